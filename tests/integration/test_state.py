"""fw.state, fw.env and fw.json through the real binary (issue 11): the
store outlives hot reloads, fw.env failures stop the load with the
variable's name, fw.json encodes what handlers see."""
import re
import signal
import textwrap
import unittest

from fwtest import PRELUDE, StandInTestCase, clean_env, run_cli, write_script


def counter(version, extra=""):
    return """
        fw.stream {
          name = "s", collection = "c", %s
          on_insert = function(ctx)
            report({ n = fw.state.incr("count"), v = %d, seq = ctx:full_document().seq })
          end,
        }
    """ % (extra, version)


class StateTest(StandInTestCase):

    def reload(self, p, body):
        before = sum("reloaded " in m for m in p.messages())
        with open(p.script, "w") as f:
            f.write(PRELUDE + textwrap.dedent(body))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_until(lambda: sum("reloaded " in m for m in p.messages()) > before, 30, "reload")

    def test_counter_continues_across_reloads(self):
        p = self.run_fw(self.script(counter(1)))
        p.wait_open()
        for i in range(3):
            self.db.c.insert_one({"seq": i})
        got = p.wait_reports(3)
        self.assertEqual([(r["n"], r["v"]) for r in got], [(1, 1), (2, 1), (3, 1)])

        # Same source: the stream is kept, its new Lua state gets the old store.
        self.reload(p, counter(2))
        self.assertTrue(any("1 kept their position" in m for m in p.messages()))
        self.db.c.insert_one({"seq": 3})
        p.wait_until(lambda: any(r["v"] == 2 for r in p.reports()), 30, "the new version")
        # Source changed: the stream restarts, and the store is handed over.
        self.reload(p, counter(3, 'full_document = "updateLookup",'))
        self.assertTrue(any("1 restarted" in m for m in p.messages()))
        self.db.c.insert_one({"seq": 4})
        got = p.wait_reports(5)
        self.assertEqual([r["n"] for r in got], [1, 2, 3, 4, 5])  # never started over
        self.assertEqual(got[-1]["v"], 3)
        self.assertEqual(p.stop(), 0)

    def test_state_ttl_stats_and_json_in_a_handler(self):
        p = self.run_fw(self.script("""
            fw.defaults { state = { max_bytes = "1KB" } }
            fw.stream {
              name = "s", collection = "c",
              on_insert = function(ctx)
                local doc = ctx:full_document()
                for i = 1, 20 do fw.state.set("k" .. i, i) end  -- 1KB holds about 15
                fw.state.set("last", fw.json.encode(doc), { ttl = "1h" })
                local back = fw.json.decode(fw.state.get("last"), { extended = true })
                local st = fw.state.stats()
                report({ same = back._id == doc._id, json = fw.json.encode({ x = doc.x }),
                         max = st.max_bytes, evictions = st.evictions > 0,
                         bounded = st.bytes <= st.max_bytes })
              end,
            }
        """))
        p.wait_open()
        self.db.c.insert_one({"x": [1.5, None, {"d": 1}]})
        r = p.wait_reports(1)[0]
        self.assertEqual(r, {"same": True, "json": '{"x":[1.5,null,{"d":1}]}', "max": 1024,
                             "evictions": True, "bounded": True})
        p.wait_log("fw.state: evicted")
        self.assertEqual(p.stop(), 0)


class LoadErrorTest(unittest.TestCase):

    def setUp(self):
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, body, env=None):
        script = write_script(self.tmp.name, body)
        return script, run_cli(["check", script], env=clean_env(env))

    def test_missing_env_variable_stops_the_load_with_its_name(self):
        body = """
            local token = fw.env("HOOK_TOKEN")
            local region = fw.env("FW_TEST_REGION", "eu")
            local optional = fw.env("FW_TEST_OPTIONAL", nil)
            fw.stream { name = "s", database = "d", on_change = function() end }
        """
        script, cp = self.check(body)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertRegex(cp.stderr, re.escape(script) + r":\d+: " + re.escape(
            'fw.env: environment variable HOOK_TOKEN is not set (give a default: '
            'fw.env("HOOK_TOKEN", "..."))'))
        script, cp = self.check(body, {"HOOK_TOKEN": "s3cret-value"})
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertNotIn("s3cret-value", cp.stdout + cp.stderr)
        self.assertIn("state.max_bytes                64MB", cp.stdout)

    def test_fw_state_at_top_level_and_bad_max_bytes(self):
        script, cp = self.check("""
            fw.state.set("k", 1)
            fw.stream { name = "s", database = "d", on_change = function() end }
        """)
        self.assertEqual(cp.returncode, 1)
        self.assertIn("fw.state is available inside handlers only", cp.stderr)
        script, cp = self.check("""
            fw.defaults { state = { max_bytes = "12" } }
            fw.stream { name = "s", database = "d", on_change = function() end }
        """)
        self.assertEqual(cp.returncode, 1)
        self.assertRegex(cp.stderr, re.escape(script) + r':\d+: defaults: state\.max_bytes: ')


if __name__ == "__main__":
    unittest.main()
