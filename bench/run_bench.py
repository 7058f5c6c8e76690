#!/usr/bin/python3
"""flowwarden against the consumers users would otherwise write, side by side, in one run.

    /usr/bin/python3 bench/run_bench.py [--events N] [--repeat K] [--json out.json]

Sets itself up (cmake build of flowwarden, fw_drain, fw_event_path_bench and fw_http_sink;
`npm ci` of the `mongodb` driver into bench/node/), starts a MongoDB stand-in, pre-loads
events in bulk and then measures, for the same pre-loaded events watched from a resume token
taken before the load:

  flowwarden  build/flowwarden run with a generated script (S1/S2/S3 handlers)
  pymongo     bench/pymongo_loop.py (Debian python3-pymongo 3.11, C extensions)
  node        bench/node/loop.js (npm `mongodb` driver)
  drain       build/fw_drain: libmongoc, no handler, no checkpoint (the ceiling)

Scenarios: S1 no-op handler, S2 three fields of the full document (one nested), S3 walk the
whole full document; each on `small` (~300-byte documents) and `large` (~4 KB) data sets with
checkpoint save_every = 100. S4: S2 with save_every = 1 vs 100 on the `ckpt` data set. S5:
insert-to-handler latency at a steady 2,000 inserts/s. S6/S7 (bench/io_scenarios.py): one
MongoDB upsert / one loopback HTTP POST per event. net (bench/net_scenarios.py): S2 against
stand-ins with 0, 1 and 5 ms of network latency (--latency-ms). lanes (bench/lanes_scenarios.py):
S3 with lanes = 1 vs 2, and S8 (a POST answered after 5 ms) with lanes = 1 vs 16, issue 16.
Plus the in-process per-event path
(build/fw_event_path_bench) on events recorded from the stand-in. Every figure is the median
of --repeat runs. See docs/performance.md.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "build-bench")  # own Release build; --build-dir to change
NODE_DIR = os.path.join(HERE, "node")
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))
sys.path.insert(0, HERE)

import pymongo  # noqa: E402
from bson.raw_bson import RawBSONDocument  # noqa: E402

import io_scenarios  # noqa: E402
import lanes_scenarios  # noqa: E402
import net_scenarios  # noqa: E402
from bench_docs import io_doc, large_doc, small_doc  # noqa: E402
from bench_proc import Child, log, proc_cpu_s  # noqa: E402
from standin_process import StandIn  # noqa: E402

PY = "/usr/bin/python3"
DB = "bench"
STREAM = "bench"
NO_CKPT = 1000000000  # save_every for the "-nockpt" rows: only the shutdown save
SYSTEMS = ["flowwarden", "pymongo", "node"]
BINARIES = ["flowwarden", "fw_drain", "fw_event_path_bench", "fw_http_sink"]


# ---- set-up -------------------------------------------------------------------

def setup(skip_build, node=True):
    if not skip_build:
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release"],
                           check=True, stdout=subprocess.DEVNULL)
        else:
            cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
            if "CMAKE_BUILD_TYPE:STRING=Release" not in cache:
                log("note: %s is not a Release build; figures may be slower than shipped"
                    % BUILD)
        log("building %s in %s ..." % (", ".join(BINARIES), BUILD))
        subprocess.run(["cmake", "--build", BUILD, "-j2", "--target"] + BINARIES, check=True,
                       stdout=subprocess.DEVNULL)
    for b in BINARIES:
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            sys.exit("missing %s: build first (cmake --build build)" % os.path.join(BUILD, b))
    if not node:  # --systems without node: its driver is not needed
        return {"pymongo": pymongo.version, "pymongo_c": pymongo.has_c()}
    if not os.path.exists(os.path.join(NODE_DIR, "node_modules", "mongodb", "package.json")):
        log("installing the npm mongodb driver into bench/node ...")
        cmd = ["npm", "ci" if os.path.exists(os.path.join(NODE_DIR, "package-lock.json"))
               else "install", "--no-audit", "--no-fund"]
        subprocess.run(cmd, cwd=NODE_DIR, check=True, stdout=subprocess.DEVNULL)
    node_ver = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    drv = json.load(open(os.path.join(NODE_DIR, "node_modules", "mongodb", "package.json")))
    return {"node": node_ver, "node_mongodb": drv["version"], "pymongo": pymongo.version,
            "pymongo_c": pymongo.has_c()}


# ---- flowwarden scripts --------------------------------------------------------------

LUA_WORK = {
    "s1": ("", ""),
    "s2": ("local acc, nlen = 0, 0\n",
           "    local d = ctx:full_document()\n"
           "    acc = acc + d.seq + d.amount\n"
           "    nlen = nlen + #d.customer.name\n"),
    "s3": ("local leaves = 0\n"
           "local function walk(t)\n"
           "  local n = 0\n"
           "  for _, v in pairs(t) do\n"
           "    if type(v) == \"table\" then n = n + walk(v) else n = n + 1 end\n"
           "  end\n"
           "  return n\n"
           "end\n",
           "    leaves = leaves + walk(ctx:full_document())\n"),
}


def fw_script(path, coll, scenario, save_every, n=None, latency=False, ckpt_mode=None, dlq=None,
              lanes=None, max_unsaved=None):
    prelude, body = LUA_WORK[scenario][:2]
    batched = len(LUA_WORK[scenario]) > 2  # on_batch (issue 30): body sees `batch`
    lines = ['local fw = require("flowwarden")', prelude]
    if latency:
        handler = ("    local d0 = ctx:full_document()\n"
                   "    io.stdout:write(d0.seq, \" \", d0.t_us, \"\\n\")\n"
                   "    io.stdout:flush()\n"
                   "    fw.log.info(\"LAT \" .. d0.seq)\n" + body)
    else:
        # The counter and the two log lines are the whole measurement overhead.
        lines.append("local N, n = %d, 0" % n)
        # With lanes each lane has its own Lua state: the count is fw.state's (shared).
        handler = body + ("    n = %s\n" % ('fw.state.incr("bench_n")' if lanes else "n + 1")
                          + "    if n == 1 then fw.log.info(\"BENCH first\")\n"
                          "    elseif n == N then fw.log.info(\"BENCH done\") end\n")
        if batched:
            handler = body + ("    local was = n\n    n = n + #batch\n"
                              "    if was == 0 then fw.log.info(\"BENCH first\") end\n"
                              "    if n >= N and was < N then fw.log.info(\"BENCH done\") end\n")
    lines.append(("fw.stream {\n  name = %s,\n  database = %s,\n  collection = %s,\n"
                  % (json.dumps(STREAM), json.dumps(DB), json.dumps(coll)))
                 + ("  dlq = %s,\n" % dlq if dlq else "")
                 + ("  lanes = %d,\n" % lanes if lanes else "")
                 + ("  checkpoint = { save_every = %d%s%s },\n"
                    "  %s\n%s  end,\n}\n"
                    % (save_every, ", mode = %s" % json.dumps(ckpt_mode) if ckpt_mode else "",
                       ", max_unsaved = %s" % json.dumps(max_unsaved) if max_unsaved else "",
                       "on_batch = function(batch)" if batched else "on_insert = function(ctx)",
                       handler)))
    with open(path, "w") as f:
        f.write("\n".join(lines))


def parse_log_ms(s):
    d = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0


def json_records(child):
    out = []
    for t, line in child.err:
        try:
            out.append((t, json.loads(line)))
        except ValueError:
            pass
    return out


# ---- the bench ----------------------------------------------------------------------

class Bench:
    def __init__(self, args, standin, tmp):
        self.a = args
        self.s = standin
        self.tmp = tmp
        self.client = pymongo.MongoClient(standin.uri)
        self.db = self.client[DB]
        self.tokens = {}
        self.counts = {}
        self.standin_pid = standin.proc.pid

    # -- loading --
    def capture_token(self, coll):
        with self.db[coll].watch() as cs:
            cs.try_next()
            tok = cs.resume_token
        if not tok:
            sys.exit("stand-in gave no postBatchResumeToken")
        return dict(tok)

    def load(self, coll, n, make, chunk=5000):
        self.db[coll].drop()
        tok = self.capture_token(coll)
        t0 = time.monotonic()
        for lo in range(0, n, chunk):
            self.db[coll].insert_many([make(i) for i in range(lo, min(n, lo + chunk))],
                                      ordered=False)
        dt = time.monotonic() - t0
        self.tokens[coll] = tok
        self.counts[coll] = n
        log("loaded %d %s documents in %.1f s (%.0f inserts/s)" % (n, coll, dt, n / dt))
        return {"documents": n, "seconds": round(dt, 2), "inserts_per_s": round(n / dt)}

    def record_events(self, coll, k, path):
        """Writes the first k change events of coll, raw BSON, for fw_event_path_bench."""
        rc = pymongo.MongoClient(self.s.uri, document_class=RawBSONDocument)
        sizes = []
        with open(path, "wb") as f, rc[DB][coll].watch(resume_after=self.tokens[coll]) as cs:
            while len(sizes) < k:
                ev = cs.try_next()
                if ev is None:
                    continue
                f.write(ev.raw)
                sizes.append(len(ev.raw))
        rc.close()
        return sum(sizes) / len(sizes)

    def seed_checkpoint(self, coll):
        self.db["_fw_checkpoints"].replace_one(
            {"_id": STREAM}, {"_id": STREAM, "lastProcessedToken": self.tokens[coll]}, upsert=True)

    # -- one throughput run --
    def run(self, system, coll, scenario, save_every=100, extra=(), timeout=None, lanes=None):
        """One consumer over the N pre-loaded events of coll; extra: more arguments for the
        pymongo and Node loops."""
        n = self.counts[coll]
        token = self.tokens[coll]
        timeout = timeout or 120 + n / 2000.0
        self.db["_fw_checkpoints"].delete_many({})
        sc0 = proc_cpu_s(self.standin_pid)
        t_wall0 = time.monotonic()
        if system == "drain":
            c = Child([os.path.join(BUILD, "fw_drain"), self.s.uri, DB, coll, str(n),
                       "--resume-after", token["_data"], "--timeout-s", str(int(timeout))])
            c.reap(timeout + 30)
            m = [re.search(r"drained (\d+) events in ([\d.]+) s: \d+ events/s "
                           r"\(first event after ([\d.]+) s\)", x[1]) for x in c.out]
            m = [x for x in m if x]
            if c.status != 0 or not m:
                raise RuntimeError("fw_drain failed:\n" + c.tail())
            events = int(m[0].group(1))
            seconds = float(m[0].group(2))  # from just before the watch (aggregate) call
            t_first = t_last = None
        elif system in ("flowwarden", "flowwarden-sync", "flowwarden-dlq", "flowwarden-seq"):
            # flowwarden-sync: the checkpoint write on the handler's path (before issue 16);
            # -dlq / -seq: a DLQ, plain or sequenced with no open sequence (issue 14)
            self.seed_checkpoint(coll)
            script = os.path.join(self.tmp, "bench_%s.lua" % scenario)
            fw_script(script, coll, scenario, save_every, n=n,
                      ckpt_mode="sync" if system == "flowwarden-sync" else None,
                      dlq={"flowwarden-dlq": "{ sequenced = false }",
                           "flowwarden-seq": "{ sequenced = true }"}.get(system), lanes=lanes,
                      max_unsaved=self.a.max_unsaved)
            c = Child([os.path.join(BUILD, "flowwarden"), "run", script, "--uri", self.s.uri,
                       "--log-format", "json", "--log-level", "info"])

            def marker(word):
                for _, line in c.err:
                    if ('"BENCH %s"' % word) in line or '"level" : "error"' in line:
                        return True  # an error fails the run (below) without the timeout
                return False
            ok = c.wait_for(lambda: marker("done"), timeout)
            t_last = time.monotonic()
            c.stop()
            recs = json_records(c)
            first = [r for _, r in recs if r.get("msg", "").startswith("starting on")]
            done = [r for _, r in recs if r.get("msg") == "BENCH done"]
            summ = [r for _, r in recs if "summary: handled=" in r.get("msg", "")]
            if not ok or not first or not done:
                raise RuntimeError("flowwarden did not finish:\n" + c.tail())
            handled = int(re.search(r"handled=(\d+)", summ[0]["msg"]).group(1)) if summ else -1
            if handled != n:
                raise RuntimeError("flowwarden handled %d of %d events:\n%s"
                                   % (handled, n, c.tail()))
            events = n
            seconds = (parse_log_ms(done[0]["ts"]) - parse_log_ms(first[0]["ts"])) / 1e3
            t_first = None
        else:
            cmd = ([PY, os.path.join(HERE, "pymongo_loop.py")] if system == "pymongo"
                   else ["node", os.path.join(NODE_DIR, "loop.js")])
            cmd += ["--uri", self.s.uri, "--db", DB, "--coll", coll,
                    "--resume-after", json.dumps(token), "--events", str(n),
                    "--scenario", scenario, "--save-every", str(save_every), "--name", STREAM]
            c = Child(cmd + list(extra))
            c.reap(timeout)
            res = None
            for _, line in c.out:
                if line.startswith("{"):
                    res = json.loads(line)
            if c.status != 0 or not res or res["events"] != n:
                raise RuntimeError("%s failed (status %s):\n%s" % (system, c.status, c.tail()))
            events = n
            seconds = (res["last_ns"] - res["open_ns"]) / 1e9
            c.note_hwm(res.get("hwm_kb"))
            t_last = None
        standin_cpu = proc_cpu_s(self.standin_pid) - sc0
        rss_mid, rss_end = c.rss_profile(t_wall0, t_last)
        seconds = max(seconds, 1e-6)
        return {"events": events, "seconds": seconds,
                "events_per_s": events / seconds,
                "cpu_s": c.cpu_s, "maxrss_kb": c.maxrss_kb,
                "rss_mid_kb": rss_mid, "rss_end_kb": rss_end,
                "standin_cpu_s": standin_cpu}

    # -- idle baseline: start-up CPU and idle RSS --
    def idle(self, system):
        coll = "idle"
        self.db["_fw_checkpoints"].delete_many({})
        c = self.start_watcher(system, coll, "s1")
        time.sleep(1.0)
        c.stop()
        return {"cpu_s": c.cpu_s, "maxrss_kb": c.maxrss_kb}

    def start_watcher(self, system, coll, scenario):
        """A consumer watching coll from now, printing "<seq> <t_us>" per event; returns once
        its change stream is open."""
        if system == "flowwarden":
            script = os.path.join(self.tmp, "lat_%s.lua" % scenario)
            fw_script(script, coll, scenario, 100, latency=True)
            c = Child([os.path.join(BUILD, "flowwarden"), "run", script, "--uri", self.s.uri,
                       "--log-format", "json", "--log-level", "info"])
            ready = lambda: any("change stream open" in x[1] for x in c.err)  # noqa: E731
        else:
            cmd = ([PY, os.path.join(HERE, "pymongo_loop.py")] if system == "pymongo"
                   else ["node", os.path.join(NODE_DIR, "loop.js")])
            cmd += ["--uri", self.s.uri, "--db", DB, "--coll", coll, "--latency",
                    "--scenario", scenario, "--save-every", "100", "--name", STREAM]
            c = Child(cmd)
            ready = lambda: any(x[1] == "ready" for x in c.out)  # noqa: E731
        if not c.wait_for(ready, 60):
            c.stop(signal.SIGKILL)
            raise RuntimeError("%s watcher did not start:\n%s" % (system, c.tail()))
        time.sleep(0.3)  # let the first getMore go out
        return c

    # -- S5 --
    def latency(self, system, rep, rate, seconds):
        coll = "lat_%s_%d" % (system, rep)
        self.db[coll].drop()
        self.db["_fw_checkpoints"].delete_many({})
        c = self.start_watcher(system, coll, "s2")
        ins = subprocess.run([PY, os.path.join(HERE, "latency_inserter.py"), "--uri", self.s.uri,
                              "--db", DB, "--coll", coll, "--rate", str(rate),
                              "--seconds", str(seconds)],
                             capture_output=True, text=True, timeout=seconds * 4 + 60)
        if ins.returncode != 0:
            c.stop(signal.SIGKILL)
            raise RuntimeError("inserter failed: " + ins.stderr[-2000:])
        info = json.loads(ins.stdout.strip().splitlines()[-1])
        total = info["sent"]

        def lines():
            return sum(1 for _, x in c.out if x and x[0].isdigit())
        c.wait_for(lambda: lines() >= total, 30)
        c.stop()
        lat, seen = [], set()
        for t, x in c.out:
            parts = x.split()
            if len(parts) == 2 and parts[0].isdigit():
                seq, t_us = int(parts[0]), int(parts[1])
                seen.add(seq)
                lat.append((seq, (t - t_us * 1000) / 1e6))
        skip = max(1, total // 100)  # the first 1% (connection warm-up) is not counted
        vals = sorted(v for s, v in lat if s >= skip)
        res = {"inserted": total, "insert_rate": info["rate"],
               "inserter_worst_lag_ms": info["worst_lag_ms"], "received": len(seen),
               "p50_ms": pct(vals, 50), "p99_ms": pct(vals, 99), "max_ms": vals[-1] if vals else None,
               "cpu_s": c.cpu_s, "maxrss_kb": c.maxrss_kb}
        if system == "flowwarden":
            # Cross-check with the runtime's own clock: the log record's millisecond timestamp
            # (truncated, so the true value is in [x, x + 1) ms).
            sent = {}
            for t, x in c.out:
                parts = x.split()
                if len(parts) == 2 and parts[0].isdigit():
                    sent[int(parts[0])] = int(parts[1]) / 1000.0
            lv = []
            for _, r in json_records(c):
                m = r.get("msg", "")
                if m.startswith("LAT "):
                    seq = int(m[4:])
                    if seq >= skip and seq in sent:
                        lv.append(parse_log_ms(r["ts"]) - sent[seq])
            lv.sort()
            res["log_clock_p50_ms"] = pct(lv, 50)
            res["log_clock_p99_ms"] = pct(lv, 99)
        return res


def pct(vals, p):
    if not vals:
        return None
    k = min(len(vals) - 1, max(0, int(round(p / 100.0 * len(vals) + 0.5)) - 1))
    return vals[k]


def median_of(runs, key):
    v = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None


def summarize(runs, idle_cpu=0.0):
    s = {k: median_of(runs, k) for k in ("events", "seconds", "events_per_s", "cpu_s",
                                         "maxrss_kb", "rss_mid_kb", "rss_end_kb",
                                         "standin_cpu_s", "server_cpu_s")}
    if s["events"]:
        s["cpu_us_per_event"] = s["cpu_s"] / s["events"] * 1e6
        s["cpu_us_per_event_net"] = max(0.0, s["cpu_s"] - idle_cpu) / s["events"] * 1e6
    s["runs"] = runs
    return s


def ratio(a, b):
    return None if not a or not b else a / b


def per_event(seconds, events):
    return None if seconds is None or not events else seconds / events * 1e6


# ---- output --------------------------------------------------------------------------

def fmt(v, f="%.0f"):
    return "-" if v is None else f % v


def print_table(R):
    out = []
    out.append("")
    out.append("End to end (median of %d runs; x fw = system / flowwarden; CPU = user+sys of the "
               "consumer process, its idle start-up/shut-down cost subtracted; RSS = peak VmHWM)"
               % R["repeat"])
    hdr = ("%-6s %-9s %-11s %11s %7s %12s %7s %9s %7s %9s"
           % ("data", "scen", "system", "events/s", "x fw", "CPU us/ev", "x fw", "RSS MB",
              "x fw", "%drain"))
    out.append(hdr)
    out.append("-" * len(hdr))
    for row in R["table"]:
        out.append("%-6s %-9s %-11s %11s %7s %12s %7s %9s %7s %9s" % (
            row["data"], row["scenario"], row["system"], fmt(row["events_per_s"]),
            fmt(row["rate_vs_fw"], "%.2f"), fmt(row["cpu_us_per_event"], "%.2f"),
            fmt(row["cpu_vs_fw"], "%.2f"), fmt(row["maxrss_mb"], "%.1f"),
            fmt(row["rss_vs_fw"], "%.2f"), fmt(row.get("pct_of_drain"), "%.0f%%")))
    out += io_scenarios.notes(R)
    if R.get("latency"):
        out.append("")
        out.append("S5 latency, insert -> handler start, %d inserts/s for %g s (median of runs)"
                   % (R["latency_rate"], R["latency_seconds"]))
        out.append("%-11s %9s %9s %9s %10s %9s" % ("system", "p50 ms", "p99 ms", "max ms",
                                                  "ins/s", "RSS MB"))
        for sysname, s in R["latency"].items():
            out.append("%-11s %9s %9s %9s %10s %9s" % (
                sysname, fmt(s["p50_ms"], "%.2f"), fmt(s["p99_ms"], "%.2f"),
                fmt(s["max_ms"], "%.1f"), fmt(s["insert_rate"]),
                fmt(s["maxrss_kb"] and s["maxrss_kb"] / 1024, "%.1f")))
        fl = R["latency"].get("flowwarden", {})
        if fl.get("log_clock_p99_ms") is not None:
            out.append("flowwarden by its own log clock (records truncated to the ms, so the "
                       "true value is up to 1 ms more): p50 %.2f..%.2f, p99 %.2f..%.2f ms"
                       % (fl["log_clock_p50_ms"], fl["log_clock_p50_ms"] + 1,
                          fl["log_clock_p99_ms"], fl["log_clock_p99_ms"] + 1))
    out += net_scenarios.table(R)
    if R.get("inprocess"):
        out.append("")
        out.append("In process (build/fw_event_path_bench on recorded events; events/s per core,"
                   " median)")
        names = ["parse", "walk", "table", "s1", "s2", "s3"]
        out.append("%-6s %8s " % ("data", "bytes") + " ".join("%10s" % n for n in names))
        for data, r in R["inprocess"].items():
            out.append("%-6s %8.0f " % (data, r["avg_event_bytes"]) + " ".join(
                "%10s" % fmt(r["events_per_cpu_s"].get(n)) for n in names))
    if R.get("goals"):
        out.append("")
        out.append("Goals")
        for g in R["goals"]:
            out.append("  [%s] %s: %s" % ("met" if g["met"] else "MISSED", g["goal"], g["measured"]))
    print("\n".join(out))


def markdown(R):
    """The same figures as print_table, as Markdown tables (for docs/performance.md)."""
    L = ["| data | scenario | system | events/s | x fw | CPU us/event | x fw | peak RSS MB |"
         " x fw | % of drain |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in R.get("table", []):
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["data"], r["scenario"], r["system"], fmt(r["events_per_s"]),
            fmt(r["rate_vs_fw"], "%.2f"), fmt(r["cpu_us_per_event"], "%.2f"),
            fmt(r["cpu_vs_fw"], "%.2f"), fmt(r["maxrss_mb"], "%.1f"),
            fmt(r["rss_vs_fw"], "%.2f"), fmt(r.get("pct_of_drain"), "%.0f%%")))
    io_notes = io_scenarios.notes(R)
    if io_notes:
        L += [""] + [x + "." for x in io_notes]
    if R.get("latency"):
        L += ["", "| system | p50 ms | p99 ms | max ms | inserts/s | peak RSS MB |",
              "|---|---:|---:|---:|---:|---:|"]
        for k, v in R["latency"].items():
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                k, fmt(v["p50_ms"], "%.2f"), fmt(v["p99_ms"], "%.2f"), fmt(v["max_ms"], "%.1f"),
                fmt(v["insert_rate"]), fmt(v["maxrss_kb"] and v["maxrss_kb"] / 1024, "%.1f")))
    L += net_scenarios.markdown(R)
    if R.get("inprocess"):
        names = ["parse", "walk", "table", "s1", "s2", "s3"]
        L += ["", "| data | event bytes | " + " | ".join(names) + " |",
              "|---|---:|" + "---:|" * len(names)]
        for data, r in R["inprocess"].items():
            L.append("| %s | %.0f | " % (data, r["avg_event_bytes"]) + " | ".join(
                fmt(r["events_per_cpu_s"].get(n)) for n in names) + " |")
    if R.get("goals"):
        L += ["", "| goal | met | measured |", "|---|---|---|"]
        for g in R["goals"]:
            L.append("| %s | %s | %s |" % (g["goal"], "yes" if g["met"] else "**no**",
                                           g["measured"]))
    return "\n".join(L) + "\n"


def goals(R):
    G = []
    ip = R.get("inprocess", {}).get("small")
    if ip:
        for sc, target in (("s2", 1e6), ("s3", 350e3)):
            v = ip["events_per_cpu_s"].get(sc)
            if v:
                G.append({"goal": "in-process %s >= %d ev/s per core" % (sc.upper(), target),
                          "met": v >= target,
                          "measured": "%.0f ev/s (%.0f%% of goal)" % (v, 100 * v / target)})
    T = {(r["data"], r["scenario"], r["system"]): r for r in R["table"]}
    for sc in ("S1", "S2"):
        fw_ = T.get(("small", sc, "flowwarden"))
        nc = T.get(("small", sc + "-nockpt", "flowwarden"))
        if fw_ and fw_.get("pct_of_drain") is not None:
            G.append({"goal": "end-to-end %s >= 85%% of the libmongoc drain (small)" % sc,
                      "met": fw_["pct_of_drain"] >= 85,
                      "measured": "%.0f%% with save_every = 100%s" % (
                          fw_["pct_of_drain"], "" if not nc or nc.get("pct_of_drain") is None
                          else ", %.0f%% without checkpoints" % nc["pct_of_drain"])})
    for other, k in (("pymongo", 5), ("node", 3)):
        fw_ = T.get(("small", "S2", "flowwarden"))
        o = T.get(("small", "S2", other))
        if fw_ and o and o["cpu_us_per_event"]:
            r = o["cpu_us_per_event"] / fw_["cpu_us_per_event"]
            G.append({"goal": "S2 CPU/event <= 1/%d of %s's" % (k, other), "met": r >= k,
                      "measured": "%s uses %.2fx flowwarden's CPU/event (%.2f vs %.2f us)"
                      % (other, r, o["cpu_us_per_event"], fw_["cpu_us_per_event"])})
    plain, seq = T.get(("small", "S2-dlq", "flowwarden")), T.get(("small", "S2-seq", "flowwarden"))
    if plain and seq and plain["events_per_s"]:
        r = seq["events_per_s"] / plain["events_per_s"]
        G.append({"goal": "S2 with dlq.sequenced (no open sequence) >= 95% of a plain dlq",
                  "met": r >= 0.95, "measured": "%.0f%% (%.0f vs %.0f ev/s)" % (
                      100 * r, seq["events_per_s"], plain["events_per_s"])})
    G += io_scenarios.goals(T)
    G += net_scenarios.goals(R)
    fw_rows = [r for r in R["table"] if r["system"] == "flowwarden"]
    small = [r for r in fw_rows if r["data"] == "small"]
    if small:
        worst = max(fw_rows, key=lambda r: r["maxrss_mb"] or 0)
        grow = ["%s %.1f->%.1f MB" % (r["scenario"], (r["rss_mid_kb"] or 0) / 1024,
                                      (r["rss_end_kb"] or 0) / 1024) for r in small]
        G.append({"goal": "steady RSS <= 20 MB for one stream",
                  "met": max(r["maxrss_mb"] for r in small) <= 20,
                  "measured": "peak %.1f MB (%s %s); small set mid->end of run: %s"
                  % (worst["maxrss_mb"], worst["data"], worst["scenario"], ", ".join(grow))})
    fl = R.get("latency", {}).get("flowwarden")
    if fl and fl.get("p99_ms") is not None:
        G.append({"goal": "p99 insert->handler latency <= 5 ms at %d ev/s" % R["latency_rate"],
                  "met": fl["p99_ms"] <= 5.0, "measured": "p99 %.2f ms (p50 %.2f ms)"
                  % (fl["p99_ms"], fl["p50_ms"])})
    return G


# ---- main ------------------------------------------------------------------------------

def main():
    global BUILD
    p = argparse.ArgumentParser(description="flowwarden vs pymongo vs Node vs libmongoc drain")
    p.add_argument("--events", type=int, default=300000,
                   help="small (~300-byte) events pre-loaded (default 300000; the issue's full "
                        "figure is --events 1000000)")
    p.add_argument("--large-events", type=int, default=None,
                   help="~4 KB events pre-loaded (default events/10, at least 1000)")
    p.add_argument("--ckpt-events", type=int, default=None,
                   help="events of the S4 save_every runs (default min(20000, events))")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    p.add_argument("--latency-seconds", type=float, default=10.0)
    p.add_argument("--latency-rate", type=float, default=2000.0)
    p.add_argument("--inprocess-events", type=int, default=500000)
    p.add_argument("--io-events", type=int, default=None,
                   help="events of S6/S7, one round trip each (default min(20000, events))")
    p.add_argument("--net-events", type=int, default=None,
                   help="events of the net part, S2 at each latency (default min(100000, "
                        "events))")
    p.add_argument("--net-latencies", default="0,1,5",
                   help="comma list of stand-in round-trip times (ms) of the net part")
    p.add_argument("--net-save-every", type=int, default=100,
                   help="flowwarden's checkpoint.save_every in the net part (1: a script's default)")
    p.add_argument("--max-unsaved", default=None,
                   help="flowwarden's checkpoint.max_unsaved in every part (a duration, \"0s\": "
                   "the count bound alone; default: flowwarden's)")
    p.add_argument("--net-systems", default=",".join(net_scenarios.SYSTEMS),
                   help="systems of the net part (flowwarden-sync: checkpoint mode \"sync\")")
    p.add_argument("--lanes-events", type=int, default=None,
                   help="events of the lanes part (default min(20000, --events)); its IO "
                        "scenario uses a tenth (5 ms each with one lane)")
    p.add_argument("--only", default="inprocess,throughput,seq,s4,s5,s6,s7,net,lanes",
                   help="comma list of parts to run (default all)")
    p.add_argument("--systems", default="flowwarden,pymongo,node,drain")
    p.add_argument("--markdown", default=None, help="also write the tables as Markdown here")
    p.add_argument("--from-json", default=None,
                   help="do not measure: print (and --markdown) the figures of an earlier --json")
    p.add_argument("--skip-build", action="store_true")
    p.add_argument("--build-dir", default=BUILD,
                   help="CMake build directory (default build-bench/, configured Release)")
    a = p.parse_args()
    BUILD = os.path.abspath(a.build_dir)
    parts = set(a.only.split(","))
    systems = a.systems.split(",")
    large_n = a.large_events if a.large_events is not None else max(1000, a.events // 10)
    ckpt_n = a.ckpt_events if a.ckpt_events is not None else min(20000, a.events)
    io_n = a.io_events if a.io_events is not None else min(20000, a.events)
    net_n = a.net_events if a.net_events is not None else min(100000, a.events)

    if a.from_json:
        R = json.load(open(a.from_json))
        print_table(R)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(markdown(R))
        return 0
    t_begin = time.monotonic()
    versions = setup(a.skip_build, "node" in systems)
    R = {"machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname()[2:5])},
         "versions": versions, "repeat": a.repeat, "events": a.events,
         "large_events": large_n, "ckpt_events": ckpt_n, "io_events": io_n,
         "latency_rate": a.latency_rate, "latency_seconds": a.latency_seconds,
         "started": datetime.datetime.now().isoformat(timespec="seconds")}
    try:
        R["git"] = {
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip(),
            "dirty_files": len(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT,
                                              capture_output=True, text=True)
                               .stdout.splitlines())}
    except OSError:
        pass
    tmp = tempfile.mkdtemp(prefix="fw_bench_")
    try:
        with StandIn() as s:
            B = Bench(a, s, tmp)
            R["load"] = {}
            if parts & {"inprocess", "throughput", "seq"}:
                R["load"]["small"] = B.load("small", a.events, small_doc)
                R["load"]["large"] = B.load("large", large_n, large_doc)
            if "s4" in parts:
                R["load"]["ckpt"] = B.load("ckpt", ckpt_n, small_doc)
            if parts & set(io_scenarios.PARTS):
                R["load"]["io"] = B.load(io_scenarios.COLL, io_n, io_doc)

            if "inprocess" in parts:
                R["inprocess"] = {}
                for data, n_ip in (("small", a.inprocess_events),
                                   ("large", max(1000, a.inprocess_events // 10))):
                    path = os.path.join(tmp, "%s.bson" % data)
                    B.record_events(data, min(1024, B.counts[data]), path)
                    runs = []
                    for _ in range(a.repeat):
                        out = subprocess.run([os.path.join(BUILD, "fw_event_path_bench"),
                                              "--file", path, "--events", str(n_ip), "--json"],
                                             capture_output=True, text=True, check=True)
                        runs.append(json.loads(out.stdout))
                    r0 = runs[0]
                    R["inprocess"][data] = {
                        "events": n_ip, "avg_event_bytes": r0["avg_event_bytes"],
                        "events_per_cpu_s": {k: statistics.median(
                            r["results"][k]["events_per_cpu_s"] for r in runs)
                            for k in r0["results"]},
                        "ns_per_event": {k: statistics.median(
                            r["results"][k]["ns_per_event"] for r in runs)
                            for k in r0["results"]},
                        "lua_kb": {k: r0["results"][k]["lua_kb"] for k in r0["results"]}}
                    log("in-process %s: %s" % (data, R["inprocess"][data]["events_per_cpu_s"]))

            R["idle"] = {}
            if parts & {"throughput", "seq", "s4", "s6", "s7"}:
                for sysname in [x for x in systems if x != "drain"]:
                    R["idle"][sysname] = B.idle(sysname)
                    log("idle %s: %s" % (sysname, R["idle"][sysname]))

            raw = {}
            if "throughput" in parts:
                for rep in range(a.repeat):
                    for data in ("small", "large"):
                        combos = [("drain", "S0")] if "drain" in systems else []
                        for sc in ("s1", "s2", "s3"):
                            combos += [(x, sc.upper()) for x in systems if x != "drain"]
                        if "flowwarden" in systems:
                            # the same handlers with no checkpoint on the way (the drain has none)
                            combos += [("flowwarden", "S1-nockpt"), ("flowwarden", "S2-nockpt")]
                        for sysname, sc in combos:
                            r = B.run(sysname, data, "s1" if sc == "S0" else sc[:2].lower(),
                                      save_every=NO_CKPT if sc.endswith("nockpt") else 100)
                            raw.setdefault((data, sc, sysname), []).append(r)
                            log("rep %d %s %s %-10s %8.0f ev/s  %.2f us/ev  %.1f MB" % (
                                rep + 1, data, sc, sysname, r["events_per_s"],
                                r["cpu_s"] / r["events"] * 1e6, r["maxrss_kb"] / 1024))
            if "seq" in parts:
                # Issue 14: a sequenced DLQ with no open sequence vs a plain DLQ, S2.
                for rep in range(a.repeat):
                    for sysname in ("flowwarden-dlq", "flowwarden-seq"):
                        r = B.run(sysname, "small", "s2", save_every=100)
                        raw.setdefault(("small", "S2-" + sysname[11:], "flowwarden"),
                                       []).append(r)
                        log("rep %d S2 %-15s %8.0f ev/s  %.2f us/ev" % (
                            rep + 1, sysname, r["events_per_s"], r["cpu_s"] / r["events"] * 1e6))
            if "s4" in parts:
                for rep in range(a.repeat):
                    for se in (1, 100):
                        for sysname in [x for x in systems if x != "drain"]:
                            r = B.run(sysname, "ckpt", "s2", save_every=se)
                            raw.setdefault(("ckpt", "S4/%d" % se, sysname), []).append(r)
                            log("rep %d S4 save_every=%d %-10s %8.0f ev/s  %.2f us/ev" % (
                                rep + 1, se, sysname, r["events_per_s"],
                                r["cpu_s"] / r["events"] * 1e6))
            if parts & set(io_scenarios.PARTS):
                R["io_server"] = io_scenarios.run(B, DB, parts, systems, a.repeat, raw,
                                                  LUA_WORK, BUILD)

            table = []
            summaries = {}
            for key, runs in raw.items():
                idle = R["idle"].get(key[2], {}).get("cpu_s", 0.0)
                summaries[key] = summarize(runs, idle)
            for (data, sc, sysname), s in summaries.items():
                fw_s = summaries.get((data, sc, "flowwarden"))
                if sc == "S0":
                    fw_s = summaries.get((data, "S1", "flowwarden"))
                elif sc.endswith("nockpt"):
                    fw_s = summaries.get((data, sc[:2], "flowwarden"))
                drain = summaries.get((data, "S0", "drain"))
                row = {"data": data, "scenario": "drain" if sc == "S0" else sc, "system": sysname,
                       "events": s["events"], "events_per_s": s["events_per_s"],
                       "cpu_us_per_event": s["cpu_us_per_event_net"],
                       "cpu_us_per_event_gross": s["cpu_us_per_event"],
                       "maxrss_mb": s["maxrss_kb"] / 1024 if s["maxrss_kb"] else None,
                       "rss_mid_kb": s["rss_mid_kb"], "rss_end_kb": s["rss_end_kb"],
                       "standin_cpu_s": s["standin_cpu_s"],
                       "standin_cpu_us_per_event": per_event(s["standin_cpu_s"], s["events"]),
                       "server_cpu_us_per_event": per_event(s["server_cpu_s"], s["events"]),
                       "rate_vs_fw": ratio(s["events_per_s"], fw_s and fw_s["events_per_s"]),
                       "cpu_vs_fw": ratio(s["cpu_us_per_event_net"],
                                          fw_s and fw_s["cpu_us_per_event_net"]),
                       "rss_vs_fw": ratio(s["maxrss_kb"], fw_s and fw_s["maxrss_kb"]),
                       "pct_of_drain": (100 * s["events_per_s"] / drain["events_per_s"]
                                        if drain and data in ("small", "large") else None),
                       "runs": s["runs"]}
                table.append(row)
            order = {"drain": 0, "S1": 1, "S2": 2, "S3": 3, "S1-nockpt": 4, "S2-nockpt": 5,
                     "S4/1": 6, "S4/100": 7, "S6": 8, "S6B": 8.5, "S7": 9, "S2-dlq": 10, "S2-seq": 11}
            sorder = {"drain": 0, "flowwarden": 1, "pymongo": 2, "node": 3}
            dorder = {"small": 0, "large": 1, "ckpt": 2, "io": 3}
            table.sort(key=lambda r: (dorder[r["data"]], order[r["scenario"]], sorder[r["system"]]))
            R["table"] = table

            if "s5" in parts:
                lat = {}
                for rep in range(a.repeat):
                    for sysname in [x for x in systems if x != "drain"]:
                        r = B.latency(sysname, rep, a.latency_rate, a.latency_seconds)
                        lat.setdefault(sysname, []).append(r)
                        log("rep %d S5 %-10s p50 %.2f ms p99 %.2f ms (%d/%d received, %.0f ins/s)"
                            % (rep + 1, sysname, r["p50_ms"] or -1, r["p99_ms"] or -1,
                               r["received"], r["inserted"], r["insert_rate"]))
                R["latency"] = {k: dict({m: median_of(v, m) for m in v[0] if m != "runs"},
                                        runs=v) for k, v in lat.items()}
        if lanes_scenarios.PART in parts:
            with StandIn() as s:
                R["lanes"] = lanes_scenarios.run(Bench(a, s, tmp), DB, a.repeat, LUA_WORK, BUILD,
                                                 a.lanes_events or min(20000, a.events))
        if net_scenarios.PART in parts:
            R["net"] = net_scenarios.run(
                lambda standin: Bench(a, standin, tmp), StandIn,
                [float(x) for x in a.net_latencies.split(",")],
                a.net_systems.split(","), a.repeat, net_n, a.net_save_every)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    R.setdefault("table", [])
    R["goals"] = goals(R)
    R["total_seconds"] = round(time.monotonic() - t_begin, 1)
    print_table(R)
    lanes_scenarios.print_table(R.get("lanes"))
    print("\n(total %.0f s)" % R["total_seconds"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(R, f, indent=1, default=str)
        print("wrote %s" % a.json)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown(R))
    return 0


if __name__ == "__main__":
    sys.exit(main())
