"""Hot reload on SIGHUP (issue 5): atomic swaps, nothing lost or repeated,
a broken script never takes the runtime down."""
import os
import signal
import threading
import time
import unittest

from fwtest import StandInTestCase

QUICK = os.environ.get("FW_RELOAD_QUICK") == "1"
# Under AddressSanitizer freed memory sits in quarantine, so RSS says nothing;
# LeakSanitizer's report at exit (a non-zero status) is the check there.
SANITIZED = os.environ.get("FW_SANITIZED") == "1"


def versioned(v, extra=""):
    """A stream reporting each event's seq with the script version V."""
    return """
        local V = %d
        fw.stream {
          name = "s", collection = "c",
          restart = { initial_delay = "100ms" },
          on_insert = function(ctx)
            report({ seq = ctx:full_document().seq, v = V, attempt = ctx:attempt_number() })
          end,
        }
        %s
    """ % (v, extra)


class ReloadTest(StandInTestCase):

    def reload(self, p, body, expect_ok=True):
        """Rewrites the script, sends SIGHUP and waits for the outcome."""
        before_ok = self.count(p, "reloaded ")
        before_bad = self.count(p, "reload failed")
        with open(p.script, "w") as f:
            from fwtest import PRELUDE
            import textwrap
            f.write(PRELUDE + textwrap.dedent(body))
        p.proc.send_signal(signal.SIGHUP)
        if expect_ok:
            p.wait_until(lambda: self.count(p, "reloaded ") > before_ok, 30, "reload")
        else:
            p.wait_until(lambda: self.count(p, "reload failed") > before_bad, 30, "reload failure")

    def cp(self, stream):
        return self.db["_fw_checkpoints"].find_one({"_id": stream})

    @staticmethod
    def count(p, needle):
        return sum(needle in m for m in p.messages())

    def test_continuous_inserts_across_many_reloads_handled_once_in_order(self):
        total, reloads = (600, 5) if QUICK else (3000, 20)
        p = self.run_fw(self.script(versioned(1)))
        p.wait_open()
        done = threading.Event()

        def insert():
            for i in range(total):
                self.db.c.insert_one({"seq": i})
            done.set()

        t = threading.Thread(target=insert)
        t.start()
        for v in range(2, reloads + 2):
            self.reload(p, versioned(v))
        t.join()
        got = p.wait_reports(total, timeout=120)
        self.assertEqual([r["seq"] for r in got], list(range(total)))  # once, in order
        versions = [r["v"] for r in got]
        self.assertEqual(versions, sorted(versions))  # never an older script after a newer one
        self.assertGreater(len(set(versions)), 2)     # reloads really happened mid-stream
        # events written after the last reload run the last version
        self.db.c.insert_one({"seq": total})
        last = p.wait_reports(total + 1)[-1]
        self.assertEqual((last["seq"], last["v"]), (total, reloads + 1))
        self.assertEqual(p.stop(), 0)

    def test_broken_reload_keeps_old_script_then_fixed_reload_works(self):
        p = self.run_fw(self.script(versioned(1)))
        p.wait_open()
        self.reload(p, versioned(2) + "\nlocal x = = 1\n", expect_ok=False)
        failure = [m for m in p.messages("error") if "reload failed" in m][-1]
        self.assertIn("still running script version", failure)
        self.assertRegex(failure, r"script\.lua:\d+: .*unexpected symbol near '='")
        self.db.c.insert_one({"seq": 1})
        self.assertEqual(p.wait_reports(1)[0]["v"], 1)
        # a validation error is refused the same way
        self.reload(p, versioned(3).replace('collection = "c"', 'collection = "c", bogus = 1'),
                    expect_ok=False)
        self.assertIn('unknown key "bogus"', [m for m in p.messages("error")
                                             if "reload failed" in m][-1])
        self.reload(p, versioned(4))
        self.db.c.insert_one({"seq": 2})
        self.assertEqual(p.wait_reports(2)[1]["v"], 4)
        self.assertEqual(p.stop(), 0)
        self.assertTrue(any("reloads: 1 succeeded, 2 failed" in m for m in p.messages()))

    def test_stream_added_removed_and_source_changed(self):
        two = versioned(1, """
            fw.stream { name = "t", collection = "d",
              on_change = function(ctx) report({ t = ctx:full_document().n }) end }
        """)
        p = self.run_fw(self.script(two))
        p.wait_open(2)
        self.db.d.insert_one({"n": 1})
        p.wait_until(lambda: len([r for r in p.reports() if "t" in r]) == 1)

        # remove "t": it stops with a final checkpoint at its last event
        self.reload(p, versioned(1))
        p.wait_log("summary (removed by reload)")
        cp = self.cp("t")
        self.assertIsNotNone(cp["lastProcessedToken"])
        self.db.d.insert_one({"n": 2})      # written while "t" is gone

        # add "t" back with its source changed (an operation filter): it resumes from
        # its checkpoint, so n = 2 is delivered, once.
        changed = versioned(1, """
            fw.stream { name = "t", collection = "d", operation_types = { "insert" },
              on_change = function(ctx) report({ t = ctx:full_document().n }) end }
        """)
        self.reload(p, changed)
        p.wait_until(lambda: [r["t"] for r in p.reports() if "t" in r] == [1, 2], 30,
                     "t resumed from its checkpoint")
        # change the source of "s": it restarts from its checkpoint, losing nothing
        self.db.c.insert_one({"seq": 0})
        p.wait_reports(1)
        moved = changed.replace('collection = "c",', 'collection = "c", full_document = "updateLookup",')
        self.reload(p, moved)
        self.assertTrue(any("(1 kept their position, 1 restarted" in m for m in p.messages()))
        self.db.c.insert_one({"seq": 1})
        self.db.d.insert_one({"n": 3})
        p.wait_until(lambda: [r["seq"] for r in p.reports() if "seq" in r] == [0, 1], 30, "s")
        p.wait_until(lambda: [r["t"] for r in p.reports() if "t" in r] == [1, 2, 3], 30, "t")
        self.assertEqual(p.stop(), 0)

    def test_event_in_backoff_is_rescued_by_fixed_handler(self):
        failing = """
            fw.stream {
              name = "s", collection = "c",
              retry = { max_attempts = 5, initial_delay = "2s", jitter = false },
              dlq = true,
              on_insert = function(ctx)
                report({ attempt = ctx:attempt_number(), fixed = false })
                error(fw.error("Downstream.Down", "not yet"))
              end,
            }
        """
        fixed = failing.replace(
            'report({ attempt = ctx:attempt_number(), fixed = false })\n'
            '                error(fw.error("Downstream.Down", "not yet"))',
            'report({ attempt = ctx:attempt_number(), fixed = true })')
        self.assertNotEqual(fixed, failing)
        p = self.run_fw(self.script(failing))
        p.wait_open()
        self.db.c.insert_one({"seq": 1})
        p.wait_reports(1)
        p.wait_log("retrying in")
        self.reload(p, fixed)
        got = p.wait_reports(2)
        self.assertEqual(got, [{"attempt": 1, "fixed": False}, {"attempt": 2, "fixed": True}])
        p.wait_until(lambda: self.cp("s") is not None, 10, "checkpoint")
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 0)
        self.assertEqual(p.stop(), 0)

    def test_reload_during_a_slow_handler_switches_at_the_event_boundary(self):
        # Event 1's handler waits (bounded by the stream's timeout) until the
        # test opens a gate in the database; the reload comes meanwhile. The
        # program never changes inside an event: event 1 ends on version 1,
        # event 2 runs on version 2.
        body = """
            local V = %d
            fw.stream {
              name = "s", collection = "c", timeout = "20s",
              on_insert = function(ctx)
                local d = ctx:full_document()
                if d.seq == 1 then
                  report({ started = d.seq, v = V })
                  local gates = fw.mongo.collection(ctx:database_name(), "gate")
                  while not gates:find_one({ _id = 1 }) do
                    local t = os.clock() + 0.02
                    while os.clock() < t do end
                  end
                end
                report({ seq = d.seq, v = V })
              end,
            }
        """
        p = self.run_fw(self.script(body % 1))
        p.wait_open()
        self.db.c.insert_one({"seq": 1})
        p.wait_until(lambda: {"started": 1, "v": 1} in p.reports(), 30, "event 1's handler")
        self.reload(p, body % 2)
        self.db.gate.insert_one({"_id": 1})
        p.wait_until(lambda: {"seq": 1, "v": 1} in p.reports(), 30, "event 1")
        self.db.c.insert_one({"seq": 2})
        p.wait_until(lambda: any("seq" in r and r["seq"] == 2 for r in p.reports()), 30, "event 2")
        done = [r for r in p.reports() if "seq" in r]
        self.assertEqual(done, [{"seq": 1, "v": 1}, {"seq": 2, "v": 2}])
        self.assertEqual(p.stop(), 0)

    def test_sighup_burst_is_coalesced_and_runtime_keeps_working(self):
        p = self.run_fw(self.script(versioned(1)))
        p.wait_open()
        for _ in range(50):
            p.proc.send_signal(signal.SIGHUP)
        p.wait_log("reloaded ")
        self.db.c.insert_one({"seq": 7})
        self.assertEqual(p.wait_reports(1)[0]["seq"], 7)
        reloads = self.count(p, "reloaded ")
        self.assertGreaterEqual(reloads, 1)
        self.assertLess(reloads, 50)
        self.assertEqual(p.stop(), 0)

    def test_sighup_during_startup_and_shutdown(self):
        p = self.run_fw(self.script(versioned(1)))
        p.wait_log("running")               # script loaded, streams not yet open
        p.proc.send_signal(signal.SIGHUP)
        p.wait_open()
        p.wait_log("reloaded ")
        self.db.c.insert_one({"seq": 1})
        p.wait_reports(1)
        p.proc.send_signal(signal.SIGTERM)
        p.proc.send_signal(signal.SIGHUP)
        self.assertEqual(p.wait_exit(), 0)

    def test_many_reloads_do_not_grow_memory(self):
        n = 100 if QUICK else 1000
        p = self.run_fw(self.script(versioned(1)))
        p.wait_open()

        def rss_kb():
            with open("/proc/%d/status" % p.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
            return 0

        def reload_n(count):
            for _ in range(count):
                before = self.count(p, "reloaded ")
                p.proc.send_signal(signal.SIGHUP)
                p.wait_until(lambda: self.count(p, "reloaded ") > before, 30, "reload")

        reload_n(n // 10)
        self.db.c.insert_one({"seq": 0})
        p.wait_reports(1)
        warm = rss_kb()
        reload_n(n - n // 10)
        self.db.c.insert_one({"seq": 1})
        p.wait_reports(2)
        grown = rss_kb() - warm
        if not SANITIZED:
            # a small fraction of what leaking one Lua state per reload would cost
            self.assertLess(grown, 4096, "RSS grew by %d kB over %d reloads" % (grown, n))
        self.assertEqual(p.stop(), 0)


if __name__ == "__main__":
    unittest.main()
