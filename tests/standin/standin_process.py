"""Start and stop the MongoDB stand-in from tests, benchmarks and tools.

    with StandIn(["--oplog-max-entries", "100"]) as s:
        client = pymongo.MongoClient(s.uri)

`start()` launches `/usr/bin/python3 tests/standin/mongo_standin.py --port 0 <args>`, waits for
the `ready 127.0.0.1:<port>` line (with a deadline, failing with the stand-in's stderr) and
returns the connection URI. `stop()` sends SIGTERM and waits; `kill9()` simulates a crash.
"""

import os
import select
import signal
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "mongo_standin.py")
PYTHON = "/usr/bin/python3"


class StandInError(RuntimeError):
    pass


class StandIn:
    def __init__(self, args=(), replset="rs0", startup_timeout=30.0):
        self.args = list(args)
        self.replset = replset
        if "--replset" in self.args:
            self.replset = self.args[self.args.index("--replset") + 1]
        self.startup_timeout = startup_timeout
        self.proc = None
        self.port = None
        self.host = None
        self._stderr = None
        self.last_stderr = ""

    @property
    def uri(self):
        return "mongodb://%s/?replicaSet=%s" % (self.host, self.replset)

    def start(self):
        if self.proc is not None:
            raise StandInError("stand-in already running on %s" % self.host)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([PYTHON, SCRIPT, "--port", "0"] + self.args,
                                     stdout=subprocess.PIPE, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        fd = self.proc.stdout.fileno()
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail("did not print its ready line within %.0f s" % self.startup_timeout)
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1)
            if not chunk:
                self._fail("exited with status %s before it was ready" % self.proc.wait())
            line += chunk
        text = line.decode().strip()
        if not text.startswith("ready "):
            self._fail("printed %r instead of its ready line" % text)
        self.host = text.split(" ", 1)[1]
        self.port = int(self.host.rsplit(":", 1)[1])
        return self.uri

    def _fail(self, why):
        err = b""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._stderr.seek(0)
            err = self._stderr.read()
        self.proc = None
        raise StandInError("stand-in %s; stderr:\n%s" % (why, err.decode(errors="replace")))

    def stderr_text(self):
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, timeout=15.0):
        """SIGTERM and wait; returns the exit status (0 for a clean stop)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_io(proc)
        return proc.returncode

    def _close_io(self, proc):
        proc.stdout.close()
        self.last_stderr = self.stderr_text()
        self._stderr.close()
        self._stderr = None

    def kill9(self):
        """Simulate a crash: SIGKILL, no chance to flush anything."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        proc.kill()
        proc.wait()
        self._close_io(proc)
        return proc.returncode

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def wait_until(predicate, timeout=10.0, interval=0.01, message="condition"):
    """Poll `predicate` (which checks real state) until true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, message))
        time.sleep(interval)


def next_event(cs, timeout=10.0):
    """The next event of a pymongo change stream, None if it closed; fails after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = cs.try_next()
        if ev is not None:
            return ev
        if not cs.alive:
            return None
    raise AssertionError("no change event within %.0f s" % timeout)
