"""The command line: help and usage errors, URI precedence, pid file, log
formats and levels, what logs never contain, signals (issue 3: command line,
logs, SIGTERM/SIGINT)."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from fwtest import (needs_standin, BINARY, ConnectionProbe, Flowwarden, StandInTestCase, clean_env, run_cli,
                    write_script)

USAGE_FIRST = "usage: flowwarden run SCRIPT [--uri URI] [--log-level debug|info|warn|error]"
TEXT_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (debug|info |warn |error) "
                       r"(?:\[([^\]]+)\] )?(.*)$")

VALID = "fw.stream { name = 's', database = 'shop', on_change = function(ctx) end }\n"


class Usage(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.valid = write_script(cls.tmp.name, VALID)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_usage_error(self, args, reason):
        r = run_cli(args)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(lines[0], "flowwarden: " + reason)
        self.assertEqual(lines[1], USAGE_FIRST)
        self.assertIn("flowwarden check SCRIPT", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_version(self):
        r = run_cli(["version"])
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^flowwarden \d+\.\d+\.\d+ \(libmongoc \d+\.\d+\.\d+, "
                                   r"Lua 5\.4\.\d+\)\n$")

    def test_help_prints_the_usage(self):
        for args in (["--help"], ["-h"], ["help"]):
            r = run_cli(args)
            self.assertEqual(r.returncode, 0)
            self.assertTrue(r.stdout.startswith(USAGE_FIRST), r.stdout)
            for cmd in ("flowwarden check SCRIPT", "flowwarden version", "flowwarden run --help"):
                self.assertIn(cmd, r.stdout)

    def test_run_help_describes_every_option(self):
        r = run_cli(["run", "--help"])
        self.assertEqual(r.returncode, 0)
        for text in ("--uri URI", "--log-level", "--log-format", "--pid-file", "FLOWWARDEN_URI",
                     "mongodb://127.0.0.1:27017/?replicaSet=rs0"):
            self.assertIn(text, r.stdout)

    def test_check_help(self):
        r = run_cli(["check", "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("without connecting", r.stdout)
        self.assertIn("--strict", r.stdout)

    def test_usage_errors_exit_2_with_a_one_line_reason_and_the_usage(self):
        v = self.valid
        cases = [
            ([], "missing command"),
            (["frobnicate"], 'unknown command "frobnicate"'),
            (["run"], "run: missing SCRIPT"),
            (["run", v, "--bogus"], "unknown option --bogus"),
            (["run", "-x", v], "unknown option -x"),
            (["run", v, "extra"], 'run: unexpected argument "extra"'),
            (["run", v, "--uri"], "option --uri needs a value"),
            (["run", v, "--log-level", "loud"],
             '--log-level: unknown level "loud" (use debug, info, warn or error)'),
            (["run", v, "--log-level=INFO"],
             '--log-level: unknown level "INFO" (use debug, info, warn or error)'),
            (["run", v, "--log-format", "xml"],
             '--log-format: unknown format "xml" (use text or json)'),
            (["run", v, "--pid-file"], "option --pid-file needs a value"),
            (["check"], "check: missing SCRIPT"),
            (["check", v, "more"], 'check: unexpected argument "more"'),
            (["check", "--bogus"], "check: unknown option --bogus"),
        ]
        for args, reason in cases:
            with self.subTest(args=args):
                self.assert_usage_error(args, reason)

    def test_usage_errors_start_nothing(self):
        probe = ConnectionProbe()
        try:
            r = run_cli(["run", self.valid, "--uri", probe.uri, "--log-level", "loud"])
            self.assertEqual(r.returncode, 2)
            self.assertEqual(probe.connections(), 0)
        finally:
            probe.close()

    def test_an_invalid_uri_is_logged_without_its_password(self):
        r = run_cli(["run", self.valid, "--uri", "mongodb://writer:s3cr3t@h:notaport/shop"])
        self.assertEqual(r.returncode, 1)
        self.assertIn('invalid MongoDB URI "mongodb://writer:***@h:notaport/shop": '
                      'Invalid host string in URI', r.stderr)
        self.assertNotIn("s3cr3t", r.stderr + r.stdout)

    def test_an_invalid_uri_says_why(self):
        r = run_cli(["run", self.valid, "--uri", "mongodb//127.0.0.1:1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn('invalid MongoDB URI "mongodb//127.0.0.1:1": Invalid URI Schema, expecting '
                      "'mongodb://' or 'mongodb+srv://'", r.stderr)

    def test_the_reason_for_refusing_a_uri_never_shows_its_password(self):
        # libmongoc's reason quotes a password holding an unencoded ':'.
        r = run_cli(["run", self.valid, "--uri", "mongodb://writer:pa:ss@h/shop"])
        self.assertEqual(r.returncode, 1)
        self.assertIn('invalid MongoDB URI "mongodb://writer:***@h/shop": Password "***" must '
                      "not have unescaped chars", r.stderr)
        self.assertNotIn("pa:ss", r.stderr + r.stdout)

    def test_check_prints_effective_settings_and_exits_0(self):
        r = run_cli(["check", self.valid])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('stream "s"', r.stdout)
        for line in ("database                       shop",
                     "checkpoint.save_every          1",
                     "checkpoint.on_history_lost     fail",
                     "checkpoint.mode                async",
                     "checkpoint.max_unsaved         100ms",
                     "restart.initial_delay          1s"):
            self.assertIn(line, r.stdout)

    def test_check_warns_about_a_misspelt_builtin_error_type_and_strict_fails(self):
        """Issue 38: "Http.Status.Transiant" in retry_on, "Http.Conect" in
        circuit.on and in an on_error comparison passed check silently, and the
        breaker never opened. A type the script raises itself is its own."""
        d = tempfile.mkdtemp(dir=self.tmp.name)
        path = write_script(d, """
            fw.stream { name = 's', database = 'shop', dlq = true,
              retry = { retry_on = { "Http.Status.Transiant", "Http.Timeout" },
                        no_retry_on = { "mongo.duplicatekey" } },
              circuit = { on = { "Http.Conect" } },
              on_change = function(ctx)
                error(fw.error("Http.Timeuot", "our own type"))
              end,
              on_error = function(err, ctx)
                if err.type == "Mongo.Netwrok" or err.type == "Http.Timeuot" then
                  return fw.RETRY
                end
              end,
            }
            """)
        r = run_cli(["check", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn('stream "s": retry.retry_on: "Http.Status.Transiant" is not a built-in '
                      'error type: did you mean "Http.Status.Transient"?', out)
        self.assertIn('stream "s": retry.no_retry_on: "mongo.duplicatekey" is not a built-in '
                      'error type: did you mean "Mongo.DuplicateKey"?', out)
        self.assertIn('stream "s": circuit.on: "Http.Conect" is not a built-in error type: '
                      'did you mean "Http.Connect"?', out)
        self.assertRegex(out, r'script\.lua:\d+: warning: "Mongo\.Netwrok" is not a built-in '
                              r'error type: did you mean "Mongo\.Network"\?')
        self.assertNotIn('"Http.Timeuot" is not', out)
        self.assertNotIn('"Http.Timeout" is not', out)
        # Named once: the script's "Http.Conect" literal is the circuit.on entry.
        self.assertEqual(out.count('"Http.Conect" is not'), 1, out)

        strict = run_cli(["check", "--strict", path])
        self.assertEqual(strict.returncode, 1, strict.stderr)
        self.assertEqual(strict.stdout, out)
        self.assertIn("check --strict: 4 warnings (above)", strict.stderr)
        after = run_cli(["check", path, "--strict"])
        self.assertEqual(after.returncode, 1)

        clean = write_script(d, "fw.stream { name = 's', database = 'shop', dlq = true, "
                                "retry = { retry_on = { 'Http.Status' } }, "
                                "circuit = true, on_change = function() end }\n", "clean.lua")
        r = run_cli(["check", "--strict", clean])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("warning", r.stdout)

    def test_a_module_next_to_the_script_can_be_required(self):
        d = tempfile.mkdtemp(dir=self.tmp.name)
        write_script(d, "return { db = 'fromhelper' }\n", "helpers.lua", prelude=False)
        path = write_script(d, "local helpers = require('helpers')\n"
                               "fw.stream { name = 's', database = helpers.db, "
                               "on_change = function() end }\n")
        # Run from elsewhere: the script's folder, not the cwd, is searched.
        r = run_cli(["check", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("database                       fromhelper", r.stdout)

    def check_version(self, script, cwd):
        r = subprocess.run([BINARY, "check", script], capture_output=True, text=True,
                           env=clean_env(), cwd=cwd, timeout=20, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"^script: .* \(version ([0-9a-f]{12})\)$", r.stdout, re.M)
        self.assertIsNotNone(m, r.stdout)
        return m.group(1)

    def test_one_script_has_one_version_whatever_path_names_it(self):
        """The version hashes the contents of the script and its modules, not
        their paths: `totals.lua`, `./totals.lua`, its absolute path and a
        copy in another folder are one version; editing a module changes it."""
        d = tempfile.mkdtemp(dir=self.tmp.name)
        write_script(d, "return { db = 'shop' }\n", "helpers.lua", prelude=False)
        body = ("local helpers = require('helpers')\n"
                "fw.stream { name = 's', database = helpers.db, on_change = function() end }\n")
        path = write_script(d, body, "totals.lua")
        versions = {self.check_version("totals.lua", d),
                    self.check_version("./totals.lua", d),
                    self.check_version(path, "/"),
                    self.check_version(os.path.relpath(path, self.tmp.name), self.tmp.name)}
        self.assertEqual(len(versions), 1, versions)
        other = tempfile.mkdtemp(dir=self.tmp.name)
        write_script(other, "return { db = 'shop' }\n", "helpers.lua", prelude=False)
        write_script(other, body, "totals.lua")
        self.assertEqual(self.check_version("totals.lua", other), versions.pop())
        write_script(other, "return { db = 'shop2' }\n", "helpers.lua", prelude=False)
        self.assertNotEqual(self.check_version("totals.lua", other),
                            self.check_version("totals.lua", d))


class UriPrecedence(unittest.TestCase):
    """--uri, then FLOWWARDEN_URI, then fw.defaults { uri }, then the default."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.flag, self.env, self.script_uri = (ConnectionProbe() for _ in range(3))
        self.with_uri = write_script(self.tmp.name, (
            "fw.defaults { uri = '%s' }\n"
            "fw.stream { name = 's', database = 'shop', on_change = function(ctx) end }\n")
            % self.script_uri.uri, "with_uri.lua")
        self.without_uri = write_script(self.tmp.name, VALID, "without_uri.lua")

    def tearDown(self):
        for p in (self.flag, self.env, self.script_uri):
            p.close()
        self.tmp.cleanup()

    def connected_probe(self, script, flag=False, env=False):
        """Runs the script until one of the probes sees a connection; returns
        the names of the probes that were connected to."""
        args = [script] + (["--uri", self.flag.uri] if flag else [])
        extra = {"FLOWWARDEN_URI": self.env.uri} if env else {}
        proc = subprocess.Popen([BINARY, "run"] + args, stderr=subprocess.DEVNULL,
                                env=clean_env(extra))
        probes = {"flag": self.flag, "env": self.env, "script": self.script_uri}
        seen = {}
        try:
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                for name, probe in probes.items():
                    if probe.connections():
                        seen[name] = True
                time.sleep(0.02)
            time.sleep(0.2)  # let any second (wrong) connection show up too
            for name, probe in probes.items():
                if probe.connections():
                    seen[name] = True
        finally:
            proc.kill()
            proc.wait()
        return sorted(seen)

    def test_flag_wins_over_environment_and_script(self):
        self.assertEqual(self.connected_probe(self.with_uri, flag=True, env=True), ["flag"])

    def test_environment_wins_over_script(self):
        self.assertEqual(self.connected_probe(self.with_uri, env=True), ["env"])

    def test_script_uri_is_used_without_flag_or_environment(self):
        self.assertEqual(self.connected_probe(self.with_uri), ["script"])

    def test_check_shows_where_the_uri_came_from(self):
        r = run_cli(["check", self.without_uri])
        self.assertIn("uri: mongodb://127.0.0.1:27017/?replicaSet=rs0 (default)\n", r.stdout)
        r = run_cli(["check", self.with_uri])
        self.assertIn("uri: %s (from fw.defaults)\n" % self.script_uri.uri, r.stdout)
        r = run_cli(["check", self.with_uri], env=clean_env({"FLOWWARDEN_URI": self.env.uri}))
        self.assertIn("uri: %s (from --uri or FLOWWARDEN_URI)\n" % self.env.uri, r.stdout)

    def test_default_database_comes_from_the_effective_uri_path(self):
        path = write_script(self.tmp.name, "fw.stream { name = 's', on_change = function() end }\n"
                            "fw.defaults { uri = 'mongodb://127.0.0.1:1/fromscript' }\n", "db.lua")
        r = run_cli(["check", path])
        self.assertRegex(r.stdout, r"database +fromscript")
        r = run_cli(["check", path], env=clean_env(
            {"FLOWWARDEN_URI": "mongodb://127.0.0.1:1/fromenv?replicaSet=rs0"}))
        self.assertRegex(r.stdout, r"database +fromenv")


@needs_standin("kill (kill -9 under a running stream)")
class DriverLogs(StandInTestCase):
    command_log = True

    def test_driver_messages_go_through_the_log_as_json_lines(self):
        # When the server dies under a running stream, libmongoc complains.
        # Its messages must come out as flowwarden records (JSON lines here,
        # filtered by --log-level), not as raw lines on stderr or stdout.
        out_path = os.path.join(self.tmp.name, "stdout")
        with open(out_path, "wb") as out:
            p = Flowwarden(self.script(VALID.replace("'shop'", "'%s'" % self.db_name)),
                           self.uri, stdout=out)
            self.procs.append(p)
            p.wait_open()
            # Killed while a getMore waits (they follow each other back to back once one
            # was sent): the driver then loses a connection mid-read and says so. Killed
            # between the aggregate's reply and the first getMore, it would only find no
            # server, 30 s later, and say nothing of its own.
            self.wait_for(lambda: self.commands("getMore"), what="the stream's first getMore")
            self.standin.kill9()
            p.wait_until(lambda: any("Failed to buffer" in m or "libmongoc" in m
                                     for m in p.messages()), what="the driver's complaint")
            p.kill9()
        raw = [r["_raw"] for r in p.records if r.get("level") == "raw"]
        self.assertEqual(raw, [])
        self.assertTrue(any("libmongoc" in m for m in p.messages(level="warn")))
        with open(out_path) as f:
            self.assertEqual(f.read(), "")


class Running(StandInTestCase):

    HANDLER = """
        fw.stream { name = "shop-watcher", collection = "orders",
          restart = { initial_delay = "100ms" },
          on_insert = function(ctx)
            local d = ctx:full_document()
            fw.log.debug("debug line for", d._id)
            fw.log.warn("warn line for", d._id)
            report({ id = d._id })
            if d.explode then local t = nil; return t.card end
          end }
        """

    def test_real_uri_precedence_events_flow_from_the_flag_uri(self):
        # The script and the environment name servers that do not exist
        # (probes); --uri names the stand-in, and events flow from it.
        env_probe, script_probe = ConnectionProbe(), ConnectionProbe()
        try:
            path = self.script(('fw.defaults { uri = "%s" }\n' % script_probe.uri) + self.HANDLER)
            p = self.run_fw(path, env=clean_env({"FLOWWARDEN_URI": env_probe.uri}))
            p.wait_open()
            self.db.orders.insert_one({"_id": 1})
            self.assertEqual(p.wait_reports(1), [{"id": 1}])
            self.assertEqual((env_probe.connections(), script_probe.connections()), (0, 0))
        finally:
            env_probe.close()
            script_probe.close()

    def test_environment_uri_reaches_the_stand_in_and_names_the_database(self):
        path = self.script(self.HANDLER)
        p = self.run_fw(path, no_uri=True, env=clean_env({"FLOWWARDEN_URI": self.uri}))
        p.wait_open()
        self.db.orders.insert_one({"_id": 2})
        self.assertEqual(p.wait_reports(1), [{"id": 2}])

    def test_pid_file_exists_while_running_and_is_removed_after(self):
        pid_file = os.path.join(self.tmp.name, "fw.pid")
        p = self.run_fw(self.script(self.HANDLER), extra=["--pid-file", pid_file])
        p.wait_open()
        with open(pid_file) as f:
            self.assertEqual(f.read(), "%d\n" % p.proc.pid)
        self.assertEqual(p.stop(), 0)
        self.assertFalse(os.path.exists(pid_file))

    def test_a_pid_file_naming_a_running_flowwarden_refuses_a_second_start(self):
        pid_file = os.path.join(self.tmp.name, "fw.pid")
        script = self.script(self.HANDLER)
        first = self.run_fw(script, extra=["--pid-file", pid_file])
        first.wait_open()
        second = self.run_fw(script, extra=["--pid-file", pid_file])
        self.assertEqual(second.wait_exit(30), 1)
        self.assertTrue(any("pid file %s names a running flowwarden (pid %d)" % (pid_file, first.proc.pid)
                            in m for m in second.messages("error")), second.raw_lines())
        with open(pid_file) as f:
            self.assertEqual(f.read(), "%d\n" % first.proc.pid)   # left to its owner
        self.assertEqual(first.stop(), 0)

    def test_a_stale_pid_file_is_replaced(self):
        pid_file = os.path.join(self.tmp.name, "fw.pid")
        with open(pid_file, "w") as f:
            f.write("%d\n" % os.getpid())   # alive, but not a flowwarden
        p = self.run_fw(self.script(self.HANDLER), extra=["--pid-file", pid_file])
        p.wait_open()
        with open(pid_file) as f:
            self.assertEqual(f.read(), "%d\n" % p.proc.pid)
        self.assertEqual(p.count_log("is stale"), 1)
        self.assertEqual(p.stop(), 0)

    def test_pid_file_is_not_written_for_a_bad_script(self):
        pid_file = os.path.join(self.tmp.name, "fw.pid")
        bad = self.script("fw.stream { name = 's' }\n")
        r = run_cli(["run", bad, "--uri", self.uri, "--pid-file", pid_file])
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(pid_file))

    def test_json_logs_are_one_object_per_line_with_time_level_stream(self):
        p = self.run_fw(self.script(self.HANDLER))
        p.wait_open()
        self.db.orders.insert_one({"_id": 3})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        lines = p.raw_lines()
        self.assertGreater(len(lines), 4)
        for line in lines:
            rec = json.loads(line)
            self.assertIsInstance(rec, dict)
            self.assertRegex(rec["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(rec["level"], ("debug", "info", "warn", "error"))
            self.assertIsInstance(rec["msg"], str)
        stream_recs = [json.loads(l) for l in lines if "shop-watcher" in l]
        self.assertTrue(all(r.get("stream") == "shop-watcher" for r in stream_recs
                            if "REPORT" in r["msg"] or "line for" in r["msg"]))
        self.assertEqual(p.count_log("summary: handled=1 handler_errors=0",
                                     stream="shop-watcher"), 1)

    def test_text_logs_have_time_level_and_stream(self):
        p = self.run_fw(self.script(self.HANDLER), log_format=None)
        p.wait_log("change stream open")
        self.db.orders.insert_one({"_id": 4})
        p.wait_log("REPORT")
        self.assertEqual(p.stop(), 0)
        lines = p.raw_lines()
        for line in lines:
            self.assertRegex(line, TEXT_LINE)
        warn = [TEXT_LINE.match(l) for l in lines if "warn line for 4" in l]
        self.assertEqual(len(warn), 1)
        self.assertEqual((warn[0].group(2), warn[0].group(3)), ("warn ", "shop-watcher"))

    def test_log_level_filters_records(self):
        path = self.script(self.HANDLER.replace('restart = { initial_delay = "100ms" }',
                                                'checkpoint = { save_interval = "100ms" }'))
        p = self.run_fw(path, extra=["--log-level", "warn"])
        # At warn the "open" line does not show; the first checkpoint says
        # the stream is open.
        self.wait_checkpoint("shop-watcher")
        self.db.orders.insert_one({"_id": 5})
        p.wait_log("warn line for 5")
        self.assertEqual(p.stop(), 0)
        self.assertEqual({r["level"] for r in p.records}, {"warn"})
        self.assertEqual(p.reports(), [])
        self.assertEqual(p.count_log("debug line for"), 0)

        p = self.run_fw(path, extra=["--log-level", "debug"])
        p.wait_open()
        self.db.orders.insert_one({"_id": 6})
        p.wait_log("debug line for 6")
        self.assertEqual(p.wait_reports(1), [{"id": 6}])
        self.assertEqual(p.stop(), 0)
        # The handler's debug record shows, once (the runtime has debug
        # records of its own, e.g. its connection probe).
        self.assertEqual([m for m in p.messages(level="debug") if "debug line for" in m],
                         ["debug line for 6"])

    def test_logs_never_contain_document_contents_at_info(self):
        p = self.run_fw(self.script(self.HANDLER))
        p.wait_open()
        self.db.orders.insert_one({"_id": 7, "card": "4111-1111-SECRET"})
        self.db.orders.insert_one({"_id": 8, "card": "4111-1111-SECRET", "explode": True})
        p.wait_reports(2)
        p.wait_log("NilError")
        self.assertEqual(p.stop(), 0)
        for line in p.raw_lines():
            self.assertNotIn("SECRET", line)
            self.assertNotIn("4111", line)

    def test_sigint_stops_cleanly_like_sigterm(self):
        p = self.run_fw(self.script(self.HANDLER))
        p.wait_open()
        self.db.orders.insert_one({"_id": 9})
        p.wait_reports(1)
        t0 = time.monotonic()
        self.assertEqual(p.stop(signal.SIGINT), 0)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(p.count_log("SIGINT received: stopping"), 1)
        self.assertEqual(p.count_log("summary: handled=1", stream="shop-watcher"), 1)

    def test_sigterm_lets_the_running_handler_finish(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "slow", collection = "c", on_insert = function(ctx)
              report({ phase = "start", id = ctx:document_key()._id })
              local t = os.clock() + 1.0 while os.clock() < t do end
              report({ phase = "end", id = ctx:document_key()._id })
            end }
            """))
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.reports(), [{"phase": "start", "id": 1}, {"phase": "end", "id": 1}])
        # The event finished, so the final checkpoint is past it.
        p2 = self.run_fw(self.script("""
            fw.stream { name = "slow", collection = "c", on_insert = function(ctx)
              report({ id = ctx:document_key()._id }) end }
            """))
        p2.wait_open()
        self.db.c.insert_one({"_id": 2})
        self.assertEqual(p2.wait_reports(1), [{"id": 2}])


if __name__ == "__main__":
    unittest.main()
