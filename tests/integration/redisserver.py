"""A redis-server from Debian for the tests: started on a free loopback port
in a temporary folder, without persistence, and a tiny RESP client to check
what handlers wrote. Skips the test when redis-server is not installed."""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ValueError("bad reply %r" % line)


class RedisServer:
    def __init__(self, password=None, args=()):
        self.exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(self.exe):
            raise unittest.SkipTest("redis-server is not installed (setup.sh installs it)")
        self.dir = tempfile.TemporaryDirectory()
        self.port = free_port()
        self.password = password
        self.args = list(args)
        self.proc = None

    def uri(self, db=0):
        auth = ":%s@" % self.password if self.password else ""
        return "redis://%s127.0.0.1:%d/%d" % (auth, self.port, db)

    def start(self, timeout=15):
        """Starts the server; the first start moves to another free port when
        another process took this one since free_port() (a later start keeps
        it: the handlers' URI names it)."""
        for attempt in range(3):
            if self._start(timeout):
                self.started = True
                return
            self.port = free_port()
        raise AssertionError("redis-server failed to start three times: ports in use")

    def _start(self, timeout):
        """True once the server answers; False when it could not bind its port
        on a first start (the caller picks another)."""
        log = os.path.join(self.dir.name, "redis.log")
        if os.path.exists(log):
            os.unlink(log)
        cmd = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", self.dir.name, "--daemonize", "no",
               "--logfile", log] + self.args
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + timeout
        while True:
            try:
                # Another test's server may answer on the port this one failed to bind.
                if (self.command("PING") == "PONG" and b"process_id:%d\r\n" % self.proc.pid
                        in self.command("INFO", "server")):
                    return True
            except OSError:
                pass
            if self.proc.poll() is not None:
                text = ""
                if os.path.exists(log):
                    with open(log, errors="replace") as f:
                        text = f.read()
                if not getattr(self, "started", False) and "in use" in text:
                    return False
                raise AssertionError("redis-server exited with %s:\n%s"
                                     % (self.proc.returncode, text[-3000:]))
            if time.monotonic() > end:
                raise AssertionError("redis-server did not answer in %ss" % timeout)
            time.sleep(0.05)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        self.kill()
        self.dir.cleanup()

    def command(self, *args, db=0):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            f = s.makefile("rb")
            pre = []
            if self.password:
                pre.append(("AUTH", self.password))
            if db:
                pre.append(("SELECT", db))
            s.sendall(b"".join(_encode(a) for a in pre) + _encode(args))
            for _ in pre:
                _read(f)
            return _read(f)
