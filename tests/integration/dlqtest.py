"""Helpers shared by the retry, DLQ, error-action and budget integration tests.

A `misbehave` handler reads what to do from the inserted document, so one
script covers many cases:

    { _id = 1 }                         -> handled
    { _id = 2, fail = "Http.Timeout" }  -> raises fw.error("Http.Timeout", ...)
    { fail = "nil" | "type" | "arg" }   -> a NilError / TypeError / ArgumentError
    { fail = "plain" }                  -> error("plain failure") (RuntimeError)
    { fail = "dlq", reason = "..." }    -> ctx:send_to_dlq(reason)
    { fail = ..., fail_until = 3 }      -> fails on attempts 1 and 2 only

Each attempt reports {id, attempt, eid} before doing anything else, so the
order of attempts and their log times can be asserted."""
import datetime
import re
import time

from fwtest import StandInTestCase, wait_until  # noqa: F401  (re-exported for the test modules)

MISBEHAVE = """
local function misbehave(ctx)
  local doc = ctx:full_document()
  report({ id = doc._id, attempt = ctx:attempt_number(), eid = ctx:event_id(),
           stream = ctx:stream_name() })
  if doc.fail_until and ctx:attempt_number() >= doc.fail_until then return end
  local kind = doc.fail
  if kind == nil then return end
  if kind == "nil" then local t = nil; return t.x
  elseif kind == "type" then return {} + 1
  elseif kind == "arg" then return string.rep()
  elseif kind == "plain" then error("plain failure")
  elseif kind == "dlq" then ctx:send_to_dlq(doc.reason or "rejected")
  else error(fw.error(kind, "failed with " .. kind, { id = doc._id })) end
end
"""

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def lua_stream(name="s", collection="orders", retry=None, dlq=None, handler="misbehave",
               extra=""):
    """One fw.stream declaration; retry/dlq/extra are Lua source text."""
    parts = ['name = "%s"' % name, 'collection = "%s"' % collection,
             "on_insert = %s" % handler]
    if retry is not None:
        parts.append("retry = %s" % retry)
    if dlq is not None:
        parts.append("dlq = %s" % dlq)
    if extra:
        parts.append(extra)
    return "fw.stream { %s }\n" % ", ".join(parts)


def parse_log_time(text):
    """Milliseconds since the epoch of a log record's "ts" field."""
    t = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return (t.replace(tzinfo=datetime.timezone.utc).timestamp()) * 1000.0


def timed_reports(p, stream=None):
    """[(ms, report)] in log order."""
    import json
    from fwtest import REPORT_PREFIX
    with p._cond:
        out = []
        for r in p.records:
            msg = r.get("msg", "")
            if msg.startswith(REPORT_PREFIX) and (stream is None or r.get("stream") == stream):
                out.append((round(parse_log_time(r["ts"])),
                            json.loads(msg[len(REPORT_PREFIX):])))
        return out


def record_index(p, needle, level=None):
    """Position of the first log record containing needle, or None."""
    with p._cond:
        for i, r in enumerate(p.records):
            if needle in r.get("msg", "") and (level is None or r.get("level") == level):
                return i
    return None


def wait_for(predicate, timeout=20.0, what="condition", interval=0.02):
    return wait_until(predicate, timeout, interval, what)


SUMMARY = re.compile(r"summary: handled=(\d+) handler_errors=(\d+) retries=(\d+) "
                     r"dead_lettered=(\d+) skipped=(\d+) lost=(\d+)")


def summary(p, stream):
    """The exit summary of stream as a dict of counters."""
    with p._cond:
        for r in p.records:
            if r.get("stream") == stream:
                m = SUMMARY.search(r.get("msg", ""))
                if m:
                    keys = ("handled", "handler_errors", "retries", "dead_lettered", "skipped",
                            "lost")
                    return dict(zip(keys, map(int, m.groups())))
    raise AssertionError("no exit summary for stream %r" % stream)


class FailureTestCase(StandInTestCase):
    """StandInTestCase plus DLQ and checkpoint look-ups."""

    def fw_script(self, *streams, defaults=""):
        return self.script(defaults + MISBEHAVE + "".join(streams))

    def start(self, *streams, defaults="", n_streams=None):
        p = self.run_fw(self.fw_script(*streams, defaults=defaults))
        p.wait_open(n_streams or len(streams))
        return p

    def dlq_entries(self, coll="_fw_dlq", stream=None):
        query = {} if stream is None else {"streamName": stream}
        return list(self.db[coll].find(query).sort("createdAt", 1))

    def wait_dlq(self, n, coll="_fw_dlq", stream=None, timeout=20.0, p=None):
        """The entries once there are n; with p (the flowwarden that writes them), also once
        p's line for each was read: it is logged after the entry is written, so every report
        and line of the event's attempts is then read too."""
        entries = wait_for(lambda: (lambda e: e if len(e) >= n else None)(
            self.dlq_entries(coll, stream)), timeout, "%d DLQ entries in %s" % (n, coll))
        if p is not None:
            p.wait_log("dead-lettered to", count=n, timeout=timeout, stream=stream)
        return entries

    def attempts_of(self, p, doc_id, stream=None):
        return [r["attempt"] for r in p.reports(stream) if r.get("id") == doc_id]

    def stop_cleanly(self, p):
        rc = p.stop()
        self.assertEqual(rc, 0, "flowwarden exit status")
        return p

    def processed_token(self, stream):
        cp = self.checkpoint(stream)
        if not cp or "lastProcessedToken" not in cp:
            return None
        return cp["lastProcessedToken"]["_data"]

    def wait_checkpoint_at_least(self, stream, eid, timeout=20.0):
        wait_for(lambda: (self.processed_token(stream) or "") >= eid, timeout,
                 "checkpoint of %s to reach %s" % (stream, eid))
