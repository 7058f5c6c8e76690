"""kill -9 of flowwarden at random points of a long run (issue 18, the chaos
suite): nothing lost, the events of one key handled in their order, and per
crash at most save_every events handled again with checkpoint mode "sync";
with the default "async" at most 20 x save_every, or, when checkpoint writes
fall behind that, the events handled within checkpoint.max_unsaved (100 ms)
plus save_every."""
import os
import random
import threading
import time
import unittest

from chaostest import SCALE, StandInTestCase, figures
from fwtest import ASYNC_SAVES, DEFAULT_MAX_UNSAVED_MS, within_async_bound

EVENTS = 50_000 * SCALE
KILLS = 20 * SCALE
KEYS = 97
# docs/reliability.md, "Duplicates are bounded": after kill -9 a restart
# delivers again at most save_every events per stream with mode "sync"; with
# mode "async" (the default: saves are written while the handler goes on, and
# it waits only when 19 of them are not yet written and the newest written is
# max_unsaved old) at most 20 x save_every, or the events handled within
# max_unsaved plus save_every (fwtest.within_async_bound); none lost. That is
# the bound checked per crash.
SAVE_EVERY = 100
SYNC_EVENTS = 10_000 * SCALE
SYNC_KILLS = 5 * SCALE
BOUND = {"async": ASYNC_SAVES * SAVE_EVERY, "sync": SAVE_EVERY}

SCRIPT = """
fw.stream { name = "seq", collection = "c",
  checkpoint = { save_every = %d, save_interval = "100ms", mode = "%%s" },
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local d = ctx:full_document()
    report({ n = d.n, k = d.k })
  end }
""" % SAVE_EVERY


class KillFlowwarden(StandInTestCase):

    def last_n(self, p):
        # Called under the harness's lock by wait_until: no copy of the list.
        return p._reports[-1][1]["n"] if p._reports else -1

    def within_bound(self, mode, repeated, handled_at):
        """Whether a crash's repeated events (their n, in order) keep mode's bound;
        handled_at: each n's log time in the run that handled it last."""
        if mode == "sync":
            return len(repeated) <= SAVE_EVERY
        return within_async_bound([handled_at[n] for n in repeated], SAVE_EVERY)

    def write_all(self, events):
        for lo in range(0, events, 1000):
            self.db.c.insert_many([{"n": n, "k": n % KEYS}
                                   for n in range(lo, min(lo + 1000, events))])

    def test_kill9_at_random_points_loses_nothing_and_repeats_within_the_async_bound(self):
        self.kill_at_random_points("async", EVENTS, KILLS)

    def test_kill9_with_sync_checkpoints_repeats_within_save_every(self):
        self.kill_at_random_points("sync", SYNC_EVENTS, SYNC_KILLS)

    def kill_at_random_points(self, mode, events, kills):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, events - 1), kills))
        script = self.script(SCRIPT % mode)
        bound = BOUND[mode]
        started = time.monotonic()

        runs = []
        p = self.run_fw(script)
        p.wait_open()
        # Written by another thread, as fast as the stand-in takes them, so
        # kills land both while events arrive and while a backlog drains.
        writer = threading.Thread(target=self.write_all, args=(events,), daemon=True)
        writer.start()
        for target in kill_at:
            # A run killed after it handled the last event may have saved its checkpoint
            # there too: the next run then has nothing to report, and is killed idle.
            ended = any(ns and ns[-1][0] >= events - 1 for ns in runs)
            p.wait_until(lambda: ended or self.last_n(p) >= target, timeout=60,
                         what="event %d (seed %d)" % (target, seed))
            p.kill9()
            runs.append([(r["n"], t) for t, r in p.report_times()])
            p = self.run_fw(script)
        writer.join()
        # A run killed late may have handled the last event already (its
        # checkpoint then says so): the last event, from any run.
        before = max(n for ns in runs for n, _ in ns)
        p.wait_open()
        p.wait_until(lambda: max(before, self.last_n(p)) >= events - 1, timeout=120,
                     what="the last event (seed %d)" % seed)
        self.assertEqual(p.stop(), 0)
        runs.append([(r["n"], t) for t, r in p.report_times()])
        elapsed = time.monotonic() - started

        handled = set()
        handled_at = {}
        dups_per_crash = []
        for i, timed in enumerate(runs):
            ns = [n for n, _ in timed]
            # One collection written in n order: each run handles its events
            # in n order, so each key's events too.
            self.assertEqual(ns, sorted(ns), "run %d out of order (seed %d)" % (i, seed))
            if i > 0:
                repeated = [n for n in ns if n in handled]
                dups_per_crash.append(len(repeated))
                # The replay is the tail of what was handled before the crash,
                # in order, and it comes first.
                self.assertEqual(repeated, ns[:len(repeated)], "seed %d" % seed)
                self.assertTrue(self.within_bound(mode, repeated, handled_at),
                                "crash %d repeated %d events in %.0f ms (mode %s, seed %d)"
                                % (i, len(repeated),
                                   handled_at[repeated[-1]] - handled_at[repeated[0]]
                                   if repeated else 0, mode, seed))
            handled.update(ns)
            handled_at.update(timed)
        every = [n for ns in runs for n, _ in ns]
        per_key = {}
        for n in every:
            per_key.setdefault(n % KEYS, []).append(n)
        for k, seq in per_key.items():
            # Across crashes a key's events go back only by a replayed tail.
            firsts = []
            seen = set()
            for n in seq:
                if n not in seen:
                    seen.add(n)
                    firsts.append(n)
            self.assertEqual(firsts, sorted(firsts), "key %d out of order (seed %d)" % (k, seed))
        lost = events - len(handled & set(range(events)))
        figures("kill_flowwarden_%s" % mode, seed=seed, events=events, handled=len(every),
                lost=lost, duplicates=sum(dups_per_crash), crashes=len(runs) - 1,
                max_duplicates_per_crash=max(dups_per_crash),
                bound=bound if mode == "sync" else "%d or %d ms + %d" % (
                    bound, DEFAULT_MAX_UNSAVED_MS, SAVE_EVERY),
                starts=len(runs), seconds="%.1f" % elapsed)
        self.assertEqual(lost, 0, "seed %d" % seed)
        self.assertEqual(len(runs) - 1, kills)


if __name__ == "__main__":
    unittest.main()
