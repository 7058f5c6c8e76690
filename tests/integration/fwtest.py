"""Harness for flowwarden's integration tests: a stand-in per test class, a
flowwarden process per scenario, and the records it logs.

Handlers report what they saw by logging one JSON object through fw.log.info
(`report(ctx_values)` in the scripts); the harness runs flowwarden with
--log-format json and collects those reports in order. Waits are always for a
condition with a deadline, never a bare sleep."""
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BINARY = os.environ.get("FW_BINARY", os.path.join(SOURCE_DIR, "build", "flowwarden"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "standin"))

from standin_process import StandIn  # noqa: E402,F401
import pymongo  # noqa: E402

REPORT_PREFIX = "REPORT "

# Prepended to every test script: report(t) logs t as one JSON line.
PRELUDE = textwrap.dedent("""\
    local fw = require("flowwarden")
    local cjson = require("cjson")
    local function report(t) fw.log.info("REPORT " .. cjson.encode(t)) end
    """)


def write_script(directory, body, name="script.lua", prelude=True):
    """Writes a Lua script (with the report() prelude) and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        if prelude:
            f.write(PRELUDE)
        f.write(textwrap.dedent(body))
    return path


class Flowwarden:
    """One `flowwarden run` process and everything it logged."""

    def __init__(self, script, uri, extra=(), env=None):
        self.script = script
        self.records = []
        self._lines = queue.Queue()
        self._cond = threading.Condition()
        cmd = [BINARY, "run", script, "--uri", uri, "--log-format", "json"] + list(extra)
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in iter(self.proc.stderr.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\n")
            try:
                rec = json.loads(text)
            except ValueError:
                rec = {"level": "raw", "msg": text}
            with self._cond:
                self.records.append(rec)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # --- reading the log -------------------------------------------------
    def reports(self, stream=None):
        with self._cond:
            out = []
            for r in self.records:
                msg = r.get("msg", "")
                if msg.startswith(REPORT_PREFIX) and (stream is None or r.get("stream") == stream):
                    out.append(json.loads(msg[len(REPORT_PREFIX):]))
            return out

    def messages(self, level=None):
        with self._cond:
            return [r.get("msg", "") for r in self.records
                    if level is None or r.get("level") == level]

    def wait_until(self, predicate, timeout=30, what="condition"):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if predicate():
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for %s; log:\n%s" % (
                        what, "\n".join(json.dumps(r) for r in self.records[-40:])))
                self._cond.wait(min(left, 0.2))

    def wait_log(self, needle, count=1, timeout=30):
        self.wait_until(lambda: sum(needle in m for m in self.messages()) >= count,
                        timeout, "log line %r x%d" % (needle, count))

    def wait_open(self, streams=1, timeout=30):
        self.wait_log("change stream open", streams, timeout)

    def wait_reports(self, n, stream=None, timeout=30):
        self.wait_until(lambda: len(self.reports(stream)) >= n, timeout,
                        "%d reports" % n)
        return self.reports(stream)

    # --- stopping ----------------------------------------------------------
    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def wait_exit(self, timeout=30):
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc


class StandInTestCase(unittest.TestCase):
    """One stand-in for the whole class; a fresh database per test."""

    standin_args = ()

    @classmethod
    def setUpClass(cls):
        cls.standin = StandIn(args=cls.standin_args)
        cls.standin.start()
        cls.client = pymongo.MongoClient(cls.base_uri())

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.standin.stop()

    @classmethod
    def base_uri(cls, db=""):
        return "mongodb://127.0.0.1:%d/%s?replicaSet=rs0" % (cls.standin.port, db)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db_name = "t_" + self.id().rsplit(".", 1)[-1][:40]
        self.db = self.client[self.db_name]
        self.uri = self.base_uri(self.db_name)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.proc.poll() is None:
                p.stop(signal.SIGKILL)
        self.tmp.cleanup()

    def script(self, body, name="script.lua"):
        return write_script(self.tmp.name, body, name)

    def run_fw(self, script, extra=(), env=None, uri=None):
        p = Flowwarden(script, uri or self.uri, extra, env)
        self.procs.append(p)
        return p

    def checkpoint(self, stream):
        return self.db._fw_checkpoints.find_one({"_id": stream})
