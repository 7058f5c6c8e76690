"""A PostgreSQL server from Debian for the tests: a fresh cluster in a
temporary folder, listening on a free loopback port, run as an unprivileged
user when the tests run as root (PostgreSQL refuses to run as root). Skips
the test when the server is not installed."""
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import unittest

from redisserver import free_port


def _bindir():
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    raise unittest.SkipTest("PostgreSQL is not installed (setup.sh installs it)")


class PgServer:
    def __init__(self, user="fwtest", password="pw"):
        self.bin = _bindir()
        self.user, self.password = user, password
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="fwpg-")
        self.data = os.path.join(self.tmp, "data")
        self.as_user = None
        if os.geteuid() == 0:
            self.as_user = "nobody"
            pw = pwd.getpwnam(self.as_user)
            os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        pwfile = os.path.join(self.tmp, "pw")
        with open(pwfile, "w") as f:
            f.write(password + "\n")
        if self.as_user:
            os.chown(pwfile, pwd.getpwnam(self.as_user).pw_uid, -1)
        self._run(["initdb", "-D", self.data, "-U", user, "--pwfile", pwfile,
                   "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
                   "--no-instructions"])
        os.unlink(pwfile)

    def _run(self, args, check=True):
        cmd = [os.path.join(self.bin, args[0])] + args[1:]
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--"] + cmd
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=check, timeout=60, cwd=self.tmp)

    def uri(self, password=None, db="postgres", query=""):
        return "postgresql://%s:%s@127.0.0.1:%d/%s%s" % (
            self.user, password or self.password, self.port, db, query)

    def start(self):
        """Starts the server; the first start moves to another free port when
        another process took this one meanwhile (a later start keeps it: the
        handlers' URI names it)."""
        for attempt in range(3):
            log = os.path.join(self.tmp, "log")
            if os.path.exists(log):
                os.unlink(log)
            cp = self._run(["pg_ctl", "-D", self.data, "-l", log, "-w", "-t", "30",
                            "-o", "-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off" % (
                                self.port, self.tmp), "start"], check=False)
            if cp.returncode == 0:
                self.started = True
                return
            with open(log, errors="replace") as f:
                text = f.read()
            if getattr(self, "started", False) or "in use" not in text:
                raise AssertionError("pg_ctl start failed: %s\n%s" % (cp.stdout, text[-3000:]))
            self.port = free_port()
        raise AssertionError("pg_ctl start failed three times: ports in use")

    def stop(self, mode="fast"):
        self._run(["pg_ctl", "-D", self.data, "-m", mode, "-w", "stop"], check=False)

    def destroy(self):
        self.stop("immediate")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sql(self, text, db="postgres"):
        """Runs text through psql (in database db); rows as lists of strings."""
        env = dict(os.environ, PGPASSWORD=self.password)
        cp = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                             "-d", db, "-At", "-F", "|", "-v", "ON_ERROR_STOP=1",
                             "-c", text], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=30)
        if cp.returncode != 0:
            raise AssertionError("psql: %s" % cp.stderr)
        return [line.split("|") for line in cp.stdout.splitlines() if line]


class WithPgServer:
    """A test case mixin: one PostgreSQL server for the class (cls.pg),
    started before its tests and removed after; pg_args go to PgServer."""

    pg_args = {}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg = PgServer(**cls.pg_args)
        cls.pg.start()

    @classmethod
    def tearDownClass(cls):
        cls.pg.destroy()
        super().tearDownClass()
