"""ha.mode = "shared": the first start of a group. A unit no member has opened yet starts at the
stream's start in the group (<stream>#start in _fw_checkpoints, written when the first member
started), not at its own open: what was written after the group started and before the unit's
stream opened reaches that unit. The window is held open without timing: a member that no
process runs holds the leases of two units (it took them and has not opened their streams
yet), so the first instance opens the other two; the events are written; then that member is
gone (its leases expired), and the two units' first open comes after them."""
import datetime
import threading

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

    LATE = "late:1:x"
    LATE_UNITS = ("s#2/4", "s#3/4")

    def held(self, by_late=False):
        now = self.db.command("hello")["localTime"]
        return [d["_id"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now and (d["owner"] == self.LATE) == by_late]

    def late_member(self):
        """A member that announced itself and took two units' leases, whose streams it has
        not opened yet: the first instance counts two members and can take only the others."""
        now = self.db.command("hello")["localTime"]
        until = now + datetime.timedelta(minutes=5)
        self.db["_fw_members"].insert_one({"_id": self.LATE, "expiresAt": until})
        for unit in self.LATE_UNITS:
            self.db["_fw_leases"].replace_one({"_id": unit}, {
                "owner": self.LATE, "epoch": 1, "renewedAt": now, "expiresAt": until}, upsert=True)

    def late_member_gone(self):
        self.db["_fw_members"].delete_one({"_id": self.LATE})
        self.db["_fw_leases"].update_many({"owner": self.LATE}, {"$set": {
            "expiresAt": datetime.datetime(2000, 1, 1)}})

    def first_start(self, checkpoint=""):
        """a starts while a second member holds two units' leases without having opened
        them: a opens the other two; events are written; then the second member is gone and
        b joins. Returns (a, b, the ids written while two units were not open yet)."""
        script = self.script(SCRIPT % (LEASE_MS, N, checkpoint))
        self.late_member()
        a = self.run_fw(script)
        a.wait_log("change stream open", count=2, timeout=20)
        self.assertEqual(sorted(self.held()), ["s#0/4", "s#1/4"])
        window = list(range(100))
        self.db.c.insert_many([{"_id": i} for i in window])
        self.late_member_gone()
        b = self.run_fw(script)
        try:
            self.wait_for(lambda: len(self.held()) == N and self.opened(a, b) == N, 30,
                          "every unit held and opened")
        except AssertionError as e:
            raise AssertionError("%s (held now: %s; first opens: %d)"
                                 % (e, sorted(self.held()), self.opened(a, b))) from None
        return a, b, window

    @staticmethod
    def opened(a, b):
        """Units whose change stream opened for the first time (from now, or at the
        group's start); a unit moved later to the other member resumes."""
        return sum(fw.count_log(m) for fw in (a, b)
                   for m in ("change stream open (from now)", "change stream open (at the group"))

    def handled(self, *fws):
        return {r["id"] for fw in fws for r in fw.reports()}

    def write_continuously(self, stop, written):
        """One insert after the other (ids from 10000, at most 3000, paced at 5 ms so that the
        stand-in still answers the members' renewals in time) until stop, each with the
        operationTime the server gave it."""
        with self.client.start_session() as session:
            for i in range(10000, 13000):
                if stop.wait(0.005):
                    break
                self.db.c.insert_one({"_id": i}, session=session)
                written.append((i, session.operation_time))

    def test_events_before_a_units_first_open_reach_it(self):
        stop, written = threading.Event(), []
        writer = threading.Thread(target=self.write_continuously, args=(stop, written))
        writer.start()
        try:
            self.wait_for(lambda: len(written) >= 5, 10, "writes before the group starts")
            a, b, window = self.first_start()
        finally:
            stop.set()
            writer.join(30)
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
        # The writes from before a started to after every unit opened: each one the server
        # placed at or after the group's start was handled.
        since = [i for i, at in written if at >= doc["startAt"]]
        self.assertTrue(since and len(since) < len(written), (len(since), len(written)))
        self.assertEqual(sorted(set(since) - self.handled(a, b)), [])
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
        def over():
            rec = self.db["_fw_checkpoints"].find_one({"_id": "s#start"}) or {}
            return rec.get("aliveUntil", datetime.datetime.min) < \
                self.db.command("hello")["localTime"]
        self.wait_for(over, 10, "the earlier run's end")
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


@needs_standin("a short oplog (--oplog-max-entries)")
class SharedStartHistoryLost(StandInTestCase):
    """A unit without a checkpoint in a group whose start has left the oplog (a group running for
    longer than the oplog's window): on_history_lost decides, as for checkpoint.start_at."""
    standin_args = ("--oplog-max-entries", "5")

    def test_a_group_start_older_than_the_oplog_is_history_lost(self):
        with self.client.start_session() as s:
            self.db.orders.insert_one({"_id": "first"}, session=s)
            old = s.operation_time
        until = self.db.command("hello")["localTime"] + datetime.timedelta(minutes=5)
        for name in ("strict", "lenient"):
            self.db["_fw_checkpoints"].insert_one({"_id": name + "#start", "startAt": old,
                                                   "by": "late:1:x", "aliveUntil": until})
        self.db.orders.insert_many([{"_id": "old%d" % i} for i in range(20)])
        body = 'fw.defaults { ha = { mode = "shared", lease = "%dms" } }\n' % LEASE_MS
        for name, extra in (("strict", ""), ("lenient", ', on_history_lost = "resume_from_now"')):
            body += """
fw.stream {
  name = "%s", collection = "orders", checkpoint = { save_every = 1 %s },
  on_insert = function(ctx) report({ id = ctx:document_key()._id }) end,
}
""" % (name, extra)
        p = self.run_fw(self.script(body))
        p.wait_log("older than the oplog's first entry", 2)
        strict = [m for m in p.messages(stream="strict") if "history is lost" in m]
        self.assertTrue(any("the stream's start in its group" in m and "on_history_lost = "
                            "\"fail\"" in m for m in strict), strict)
        self.assertTrue(any("the stream's start in its group" in m and "starting from now" in m
                            for m in p.messages(level="error", stream="lenient")))
        p.wait_log("change stream open (from now)", stream="lenient")
        self.db.orders.insert_one({"_id": "new"})
        p.wait_reports(1, "lenient")
        self.assertEqual([r["id"] for r in p.reports("lenient")], ["new"])
        self.assertEqual(p.report_count("strict"), 0)
        p.stop()
