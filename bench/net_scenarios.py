"""S2 over a network with latency (issue 16), part "net" of bench/run_bench.py.

For each round-trip time of --net-latencies (default 0, 1 and 5 ms) a stand-in is started with
`--latency-ms N` (tests/standin/mongo_standin.py: every reply leaves N ms after it is ready, per
connection, in order), the `net` data set (small documents, --net-events of them) is loaded into
it, and each system runs S2 with save_every = 100 (--net-save-every) over the same pre-loaded events, as the
throughput part does: flowwarden, pymongo, Node and the plain libmongoc drain, plus
"flowwarden-sync" (flowwarden with checkpoint = { mode = "sync" }: the checkpoint write on the
handler's path, as before issue 16). The table gives events/s per system and latency, the
percentage of the drain at the same latency and of the system's own 0 ms figure.
"""

from bench_docs import small_doc
from bench_proc import log

COLL = "net"
PART = "net"
SYSTEMS = ("drain", "flowwarden", "flowwarden-sync", "pymongo", "node")


def run(make_bench, standin_cls, latencies, systems, repeat, n, save_every=100):
    """Returns {"latencies": [...], "events": n, "save_every": save_every, "rows": {system: {ms:
    summary}}}; make_bench (standin) gives a run_bench.Bench on that stand-in, standin_cls starts
    one. save_every: flowwarden's checkpoint.save_every (100; 1 is the default a script gets)."""
    rows = {}
    for ms in latencies:
        args = ["--latency-ms", str(ms)] if ms else []
        with standin_cls(args) as s:
            bench = make_bench(s)
            bench.load(COLL, n, small_doc)
            for rep in range(repeat):
                for sysname in [x for x in SYSTEMS if x in systems]:
                    r = bench.run(sysname, COLL, "s2", save_every=save_every,
                                  timeout=120 + n / 500.0 + n / save_every * ms / 1000.0 * 3)
                    rows.setdefault(sysname, {}).setdefault("%g" % ms, []).append(r["events_per_s"])
                    log("rep %d net %g ms %-15s %8.0f ev/s" % (rep + 1, ms, sysname,
                                                              r["events_per_s"]))
            bench.client.close()
    out = {}
    for sysname, by_ms in rows.items():
        out[sysname] = {ms: sorted(v)[len(v) // 2] for ms, v in by_ms.items()}
    return {"latencies": list(latencies), "events": n, "save_every": save_every, "rows": out}


def _pct(a, b):
    return None if a is None or not b else 100.0 * a / b


def table(R):
    """Lines of the "net" table for print_table."""
    net = R.get("net")
    if not net:
        return []
    lat = net["latencies"]
    rows = net["rows"]
    drain = rows.get("drain", {})
    L = ["", "S2 over a network with latency (stand-in --latency-ms; %d small events, "
         "save_every = %d, median of %d runs): events/s, %% of the drain at the same "
         "latency, %% of the system's own 0 ms figure" % (net["events"], net.get("save_every", 100),
                                                          R["repeat"])]
    hdr = "%-16s" % "system" + "".join("%24s" % ("%g ms" % ms) for ms in lat)
    L += [hdr, "-" * len(hdr)]
    for sysname in SYSTEMS:
        if sysname not in rows:
            continue
        cells = []
        for ms in lat:
            k = "%g" % ms
            v = rows[sysname].get(k)
            d = _pct(v, drain.get(k)) if sysname != "drain" else None
            own = _pct(v, rows[sysname].get("%g" % lat[0])) if ms != lat[0] else None
            cells.append("%24s" % ("%s%s%s" % (
                "-" if v is None else "%.0f" % v,
                "" if d is None else " %3.0f%%d" % d,
                "" if own is None else " %3.0f%%0" % own)))
        L.append("%-16s" % sysname + "".join(cells))
    return L


def markdown(R):
    net = R.get("net")
    if not net:
        return []
    lat = net["latencies"]
    rows = net["rows"]
    drain = rows.get("drain", {})
    L = ["", "| system | " + " | ".join("%g ms ev/s | %% drain | %% own 0 ms" % ms for ms in lat)
         + " |", "|---|" + "---:|---:|---:|" * len(lat)]
    for sysname in SYSTEMS:
        if sysname not in rows:
            continue
        cells = []
        for ms in lat:
            k = "%g" % ms
            v = rows[sysname].get(k)
            d = _pct(v, drain.get(k)) if sysname != "drain" else None
            own = _pct(v, rows[sysname].get("%g" % lat[0]))
            cells += ["-" if v is None else "%.0f" % v, "-" if d is None else "%.0f%%" % d,
                      "-" if own is None else "%.0f%%" % own]
        L.append("| %s | %s |" % (sysname, " | ".join(cells)))
    return L


def goals(R):
    """The issues' goals: S2 >= 80% of the drain at 0 ms; at 1 ms >= 90% of its own 0 ms; at
    5 ms >= 80% of the drain at 5 ms."""
    net = R.get("net")
    if not net:
        return []
    rows = net["rows"]
    fw = rows.get("flowwarden", {})
    drain = rows.get("drain", {})
    G = []
    if fw.get("0") and drain.get("0"):
        p = 100.0 * fw["0"] / drain["0"]
        G.append({"goal": "S2 end to end >= 80%% of the drain at 0 ms (save_every = %d)"
                  % net.get("save_every", 100),
                  "met": p >= 80, "measured": "%.0f%% (%.0f vs %.0f ev/s)" % (p, fw["0"], drain["0"])})
    if fw.get("0") and fw.get("1"):
        p = 100.0 * fw["1"] / fw["0"]
        G.append({"goal": "S2 at 1 ms latency >= 90% of flowwarden's own 0 ms figure (issue 41)",
                  "met": p >= 90, "measured": "%.0f%% (%.0f vs %.0f ev/s)" % (p, fw["1"], fw["0"])})
    if fw.get("5") and drain.get("5"):
        p = 100.0 * fw["5"] / drain["5"]
        G.append({"goal": "S2 at 5 ms latency >= 80% of the drain at 5 ms (issue 41)",
                  "met": p >= 80, "measured": "%.0f%% (%.0f vs %.0f ev/s)" % (p, fw["5"], drain["5"])})
    return G
