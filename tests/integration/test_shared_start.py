"""ha.mode = "shared": the first start of a group. A unit no member has opened yet starts at the
stream's start in the group (<stream>#start in _fw_checkpoints, written when the first member
started), not at its own open: what was written after the group started and before the unit's
stream opened reaches that unit. The window is held open without timing: a member record that
no process renews (a member that announced itself and has not opened its units yet) keeps the
first instance at its share, two of the four units, until the record is removed."""
import datetime

from fwtest import StandInTestCase, needs_standin

LEASE_MS = 1000
N = 4
SCRIPT = """
fw.defaults { ha = { mode = "shared", lease = "%dms" } }
fw.stream {
  name = "s", collection = "c", partitions = %d,
  checkpoint = { save_every = 1 %s },
  on_insert = function(ctx)
    report({ id = ctx:document_key()._id, unit = ctx:stream_name() })
  end,
}
"""


@needs_standin("version mode (--server-version 7.0)")
class SharedFirstStart(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def held(self):
        now = self.db.command("hello")["localTime"]
        return [d["_id"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now]

    def late_member(self):
        """A live member record nobody renews: the first instance counts two members."""
        now = self.db.command("hello")["localTime"]
        self.db["_fw_members"].insert_one({"_id": "late:1:x",
                                           "expiresAt": now + datetime.timedelta(minutes=5)})

    def first_start(self, checkpoint=""):
        """a starts while a second member is announced: it opens two units (its share);
        events are written; then the second member joins for real. Returns (a, b, the ids
        written while two units were not open yet)."""
        script = self.script(SCRIPT % (LEASE_MS, N, checkpoint))
        self.late_member()
        a = self.run_fw(script)
        a.wait_log("change stream open", count=2, timeout=20)
        self.wait_for(lambda: len(self.held()) == 2, 10, "a holding its share, two units")
        window = list(range(100))
        self.db.c.insert_many([{"_id": i} for i in window])
        self.db["_fw_members"].delete_one({"_id": "late:1:x"})
        b = self.run_fw(script)
        self.wait_for(lambda: len(self.held()) == N and self.units_started("s", N), 20,
                      "every unit held and opened")
        return a, b, window

    def handled(self, *fws):
        return {r["id"] for fw in fws for r in fw.reports()}

    def test_events_before_a_units_first_open_reach_it(self):
        a, b, window = self.first_start()
        # Written after every unit opened: each unit hands them out after what it had before
        # them in the oplog, so once they are handled every unit is past the window.
        after = list(range(1000, 1040))
        self.db.c.insert_many([{"_id": i} for i in after])
        self.wait_for(lambda: self.handled(a, b) >= set(after), 20, "the events after the opens")
        missing = sorted(set(window) - self.handled(a, b))
        self.assertEqual(missing, [], "events written after the group started, before their "
                         "unit opened, were never handled")
        doc = self.db["_fw_checkpoints"].find_one({"_id": "s#start"})
        self.assertIsNotNone(doc, "the stream's start in the group is recorded")
        # Each unit's first open, by a or b (a may take the two itself before b counts):
        # at the group's start; a unit moved later resumes from its checkpoint.
        first = "change stream open (at the group's start"
        self.assertEqual(a.count_log(first) + b.count_log(first), N)
        self.assertEqual(a.count_log("shared: the group starts here"), 1)
        self.assertEqual(a.stop(), 0)
        self.assertEqual(b.stop(), 0)

    def test_latest_starts_at_the_groups_start_not_each_units_now(self):
        """start_position = "latest": what was written while the group was down is skipped,
        the checkpoints of the group's earlier run are dropped, and what came after the group
        started reaches every unit, the ones opened later too."""
        latest = ', start_position = "latest"'
        earlier = self.run_fw(self.script(SCRIPT % (LEASE_MS, N, latest)))
        self.wait_for(lambda: self.units_started("s", N), 20, "the earlier run's units opened")
        self.assertEqual(earlier.stop(), 0)
        down = list(range(5000, 5040))
        self.db.c.insert_many([{"_id": i} for i in down])
        # The group is over once no member kept its start alive for a lease.
        self.wait_for(lambda: self.db["_fw_checkpoints"].find_one({"_id": "s#start"})[
            "aliveUntil"] < self.db.command("hello")["localTime"], 10, "the earlier run's end")
        a, b, window = self.first_start(latest)
        after = list(range(1000, 1040))
        self.db.c.insert_many([{"_id": i} for i in after])
        self.wait_for(lambda: self.handled(a, b) >= set(after), 20, "the events after the opens")
        self.assertEqual(sorted(set(window) - self.handled(a, b)), [])
        self.assertEqual(sorted(set(down) & self.handled(a, b)), [],
                         "latest: what was written while the group was down is skipped")
        self.assertGreaterEqual(a.count_log("its checkpoint is older than the group's start"), 2)
        self.assertEqual(a.stop(), 0)
        self.assertEqual(b.stop(), 0)
