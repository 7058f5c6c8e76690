"""The Python peer of bench/store_scenarios.py: a pymongo change stream whose events do the
same PostgreSQL (psycopg2) or Redis (redis-py) work as the flowwarden script, one event at a
time or in batches of up to 500 (as on_batch's default). Prints "ready" once the stream is
open, and "cpu SECONDS" (its CPU since then) after N events. With a resume token (JSON), the
stream starts there and it also prints "elapsed SECONDS", from just before watch() to the Nth
event applied.

  python3 store_loop.py MONGO_URI DB COLL N SCENARIO TARGET_URI [RESUME_TOKEN_JSON]
"""
import json
import sys
import time

import pymongo


BATCHED = ("s0b", "s9b", "s9j", "s9m", "s10b")  # up to 500 events per batch, as on_batch's default


def main():
    uri, db, coll, n, scenario, target = sys.argv[1:7]
    token = json.loads(sys.argv[7]) if len(sys.argv) > 7 else None
    n = int(n)
    client = pymongo.MongoClient(uri)
    if scenario.startswith("s9"):
        import psycopg2
        conn = psycopg2.connect(target)
        conn.autocommit = True
        cur = conn.cursor()
    else:
        import redis
        r = redis.Redis.from_url(target)
    done = 0
    client.admin.command("ping")
    t0 = time.monotonic()
    with client[db][coll].watch(resume_after=token) as stream:
        print("ready", flush=True)
        cpu0 = time.process_time()
        pending = []
        while done < n:
            ev = stream.try_next() if pending else stream.next()
            if ev is not None:
                pending.append(ev["fullDocument"])
            if pending and (ev is None or len(pending) >= 500 or scenario not in BATCHED):
                if scenario == "s0b":
                    for d in pending:
                        _ = d["g"] + d["n"]
                elif scenario == "s9":
                    for d in pending:
                        cur.execute("INSERT INTO s9 (id, g, n) VALUES (%s, %s, %s) ON CONFLICT (id) "
                                    "DO UPDATE SET n = EXCLUDED.n", (str(d["_id"]), d["g"], d["n"]))
                elif scenario == "s9m":
                    import psycopg2.extras
                    psycopg2.extras.execute_batch(
                        cur, "INSERT INTO s9 (id, g, n) VALUES (%s, %s, %s) ON CONFLICT (id) "
                        "DO UPDATE SET n = EXCLUDED.n",
                        [(str(d["_id"]), d["g"], d["n"]) for d in pending], page_size=500)
                elif scenario == "s9j":
                    cur.execute("INSERT INTO s9 (id, g, n) SELECT id, g, n FROM "
                                "jsonb_to_recordset(%s::jsonb) AS r(id text, g int, n int) "
                                "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n",
                                (json.dumps([{"id": str(d["_id"]), "g": d["g"], "n": d["n"]}
                                             for d in pending]),))
                elif scenario == "s9b":
                    args = []
                    for d in pending:
                        args += [str(d["_id"]), d["g"], d["n"]]
                    cur.execute("INSERT INTO s9 (id, g, n) VALUES " +
                                ",".join(["(%s, %s, %s)"] * len(pending)) +
                                " ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", args)
                else:
                    p = r.pipeline(transaction=False)
                    for d in pending:
                        p.set("doc:%s" % d["_id"], d["n"])
                        p.incr("count:%s" % d["g"])
                        if scenario == "s10":
                            p.execute()
                    if scenario == "s10b":
                        p.execute()
                done += len(pending)
                pending = []
    elapsed = time.monotonic() - t0
    # CPU after the stream opened: the interpreter's start-up is not the loop's cost.
    print("cpu %.6f" % (time.process_time() - cpu0), flush=True)
    if token:
        print("elapsed %.6f" % elapsed, flush=True)


if __name__ == "__main__":
    main()
