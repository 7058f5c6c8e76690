"""ha.mode = "shared" (issue 31): instances running one script share its units (here the four
units of a stream with partitions = 4), each at most ceil(units / live members). Two instances
end with two units each (the first one, alone at first, gives two up at an event boundary, its
checkpoint saved first); every event is handled once, each unit by one instance at a time; a
killed instance's units are taken by the other after their leases expire; a lone instance
holds every unit; a member stopped with SIGTERM hands its units over with nothing handled
twice; two unpartitioned streams and two members: each leads one."""
import datetime
import json
import re
import time
import urllib.request

from fwtest import StandInTestCase, needs_standin

LEASE_MS = 1000
N = 4
SCRIPT = """
fw.defaults { ha = { mode = "shared", lease = "%dms" } }
fw.stream {
  name = "s", collection = "c", partitions = %d,
  checkpoint = { save_every = 1 },
  on_insert = function(ctx)
    report({ id = ctx:document_key()._id, unit = ctx:stream_name() })
  end,
}
""" % (LEASE_MS, N)


@needs_standin("version mode (--server-version 7.0) and kill -9")
class SharedUnits(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def holders(self):
        """{unit: owner} of the units' leases held now (expiresAt after now)."""
        now = self.db.command("hello")["localTime"]
        return {d["_id"]: d["owner"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now}

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.05)
        raise AssertionError("timed out after %.1f s waiting for %s (holders %s)"
                             % (timeout, what, self.holders()))

    def started(self):
        return self.units_started("s", N)

    def held_metric(self, port):
        """(sum of flowwarden_units_held, max flowwarden_members) in b's /metrics."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port) as r:
            text = r.read().decode()
        held = sum(float(v) for v in re.findall(r"^flowwarden_units_held\{[^}]*\} (\S+)$", text, re.M))
        members = [float(v) for v in re.findall(r"^flowwarden_members\{[^}]*\} (\S+)$", text, re.M)]
        return int(held), int(max(members or [0]))

    def split(self):
        per = {}
        for unit, owner in self.holders().items():
            per.setdefault(owner, []).append(unit)
        return per

    def test_two_share_fairly_and_one_takes_the_killed_ones_units(self):
        script = self.script(SCRIPT)
        gone = self.db.command("hello")["localTime"] - datetime.timedelta(hours=2)
        self.db["_fw_members"].insert_one({"_id": "gone:1:x", "expiresAt": gone})
        a = self.run_fw(script)
        self.wait_for(lambda: len(self.holders()) == N, 10, "the lone instance holding every unit")
        # A member gone for over an hour is swept when an instance joins.
        self.assertIsNone(self.db["_fw_members"].find_one({"_id": "gone:1:x"}))
        self.assertEqual(len(self.split()), 1)
        b = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        # Within about two lease periods: two units each.
        self.wait_for(lambda: sorted(len(u) for u in self.split().values()) == [2, 2]
                      and self.started(), 10, "two units each, every unit started")
        # a logs each release after giving the lease up, so b may hold the unit before
        # the line is read.
        a.wait_log("shared: released the unit", count=2, timeout=10)
        self.assertIn("2 members", "\n".join(a.messages()))
        # What b shows: its units' roles and gauges, the standbys' holder.
        port = b.admin_port()
        self.wait_for(lambda: self.held_metric(port) == (2, 2), 5, "b's gauges")
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/streams" % port) as r:
            streams = json.loads(r.read())
        text = json.dumps(streams)
        self.assertIn("standby (shared): unit held by", text)
        self.assertEqual(text.count('"leader"'), 2, text)

        self.db.c.insert_many([{"_id": i} for i in range(200)])
        self.wait_for(lambda: a.report_count() + b.report_count() >= 200, 30, "200 reports")
        ra, rb = a.reports(), b.reports()
        ids = sorted(r["id"] for r in ra + rb)
        self.assertEqual(ids, list(range(200)))  # each once: no unit handled twice
        self.assertFalse({r["unit"] for r in ra} & {r["unit"] for r in rb})
        self.assertTrue(ra and rb, "both instances handled events")

        # kill -9 of one: the other takes its units once their leases expire.
        a.kill9()
        killed = time.monotonic()
        self.wait_for(lambda: len(self.split()) == 1 and len(self.holders()) == N,
                      LEASE_MS / 1000 * 4 + 5, "the survivor holding every unit")
        took = time.monotonic() - killed
        self.db.c.insert_many([{"_id": i} for i in range(200, 260)])
        self.wait_for(lambda: {r["id"] for r in b.reports()} >= set(range(200, 260)), 30,
                      "the survivor handling every new event")
        # A third joins, then b stops (SIGTERM): its units go over with their final
        # checkpoints, so nothing is handled twice.
        c = self.run_fw(script)
        self.wait_for(lambda: sorted(len(u) for u in self.split().values()) == [2, 2], 10,
                      "b and c with two units each")
        self.assertEqual(b.stop(), 0)
        self.wait_for(lambda: len(self.split()) == 1 and len(self.holders()) == N, 10,
                      "c holding every unit after b's SIGTERM")
        self.db.c.insert_many([{"_id": i} for i in range(260, 300)])
        self.wait_for(lambda: {r["id"] for r in c.reports()} >= set(range(260, 300)), 30,
                      "c handling every new event")
        after_kill = [r["id"] for r in b.reports() + c.reports() if r["id"] >= 200]
        self.assertEqual(sorted(after_kill), list(range(200, 300)))  # once each
        self.assertEqual(c.stop(), 0)
        print("shared: survivor held all %d units %.2f s after the kill (lease %d ms)"
              % (N, took, LEASE_MS))

    def test_two_streams_two_members_each_leads_one(self):
        script = self.script("""
            fw.defaults { ha = { mode = "shared", lease = "%dms" } }
            fw.stream { name = "x", collection = "cx", on_insert = function(ctx) end }
            fw.stream { name = "y", collection = "cy", on_insert = function(ctx) end }
            """ % LEASE_MS)
        self.run_fw(script)
        self.run_fw(script)
        self.wait_for(lambda: sorted(len(u) for u in self.split().values()) == [1, 1], 10,
                      "one stream each")
