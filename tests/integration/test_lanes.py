"""Per-key lanes (issue 16, lanes = N): events of one key in order, keys in
parallel, a retrying key holding back only its own lane, the checkpoint as a
watermark (kill -9 loses nothing), reloads switching every lane at one event,
and the lanes setting's validation."""
import os
import signal
import textwrap
import threading
import unittest

import pymongo

from fwtest import PRELUDE, StandInTestCase, run_cli, write_script

QUICK = os.environ.get("FW_RELOAD_QUICK") == "1" or os.environ.get("FW_SANITIZED") == "1"

# Each lane has a Lua state of its own: STATE tells them apart in reports.
UPDATES = """
    local STATE = string.format("%%p", {})
    fw.stream {
      name = "s", collection = "c", lanes = %(lanes)d,
      checkpoint = { save_every = %(save_every)d%(cp)s },
      on_insert = function(ctx)
        report({ k = ctx:document_key()._id, n = 0, st = STATE })
      end,
      on_update = function(ctx)
        report({ k = ctx:document_key()._id, n = ctx:update_description().updatedFields.n,
                 st = STATE })
      end,
    }
"""


def per_key(reports):
    """{key: [n, ...]} in report order."""
    out = {}
    for r in reports:
        out.setdefault(r["k"], []).append(r["n"])
    return out


class LanesTest(StandInTestCase):

    def write_updates(self, keys, updates, start=0):
        """Updates key i % keys with n = start + i + 1, one event each."""
        ops = [pymongo.UpdateOne({"_id": "k%d" % (i % keys)}, {"$set": {"n": start + i + 1}})
               for i in range(updates)]
        for at in range(0, len(ops), 500):
            self.db.c.bulk_write(ops[at:at + 500])

    def expected(self, keys, updates):
        want = {"k%d" % j: [0] for j in range(keys)}
        for i in range(updates):
            want["k%d" % (i % keys)].append(i + 1)
        return want

    def test_per_key_order_kept_with_four_lanes(self):
        keys, updates = 40, 1200 if QUICK else 3000
        p = self.run_fw(self.script(UPDATES % {"lanes": 4, "save_every": 100, "cp": ""}))
        p.wait_open()
        self.db.c.insert_many([{"_id": "k%d" % j, "n": 0} for j in range(keys)])
        self.write_updates(keys, updates)
        got = p.wait_reports(keys + updates, timeout=120)
        self.assertEqual(per_key(got), self.expected(keys, updates))  # once each, in key order
        self.assertGreater(len({r["st"] for r in got}), 1, "all events ran in one lane")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.report_count(), keys + updates)
        self.assertIn("4 lanes running script version", "\n".join(p.messages()))

    def test_retrying_key_holds_back_only_its_lane_and_the_watermark(self):
        # "stuck" fails until the test writes the gate document: with one
        # lane nothing after it could be handled before that.
        others = 300
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "c", lanes = 4,
              retry = { max_attempts = 100000, initial_delay = "20ms", max_delay = "20ms",
                        multiplier = 1.0, jitter = false },
              on_insert = function(ctx)
                local id = ctx:document_key()._id
                if id == "stuck" and not fw.mongo.collection("%s", "gate"):find_one({ _id = 1 }) then
                  if ctx:attempt_number() == 1 then
                    report({ waiting = ctx:resume_token()._data })
                  end
                  error(fw.error("Gate", "closed"))
                end
                report({ id = id, token = ctx:resume_token()._data })
              end,
            }
        """ % self.db_name))
        p.wait_open()
        self.db.c.insert_one({"_id": "stuck"})
        self.db.c.insert_many([{"_id": "o%d" % i} for i in range(others)])
        # Other keys flow while "stuck" retries: most of them are in other
        # lanes (4 lanes: about 3/4; the bound asks for half).
        p.wait_until(lambda: sum("id" in r for r in p.reports()) >= others // 2
                     and any("waiting" in r for r in p.reports()), 60,
                     "other keys handled while one key retries")
        stuck_token = [r["waiting"] for r in p.reports() if "waiting" in r][0]
        self.assertNotIn("stuck", [r.get("id") for r in p.reports()])
        # The watermark stays before the retrying event: a checkpoint written
        # now (save_every = 1) may not name it or anything after it.
        cp = self.checkpoint("s")
        if cp and cp.get("lastProcessedToken"):
            self.assertLess(cp["lastProcessedToken"]["_data"], stuck_token)
        self.db.gate.insert_one({"_id": 1})
        got = p.wait_reports(others + 2, timeout=60)
        last = max(r["token"] for r in got if "token" in r)
        self.wait_checkpoint("s", lambda c: c.get("lastProcessedToken", {}).get("_data", "") >= last)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(sorted(r["id"] for r in p.reports() if "id" in r),
                         sorted(["stuck"] + ["o%d" % i for i in range(others)]))

    def test_kill9_loses_nothing_and_keeps_key_order(self):
        keys, updates = 30, 1500 if QUICK else 4000
        # The count bound alone (max_unsaved = 0), so that a crash's repeats have a
        # bound in events to check: 4,096 + 20 x save_every (docs/reliability.md,
        # lanes). The time allowance is checked by test_checkpoints and
        # chaos/test_kill_flowwarden.
        script = self.script(UPDATES % {"lanes": 8, "save_every": 50, "cp": ', max_unsaved = "0s"'})
        p = self.run_fw(script)
        p.wait_open()
        self.db.c.insert_many([{"_id": "k%d" % j, "n": 0} for j in range(keys)])
        writer = threading.Thread(target=self.write_updates, args=(keys, updates))
        writer.start()
        p.wait_until(lambda: p.report_count() >= updates // 4, 60, "a quarter handled")
        p.kill9()
        first = list(p.reports())
        writer.join()
        q = self.run_fw(script)
        want = self.expected(keys, updates)
        # Everything is handled at least once: what the first run did not
        # finish comes again after the restart, from the watermark.

        def covered():
            a, b = per_key(first), per_key(q.reports())
            return all(sorted(set(a.get(k, [])) | set(b.get(k, []))) == ns
                       for k, ns in want.items())

        q.wait_until(covered, 120, "every event handled by one run or the other")
        self.assertEqual(q.stop(), 0)
        second = q.reports()
        for k in want:
            a = per_key(first).get(k, [])
            b = per_key(second).get(k, [])
            self.assertEqual(a, sorted(a), "key %s out of order before the kill" % k)
            self.assertEqual(b, sorted(b), "key %s out of order after the restart" % k)
            self.assertEqual(len(b), len(set(b)), "key %s repeated within one run" % k)
        # Repeats: within the window (4096) plus the checkpoint writer's count bound.
        repeated = len(first) + len(second) - (keys + updates)
        self.assertLessEqual(repeated, 4096 + 20 * 50)

    def test_reload_under_load_switches_every_lane_at_one_event(self):
        total, reloads = (600, 3) if QUICK else (2000, 6)

        def body(v):
            return """
                local V = %d
                fw.stream {
                  name = "s", collection = "c", lanes = 4,
                  on_insert = function(ctx)
                    report({ seq = ctx:full_document().seq, v = V })
                  end,
                }
            """ % v

        p = self.run_fw(self.script(body(1)))
        p.wait_open()
        done = threading.Event()

        def insert():
            for at in range(0, total, 50):
                self.db.c.insert_many([{"seq": i} for i in range(at, min(total, at + 50))])
            done.set()

        t = threading.Thread(target=insert)
        t.start()
        for v in range(2, reloads + 2):
            before = sum("reloaded " in m for m in p.messages())
            with open(p.script, "w") as f:
                f.write(PRELUDE + textwrap.dedent(body(v)))
            p.proc.send_signal(signal.SIGHUP)
            p.wait_until(lambda: sum("reloaded " in m for m in p.messages()) > before, 30,
                         "reload")
        t.join()
        got = p.wait_reports(total, timeout=120)
        self.assertEqual(sorted(r["seq"] for r in got), list(range(total)))  # each once
        # In stream order, versions never go back: all lanes switch after the
        # same event.
        by_seq = sorted(got, key=lambda r: r["seq"])
        versions = [r["v"] for r in by_seq]
        self.assertEqual(versions, sorted(versions))
        self.db.c.insert_one({"seq": total})
        last = p.wait_reports(total + 1)[-1]
        self.assertEqual((last["seq"], last["v"]), (total, reloads + 1))
        self.assertEqual(p.stop(), 0)
        self.assertGreaterEqual(
            sum("all 4 lanes switch to version" in m for m in p.messages()), 1)


class LanesConfigTest(unittest.TestCase):

    def setUp(self):
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def check(self, lanes):
        path = write_script(self.tmp.name, """
            fw.stream { name = "s", database = "shop", collection = "c", lanes = %s,
                        on_insert = function(ctx) end }
        """ % lanes)
        return path, run_cli(["check", path])

    def test_bad_lanes_values_are_refused_with_a_clear_error(self):
        for bad, shown in (("0", "0"), ("65", "65"), ("2.5", "2.5"), ('"4"', '"4"'),
                           ("-1", "-1")):
            path, r = self.check(bad)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(
                'stream "s": lanes: expected an integer from 1 to 64 (Lua states handling events '
                "of different keys in parallel), got %s" % shown, r.stderr)

    def test_check_shows_lanes(self):
        path, r = self.check("8")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n  lanes +8 \(in order per key, keys in parallel\)\n")
        path, r = self.check("1")
        self.assertRegex(r.stdout, r"\n  lanes +1 \(events handled one at a time, in order\)\n")


if __name__ == "__main__":
    unittest.main()
