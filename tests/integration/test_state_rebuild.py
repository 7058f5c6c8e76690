"""A Lua state that reaches its memory_limit is rebuilt from the script
(issue 25): a handler that keeps what it is given in a global does not turn the
stream into a pipe to the DLQ; a handler that fills the state at once on every
event stops the stream with its reason instead of rebuilding in a loop."""
import shutil
import subprocess
import urllib.request

from dlqtest import FailureTestCase, lua_stream, summary
from fwtest import reports_of, run_cli

PROMTOOL = shutil.which("promtool")

LEAKY = """
leak = {}
local function leaky(ctx)
  local doc = ctx:full_document()
  if doc.remember then fw.state.set("remembered", doc.remember) end
  report({ id = doc._id, attempt = ctx:attempt_number(), kept = #leak,
           remembered = fw.state.get("remembered") })
  if doc.fill == "always" or (doc.fill == "once" and ctx:attempt_number() == 1) then
    -- Up to the brim, in small pieces: the last one fails with the state full.
    while true do leak[#leak + 1] = string.rep("x", 4096) .. #leak end
  end
  for i = 1, doc.leak_kb or 0 do leak[#leak + 1] = string.rep("x", 1024) .. i end
end
"""


def metric(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    for line in text.splitlines():
        if line.startswith("%s{%s} " % (name, want)):
            return float(line.rsplit(" ", 1)[1])
    return None


class StateRebuild(FailureTestCase):

    def start_leaky(self, extra='memory_limit = "8MB"', admin=False, retry=None):
        args = ["--admin", "127.0.0.1:0"] if admin else []
        p = self.run_fw(self.script(LEAKY + lua_stream(handler="leaky", dlq="true",
                                                       extra=extra, retry=retry)),
                        extra=args)
        p.wait_open()
        return p

    def test_a_leaking_handler_gets_a_fresh_state_and_its_events_are_handled(self):
        self.leak_and_check('memory_limit = "8MB"', 60)

    def test_each_lane_rebuilds_its_own_state(self):
        self.leak_and_check('memory_limit = "8MB", lanes = 2', 120, at_least=2)

    def leak_and_check(self, extra, n, at_least=1):
        # 256 KB kept per event: an 8 MB state fills about every 25 events.
        p = self.start_leaky(extra=extra, admin=True)
        self.db.orders.insert_many([{"_id": i, "leak_kb": 256} for i in range(n)])
        p.wait_reports(n, timeout=60)
        self.assertEqual(self.dlq_entries(), [])
        rebuilt = [m for m in p.messages("warn") if m.startswith("Lua state rebuilt")]
        self.assertGreaterEqual(len(rebuilt), at_least)
        self.assertIn("of its 8388608 bytes (memory_limit)", rebuilt[0])
        # The globals start afresh: what the handler kept falls back to 0.
        kept = [r["kept"] for r in p.reports()]
        self.assertEqual(max(r["attempt"] for r in p.reports()), 1)
        self.assertGreater(kept.count(0), at_least)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % p.admin_port(),
                                    timeout=10) as r:
            text = r.read().decode()
        self.assertEqual(metric(text, "flowwarden_states_rebuilt_total", stream="s",
                                reason="memory"), float(len(rebuilt)))
        if PROMTOOL:
            cp = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                                capture_output=True, timeout=30)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["dead_lettered"], s["lost"]), (n, 0, 0))

    def test_an_event_that_fails_in_a_full_state_is_retried_on_the_rebuilt_one(self):
        p = self.start_leaky(retry='{ max_attempts = 1 }')
        self.db.orders.insert_one({"_id": 1, "remember": "kept across the rebuild"})
        self.db.orders.insert_one({"_id": 2, "fill": "once"})
        self.db.orders.insert_one({"_id": 3})
        p.wait_until(lambda: any(r["id"] == 3 for r in p.reports()), timeout=30,
                     what="event 3")
        by_id = {}
        for r in p.reports():
            by_id.setdefault(r["id"], []).append(r)
        # Attempt 1 filled the state; attempt 2 ran on a fresh one (no retry
        # policy needed: the failure was the state's), with fw.state kept.
        self.assertEqual([r["attempt"] for r in by_id[2]], [1, 2])
        self.assertEqual(by_id[2][1]["kept"], 0)
        self.assertEqual(by_id[3][0]["remembered"], "kept across the rebuild")
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.count_log("Lua state rebuilt"), 1)
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["dead_lettered"], s["handler_errors"]), (3, 0, 1))

    def test_dlq_replay_rebuilds_a_full_state_too(self):
        # Two entries; their replay fills the state on the first one's first attempt:
        # `dlq replay` rebuilds it as `run` does, and both entries are resolved.
        failing = "local function leaky(ctx) error('sink down') end\n"
        p = self.run_fw(self.script(failing + lua_stream(handler="leaky", dlq="true",
                                                         retry="{ max_attempts = 1 }")))
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1, "fill": "once"}, {"_id": 2}])
        self.wait_dlq(2)
        self.stop_cleanly(p)
        fixed = self.script(LEAKY + lua_stream(handler="leaky", dlq="true",
                                               extra='memory_limit = "8MB"'), "fixed.lua")
        cp = run_cli(["dlq", "replay", fixed, "--uri", self.uri, "--log-format", "json"],
                     timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("Lua state rebuilt", cp.stderr)
        self.assertEqual(sorted(r["id"] for r in reports_of(cp) if r["attempt"] > 1), [1])
        self.assertEqual([e["status"] for e in self.dlq_entries()], ["RESOLVED"] * 2)

    def test_a_state_that_fills_up_at_once_again_stops_the_stream(self):
        p = self.start_leaky()
        self.db.orders.insert_one({"_id": 1})
        p.wait_reports(1)
        self.db.orders.insert_one({"_id": 2, "fill": "always"})
        p.wait_log("STREAM STOPPED", timeout=30)
        stopped = [m for m in p.messages("error") if "STREAM STOPPED" in m][0]
        self.assertIn('the Lua state of stream "s" filled its memory_limit again', stopped)
        self.assertIn("within 1 event(s) of being rebuilt", stopped)
        # Rebuilt once, retried once, then stopped: never looping, nothing in the DLQ.
        self.assertEqual([r["attempt"] for r in p.reports() if r["id"] == 2], [1, 2])
        self.assertEqual(p.count_log("Lua state rebuilt"), 1)
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.wait_exit(timeout=30), 1)  # its only stream stopped
