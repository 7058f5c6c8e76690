"""Child processes of the benchmark: consumers and helpers whose output lines are stamped on
receipt, whose RSS is sampled and whose own CPU time (os.wait4) is read when they end. Used by
bench/run_bench.py and bench/io_scenarios.py."""

import os
import signal
import subprocess
import sys
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def proc_cpu_s(pid):
    """user+sys seconds of a live process from /proc (clock-tick resolution)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_status_kb(pid, field="VmRSS"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Child:
    """A consumer process: lines of stdout/stderr stamped on receipt, RSS sampled, and its own
    resource usage (os.wait4) when it ends."""

    def __init__(self, cmd, cwd=None):
        self.cmd = cmd
        self.out = []  # (receipt time.time_ns(), text)
        self.err = []
        self.rss = []  # (monotonic s, VmRSS kB)
        # Peak RSS is VmHWM, not ru_maxrss: Linux carries the forking Python process's RSS
        # (~50 MB) across exec into ru_maxrss, which would hide a small consumer.
        self.hwm_kb = 0
        self.cond = threading.Condition()
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd=cwd)
        self.pid = self.proc.pid
        self.done = False
        self.rusage = None
        self.status = None
        self.threads = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out),
                                         daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.err),
                                         daemon=True),
                        threading.Thread(target=self._sample, daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, f, sink):
        for raw in iter(f.readline, b""):
            t = time.time_ns()
            with self.cond:
                sink.append((t, raw.decode("utf-8", "replace").rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def _sample(self):
        while not self.done:
            kb = proc_status_kb(self.pid)
            if kb:
                self.rss.append((time.monotonic(), kb))
            self.note_hwm()
            time.sleep(0.1)

    def note_hwm(self, kb=None):
        kb = kb if kb is not None else proc_status_kb(self.pid, "VmHWM")
        self.hwm_kb = max(self.hwm_kb, kb or 0)

    def wait_for(self, pred, timeout):
        """Waits until pred() (called under the lock) is true; False on timeout or exit."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not pred()):
                    # one last look after the readers drained the pipes
                    self.cond.wait(0.2)
                    return pred()
                self.cond.wait(min(left, 0.5))
        return True

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.status is None:
            self.note_hwm()
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
        return self.reap(timeout)

    def reap(self, timeout=600):
        if self.status is not None:
            return self.status
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(self.pid, 0)
                break
            time.sleep(0.02)
        self.done = True
        self.status = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.status
        self.rusage = ru
        for t in self.threads[:2]:
            t.join(5)
        return self.status

    @property
    def cpu_s(self):
        return self.rusage.ru_utime + self.rusage.ru_stime

    @property
    def maxrss_kb(self):
        return self.hwm_kb

    def rss_profile(self, t_from=None, t_to=None):
        """RSS at the middle and at the end of [t_from, t_to] (monotonic)."""
        s = [(t, kb) for t, kb in self.rss
             if (t_from is None or t >= t_from) and (t_to is None or t <= t_to)]
        if not s:
            return None, None
        return s[len(s) // 2][1], s[-1][1]

    def tail(self, n=15):
        return "\n".join(x[1] for x in (self.err + self.out)[-n:])
