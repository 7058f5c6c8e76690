"""S9 and S10: handler IO to PostgreSQL and Redis, flowwarden beside a Python loop.

  S9   fw.pg.execute: one upsert (INSERT ... ON CONFLICT) per event
  S9b  the same upserts as one multi-row INSERT per on_batch batch (up to 500 events)
  S9j  the same upserts as one statement per batch over a jsonb parameter holding the batch's
       rows (INSERT ... SELECT FROM jsonb_to_recordset($1::jsonb) ... ON CONFLICT; prepared)
  S9m  the same upsert as S9, prepared, run for every event of a batch in one round trip
       (fw.pg.execute_many; the loop: psycopg2.extras.execute_batch, 500 per page)
  S9e  S9 with exactly_once = { connection = "pg" }: each event's upsert and the stream's
       position in one SQL transaction (flowwarden only: the loop has no such mode)
  S9me S9m with exactly_once = { connection = "pg" }: one SQL transaction per batch (its
       upserts and the position past its last event; flowwarden only)
  S10  fw.redis.pipeline: SET doc:<id> and INCR count:<group> per event
  S10b one pipeline of those per on_batch batch
  S0b  (with --preload only) on_batch reading the same fields and writing nothing: the ceiling
       the source and the batch path allow on the machine at that moment

Peer: bench/store_loop.py (pymongo change stream; psycopg2 / redis-py doing the same work).
Servers: the MongoDB stand-in, redis-server and a PostgreSQL cluster from Debian, started here
on loopback ports (tests/integration/redisserver.py, pgserver.py). Each run: the consumer opens
its change stream, N documents are inserted, the run ends when the target holds all N. Printed:
events/s (first insert to the last event applied) and the consumer's CPU per event (flowwarden's
from /proc, at clock-tick resolution; the loop's own process_time after its stream opened),
which never includes the servers'.

--preload: the N documents are inserted first and each consumer reads them from a resume token
taken before them (as bench/run_bench.py's S1-S3 do), so the source is not the limit; events/s
then runs from just before the change stream opens (flowwarden: its "starting on" record; the
loop: before watch()) to the handler's return for the Nth event (flowwarden: a "BENCH done"
record; the loop: its own clock), and the target is checked to hold all N afterwards.

--pg-latency-ms N: both consumers reach PostgreSQL through bench/delay_proxy.py, which delays
every chunk by N/2 ms each way (a network with an N ms round trip; the servers stay local).

  python3 bench/store_scenarios.py [--events 5000] [--only s9,s9b,s9j,s9m,s10,s10b] [--preload]
                                   [--pg-latency-ms N] [--systems flowwarden,python]
  (s9e and s9me, exactly once, run only with --only naming them)
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("FW_BINARY", os.path.join(ROOT, "build", "flowwarden"))
os.environ.setdefault("FW_SOURCE_DIR", ROOT)

import fwtest  # noqa: E402
from bench_proc import proc_cpu_s  # noqa: E402
from delay_proxy import DelayProxy  # noqa: E402
from pgserver import PgServer  # noqa: E402
from redisserver import RedisServer  # noqa: E402

DB, COLL = "bench_store", "docs"

BODIES = {
    # The ceiling the source and on_batch allow here: the same documents read, nothing written.
    "s0b": ("on_batch", """
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      local _ = d.g + d.n
    end
"""),
    "s9": ("on_change", """
    local d = ctx:full_document()
    fw.pg.execute("pg", "INSERT INTO s9 (id, g, n) VALUES ($1, $2, $3) "
      .. "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", { tostring(d._id), d.g, d.n })
"""),
    "s9b": ("on_batch", """
    local rows, params = {}, {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      local k = #params
      rows[#rows + 1] = string.format("($%d, $%d, $%d)", k + 1, k + 2, k + 3)
      params[k + 1], params[k + 2], params[k + 3] = tostring(d._id), d.g, d.n
    end
    fw.pg.execute("pg", "INSERT INTO s9 (id, g, n) VALUES " .. table.concat(rows, ",")
      .. " ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", params)
"""),
    "s9m": ("on_batch", """
    local rows = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      rows[#rows + 1] = { tostring(d._id), d.g, d.n }
    end
    fw.pg.execute_many("pg", "INSERT INTO s9 (id, g, n) VALUES ($1, $2, $3) "
      .. "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", rows)
"""),
    "s9j": ("on_batch", """
    local rows = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      rows[#rows + 1] = { id = tostring(d._id), g = d.g, n = d.n }
    end
    fw.pg.execute("pg", UPSERT_JSON, { rows })
"""),
    "s10": ("on_change", """
    local d = ctx:full_document()
    fw.redis.pipeline("cache", { { "SET", "doc:" .. tostring(d._id), d.n },
                                 { "INCR", "count:" .. d.g } })
"""),
    "s10b": ("on_batch", """
    local cmds = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      cmds[#cmds + 1] = { "SET", "doc:" .. tostring(d._id), d.n }
      cmds[#cmds + 1] = { "INCR", "count:" .. d.g }
    end
    fw.redis.pipeline("cache", cmds)
"""),
}


# Exactly-once variants: the base scenario's handler, its calls' statements and the stream's
# position committed in one SQL transaction.
EXACTLY_ONCE = {"s9e": "s9", "s9me": "s9m"}


def script(tmp, scenario, pg_uri, redis_uri, done_at=0):
    """done_at > 0: the handler logs "BENCH done" once it has returned for that many events."""
    kind, body = BODIES[EXACTLY_ONCE.get(scenario, scenario)]
    eo = 'exactly_once = { connection = "pg" },\n  ' if scenario in EXACTLY_ONCE else ""
    arg = "batch" if kind == "on_batch" else "ctx"
    if done_at:
        body += ("    seen = seen + %s\n    if seen >= %d and not done then done = true; "
                 "fw.log.info('BENCH done') end\n" % ("#batch" if arg == "batch" else "1", done_at))
    text = ('local fw = require("flowwarden")\n'
            'local UPSERT_JSON = "INSERT INTO s9 (id, g, n) SELECT id, g, n FROM "\n'
            '  .. "jsonb_to_recordset($1::jsonb) AS r(id text, g int, n int) "\n'
            '  .. "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n"\n'
            'local seen, done = 0, false\n'
            'fw.connection { name = "pg", uri = %r }\n'
            'fw.connection { name = "cache", uri = %r }\n'
            'fw.stream { name = "b", database = %r, collection = %r,\n'
            '  checkpoint = { save_every = 100 },\n'
            '  %s%s = function(%s)%s  end }\n') % (pg_uri, redis_uri, DB, COLL, eo, kind, arg,
                                                    body)
    path = os.path.join(tmp, scenario + ".lua")
    with open(path, "w") as f:
        f.write(text.replace("'", '"'))
    return path


def applied(scenario, pg, redis, n):
    if scenario == "s0b":
        return True
    if scenario.startswith("s9"):
        return int(pg.sql("SELECT count(*) FROM s9")[0][0]) >= n
    total = sum(int(redis.command("GET", "count:%d" % g) or 0) for g in range(100))
    return total >= n


def reset(scenario, pg, redis, mongo, keep_docs=False):
    if not keep_docs:
        mongo[DB][COLL].drop()
    mongo[DB]["_fw_checkpoints"].drop()
    pg.sql("DROP TABLE IF EXISTS s9, flowwarden_checkpoints; CREATE TABLE s9 (id text PRIMARY KEY, g int, n int)")
    redis.command("FLUSHALL")


def insert(mongo, n):
    docs = [{"_id": i, "g": i % 100, "n": i} for i in range(n)]
    for k in range(0, n, 1000):
        mongo[DB][COLL].insert_many(docs[k:k + 1000])


def wait(pred, timeout):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise RuntimeError("not applied within %ss" % timeout)
        time.sleep(0.02)


def run_flowwarden(tmp, scenario, uri, pg, redis, mongo, n):
    reset(scenario, pg, redis, mongo)
    p = fwtest.Flowwarden(script(tmp, scenario, pg.uri(), redis.uri(0)), uri)
    try:
        p.wait_open()
        cpu0 = proc_cpu_s(p.proc.pid)
        t0 = time.monotonic()
        insert(mongo, n)
        wait(lambda: applied(scenario, pg, redis, n), 300)
        elapsed = time.monotonic() - t0
        cpu = proc_cpu_s(p.proc.pid) - cpu0
    finally:
        p.stop()
    return n / elapsed, cpu / n * 1e6


def preload(mongo, n):
    """Inserts the N documents; returns a resume token from before them."""
    mongo[DB][COLL].drop()
    with mongo[DB][COLL].watch() as cs:
        cs.try_next()
        token = dict(cs.resume_token)
    insert(mongo, n)
    return token


def log_ms(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0


def run_flowwarden_preloaded(tmp, scenario, uri, pg, redis, mongo, n, token):
    reset(scenario, pg, redis, mongo, keep_docs=True)
    mongo[DB]["_fw_checkpoints"].replace_one(
        {"_id": "b"}, {"_id": "b", "lastProcessedToken": token}, upsert=True)
    p = fwtest.Flowwarden(script(tmp, scenario, pg.uri(), redis.uri(0), done_at=n), uri)
    try:
        p.wait_log("starting on", 1, 60)
        cpu0 = proc_cpu_s(p.proc.pid)
        p.wait_log("BENCH done", 1, 300)
        cpu = proc_cpu_s(p.proc.pid) - cpu0
    finally:
        p.stop()
    first = [r for r in p.records if str(r.get("msg", "")).startswith("starting on")]
    done = [r for r in p.records if r.get("msg") == "BENCH done"]
    elapsed = (log_ms(done[0]["ts"]) - log_ms(first[0]["ts"])) / 1e3
    if not applied(scenario, pg, redis, n):
        raise RuntimeError("the target does not hold all %d" % n)
    return n / elapsed, cpu / n * 1e6


def run_python_preloaded(scenario, uri, pg, redis, mongo, n, token):
    reset(scenario, pg, redis, mongo, keep_docs=True)
    target = pg.uri() if scenario.startswith("s9") else redis.uri(0)
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "store_loop.py"), uri, DB, COLL,
                              str(n), scenario, target, json.dumps(token, default=str)],
                             stdout=subprocess.PIPE, text=True)
    lines = [child.stdout.readline().split() for _ in range(3)]
    child.wait(300)
    got = {ln[0]: float(ln[1]) for ln in lines if len(ln) == 2}
    if not applied(scenario, pg, redis, n) or "elapsed" not in got:
        raise RuntimeError("store_loop.py did not finish: %r" % lines)
    return n / got["elapsed"], got["cpu"] / n * 1e6


def run_python(scenario, uri, pg, redis, mongo, n):
    reset(scenario, pg, redis, mongo)
    target = pg.uri() if scenario.startswith("s9") else redis.uri(0)
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "store_loop.py"), uri, DB, COLL,
                              str(n), scenario, target], stdout=subprocess.PIPE, text=True)
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("store_loop.py did not start")
    t0 = time.monotonic()
    insert(mongo, n)
    wait(lambda: applied(scenario, pg, redis, n), 300)
    elapsed = time.monotonic() - t0
    line = child.stdout.readline().split()
    child.wait(60)
    cpu = float(line[1]) if len(line) == 2 and line[0] == "cpu" else float("nan")
    return n / elapsed, cpu / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--only", default="s9,s9b,s9j,s9m,s10,s10b")
    ap.add_argument("--systems", default="flowwarden,python")
    ap.add_argument("--pg-latency-ms", type=float, default=0)
    ap.add_argument("--preload", action="store_true",
                    help="insert the documents first, read them from a resume token")
    a = ap.parse_args()
    import pymongo
    standin = fwtest.StandIn(credentials=())
    standin.start()
    redis, pg = RedisServer(), PgServer(password="bench-pw")
    redis.start()
    pg.start()
    proxy = None
    if a.pg_latency_ms:
        proxy = DelayProxy(pg.port, a.pg_latency_ms)
        proxy.start()
        direct = pg.uri
        pg.uri = lambda **kw: direct(**kw).replace(":%d/" % pg.port, ":%d/" % proxy.port)
    uri = fwtest.uri_with_database(standin.uri, DB)
    mongo = pymongo.MongoClient(standin.uri)
    tmp = tempfile.mkdtemp(prefix="fw-store-bench-")
    try:
        print("%-5s %-10s %12s %16s" % ("", "system", "events/s", "CPU us/event"))
        if "s0b" in a.only.split(",") and not a.preload:
            sys.exit("s0b needs --preload (it writes nothing to wait for)")
        token = preload(mongo, a.events) if a.preload else None
        for sc in a.only.split(","):
            for system in a.systems.split(","):
                if system == "python" and sc in EXACTLY_ONCE:
                    continue  # no such mode in the loop
                if system == "flowwarden" and token:
                    rate, cpu = run_flowwarden_preloaded(tmp, sc, uri, pg, redis, mongo, a.events,
                                                         token)
                elif system == "flowwarden":
                    rate, cpu = run_flowwarden(tmp, sc, uri, pg, redis, mongo, a.events)
                elif token:
                    rate, cpu = run_python_preloaded(sc, uri, pg, redis, mongo, a.events, token)
                else:
                    rate, cpu = run_python(sc, uri, pg, redis, mongo, a.events)
                print("%-5s %-10s %12.0f %16.1f" % (sc.upper(), system, rate, cpu), flush=True)
    finally:
        mongo.close()
        if proxy:
            proxy.stop()
        standin.stop()
        redis.stop()
        pg.destroy()


if __name__ == "__main__":
    main()
