"""A runaway handler (endless loop, memory bomb, deep recursion) in one
stream while another stream drains a backlog (issue 18, the chaos suite):
the budgets (timeout, memory_limit) make the runaway fail its events, and the
healthy stream is not starved by it.

The goal that the healthy stream keeps >= 80% of the throughput it has alone
is a performance figure (printed, and kept in docs/performance.md): on a
quiet machine it measures 80-98%, on a busy one it can fall below 80% with
nothing wrong. The test fails only on starvation, below half of it, which a
runaway that held the healthy stream's thread or the process would cause."""
import datetime
import unittest

from chaostest import SCALE, StandInTestCase, figures

HEALTHY_EVENTS = 50_000 * SCALE
RUNAWAY_EVENTS = 60 * SCALE
ROUNDS = 2

SCRIPT = """
fw.stream { name = "healthy", collection = "%(coll)s",
  checkpoint = { save_every = 1000 },
  on_insert = function(ctx)
    local d = ctx:full_document()
    -- Some work per event, so the backlog takes seconds to drain.
    local t = os.clock() + 0.00005 while os.clock() < t do end
    if d.n %% 500 == 0 or d.last then report({ n = d.n }) end
  end }

local function recurse(n) return 1 + recurse(n + 1) end

fw.stream { name = "runaway", collection = "%(rcoll)s",
  timeout = "200ms", memory_limit = "16MB", retry = false, dlq = true,
  on_insert = function(ctx)
    local kind = ctx:full_document().kind
    if kind == "spin" then while true do end end
    if kind == "hog" then
      local t = {}
      for i = 1, 1e9 do t[i] = string.rep("x", 64) .. i end
    end
    if kind == "recurse" then recurse(1) end
  end }
"""

KINDS = ["spin", "hog", "recurse"]


def ts(rec):
    return datetime.datetime.strptime(rec["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")


class RunawayHandler(StandInTestCase):

    def drain(self, coll, runaway):
        """Primes a checkpoint for `coll`, writes a backlog (and runaway
        events), starts flowwarden and returns the healthy stream's events
        per second over its whole backlog."""
        script = self.script(SCRIPT % {"coll": coll, "rcoll": "r_" + coll}, name=coll + ".lua")
        # Each round watches other collections under the same stream names: the
        # last round's checkpoints hold tokens of those, which MongoDB refuses to
        # resume a stream of another collection with (280, as the stand-in now does).
        self.db["_fw_checkpoints"].delete_many({})
        p = self.run_fw(script)
        p.wait_open(2)
        self.assertEqual(p.stop(), 0)       # both checkpoints saved: backlogs are kept
        for lo in range(0, HEALTHY_EVENTS, 5000):
            self.db[coll].insert_many([{"n": n, "last": n == HEALTHY_EVENTS - 1}
                                       for n in range(lo, min(lo + 5000, HEALTHY_EVENTS))])
        if runaway:
            self.db["r_" + coll].insert_many([{"kind": KINDS[i % 3], "i": i}
                                              for i in range(RUNAWAY_EVENTS)])
        p = self.run_fw(script)
        p.wait_until(lambda: any(r.get("n") == HEALTHY_EVENTS - 1 for r in p.reports("healthy")),
                     timeout=120, what="the healthy backlog")
        recs = [r for r in p.records if str(r.get("msg", "")).startswith("REPORT ")
                and r.get("stream") == "healthy"]
        opened = [r for r in p.records if r.get("stream") == "healthy"
                  and "change stream open" in str(r.get("msg"))][0]
        seconds = max((ts(recs[-1]) - ts(opened)).total_seconds(), 0.001)
        p.stop()
        return HEALTHY_EVENTS / seconds, p

    def test_runaway_stream_does_not_slow_a_healthy_one(self):
        # Interleaved rounds, best of each: a burst of load from elsewhere on
        # the machine does not decide the ratio.
        solo, loaded = [], []
        for rnd in range(ROUNDS):
            solo.append(self.drain("solo%d" % rnd, runaway=False)[0])
            eps, p = self.drain("loaded%d" % rnd, runaway=True)
            loaded.append(eps)
        solo, loaded = max(solo), max(loaded)
        # (deep recursion grows the Lua stack until the memory limit stops it)
        by_type = {}
        for e in self.db["_fw_dlq"].find({"streamName": "runaway"}, {"error.type": 1, "_id": 0}):
            by_type[e["error"]["type"]] = by_type.get(e["error"]["type"], 0) + 1
        dlq = sum(by_type.values())
        ratio = loaded / solo
        figures("runaway_handler", events=HEALTHY_EVENTS, solo_eps="%.0f" % solo,
                with_runaway_eps="%.0f" % loaded, ratio="%.2f" % ratio,
                runaway_dead_lettered=dlq,
                runaway_errors=",".join("%s:%d" % kv for kv in sorted(by_type.items())),
                healthy_seconds_solo="%.1f" % (HEALTHY_EVENTS / solo))
        self.assertGreater(dlq, 0, "the runaway failed none of its events")
        self.assertGreaterEqual(ratio, 0.5, "the runaway starved the healthy stream")


if __name__ == "__main__":
    unittest.main()
