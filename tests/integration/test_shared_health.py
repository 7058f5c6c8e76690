"""Issue 38: what an operator watches of a group of instances sharing units (ha.mode = "shared",
partitions = 4) says what the group does. Two healthy members under steady writes: both /readyz
200, no flowwarden_stream_up 0, each unit's lag exported by its holder alone, and
flowwarden_unit_held summing to 1 per unit. A member killed while the other cannot take leases
(a failCommand on its lease client's findAndModify): its units show as `orphaned` with how long,
on the survivor's status, /readyz (503: it holds less than its share) and
flowwarden_unit_orphaned_seconds, whose alert expression (FlowwardenUnitOrphaned: orphaned for
over 2 x lease) turns true; once takes succeed again the survivor holds every unit and all is
quiet again. A third member then killed with nothing in the way: the take-over time is measured
against the bound docs/operations.md states (lease + lease / 3 + 250 ms), and `flowwarden status`
with both --admin addresses prints the group."""
import datetime
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request

from fwtest import SOURCE_DIR, StandInTestCase, clean_env, needs_standin, run_cli

LEASE_MS = 2000
N = 4
UNITS = ["s#%d/%d" % (k, N) for k in range(N)]
SCRIPT = """
fw.defaults { ha = { mode = "shared", lease = "%dms" } }
fw.stream {
  name = "s", collection = "c", partitions = %d,
  on_insert = function(ctx)
    report({ id = ctx:document_key()._id, unit = ctx:stream_name() })
  end,
}
""" % (LEASE_MS, N)


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text, name):
    """{labels text: value} of metric name in an exposition."""
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), text, re.M)}


def unit_of(labels):
    m = re.search(r'unit="([^"]*)"', labels) or re.search(r'stream="([^"]*)"', labels)
    return m.group(1)


def check_bound(script, uri):
    """The take-over bound `flowwarden check` states for script, in seconds."""
    r = run_cli(["check", script], env=clean_env({"FLOWWARDEN_URI": uri}))
    found = re.search(r"crashed holder's (?:units are|stream is) taken over within (\d+)ms", r.stdout)
    if not found:
        raise AssertionError("no take-over bound in check's output:\n" + r.stdout + r.stderr)
    return int(found.group(1)) / 1000


def take_over_time(survivor, dead, killed, units):
    """Seconds from the kill -9 of `dead` (time.time() `killed`, taken just before the
    signal) to the last of `survivor`'s takes of its `units` units, on survivor's clock (the
    ts of its "took the lease" lines), as docs/operations.md's "Take-over time" counts it: how
    quickly the test polls the leases or reads the log adds nothing."""
    needle = "it had no live holder for"
    owner = ":%d:" % dead.proc.pid
    survivor.wait_until(lambda: sum(needle in m and owner in m for m in survivor.messages())
                        >= units, 10, "%d take(s) of the killed member's units logged" % units)
    with survivor._cond:
        takes = [r["ts"] for r in survivor.records
                 if needle in r.get("msg", "") and owner in r.get("msg", "")]
    last = max(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")
               .replace(tzinfo=datetime.timezone.utc).timestamp() for t in takes)
    return last - killed


@needs_standin("version mode (--server-version 7.0), fail points and kill -9")
class SharedHealth(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def holders(self):
        now = self.db.command("hello")["localTime"]
        return {d["_id"]: d["owner"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now}

    def split(self):
        per = {}
        for unit, owner in self.holders().items():
            per.setdefault(owner, []).append(unit)
        return sorted(len(u) for u in per.values())

    def writer(self):
        """Steady writes (50 a second) until the test ends."""
        stop = threading.Event()
        self.addCleanup(stop.set)

        def run():
            i = 0
            while not stop.wait(0.02) and i < 20000:
                self.db.c.insert_one({"_id": i})
                i += 1
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return stop

    def group_view(self, ports):
        """Per port: (readyz status, /metrics text, /v1/streams doc)."""
        out = {}
        for p in ports:
            ready, _ = get(p, "/readyz")
            _, metrics = get(p, "/metrics")
            _, streams = get(p, "/v1/streams")
            out[p] = (ready, metrics, json.loads(streams))
        return out

    def assert_quiet(self, ports):
        """Both ready, no stream_up 0, each unit held by one member, which alone exports
        its lag; no orphan anywhere."""
        view = self.group_view(ports)
        held, lag = {}, {}
        for p, (ready, metrics, streams) in view.items():
            self.assertEqual(ready, 200, (p, streams))
            self.assertNotIn(0.0, samples(metrics, "flowwarden_stream_up").values(), metrics)
            for labels, v in samples(metrics, "flowwarden_unit_held").items():
                held[unit_of(labels)] = held.get(unit_of(labels), 0) + v
            for labels in samples(metrics, "flowwarden_lag_seconds"):
                lag.setdefault(unit_of(labels), []).append(p)
            self.assertEqual(set(samples(metrics, "flowwarden_unit_orphaned_seconds").values()),
                             {0.0})
            for s in streams["streams"]:
                self.assertIn(s["state"], ("running", "standby"), s)
                self.assertIsNone(s["orphaned_seconds"], s)
                if s["role"] == "standby":
                    self.assertIsNone(s["lag_seconds"], s)
                    self.assertIsNone(s["headroom_seconds"], s)
        self.assertEqual(held, {u: 1.0 for u in UNITS})
        self.assertEqual(sorted(lag), UNITS)
        self.assertTrue(all(len(v) == 1 for v in lag.values()), lag)
        return view

    def assert_rule_tests_use_these_series(self, view):
        """tests/prometheus/alerts_test.yml replays a group of two: each series it writes
        exists in this group's /metrics with the same labels (a unit named as here), and
        a standby's lag is absent there as here."""
        path = os.path.join(SOURCE_DIR, "tests", "prometheus", "alerts_test.yml")
        with open(path) as f:
            written = re.findall(r"- series: '(\w+)\{([^}]*)\}'", f.read())
        self.assertTrue(written)
        real = {}
        for _, metrics, _ in view.values():
            for m in re.finditer(r"^(flowwarden_\w+)\{([^}]*)\} ", metrics, re.M):
                keys = tuple(sorted(k for k, _ in re.findall(r'(\w+)="([^"]*)"', m.group(2))))
                real.setdefault(m.group(1), set()).add(keys)
        for name, labels in written:
            keys = tuple(sorted(k for k, _ in re.findall(r'(\w+)="([^"]*)"', labels)
                                if k not in ("job", "instance")))
            self.assertIn(keys, real.get(name, set()), "%s{%s}" % (name, labels))
            unit = re.search(r'unit="kv#(\d)/4"', labels) or re.search(r'stream="kv#(\d)/4"', labels)
            self.assertTrue(unit, labels)

    def wait_quiet(self, ports, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.assert_quiet(ports)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def test_a_group_of_two_healthy_killed_orphaned_and_taken_over(self):
        script = self.script(SCRIPT)
        a = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        b = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        pa, pb = a.admin_port(), b.admin_port()
        self.wait_for(lambda: self.split() == [2, 2], 15, "two units each")
        self.writer()
        self.wait_for(lambda: b.report_count() > 20 and a.report_count() > 20, 30,
                      "both handling events")
        view = self.wait_quiet([pa, pb], 10)
        self.assert_rule_tests_use_these_series(view)
        # Steady for two more lease periods: still quiet, and no standby grows a lag.
        time.sleep(2 * LEASE_MS / 1000)
        self.assert_quiet([pa, pb])

        # b cannot take leases; a killed: a's two units stay orphaned on b.
        self.fail_point("alwaysOn", {"failCommands": ["findAndModify"], "errorCode": 96,
                                     "appName": "flowwarden-lease-%d" % b.proc.pid})
        a.kill9()
        killed = time.monotonic()
        seen = {}

        def orphaned_long():
            _, metrics = get(pb, "/metrics")
            orphan = samples(metrics, "flowwarden_unit_orphaned_seconds")
            lease = samples(metrics, "flowwarden_unit_lease_seconds")
            # FlowwardenUnitOrphaned's expression, on b's series alone.
            ratio = {unit_of(k): v / lease[k] for k, v in orphan.items() if k in lease}
            if not seen.get("shown") and any(v > 0 for v in ratio.values()):
                seen["shown"] = time.monotonic() - killed
            return sum(1 for v in ratio.values() if v > 2) == 2
        self.wait_for(orphaned_long, 6 * LEASE_MS / 1000, "two units orphaned over 2 x lease",
                      interval=0.1)
        # Shown within 2 x lease of the kill (the lease expires within one).
        self.assertLess(seen["shown"], 2 * LEASE_MS / 1000 + 0.5)
        status, body = get(pb, "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn('"state":"orphaned"', body)
        self.assertIn("this instance takes it at its next look", body)
        _, streams = get(pb, "/v1/streams")
        orphans = [s for s in json.loads(streams)["streams"] if s["state"] == "orphaned"]
        self.assertEqual(len(orphans), 2, streams)
        for s in orphans:
            self.assertGreater(s["orphaned_seconds"], 2 * LEASE_MS / 1000)
            self.assertIsNone(s["lag_seconds"])
        metrics = get(pb, "/metrics")[1]
        self.assertEqual(sorted(samples(metrics, "flowwarden_stream_up").values()),
                         [0.0, 0.0, 1.0, 1.0])
        r = run_cli(["status", "--admin", "127.0.0.1:%d" % pb])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("orphaned for", r.stdout)

        # Takes succeed again: b holds every unit, all quiet.
        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        self.wait_for(lambda: self.split() == [N], 4 * LEASE_MS / 1000, "b holding every unit")
        self.wait_quiet([pb], 10)
        # Each take is logged after the server applied it: the lines may still be on their way.
        b.wait_log("it had no live holder for", count=2, timeout=10)
        took = [m for m in b.messages() if "it had no live holder for" in m]
        self.assertEqual(len(took), 2, took)

        # A third member, then killed with nothing in the way: the take-over within the
        # stated bound (with room for a busy machine's scheduling).
        c = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        pc = c.admin_port()
        self.wait_for(lambda: self.split() == [2, 2], 15, "b and c with two units each")
        self.wait_quiet([pb, pc], 10)
        r = run_cli(["status", "--admin", "127.0.0.1:%d" % pb, "--admin", "127.0.0.1:%d" % pc])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("group: 2 members asked, 2 answered", r.stdout)
        rows = [l for l in r.stdout.splitlines() if l.startswith("s#")]
        self.assertEqual(len(rows), N, r.stdout)
        self.assertEqual(sum("127.0.0.1:%d" % pb in l for l in rows), 2, r.stdout)
        self.assertEqual(sum("127.0.0.1:%d" % pc in l for l in rows), 2, r.stdout)
        killed = time.time()
        c.kill9()
        self.wait_for(lambda: self.split() == [N], 4 * LEASE_MS / 1000, "b taking c's units",
                      interval=0.02)
        took = take_over_time(b, c, killed, 2)
        bound = check_bound(script, self.uri)
        self.assertEqual(bound, (LEASE_MS + LEASE_MS // 3 + 250) / 1000)
        print("shared: take-over %.2f s after kill -9 (bound lease + lease/3 + 250 ms = %.2f s, "
              "lease %d ms)" % (took, bound, LEASE_MS))
        # The bound counts no round trip (the take's own are in the time measured).
        self.assertLess(took, bound + 1.0)
        self.wait_quiet([pb], 10)
        r = run_cli(["status", "--admin", "127.0.0.1:%d" % pb, "--admin", "127.0.0.1:%d" % pc])
        self.assertEqual(r.returncode, 1)
        self.assertIn("DOES NOT ANSWER", r.stdout)
        self.assertEqual(b.stop(), 0)

    def test_leader_mode_standby_is_ready_and_a_kill_is_taken_over_within_the_bound(self):
        script = self.script("""
            fw.defaults { ha = { mode = "leader", lease = "%dms" } }
            fw.stream { name = "s", collection = "c",
                        on_insert = function(ctx) report({ id = ctx:document_key()._id }) end }
            """ % LEASE_MS)
        a = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        a.wait_open()
        b = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        pa, pb = a.admin_port(), b.admin_port()
        self.writer()

        def shape():
            view = self.group_view([pa, pb])
            for ready, metrics, _ in view.values():
                if ready != 200 or 0.0 in samples(metrics, "flowwarden_stream_up").values():
                    return None
            states = sorted(st["state"] for _, _, d in view.values() for st in d["streams"])
            lags = [p for p, (_, m, _) in view.items() if samples(m, "flowwarden_lag_seconds")]
            held = sum(sum(samples(m, "flowwarden_unit_held").values()) for _, m, _ in view.values())
            named = view[pb][2]["streams"][0]["holder"]
            return states == ["running", "standby"] and lags == [pa] and held == 1 and named
        self.wait_for(shape, 15, "a leading, b a ready standby naming it and exporting no lag",
                      interval=0.1)
        _, streams = get(pb, "/v1/streams")
        st = json.loads(streams)["streams"][0]
        self.assertEqual((st["role"], st["state"]), ("standby", "standby"), st)
        self.assertIn("standby: unit held by", st["reason"])
        self.assertEqual(st["holder"], self.holders()["s"])

        killed = time.time()
        a.kill9()
        self.wait_for(lambda: self.holders().get("s", "").split(":")[1:2] == [str(b.proc.pid)],
                      4 * LEASE_MS / 1000, "b taking the lease", interval=0.02)
        took = take_over_time(b, a, killed, 1)
        bound = check_bound(script, self.uri)
        self.assertEqual(bound, (LEASE_MS + 250) / 1000)
        print("leader: take-over %.2f s after kill -9 (bound lease + 250 ms = %.2f s)"
              % (took, bound))
        self.assertLess(took, bound + 1.0)
        self.wait_for(lambda: get(pb, "/readyz")[0] == 200 and samples(
            get(pb, "/metrics")[1], "flowwarden_lag_seconds"), 10, "b reading", interval=0.1)
        self.assertEqual(b.stop(), 0)
