"""Bad scripts: `flowwarden check` and `flowwarden run` both refuse them with
exit code 1 and the exact SCRIPT:LINE messages, and `run` starts nothing: it
never even opens a connection (issue 3: the script, validation).

Each case below becomes two tests, test_check_<case> and test_run_<case>.
The messages are the ones of the catalogue in tests/lua/config_spec.lua, seen
through the real binary."""
import json
import os
import re
import subprocess
import tempfile
import time
import unittest

from fwtest import BINARY, ConnectionProbe, clean_env, run_cli

# Every script starts with these two lines, so its own code starts at line 3.
HEADER = "local fw = require('flowwarden')\nlocal h = function() end\n"
P = "{S}:3: "
S = P + 'stream "s": '

CASES = [
    ("missing_name",
     "fw.stream { database = 'shop', on_change = h }",
     [P + 'stream #1: name: missing (every stream needs a unique name, e.g. name = "order-watcher")']),
    ("name_not_a_string",
     "fw.stream { name = 42, database = 'shop', on_change = h }",
     [P + "stream #1: name: expected a non-empty string, got 42"]),
    ("duplicate_name",
     "fw.stream { name = 's', database = 'shop', on_change = h }\n"
     "fw.stream { name = 's', database = 'shop', on_change = h }",
     ['{S}:4: stream "s": name: duplicate stream name (first declared at {S}:3)']),
    ("misspelt_handler_key",
     "fw.stream { name = 's', database = 'shop', on_insrt = h, on_change = h }",
     [S + 'unknown key "on_insrt" (did you mean "on_insert"?)']),
    ("camel_case_key",
     "fw.stream { name = 's', database = 'shop', fullDocument = 'required', on_change = h }",
     [S + 'unknown key "fullDocument" (did you mean "full_document"?)']),
    ("no_database_anywhere",
     "fw.stream { name = 's', on_change = h }",
     [S + "database: missing (set database in this stream, in fw.defaults { database = ... } or "
      "in the URI path, e.g. mongodb://127.0.0.1:27017/shop)"]),
    ("invalid_database_name",
     "fw.stream { name = 's', database = 'my.shop', on_change = h }",
     [S + 'database: invalid database name "my.shop" (at most 63 bytes, without / \\ . " $, '
      'spaces or NUL)']),
    ("system_collection",
     "fw.stream { name = 's', database = 'shop', collection = 'system.profile', on_change = h }",
     [S + 'collection: "system.profile" is a system collection, which change streams cannot watch']),
    ("unknown_operation_types",
     "fw.stream { name = 's', database = 'shop', operation_types = { 'insert', 'INSERT', 'upsert' }, "
     "on_change = h }",
     [S + 'operation_types[2]: unknown operation type "INSERT" (did you mean "insert"? expected one '
      "of insert, update, replace, delete, drop, rename, dropDatabase, invalidate)",
      S + 'operation_types[3]: unknown operation type "upsert" (expected one of insert, update, '
      "replace, delete, drop, rename, dropDatabase, invalidate)"]),
    ("empty_operation_types",
     "fw.stream { name = 's', database = 'shop', operation_types = {}, on_change = h }",
     [S + "operation_types: the empty list matches no event (omit operation_types to receive "
      "every type)"]),
    ("pipeline_stage_without_dollar",
     "fw.stream { name = 's', database = 'shop', pipeline = { { match = {} } }, on_change = h }",
     [S + 'pipeline[1]: stage name "match" must start with "$", e.g. "$match"']),
    ("wrong_full_document",
     "fw.stream { name = 's', database = 'shop', full_document = 'updatelookup', on_change = h }",
     [S + 'full_document: invalid value "updatelookup" (did you mean "updateLookup"? expected '
      '"default", "updateLookup", "whenAvailable" or "required")']),
    ("wrong_full_document_before_change",
     "fw.stream { name = 's', database = 'shop', full_document_before_change = true, on_change = h }",
     [S + 'full_document_before_change: invalid value true (expected "off", "whenAvailable" or '
      '"required")']),
    ("save_every_zero",
     "fw.stream { name = 's', database = 'shop', checkpoint = { save_every = 0 }, on_change = h }",
     [S + "checkpoint.save_every: expected an integer >= 1, got 0"]),
    ("duration_with_spelled_out_unit",
     "fw.stream { name = 's', database = 'shop', checkpoint = { save_interval = '5 sec' }, "
     "on_change = h }",
     [S + 'checkpoint.save_interval: invalid duration "5 sec" (expected a number followed by ms, '
      's, m, h, d or w, e.g. "500ms")']),
    ("duration_in_years",
     "fw.stream { name = 's', database = 'shop', checkpoint = { idle_heartbeat = '1y' }, "
     "on_change = h }",
     [S + 'checkpoint.idle_heartbeat: invalid duration "1y" (expected a number followed by ms, s, '
      'm, h, d or w, e.g. "500ms")']),
    ("unknown_on_history_lost",
     "fw.stream { name = 's', database = 'shop', checkpoint = { on_history_lost = "
     "'resume-from-now' }, on_change = h }",
     [S + 'checkpoint.on_history_lost: invalid value "resume-from-now" (did you mean '
      '"resume_from_now"? expected "fail" or "resume_from_now")']),
    ("unknown_checkpoint_key",
     "fw.stream { name = 's', database = 'shop', checkpoint = { every = 5 }, on_change = h }",
     [S + 'checkpoint: unknown key "every" (valid keys: save_every, max_unsaved, save_interval, '
      "idle_heartbeat, start_position, on_history_lost, mode, start_at)"]),
    ("restart_max_delay_below_initial_delay",
     "fw.stream { name = 's', database = 'shop', restart = { max_delay = '500ms' }, on_change = h }",
     [S + 'restart.max_delay: must be >= restart.initial_delay ("1s", the default), got "500ms"']),
    ("retry_max_attempts_as_string",
     "fw.stream { name = 's', database = 'shop', retry = { max_attempts = '3' }, on_change = h }",
     [S + 'retry.max_attempts: expected an integer >= 1, got "3"']),
    ("unacknowledged_dlq_write_concern",
     "fw.stream { name = 's', database = 'shop', dlq = { write_concern = 0 }, on_change = h }",
     [S + "dlq.write_concern: 0 (unacknowledged) is not allowed: the checkpoint may only pass an "
      'event once its DLQ insert is acknowledged (use "majority" or an integer >= 1)']),
    ("memory_limit_with_a_space",
     "fw.stream { name = 's', database = 'shop', memory_limit = '256 MB', on_change = h }",
     [S + 'memory_limit: invalid size "256 MB" (expected an integer followed by B, KB, MB or GB, '
      'e.g. "256MB")']),
    ("timeout_without_unit",
     "fw.stream { name = 's', database = 'shop', timeout = 30, on_change = h }",
     [S + 'timeout: expected a duration string, got 30 (a number has no unit: write "30s" or '
      '"30ms")']),
    ("no_handler",
     "fw.stream { name = 's', database = 'shop' }",
     [S + "handlers: none declared (define at least one of on_insert, on_update, on_replace, "
      "on_delete, on_change, on_snapshot)"]),
    ("handler_not_a_function",
     "fw.stream { name = 's', database = 'shop', on_insert = 'process' }",
     [S + 'on_insert: expected a function, got "process"']),
    ("defaults_called_twice",
     "fw.defaults { database = 'a' }\nfw.defaults { database = 'b' }\n"
     "fw.stream { name = 's', on_change = h }",
     ["{S}:4: defaults: fw.defaults called again (first called at {S}:3; merge them into one "
      "fw.defaults { ... })"]),
    ("defaults_uri_not_a_mongodb_uri",
     "fw.defaults { uri = 'localhost:27017' }\n"
     "fw.stream { name = 's', database = 'shop', on_change = h }",
     [P + "defaults: uri: expected a MongoDB connection string starting with mongodb:// or "
      'mongodb+srv://, got "localhost:27017"']),
    ("no_stream_declared",
     "fw.defaults { database = 'shop' }",
     ["{S}: no streams declared (declare at least one with fw.stream { name = ..., "
      "on_change = function(ctx) ... end })"]),
    ("syntax_error",
     "fw.stream { name = 's' on_change = h }",
     ["{S}:3: '}' expected near 'on_change'"]),
    ("runtime_error_after_a_bad_declaration",
     "fw.stream { name = 's', on_change = h }\nlocal x = nil + 1",
     [S + "database: missing (set database in this stream, in fw.defaults { database = ... } or "
      "in the URI path, e.g. mongodb://127.0.0.1:27017/shop)",
      "{S}:4: attempt to perform arithmetic on a nil value"]),
    ("typed_error_while_loading",
     "error(fw.error('Config', 'ORDERS_URL is not set'))",
     ["{S}:3: Config: ORDERS_URL is not set"]),
    ("multi_line_declaration_reports_its_first_line",
     "\n\nfw.stream {\n  name = 's',\n  database = 'shop',\n  timeout = '1x',\n  on_change = h,\n}",
     ['{S}:5: stream "s": timeout: invalid duration "1x" (expected a number followed by ms, s, m, '
      'h, d or w, e.g. "500ms")']),
    # Longer than 512 bytes: the error list was once cut there
    # (FW_ERROR_MESSAGE_MAX).
    ("every_error_of_every_stream_in_order",
     "fw.stream { name = 'a', database = 'shop', retry = { max_attempts = 0, jitter = 1 }, "
     "on_change = h }\n"
     "fw.stream { database = 'shop' }\n"
     "fw.stream { name = 'a', database = 'shop', on_updte = h }",
     ['{S}:3: stream "a": retry.max_attempts: expected an integer >= 1, got 0',
      '{S}:3: stream "a": retry.jitter: expected true or false, got 1',
      '{S}:4: stream #2: name: missing (every stream needs a unique name, e.g. name = '
      '"order-watcher")',
      "{S}:4: stream #2: handlers: none declared (define at least one of on_insert, on_update, "
      "on_replace, on_delete, on_change, on_snapshot)",
      '{S}:5: stream "a": name: duplicate stream name (first declared at {S}:3)',
      '{S}:5: stream "a": unknown key "on_updte" (did you mean "on_update"?)',
      '{S}:5: stream "a": handlers: none declared (define at least one of on_insert, on_update, '
      "on_replace, on_delete, on_change, on_snapshot)"]),
    ("error_in_a_required_module",
     "local helper = require('badhelper')\nfw.stream { name = 's', database = 'shop', on_change = h }",
     ["{D}/badhelper.lua:2: attempt to perform arithmetic on a nil value"]),
]

# Modules the cases may require (written next to the script).
MODULES = {"badhelper.lua": "local M = {}\nlocal x = nil + 1\nreturn M\n"}


class BadScripts(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        for name, text in MODULES.items():
            with open(os.path.join(cls.tmp.name, name), "w") as f:
                f.write(text)
        # A listener that nobody should ever connect to.
        cls.probe = ConnectionProbe()

    @classmethod
    def tearDownClass(cls):
        cls.probe.close()
        cls.tmp.cleanup()

    def write(self, case, body):
        path = os.path.join(self.tmp.name, case + ".lua")
        with open(path, "w") as f:
            f.write(HEADER + body)
        return path

    def expected(self, path, lines):
        return [l.replace("{S}", path).replace("{D}", self.tmp.name) for l in lines]

    def check_case(self, case, body, lines):
        path = self.write(case, body)
        # The URI run gets (no database in its path): check given no URI at all lets a
        # stream's database come from run's --uri (a warning; test_examples).
        r = run_cli(["check", path, "--uri", self.probe.uri])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "\n".join(self.expected(path, lines)) + "\n")
        self.assertEqual(r.stdout, "")

    def run_case(self, case, body, lines):
        path = self.write(case, body)
        r = run_cli(["run", path, "--uri", self.probe.uri, "--log-format", "json"], timeout=10)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertLess(r.elapsed, 5.0, "a bad script must fail at once")
        records = [json.loads(l) for l in r.stderr.splitlines()]
        self.assertEqual(len(records), 1, records)
        self.assertEqual(records[0]["level"], "error")
        self.assertEqual(records[0]["msg"],
                         "invalid script:\n" + "\n".join(self.expected(path, lines)))
        self.assertEqual(self.probe.connections(), 0, "run connected with a bad script")

    def test_there_are_at_least_20_cases(self):
        self.assertGreaterEqual(len(CASES), 20)

    def test_run_in_text_format_prints_the_same_lines(self):
        case, body, lines = CASES[8]
        path = self.write(case, body)
        r = run_cli(["run", path, "--uri", self.probe.uri])
        self.assertEqual(r.returncode, 1)
        out = r.stderr.splitlines()
        self.assertRegex(out[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z error +invalid script:$")
        self.assertEqual(out[1:], self.expected(path, lines))
        self.assertEqual(self.probe.connections(), 0)

    def test_a_missing_script_is_reported_by_check_and_run(self):
        path = os.path.join(self.tmp.name, "nowhere.lua")
        r = run_cli(["check", path])
        self.assertEqual((r.returncode, r.stderr),
                         (1, "cannot open %s: No such file or directory\n" % path))
        r = run_cli(["run", path, "--uri", self.probe.uri, "--log-format", "json"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(json.loads(r.stderr)["msg"],
                         "invalid script:\ncannot open %s: No such file or directory" % path)
        self.assertEqual(self.probe.connections(), 0)

    def test_a_valid_script_does_connect(self):
        # The other side of "no connection attempted": the probe does see a
        # valid script's connection, so its silence above means something.
        path = self.write("valid", "fw.stream { name = 's', database = 'shop', on_change = h }")
        probe = ConnectionProbe()
        proc = subprocess.Popen([BINARY, "run", path, "--uri", probe.uri],
                                stderr=subprocess.DEVNULL, env=clean_env())
        try:
            deadline = time.monotonic() + 10
            seen = 0
            while seen == 0 and time.monotonic() < deadline:
                seen = probe.connections()
                time.sleep(0.02)
            self.assertGreater(seen, 0)
        finally:
            proc.kill()
            proc.wait()
            probe.close()


def _add(case, body, lines, known_bug=None):
    slug = re.sub(r"\W", "_", case)

    def check(self):
        self.check_case(case, body, lines)

    def run(self):
        self.run_case(case, body, lines)

    if known_bug:
        check = unittest.expectedFailure(check)
        run = unittest.expectedFailure(run)
    setattr(BadScripts, "test_check_" + slug, check)
    setattr(BadScripts, "test_run_" + slug, run)


for _case in CASES:
    _add(*_case)


if __name__ == "__main__":
    unittest.main()
