"""Harness for flowwarden's integration tests: a stand-in per test class, a
flowwarden process per scenario, and the records it logs.

Handlers report what they saw by logging one JSON object through fw.log.info
(`report(ctx_values)` in the scripts); the harness runs flowwarden with
--log-format json and collects those reports in order. Waits are always for a
condition with a deadline, never a bare sleep.

FW_TEST_AUTH=1 (ctest's integration-auth/*): every stand-in requires a user with
a recognisable password, every URI the harness hands out carries it, every
flowwarden process runs through a wrapper that copies its stdout and stderr
aside, and each test ends by scanning those copies and every DLQ entry for the
password (see docs/testing.md).

FW_TEST_MONGODB_URI=mongodb://... : no stand-in is started; every test runs
against that deployment, in a database of its own (fwt<random>_<test name>)
that it drops at the end, and the tests marked @needs_standin(...) (they use a
control only the stand-in has: fault injection, a kill, an oplog size, a
version mode, its users) are skipped with the control they need."""
import atexit
import base64
import datetime
import functools
import hashlib
import json
import re
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FW_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BINARY = os.environ.get("FW_BINARY", os.path.join(SOURCE_DIR, "build", "flowwarden"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "standin"))

import standin_process  # noqa: E402
from standin_process import wait_until  # noqa: E402,F401
import pymongo  # noqa: E402
from bson.raw_bson import RawBSONDocument  # noqa: E402

# --- FW_TEST_MONGODB_URI: the suite against a real deployment ---

REAL_URI = os.environ.get("FW_TEST_MONGODB_URI") or None
REAL_MODE = REAL_URI is not None


def needs_standin(control):
    """Marks a test (method or class) that needs the stand-in's own `control`
    (fault injection, a kill, --oplog-max-entries, ...): skipped, naming it,
    when FW_TEST_MONGODB_URI points the suite at a real deployment."""
    return unittest.skipIf(REAL_MODE, "needs the stand-in's %s (FW_TEST_MONGODB_URI is set)"
                           % control)


def _skip_if_older(client, want, feature):
    have = tuple(client.server_info().get("versionArray", [0]))[:len(want)]
    if have < want:
        raise unittest.SkipTest("needs MongoDB %s+ for %s; the deployment is %s"
                                % (".".join(map(str, want)), feature,
                                   ".".join(map(str, have))))


def needs_mongodb(version, feature):
    """Marks a test (method or class) that needs MongoDB `version` ("6.0.9")
    for `feature`: against a real deployment (FW_TEST_MONGODB_URI) of an
    older version it is skipped naming both; the stand-in plays 6.0 with the
    split stage, and the tests of its 5.0 mode say what 5.0 refuses."""
    want = tuple(int(x) for x in version.split("."))

    def decorate(obj):
        if not REAL_MODE:
            return obj
        if isinstance(obj, type):
            set_up = obj.setUp

            def setUp(self):
                _skip_if_older(self.client, want, feature)
                set_up(self)
            obj.setUp = setUp
            return obj

        @functools.wraps(obj)
        def run(self, *args, **kwargs):
            _skip_if_older(self.client, want, feature)
            return obj(self, *args, **kwargs)
        return run
    return decorate


def uri_parts(uri):
    """(scheme, userinfo-and-hosts, path database, query) of a MongoDB URI."""
    scheme, _, rest = uri.partition("://")
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0] or [len(rest)])
    hosts, tail = rest[:end], rest[end:]
    path, _, query = tail.lstrip("/").partition("?")
    return scheme, hosts, path, query


def uri_with_database(uri, db):
    """`uri` with `db` as its path. A URI with credentials and no authSource
    keeps authenticating where it did (its old path, else admin)."""
    scheme, hosts, path, query = uri_parts(uri)
    if "@" in hosts and "authsource=" not in query.lower():
        query = "&".join(x for x in (query, "authSource=" + (path or "admin")) if x)
    return "%s://%s/%s%s" % (scheme, hosts, db, "?" + query if query else "")


def uri_credentials(uri):
    """(user, password) of a URI's userinfo (decoded), or None."""
    hosts = uri_parts(uri)[1]
    if "@" not in hosts:
        return None
    user, _, password = hosts.rsplit("@", 1)[0].partition(":")
    return (urllib.parse.unquote(user), urllib.parse.unquote(password)) if password else None


class _NoStandIn:
    """self.standin when FW_TEST_MONGODB_URI is set: any use names the
    missing mark instead of touching the deployment."""

    proc = None

    def __getattr__(self, name):
        raise AssertionError("this test uses the stand-in (standin.%s) but FW_TEST_MONGODB_URI "
                             "is set: mark it @needs_standin(...)" % name)


# --- FW_TEST_AUTH=1: credentials everywhere, and a scan for the password ---

AUTH_MODE = os.environ.get("FW_TEST_AUTH") == "1"
AUTH_USER = "fwtest"
# Recognisable, and its URL-encoded form differs from it ("/" and "@").
AUTH_PASSWORD = "Fw-S3cret/Pa55word@7f3a"
REAL_BINARY = BINARY


def default_credentials():
    """(user, password) every stand-in requires in FW_TEST_AUTH mode, else None;
    against a real deployment, those of FW_TEST_MONGODB_URI (for the scan)."""
    if REAL_MODE:
        return uri_credentials(REAL_URI)
    return (AUTH_USER, AUTH_PASSWORD) if AUTH_MODE else None


def with_credentials(uri, credentials):
    """`uri` with user:password (URL-encoded) and authSource=admin added, or
    unchanged when credentials is None or the URI already has user info."""
    if not credentials or not uri.startswith("mongodb://"):
        return uri
    rest = uri[len("mongodb://"):]
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0] or [len(rest)])
    if "@" in rest[:end]:
        return uri
    user, password = (urllib.parse.quote(x, safe="") for x in credentials)
    out = "mongodb://%s:%s@%s" % (user, password, rest)
    if "?" in out:
        return out + ("" if out.endswith(("?", "&")) else "&") + "authSource=admin"
    if "/" in rest:
        return out + "?authSource=admin"
    return out + "/?authSource=admin"


def auth_uri(uri):
    """For tests that build a URI of their own to the harness's stand-ins."""
    return with_credentials(uri, default_credentials())


def secret_forms(secret):
    """The strings a leaked `secret` may take: itself, URL-encoded, base64 (at
    each of the three alignments, without the edge characters the neighbouring
    bytes change) and MongoDB's SCRAM-SHA-1 digest of it."""
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    raw = secret.encode("utf-8")
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw).decode("ascii").rstrip("=")
        start = (pad * 8 + 5) // 6
        stop = len(enc) - (1 if (pad + len(raw)) % 3 else 0)
        forms.add(enc[start:stop])
    forms.add(hashlib.md5(("%s:mongo:%s" % (AUTH_USER, secret)).encode()).hexdigest())
    return sorted(forms)


class StandIn(standin_process.StandIn):
    """standin_process.StandIn requiring `credentials` (default: FW_TEST_AUTH's);
    .uri carries them."""

    def __init__(self, args=(), replset="rs0", startup_timeout=30.0, credentials=None):
        super().__init__(args, replset, startup_timeout)
        self.credentials = credentials or default_credentials()

    def start(self):
        args = self.args
        if self.credentials:
            self.args = list(args) + ["--auth", "%s:%s" % self.credentials]
        try:
            super().start()
        finally:
            self.args = args
        return self.uri

    @property
    def uri(self):
        return with_credentials(standin_process.StandIn.uri.fget(self), self.credentials)


# In FW_TEST_AUTH mode every flowwarden the tests start is this wrapper: it
# execs flowwarden (same pid, argv[0] the real binary) with stdout and stderr
# copied into CAPTURE_DIR/<pid>.out|.err, so the scan sees every line even of
# processes whose output a test discards or reads itself. An output that is a
# terminal is passed through untouched (the tests that need a tty).
CAPTURE_DIR = None
if AUTH_MODE:
    CAPTURE_DIR = tempfile.mkdtemp(prefix="fw-capture-")
    atexit.register(shutil.rmtree, CAPTURE_DIR, True)
    BINARY = os.path.join(CAPTURE_DIR, "flowwarden")
    with open(BINARY, "w") as f:
        f.write(textwrap.dedent("""\
            #!/bin/bash
            if [ -t 1 ] || [ -t 2 ]; then exec %(fw)s "$@"; fi
            exec 3>&1 4>&2
            exec %(fw)s "$@" > >(tee -a %(dir)s/$$.out >&3 3>&- 4>&-) \\
                2> >(tee -a %(dir)s/$$.err >&4 3>&- 4>&-) 3>&- 4>&-
            """) % {"fw": shlex.quote(REAL_BINARY), "dir": shlex.quote(CAPTURE_DIR)})
    os.chmod(BINARY, 0o755)

_CLI_RUNS = []      # run_cli's results since the current test began

REPORT_PREFIX = "REPORT "


# checkpoint.mode = "async" (docs/reliability.md, "Duplicates are bounded"):
# after kill -9 a restart repeats at most ASYNC_SAVES x save_every events per
# stream, or, when checkpoint writes fall behind that, the events handled
# within checkpoint.max_unsaved (DEFAULT_MAX_UNSAVED_MS) plus save_every.
ASYNC_SAVES = 20
DEFAULT_MAX_UNSAVED_MS = 100


def within_async_bound(times_ms, save_every, max_unsaved_ms=DEFAULT_MAX_UNSAVED_MS):
    """Whether events handled after the stored checkpoint (the log times, in
    ms, of their handler's report lines, in the order handled) keep the async
    bound: at most ASYNC_SAVES x save_every of them, or all but the last
    save_every reported less than max_unsaved_ms after the first (the handler
    went on only while the newest stored save was younger than that). Log times
    are whole ms: a span under max_unsaved_ms reads as at most max_unsaved_ms."""
    n = len(times_ms)
    if n <= ASYNC_SAVES * save_every:
        return True
    return max_unsaved_ms > 0 and times_ms[n - save_every - 1] - times_ms[0] <= max_unsaved_ms


def log_ms(rec):
    """A log record's time ("ts", ms precision) in ms since the epoch; None without one."""
    ts = rec.get("ts")
    if not isinstance(ts, str):
        return None
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0


def reports_of(cp):
    """What report(t) logged in a finished CLI run (cp: run_cli's result), in order."""
    out = []
    for line in cp.stderr.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        msg = rec.get("msg", "")
        if isinstance(msg, str) and msg.startswith(REPORT_PREFIX):
            out.append(json.loads(msg[len(REPORT_PREFIX):]))
    return out

# Prepended to every test script: report(t) logs t as one JSON line;
# plain(v) deep-copies a document (a view or a table) into plain tables that
# cjson can encode (typed values are left as they are).
PRELUDE = textwrap.dedent("""\
    local fw = require("flowwarden")
    local cjson = require("cjson")
    local function report(t) fw.log.info("REPORT " .. cjson.encode(t)) end
    local function plain(v)
      if type(v) ~= "table" and type(v) ~= "userdata" then return v end
      local ok, it, state, init = pcall(pairs, v)
      if not ok then return v end
      local t = {}
      for k, x in it, state, init do t[k] = plain(x) end
      return t
    end
    """)
PRELUDE_LINES = PRELUDE.count("\n")


def write_script(directory, body, name="script.lua", prelude=True):
    """Writes a Lua script (with the report() prelude) and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        if prelude:
            f.write(PRELUDE)
        f.write(textwrap.dedent(body))
    return path


def clean_env(extra=None):
    """The test process's environment without FLOWWARDEN_URI, plus `extra`.

    MONGOC_DISABLE_SHM: libmongoc's counters live in /dev/shm/mongoc-PID,
    which a kill -9 leaves behind; when a later process gets the same PID,
    libmongoc prints "Falling back to malloc for counters." from its load-time
    constructor (before flowwarden's main can route its logs), which would
    land in the middle of the output the tests compare."""
    env = {k: v for k, v in os.environ.items() if k != "FLOWWARDEN_URI"}
    env["MONGOC_DISABLE_SHM"] = "1"
    env.update(extra or {})
    return env


def run_cli(args, env=None, timeout=20):
    """Runs `flowwarden ARGS...` to completion: CompletedProcess with text
    stdout/stderr and the wall time it took in `.elapsed`."""
    t0 = time.monotonic()
    cp = subprocess.run([BINARY] + list(args), capture_output=True, text=True,
                        env=env if env is not None else clean_env(), timeout=timeout,
                        stdin=subprocess.DEVNULL)
    cp.elapsed = time.monotonic() - t0
    _CLI_RUNS.append(cp)
    return cp


def token_data(token):
    """The _data string of a resume token document (or None)."""
    return token.get("_data") if token else None


def token_at(op_time):
    """A prefix that compares (as a string) like a resume token at op_time.
    The stand-in's tokens are upper-case hex, '82' + seconds + increment, so
    string order is event order; tests use this only to wait for positions."""
    return "82%08X%08X" % (op_time.time, op_time.inc)


_REFUSING = []      # refused_port()'s sockets, held until the test process ends


def refused_port():
    """A loopback port that refuses connections for as long as the test process runs: bound
    (so no other process can take it and answer) but never listening."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    _REFUSING.append(s)
    return s.getsockname()[1]


class ConnectionProbe:
    """A TCP listener that only counts the connections made to it: the proof
    that a process did (or did not) try to reach a server."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        # No database in the path: the URI must not make a script valid.
        self.uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % self.port

    def connections(self):
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return n
            conn.close()
            n += 1

    def close(self):
        self.sock.close()


class Flowwarden:
    """One `flowwarden run` process and everything it logged.

    uri=None runs without --uri (for the precedence tests); env=None runs
    with the test's environment minus FLOWWARDEN_URI."""

    def __init__(self, script, uri, extra=(), env=None, log_format="json", stdout=None):
        self.script = script
        self.log_format = log_format
        self.records = []
        self._reports = []          # (stream, report) in log order
        self._report_ms = []        # each report's log time (log_ms), in the same order
        self._cond = threading.Condition()
        cmd = [BINARY, "run", script]
        if uri is not None:
            cmd += ["--uri", uri]
        if log_format is not None:
            cmd += ["--log-format", log_format]
        cmd += list(extra)
        self.started_at = time.monotonic()
        # A test's own env too: without MONGOC_DISABLE_SHM (clean_env) a pid that a killed
        # flowwarden's /dev/shm/mongoc-PID outlived prints a line that is not JSON.
        env = clean_env() if env is None else dict({"MONGOC_DISABLE_SHM": "1"}, **env)
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE,
                                     stdout=stdout if stdout is not None else subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in iter(self.proc.stderr.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\n")
            try:
                rec = json.loads(text)
                if not isinstance(rec, dict):
                    raise ValueError
            except ValueError:
                rec = {"level": "raw", "msg": text}
            rec["_raw"] = text
            msg = rec.get("msg", "")
            rep = None
            if isinstance(msg, str) and msg.startswith(REPORT_PREFIX):
                rep = json.loads(msg[len(REPORT_PREFIX):])
            with self._cond:
                self.records.append(rec)
                if rep is not None:
                    self._reports.append((rec.get("stream"), rep))
                    self._report_ms.append(log_ms(rec))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # --- reading the log -------------------------------------------------
    def reports(self, stream=None):
        with self._cond:
            return [r for s, r in self._reports if stream is None or s == stream]

    def report_times(self, stream=None):
        """[(log time in ms, report)] in log order (log_ms)."""
        with self._cond:
            return [(t, r) for (s, r), t in zip(self._reports, self._report_ms)
                    if stream is None or s == stream]

    def report_count(self, stream=None):
        with self._cond:
            if stream is None:
                return len(self._reports)
            return sum(1 for s, _ in self._reports if s == stream)

    def messages(self, level=None, stream=None):
        with self._cond:
            return [r.get("msg", "") for r in self.records
                    if (level is None or r.get("level") == level)
                    and (stream is None or r.get("stream") == stream)]

    def raw_lines(self):
        with self._cond:
            return [r["_raw"] for r in self.records]

    def count_log(self, needle, stream=None, level=None):
        return sum(needle in m for m in self.messages(level, stream))

    def wait_until(self, predicate, timeout=30, what="condition"):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if predicate():
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for %s; log:\n%s" % (
                        what, "\n".join(r["_raw"] for r in self.records[-40:])))
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError("flowwarden exited (%s) while waiting for %s; log:\n%s"
                                         % (self.proc.returncode, what, "\n".join(
                                             r["_raw"] for r in self.records[-40:])))
                self._cond.wait(min(left, 0.2))

    def wait_log(self, needle, count=1, timeout=30, stream=None):
        self.wait_until(lambda: self.count_log(needle, stream) >= count,
                        timeout, "log line %r x%d" % (needle, count))

    def admin_port(self):
        """The port flowwarden reports after binding its admin endpoint to 127.0.0.1:0."""
        # Wait for the line with the port: an endpoint beyond loopback logs a
        # warning starting with the same words first.
        def port():
            for m in self.messages():
                found = re.search(r"admin endpoint on \S+ \(port (\d+)\)", m)
                if found:
                    return int(found.group(1))
            return None
        self.wait_until(lambda: port() is not None, 30, "admin endpoint line with its port")
        return port()

    def wait_open(self, streams=1, timeout=30):
        self.wait_log("change stream open", streams, timeout)

    def wait_reports(self, n, stream=None, timeout=30):
        self.wait_until(lambda: self.report_count(stream) >= n, timeout,
                        "%d reports%s" % (n, " of " + stream if stream else ""))
        return self.reports(stream)

    # --- stopping ----------------------------------------------------------
    def stop(self, sig=signal.SIGTERM, timeout=30):
        if sig != signal.SIGKILL:
            # A signal before main() blocks them (the dynamic loader still at work on a
            # busy machine) kills the process; its first log line comes after: wait for
            # it a while (a process that logs nothing gets the signal anyway).
            with self._cond:
                deadline = time.monotonic() + 10
                while (not self.records and self.proc.poll() is None
                       and time.monotonic() < deadline):
                    self._cond.wait(0.2)
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait_exit(timeout)

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def wait_exit(self, timeout=30):
        rc = self.proc.wait(timeout=timeout)
        # Every line read before the caller looks at them: a run of thousands of
        # reports may take the reader seconds to finish on a loaded machine.
        self._reader.join(timeout=60)
        if not self._reader.is_alive():
            self.proc.stderr.close()
        return rc


def mask(text, forms):
    for f in sorted(forms, key=len, reverse=True):
        text = text.replace(f, "<SECRET>")
    return text


def _capture_sizes():
    """{path: size} of the wrapper's capture files (FW_TEST_AUTH)."""
    if CAPTURE_DIR is None:
        return {}
    out = {}
    for name in os.listdir(CAPTURE_DIR):
        if name.endswith((".out", ".err")):
            path = os.path.join(CAPTURE_DIR, name)
            out[path] = os.path.getsize(path)
    return out


def _capture_new(seen):
    """(path, text) of what the capture files gained since `seen`."""
    for path in sorted(_capture_sizes()):
        with open(path, "rb") as f:
            f.seek(seen.get(path, 0))
            yield path, f.read().decode("utf-8", "replace")


class StandInTestCase(unittest.TestCase):
    """One stand-in for the whole class; a fresh database per test."""

    standin_args = ()
    command_log = False     # True: the stand-in logs every command (see commands())
    standin_auth = None     # (user, password) the stand-in requires; None: FW_TEST_AUTH's

    @classmethod
    def setUpClass(cls):
        if REAL_MODE:
            cls._setup_real()
            return
        args = list(cls.standin_args)
        cls._log_dir = None
        if cls.command_log:
            cls._log_dir = tempfile.TemporaryDirectory()
            cls.command_log_path = os.path.join(cls._log_dir.name, "commands.jsonl")
            args += ["--log", cls.command_log_path]
        cls.credentials = cls.standin_auth or default_credentials()
        cls.standin = StandIn(args=args, credentials=cls.credentials)
        cls.standin.start()
        cls.client = pymongo.MongoClient(cls.base_uri())

    @classmethod
    def _setup_real(cls):
        """FW_TEST_MONGODB_URI: the deployment instead of a stand-in. A class
        that configures the stand-in (standin_args, command_log, standin_auth)
        is skipped, as its mark would say."""
        for attr, control in (("standin_args", "options %s" % (cls.standin_args,)),
                              ("command_log", "command log (--log)"),
                              ("standin_auth", "users (--auth)")):
            if getattr(cls, attr):
                raise unittest.SkipTest("needs the stand-in's %s (FW_TEST_MONGODB_URI is set)"
                                        % control)
        cls._log_dir = None
        cls.credentials = default_credentials()
        cls.standin = _NoStandIn()
        cls.client = pymongo.MongoClient(REAL_URI)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        if REAL_MODE:
            return
        cls.standin.stop()
        if cls._log_dir is not None:
            cls._log_dir.cleanup()

    def commands(self, name=None, db=None):
        """The commands the stand-in received (command_log = True), oldest
        first, as {t, cmd, db, summary}; db defaults to this test's database."""
        db = db or self.db_name
        out = []
        with open(self.command_log_path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                if rec.get("db") == db and (name is None or rec.get("cmd") == name):
                    out.append(rec)
        return out

    @classmethod
    def base_uri(cls, db=""):
        if REAL_MODE:
            return uri_with_database(REAL_URI, db)
        return with_credentials("mongodb://127.0.0.1:%d/%s?replicaSet=rs0"
                                % (cls.standin.port, db), cls.credentials)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db_name = "t_" + self.id().rsplit(".", 1)[-1][:40]
        if REAL_MODE:
            self._real_database()
        self.db = self.client[self.db_name]
        self.uri = self.base_uri(self.db_name)
        self.procs = []
        self._fail_points = set()
        del _CLI_RUNS[:]
        self._capture_seen = _capture_sizes()

    def _real_database(self):
        """A database name nobody uses on the deployment: fwt + 48 random
        bits + the test's name; what exists before the test is never dropped."""
        try:
            self._existing = set(self.client.list_database_names())
        except pymongo.errors.OperationFailure:
            self._existing = None   # no listDatabases: the random part alone
        while True:
            self.db_name = "fwt%s_%s" % (os.urandom(6).hex(),
                                         self.id().rsplit(".", 1)[-1][:40])
            if not self._existing or not any(
                    d.startswith(self.db_name) for d in self._existing):
                break
        self.addCleanup(self._drop_real_databases)

    def _drop_real_databases(self):
        """Drops this test's database and those it made by extending its name
        (db_name + "_other"), none of which existed before it began."""
        names = {self.db_name}
        try:
            names |= {d for d in self.client.list_database_names()
                      if d.startswith(self.db_name + "_")}
        except pymongo.errors.OperationFailure:
            pass
        for name in sorted(names):
            if self._existing is None or name not in self._existing:
                self.client.drop_database(name)

    def _own_databases(self, names):
        """Of `names`, those this test may read: all on the stand-in, only
        its own on a real deployment."""
        if not REAL_MODE:
            return [d for d in names if d not in ("admin", "local", "config")]
        return [d for d in names if d == self.db_name or d.startswith(self.db_name + "_")]

    def tearDown(self):
        for name in self._fail_points:
            self.client.admin.command({"configureFailPoint": name, "mode": "off"})
        for p in self.procs:
            if p.proc.poll() is None:
                p.stop(signal.SIGKILL)
        self.tmp.cleanup()
        # --log-format json promises one JSON object a line: hold every run
        # of every test to it (a sanitizer report is not a log line: it has
        # its own check).
        for p in self.procs:
            if p.log_format == "json":
                p._reader.join(timeout=5)
                raw = [r["_raw"] for r in p.records if r.get("level") == "raw"
                       and not r["_raw"].startswith(("==", "    #", "SUMMARY:"))]
                self.assertEqual(raw, [], "lines of --log-format json output that are not JSON")
        # A stand-in that died on its own fails the test that saw it, with the
        # reason (kill9() and stop() forget the process, so no test trips this).
        s = self.standin
        if s.proc is not None and s.proc.poll() is not None:
            self.fail("the stand-in exited with status %s during the test; its stderr:\n%s"
                      % (s.proc.returncode, s.stderr_text()[-4000:]))
        if self.credentials:
            self.assert_no_secret(self.credentials[1])

    def assert_no_secret(self, secret):
        """Fails if `secret` (in any of its secret_forms) is in a log line or
        output of a flowwarden this test ran, or in a DLQ document on the
        stand-in (any database, any collection named like a DLQ or _fw_*)."""
        forms = secret_forms(secret)
        found = []

        def scan(where, text):
            for line in text.splitlines():
                if any(f in line for f in forms):
                    found.append("%s: %s" % (where, mask(line, forms)))

        for p in self.procs:
            p._reader.join(timeout=5)
            scan("flowwarden run log", "\n".join(p.raw_lines()))
        for cp in _CLI_RUNS:
            scan("flowwarden %s output" % " ".join(cp.args[1:2]),
                 "%s\n%s" % (cp.stdout or "", cp.stderr or ""))
        for path, text in _capture_new(self._capture_seen):
            scan("output of flowwarden pid %s" % os.path.basename(path), text)
        for where, raw in self._dlq_documents():
            if any(f.encode() in raw for f in forms):
                found.append("%s: %s" % (where, mask(repr(raw), forms)[:400]))
        if found:
            self.fail("a secret leaked (shown as <SECRET>):\n" + "\n".join(found))

    def _dlq_documents(self):
        """(where, raw BSON) of every document in a DLQ-like collection."""
        try:
            client = pymongo.MongoClient(self.base_uri(), serverSelectionTimeoutMS=2000,
                                         document_class=RawBSONDocument)
        except pymongo.errors.PyMongoError:
            return
        try:
            for db in self._own_databases(client.list_database_names()):
                for coll in client[db].list_collection_names():
                    if "dlq" in coll.lower() or coll.startswith("_fw"):
                        for doc in client[db][coll].find():
                            yield "%s.%s" % (db, coll), doc.raw
        except pymongo.errors.ServerSelectionTimeoutError:
            pass        # the test left its stand-in stopped: nothing to read
        finally:
            client.close()

    def script(self, body, name="script.lua"):
        return write_script(self.tmp.name, body, name)

    def run_fw(self, script, extra=(), env=None, uri=None, no_uri=False, log_format="json"):
        p = Flowwarden(script, None if no_uri else (uri or self.uri), extra, env, log_format)
        self.procs.append(p)
        return p

    def checkpoint(self, stream):
        return self.db["_fw_checkpoints"].find_one({"_id": stream})

    def fail_point(self, mode, data=None, name="failCommand"):
        """configureFailPoint on the stand-in; turned off again in tearDown.
        Returns the reply ({count} = how often it fired before)."""
        if REAL_MODE:
            raise AssertionError("fail_point needs the stand-in but FW_TEST_MONGODB_URI is set: "
                                 "mark the test @needs_standin(\"fault injection\")")
        cmd = {"configureFailPoint": name, "mode": mode}
        if data is not None:
            cmd["data"] = data
        self._fail_points.add(name)
        return self.client.admin.command(cmd)

    def units_started(self, stream, n):
        """Whether the change stream of every unit of stream (partitions = n) opened once. A
        unit's first holder saves where it starts ("from now"; with ha.mode = "shared" the
        group's start) before its stream is open, and every later holder resumes there; without
        "shared", a unit whose lease is held but whose stream is not open yet starts at its
        open, after what was written meanwhile (a loaded machine opens them late)."""
        return self.db["_fw_checkpoints"].count_documents({
            "_id": {"$regex": "^%s#[0-9]+/%d$" % (re.escape(stream), n)},
            "$or": [{"lastSeenToken": {"$exists": True}},
                    {"lastProcessedToken": {"$exists": True}}]}) == n

    def wait_for(self, predicate, timeout=30, what="condition", interval=0.02):
        """Polls predicate (real state, e.g. the database) until truthy."""
        return wait_until(predicate, timeout, interval, what)

    def wait_checkpoint(self, stream, predicate=lambda cp: True, timeout=30, what=None):
        """Waits until the stream's checkpoint document exists and satisfies predicate."""
        return self.wait_for(lambda: (lambda cp: cp if cp and predicate(cp) else None)(
            self.checkpoint(stream)), timeout, what or "checkpoint of %s" % stream)
