"""S6 and S7 of bench/run_bench.py: handler IO, one round trip per change event.

  S6  fw.mongo.collection(DB, "s6_totals"):update_one({ _id = doc.group },
          { ["$inc"] = { n = 1 } }, { upsert = true })       -- against the same stand-in
  S7  fw.http.post(URL, { json = { id = doc._id, k = doc.group } })
                                      -- to fw_http_sink (bench/http_sink.c) on 127.0.0.1

Peers: bench/pymongo_loop.py and bench/node/loop.js with --scenario s6|s7 (pymongo update_one /
http.client on one keep-alive connection; the Node driver's updateOne / the built-in fetch).
Every system waits for each answer before the next event, as a flowwarden handler does. The
data set `io` (bench_docs.io_doc: the small document plus `group`, 100 distinct values) is
loaded once and watched from the same resume token by every run; checkpoints every 100 events.

After each run the work is checked (S6: the counters add up to N over 100 groups; S7: the
server got N valid POSTs with N distinct ids). The HTTP server's CPU during each run is
measured from /proc and reported apart: the consumer's CPU per event never includes it. All
traffic goes to 127.0.0.1 (the stand-in and the server listen there; flowwarden's script also
sets http.allow_hosts = { "127.0.0.1" }), N requests per run, each run bounded by a timeout.
"""

import http.client
import json
import os
import subprocess
import time

from bench_docs import IO_GROUPS
from bench_proc import log, proc_cpu_s

COLL = "io"  # the data set
TOTALS = "s6_totals"
PARTS = ("s6", "s7", "s6b")
# S6b (issue 30): S6's upserts as one unordered bulk_write per on_batch batch
# (the defaults: up to 500 events, 20 ms); flowwarden and pymongo (its loop batches the same way).
BATCH_BODY = ("    local ops = {}\n"
              "    for _, ctx in batch:events() do\n"
              "      local d = ctx:full_document()\n"
              "      ops[#ops + 1] = { update_one = { filter = { _id = d.group },\n"
              "        update = { [\"$inc\"] = { n = 1 } }, upsert = true } }\n"
              "    end\n"
              "    fw.mongo.collection(DB, \"%s\"):bulk_write(ops, { ordered = false })\n" % TOTALS)
MIN_RATE = 200.0  # events/s below which a run is taken for hung (its timeout)


def lua_work(db, url):
    """The flowwarden handlers, as (prelude, body) for run_bench.fw_script."""
    return {
        "s6": ("local DB = %s\n" % json.dumps(db),
               "    local d = ctx:full_document()\n"
               "    fw.mongo.collection(DB, \"%s\"):update_one({ _id = d.group },\n"
               "      { [\"$inc\"] = { n = 1 } }, { upsert = true })\n" % TOTALS),
        "s7": ("fw.defaults { http = { allow_hosts = { \"127.0.0.1\" } } }\n"
               "local URL = %s\n" % json.dumps(url or ""),
               "    local d = ctx:full_document()\n"
               "    local res = fw.http.post(URL, { json = { id = d._id, k = d.group } })\n"
               "    if res.status ~= 200 then error(\"HTTP status \" .. res.status) end\n"),
        "s6b": ("local DB = %s\n" % json.dumps(db), BATCH_BODY, "batch"),
    }


class HttpSink:
    """fw_http_sink (bench/http_sink.c, libmicrohttpd): the loopback server every system posts
    to in S7. It exits when its stdin (a pipe from us) closes, so it cannot outlive the
    benchmark, and after max_seconds in any case."""

    def __init__(self, binary, max_seconds=7200, delay_ms=0):
        self.proc = subprocess.Popen([binary, "--max-seconds", str(int(max_seconds))]
                                     + (["--delay-ms", str(int(delay_ms))] if delay_ms else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("ready 127.0.0.1:"):
            self.stop()
            raise RuntimeError("%s did not start (printed %r)" % (binary, line))
        self.port = int(line.rsplit(":", 1)[1])
        self.url = "http://127.0.0.1:%d/events" % self.port

    def get(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def cpu_s(self):
        return proc_cpu_s(self.proc.pid)

    def stop(self):
        """Closes its stdin and waits; returns its whole CPU time (s)."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            pid, status, ru = os.wait4(self.proc.pid, 0)
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        except ChildProcessError:
            return None


def run(bench, db, parts, systems, repeat, raw, fw_work, build_dir):
    """Measures the scenarios of parts ("s6", "s7") for each system, repeat times, on the
    loaded data set COLL of database db, adding the runs to raw under (COLL, "S6"|"S7",
    system). fw_work: run_bench.LUA_WORK, which gets the flowwarden handlers; build_dir holds
    fw_http_sink. Returns the HTTP server's description and total CPU."""
    parts = [p for p in PARTS if p in parts]
    n = bench.counts[COLL]
    timeout = 120 + n / MIN_RATE
    sink = HttpSink(os.path.join(build_dir, "fw_http_sink")) if "s7" in parts else None
    fw_work.update(lua_work(db, sink and sink.url))
    server = {}
    try:
        for rep in range(repeat):
            for sc in parts:
                for sysname in [x for x in systems if x != "drain"
                                and (sc != "s6b" or x in ("flowwarden", "pymongo"))]:
                    extra = []
                    if sc in ("s6", "s6b"):
                        bench.db[TOTALS].drop()
                    else:
                        sink.get("/_reset")
                        extra = ["--http-url", sink.url]
                        cpu0 = sink.cpu_s()
                    r = bench.run(sysname, COLL, sc, extra=extra, timeout=timeout)
                    if sc in ("s6", "s6b"):
                        check_totals(bench.db[TOTALS], n, sysname)
                    else:
                        time.sleep(0.05)  # the last answer is out; let /proc catch up
                        r["server_cpu_s"] = sink.cpu_s() - cpu0
                        st = sink.get("/_stats")
                        check_posts(st, n, sysname)
                        r["http_connections"] = st["connections"] - 1  # not /_stats's
                    raw.setdefault((COLL, sc.upper(), sysname), []).append(r)
                    log("rep %d %s %-10s %8.0f ev/s  %.2f us/ev%s" % (
                        rep + 1, sc.upper(), sysname, r["events_per_s"],
                        r["cpu_s"] / r["events"] * 1e6,
                        "  (server %.2f us/ev, %d connection(s))"
                        % (r["server_cpu_s"] / r["events"] * 1e6, r["http_connections"])
                        if "server_cpu_s" in r else ""))
    finally:
        if sink:
            server["total_cpu_s"] = sink.stop()
    if sink:
        server["kind"] = "fw_http_sink (libmicrohttpd %s, one epoll thread, keep-alive)" \
            % subprocess.run(["pkg-config", "--modversion", "libmicrohttpd"], capture_output=True,
                             text=True).stdout.strip()
    return server


def check_totals(coll, n, system):
    docs = list(coll.find({}))
    total = sum(d.get("n", 0) for d in docs)
    if total != n or len(docs) != min(n, IO_GROUPS):
        raise RuntimeError("S6 %s: %s holds %d counters adding up to %d; expected %d adding up "
                           "to %d" % (system, TOTALS, len(docs), total, min(n, IO_GROUPS), n))


def check_posts(stats, n, system):
    if stats["requests"] != n or stats["distinct_ids"] != n or stats["bad"]:
        raise RuntimeError("S7 %s: the server got %s; expected %d valid POSTs, %d distinct ids"
                           % (system, stats, n, n))


def goals(T):
    """The issue's goal: flowwarden's CPU per event at most 1/3 of each peer's, S6 and S7.
    T: the table rows by (data, scenario, system)."""
    G = []
    for sc in ("S6", "S7"):
        fw_ = T.get((COLL, sc, "flowwarden"))
        for other in ("pymongo", "node"):
            o = T.get((COLL, sc, other))
            if fw_ and o and fw_["cpu_us_per_event"] and o["cpu_us_per_event"]:
                r = o["cpu_us_per_event"] / fw_["cpu_us_per_event"]
                G.append({"goal": "%s CPU/event <= 1/3 of %s's" % (sc, other), "met": r >= 3,
                          "measured": "%s uses %.2fx flowwarden's CPU/event (%.2f vs %.2f us)"
                          % (other, r, o["cpu_us_per_event"], fw_["cpu_us_per_event"])})
    return G


def notes(R):
    """Lines under the end-to-end table: the CPU the S6/S7 rows leave out (the stand-in's
    updates, the HTTP server), per event, per system."""
    rows = [r for r in R.get("table", []) if r["data"] == COLL]
    L = []
    for sc, key, what in (("S6", "standin_cpu_us_per_event", "stand-in (MongoDB side)"),
                          ("S6B", "standin_cpu_us_per_event", "stand-in (MongoDB side)"),
                          ("S7", "server_cpu_us_per_event", "loopback HTTP server")):
        v = ["%s %.2f" % (r["system"], r[key]) for r in rows
             if r["scenario"] == sc and r.get(key) is not None]
        if v:
            L.append("%s: CPU us/event of the %s, not in the rows above: %s"
                     % (sc, what, ", ".join(v)))
    if R.get("io_server", {}).get("kind"):
        L.append("S7 server: %s" % R["io_server"]["kind"])
    return L
