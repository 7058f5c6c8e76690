"""exactly_once = { connection = "rep" } naming a PostgreSQL connection
(issue 40), through the real binary against a PostgreSQL cluster from
Debian (pgserver.py): each event's fw.pg statements and the stream's
position commit in one SQL transaction; a failed attempt leaves nothing; a
restart resumes from the position in flowwarden_checkpoints (which wins
over _fw_checkpoints); what cannot join raises."""
import signal
import socket
import threading
import time

from dlqtest import FailureTestCase
from fwtest import clean_env, run_cli
from pgserver import WithPgServer

SCRIPT = """
fw.connection { name = "rep", uri = fw.env("PG_URI") }
fw.connection { name = "other", uri = fw.env("PG_URI") }
local function log(id, attempt)
  fw.pg.execute("rep", "INSERT INTO log (id, attempt) VALUES ($1, $2)", { id, attempt })
end
local cases = {}
cases.fail_once = function(id, ctx)
  if ctx:attempt_number() == 1 then error(fw.error("Validation", "the first attempt fails")) end
end
cases.poison = function() error(fw.error("Validation", "poison")) end
cases.savepoint = function(id)
  local ok = pcall(fw.pg.transaction, "rep", function(tx)
    tx:execute("INSERT INTO log (id, attempt) VALUES ($1, 100)", { id })
    error("the inner transaction fails")
  end)
  fw.pg.transaction("rep", function(tx)
    tx:execute("INSERT INTO log (id, attempt) VALUES ($1, 200)", { id })
  end)
  return { inner_failed = not ok }
end
cases.other = function()
  local _, err = pcall(fw.pg.execute, "other", "SELECT 1")
  return { type = err.type, message = err.message }
end
cases.mongo = function(id, ctx)
  local c = fw.mongo.collection(ctx:database_name(), "c")
  local found = c:find_one({ _id = ctx:document_key()._id })
  local _, err = pcall(function() c:insert_one({ x = 1 }) end)
  return { read = found ~= nil, type = err.type, message = err.message }
end
cases.commits_itself = function() fw.pg.execute("rep", "COMMIT") end
fw.stream { name = "eo", collection = "c", exactly_once = { connection = "rep" }, dlq = true,
  retry = { max_attempts = 2, initial_delay = "20ms", max_delay = "100ms", jitter = false },
  on_insert = function(ctx)
    local d = ctx:full_document()
    local id = tostring(d._id)
    log(id, ctx:attempt_number())
    local out = (cases[d.case or ""] or function() end)(id, ctx) or {}
    out.id = id
    report(out)
  end }
"""


BATCH_SCRIPT = """
fw.connection { name = "rep", uri = fw.env("PG_URI") }
fw.stream { name = "eo", collection = "c", exactly_once = { connection = "rep" }, dlq = true,
  retry = { max_attempts = 2, initial_delay = "20ms", max_delay = "100ms", jitter = false },
  batch = { max_events = 100, max_wait = "300ms" },
  on_batch = function(batch)
    local rows, poison = {}, false
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      rows[#rows + 1] = { tostring(d._id), 0 }
      poison = poison or d.case == "poison"
    end
    fw.pg.execute_many("rep", "INSERT INTO log (id, attempt) VALUES ($1, $2)", rows)
    if poison then error(fw.error("Validation", "poison in a batch of " .. #rows)) end
  end }
"""

class CommitReplyDropper:
    """A TCP proxy to the server on a loopback port that, once armed, lets the
    first COMMIT through and closes that client's connection instead of
    passing the server's reply back: the commit happened, its reply was lost.
    With before=True it closes the connection instead of sending the COMMIT:
    the server rolls the transaction back."""

    def __init__(self, port, before=False):
        self.target, self.armed, self.dropped = port, False, 0
        self.before = before
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            state = {"commit": False}
            threading.Thread(target=self.pump, args=(client, server, state, True),
                             daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, state, False),
                             daemon=True).start()

    def pump(self, src, dst, state, upstream):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self.armed and b"COMMIT\x00" in data:
                    self.armed, state["commit"] = False, True
                    if self.before:
                        self.dropped += 1
                        break
                elif not upstream and state["commit"]:
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.sock.close()


class PgExactlyOnce(WithPgServer, FailureTestCase):
    standin_args = ("--server-version", "7.0")  # partitions: $toHashedIndexKey

    def setUp(self):
        super().setUp()
        self.pg.sql("DROP TABLE IF EXISTS log, flowwarden_checkpoints; "
                    "CREATE TABLE log (id text, attempt int)")

    def start(self):
        p = self.run_fw(self.script(SCRIPT), env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open()
        return p

    def log(self):
        return sorted(tuple(r) for r in self.pg.sql("SELECT id, attempt FROM log"))

    def wait_logged(self, n, timeout=30):
        """Waits for n committed rows (a report comes before its commit)."""
        deadline = time.monotonic() + timeout
        while len(self.log()) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(len(self.log()), n, "%d rows committed" % n)

    def position(self):
        rows = self.pg.sql("SELECT resume_token FROM flowwarden_checkpoints "
                           "WHERE database = '%s' AND stream = 'eo'" % self.db_name)
        return rows[0][0] if rows else None

    def test_each_event_commits_once_with_its_position(self):
        p = self.start()
        self.db.c.insert_many([{"_id": 1}, {"_id": 2, "case": "fail_once"},
                               {"_id": 3, "case": "poison"}, {"_id": 4, "case": "savepoint"},
                               {"_id": 5, "case": "commits_itself"}])
        self.wait_dlq(2)
        p.wait_until(lambda: any(r["id"] == "4" for r in p.reports()), 30, "event 4")
        self.assertEqual(p.stop(), 0)
        # 2: its failed first attempt rolled back; 3 and 5: dead-lettered,
        # nothing applied; 4: the failed fw.pg.transaction was a savepoint.
        self.assertEqual(self.log(), [("1", "1"), ("2", "2"), ("4", "1"), ("4", "200")])
        self.assertTrue([r for r in p.reports() if r["id"] == "4"][0]["inner_failed"])
        errors = sorted(e["error"]["message"] for e in self.dlq_entries())
        self.assertIn("poison", errors[1])
        self.assertIn("which its handler cannot end or nest by SQL", errors[0])
        self.assertIn('"_data"', self.position())

    def test_a_restart_resumes_from_the_position_in_postgresql(self):
        p = self.start()
        self.db.c.insert_many([{"_id": i} for i in range(10)])
        self.wait_logged(10)
        self.assertEqual(p.stop(), 0)
        # Without its position in PostgreSQL the stream would start from
        # now, and miss what comes while it is stopped.
        self.db["_fw_checkpoints"].delete_many({})
        self.db.c.insert_many([{"_id": i} for i in range(10, 20)])
        p = self.start()
        self.assertEqual(p.count_log("resuming from the position committed"), 1)
        self.db.c.insert_one({"_id": 20})
        self.wait_logged(21)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.log(), sorted((str(i), "1") for i in range(21)))

    def test_an_on_demand_snapshot_is_refused_naming_the_stream_and_why(self):
        p = self.run_fw(self.script(SCRIPT), env=clean_env({"PG_URI": self.pg.uri()}),
                        extra=["--admin", "127.0.0.1:0"])
        p.wait_open()
        r = run_cli(["snapshot", "eo", "--admin", "http://127.0.0.1:%d" % p.admin_port()])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn('stream "eo" has exactly_once into PostgreSQL, which cannot take a snapshot '
                      "yet (a snapshot's row has no resume token, and its progress is not kept "
                      "in flowwarden_checkpoints)", r.stderr)
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.db["_fw_checkpoints"].find_one({"snapshot": {"$exists": True}}))

    def test_what_cannot_join_raises(self):
        p = self.start()
        self.db.c.insert_many([{"_id": 1, "case": "other"}, {"_id": 2, "case": "mongo"}])
        p.wait_reports(2)
        self.assertEqual(p.stop(), 0)
        other, mongo = sorted(p.reports(), key=lambda r: r["id"])
        self.assertEqual(other["type"], "ArgumentError")
        self.assertIn('stream "eo" has exactly_once = { connection = "rep" }', other["message"])
        self.assertIn('connection "other" cannot join', other["message"])
        self.assertTrue(mongo["read"], "fw.mongo reads run")
        self.assertEqual(mongo["type"], "ArgumentError")
        self.assertIn("a MongoDB write cannot join its PostgreSQL transaction", mongo["message"])

    def test_turning_ha_off_goes_on_from_the_leaders_position(self):
        # A leader stored its epoch in the row; a run without ha (ha turned
        # off) is not fenced by it: it goes on from the leader's position,
        # nothing lost or repeated.
        script = self.script('fw.defaults { ha = { mode = "leader", lease = "1s" } }\n' + SCRIPT)
        env = clean_env({"PG_URI": self.pg.uri()})
        leader = self.run_fw(script, env=env)
        leader.wait_open()
        self.db.c.insert_many([{"_id": i} for i in range(5)])
        self.wait_logged(5)
        self.assertEqual(leader.stop(), 0)
        epoch, gen = (int(v) for v in self.pg.sql(
            "SELECT epoch, writer_gen FROM flowwarden_checkpoints WHERE stream = 'eo'")[0])
        self.assertGreaterEqual(epoch, 1, "the leader's epoch is stored")
        self.assertGreater(gen, 0, "the leader claimed a writer generation")
        self.db.c.insert_many([{"_id": i} for i in range(5, 10)])
        p = self.start()
        self.assertEqual(p.count_log("resuming from the position committed"), 1)
        self.db.c.insert_one({"_id": 10})
        self.wait_logged(11)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("holds the position"), 0)
        self.assertEqual(self.log(), sorted((str(i), "1") for i in range(11)))
        row = self.pg.sql("SELECT epoch, writer_gen FROM flowwarden_checkpoints "
                          "WHERE stream = 'eo'")[0]
        self.assertEqual(int(row[0]), epoch, "the epoch stays for the next leader")
        self.assertEqual(int(row[1]), gen + 1, "the run's claim is past the leader's")

    def test_a_newer_leaders_fence_stops_a_run_without_ha(self):
        # ha turned on elsewhere: a new leader raised the epoch and claimed a
        # later writer generation; this run without ha commits nothing more.
        p = self.start()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        gen = int(self.pg.sql("UPDATE flowwarden_checkpoints SET epoch = 99, "
                              "writer_gen = writer_gen + 1 RETURNING writer_gen")[0][0])
        self.db.c.insert_one({"_id": 2})
        p.wait_log('STREAM STOPPED: exactly_once: a newer run of stream "eo" (writer '
                   "generation %d" % gen, timeout=30)
        p.kill9()
        self.assertEqual(self.log(), [("1", "1")])

    def test_a_paused_run_replaced_by_a_new_one_commits_nothing_when_it_resumes(self):
        # Without ha, a process paused (SIGSTOP: a stalled VM) and replaced:
        # the new run claims a later writer generation in the position's row
        # before reading it; the resumed run's handler runs the new run's
        # event too, but its transaction's position write is refused, so its
        # statements roll back and its stream stops saying why.
        old = self.start()
        self.db.c.insert_one({"_id": 0})
        self.wait_logged(1)
        old.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: old.proc.poll() is None and old.proc.send_signal(signal.SIGCONT))
        new = self.start()
        gen = int(self.pg.sql("SELECT writer_gen FROM flowwarden_checkpoints "
                              "WHERE stream = 'eo'")[0][0])
        self.db.c.insert_one({"_id": 1})
        new.wait_reports(1)
        self.wait_logged(2)
        old.proc.send_signal(signal.SIGCONT)  # its change stream hands it event 1 too
        old.wait_log('STREAM STOPPED: exactly_once: a newer run of stream "eo" (writer '
                     "generation %d" % gen, timeout=30)
        self.assertEqual(sorted(r["id"] for r in old.reports()), ["0", "1"],
                         "old's handler ran event 1")
        self.assertEqual(self.log(), [("0", "1"), ("1", "1")], "event 1 applied once")
        self.assertEqual(new.stop(), 0)
        self.assertEqual(int(self.pg.sql("SELECT writer_gen FROM flowwarden_checkpoints "
                                         "WHERE stream = 'eo'")[0][0]), gen)
        old.stop()

    def test_a_position_table_without_writer_gen_gains_it(self):
        # A table made by a version before writer generations keeps working.
        self.pg.sql("CREATE TABLE flowwarden_checkpoints (database text NOT NULL, "
                    "stream text NOT NULL, resume_token text, epoch bigint NOT NULL DEFAULT 0, "
                    "script_version text, updated_at timestamptz NOT NULL DEFAULT now(), "
                    "PRIMARY KEY (database, stream))")
        p = self.start()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        self.assertEqual(p.stop(), 0)
        gen = int(self.pg.sql("SELECT writer_gen FROM flowwarden_checkpoints "
                              "WHERE stream = 'eo'")[0][0])
        self.assertGreater(gen, 0, "the run's generation is stored")
        self.assertIn('"_data"', self.position())

    def test_doctor_checks_the_position_tables_privileges(self):
        from fwtest import run_cli
        script = self.script(SCRIPT)
        self.pg.sql("DROP ROLE IF EXISTS limited; CREATE ROLE limited LOGIN PASSWORD 'lp'; "
                    "REVOKE CREATE ON SCHEMA public FROM PUBLIC")

        def doctor(user="fwtest:pw"):
            uri = "postgresql://%s@127.0.0.1:%d/postgres" % (user, self.pg.port)
            return run_cli(["doctor", script, "--uri", self.uri],
                           env=clean_env({"PG_URI": uri}))

        cp = doctor()
        self.assertIn('connection "rep" (PostgreSQL): the position table flowwarden_checkpoints '
                      "will be created in schema public on first use", cp.stdout)
        cp = doctor("limited:lp")
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        self.assertIn("role limited may not create the position table", cp.stdout)
        self.assertIn("GRANT CREATE ON SCHEMA public TO limited", cp.stdout)
        self.pg.sql("CREATE TABLE flowwarden_checkpoints (database text, stream text)")
        cp = doctor("limited:lp")
        self.assertIn("role limited cannot read and write the position table", cp.stdout)
        self.assertIn("GRANT SELECT, INSERT, UPDATE ON flowwarden_checkpoints TO limited",
                      cp.stdout)
        self.pg.sql("GRANT SELECT, INSERT, UPDATE ON flowwarden_checkpoints TO limited")
        cp = doctor("limited:lp")
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        self.assertIn("has no column writer_gen (made by an earlier version), and role limited, "
                      "not its owner, cannot add it", cp.stdout)
        self.assertIn("ALTER TABLE flowwarden_checkpoints ADD COLUMN writer_gen", cp.stdout)
        self.pg.sql("ALTER TABLE flowwarden_checkpoints ADD COLUMN writer_gen bigint")
        cp = doctor("limited:lp")
        self.assertIn("exists and can be read and written", cp.stdout)

    def test_a_dead_letter_moves_the_position_so_a_restart_does_not_run_it_again(self):
        p = self.start()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        handled = self.position()
        self.db.c.insert_one({"_id": 2, "case": "poison"})
        self.wait_dlq(1)
        deadline = time.monotonic() + 30
        while self.position() == handled and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertNotEqual(self.position(), handled, "the position past the dead letter")
        p.kill9()
        p = self.start()
        self.db.c.insert_one({"_id": 3})
        self.wait_logged(2)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("poison"), 0, "the dead-lettered event did not run again")
        self.assertEqual(len(self.dlq_entries()), 1)
        self.assertEqual(self.log(), [("1", "1"), ("3", "1")])

    def test_a_new_ha_leader_fences_the_position_and_resumes_from_it(self):
        script = self.script('fw.defaults { ha = { mode = "leader", lease = "1s" } }\n' + SCRIPT)
        env = clean_env({"PG_URI": self.pg.uri()})
        a = self.run_fw(script, env=env)
        a.wait_open()
        b = self.run_fw(script, env=env)
        b.wait_log("role: standby")
        self.db.c.insert_many([{"_id": i} for i in range(50)])
        self.wait_logged(50)
        a.kill9()
        self.db.c.insert_many([{"_id": i} for i in range(50, 100)])
        b.wait_log("role: leader (epoch", timeout=30)
        self.wait_logged(100)
        self.assertEqual(b.count_log("resuming from the position committed"), 1)
        self.assertEqual(b.stop(), 0)
        self.assertEqual(self.log(), sorted((str(i), "1") for i in range(100)))
        epoch = int(self.pg.sql("SELECT epoch FROM flowwarden_checkpoints "
                                "WHERE stream = 'eo'")[0][0])
        self.assertGreaterEqual(epoch, 2, "the new leader's epoch is stored")

    def test_a_reload_naming_another_database_moves_the_transactions_there(self):
        self.pg.sql("DROP DATABASE IF EXISTS other")
        self.pg.sql("CREATE DATABASE other")
        path = self.script(SCRIPT.replace('fw.env("PG_URI")', '"%s"' % self.pg.uri()))
        p = self.run_fw(path)
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        other = self.pg.uri(db="other")
        with open(path) as f:
            text = f.read().replace(self.pg.uri(), other)
        with open(path, "w") as f:
            f.write(text)
        self.pg.sql("CREATE TABLE log (id text, attempt int)", db="other")
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("reloaded ", timeout=30)
        self.db.c.insert_one({"_id": 2})
        p.wait_reports(2)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.log(), [("1", "1")])
        self.assertEqual(self.pg.sql("SELECT id, attempt FROM log", db="other"), [["2", "1"]])
        self.assertEqual(len(self.pg.sql("SELECT stream FROM flowwarden_checkpoints",
                                         db="other")), 1)

    def test_a_reload_to_another_database_claims_the_row_there_first(self):
        # The other database's table has its own generations: a row there holds
        # one later than this run's (a run of the stream that used it before).
        # The run claims the row there before its first transaction (one past
        # it), so it is not refused as older, and any earlier run's late
        # transaction there is.
        self.pg.sql("DROP DATABASE IF EXISTS other")
        self.pg.sql("CREATE DATABASE other")
        self.pg.sql("CREATE TABLE log (id text, attempt int); "
                    "CREATE TABLE flowwarden_checkpoints (database text NOT NULL, "
                    "stream text NOT NULL, resume_token text, epoch bigint NOT NULL DEFAULT 0, "
                    "script_version text, updated_at timestamptz NOT NULL DEFAULT now(), "
                    "writer_gen bigint NOT NULL DEFAULT 0, PRIMARY KEY (database, stream)); "
                    "INSERT INTO flowwarden_checkpoints (database, stream, writer_gen) "
                    "VALUES ('%s', 'eo', 9000000000000000)" % self.db_name, db="other")
        path = self.script(SCRIPT.replace('fw.env("PG_URI")', '"%s"' % self.pg.uri()))
        p = self.run_fw(path)
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        with open(path) as f:
            text = f.read().replace(self.pg.uri(), self.pg.uri(db="other"))
        with open(path, "w") as f:
            f.write(text)
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("reloaded ", timeout=30)
        self.db.c.insert_many([{"_id": 2}, {"_id": 3}])
        p.wait_reports(3)
        p.wait_until(lambda: len(self.pg.sql("SELECT id FROM log", db="other")) == 2, 30,
                     "events 2 and 3 committed in the other database")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("a newer run"), 0)
        self.assertEqual(p.count_log("claiming the stream's position row there"), 1)
        self.assertEqual(sorted(self.pg.sql("SELECT id, attempt FROM log", db="other")),
                         [["2", "1"], ["3", "1"]])
        gen, token = self.pg.sql("SELECT writer_gen, resume_token FROM flowwarden_checkpoints",
                                 db="other")[0]
        self.assertEqual(int(gen), 9000000000000001)
        self.assertIn('"_data"', token)

    def test_partitions_each_commit_their_own_position(self):
        script = self.script(SCRIPT.replace('exactly_once = { connection = "rep" },',
                                            'exactly_once = { connection = "rep" }, '
                                            'partitions = 2,'))
        p = self.run_fw(script, env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open(streams=2)
        self.db.c.insert_many([{"_id": i} for i in range(100)])
        self.wait_logged(100)
        p.kill9()
        self.db.c.insert_many([{"_id": i} for i in range(100, 150)])
        p = self.run_fw(script, env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open(streams=2)
        self.wait_logged(150)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.log(), sorted((str(i), "1") for i in range(150)))
        self.assertEqual(sorted(r[0] for r in self.pg.sql(
            "SELECT stream FROM flowwarden_checkpoints")), ["eo#0/2", "eo#1/2"])

    def test_a_commit_whose_reply_is_lost_is_decided_from_the_table(self):
        self.lose_the_commits_reply(before=False)

    def test_a_commit_lost_on_its_way_fails_the_attempt_which_runs_again(self):
        self.lose_the_commits_reply(before=True)

    def lose_the_commits_reply(self, before):
        proxy = CommitReplyDropper(self.pg.port, before)
        self.addCleanup(proxy.close)
        uri = "postgresql://fwtest:pw@127.0.0.1:%d/postgres" % proxy.port
        p = self.run_fw(self.script(SCRIPT), env=clean_env({"PG_URI": uri}))
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        proxy.armed = True
        self.db.c.insert_one({"_id": 2})
        if before:
            p.wait_log("which did not commit", timeout=30)
        else:
            p.wait_log("the event had committed", timeout=30)
        self.db.c.insert_one({"_id": 3})
        self.wait_logged(3)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(proxy.dropped, 1)
        self.assertEqual(p.count_log("the COMMIT's reply was lost"), 1)
        # Event 2 applied once: by its first attempt, or (lost before the
        # server) by its second.
        self.assertEqual(self.log(), [("1", "1"), ("2", "2" if before else "1"), ("3", "1")])

    def test_a_serialization_failure_at_commit_is_retried_as_an_attempt(self):
        # A deferred constraint trigger runs at COMMIT: its first run fails
        # as a serializable transaction's commit can (40001).
        self.pg.sql("""
            DROP SEQUENCE IF EXISTS once; CREATE SEQUENCE once;
            CREATE OR REPLACE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN
                IF nextval('once') = 1 THEN
                  RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
                END IF;
                RETURN NULL;
              END $$;
            CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON log DEFERRABLE INITIALLY DEFERRED
              FOR EACH ROW EXECUTE FUNCTION fail_once()""")
        p = self.start()
        self.db.c.insert_one({"_id": 1})
        self.wait_logged(1)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.log(), [("1", "2")], "the second attempt committed")
        self.assertEqual(p.count_log("Pg.Serialization"), 1)
        self.assertEqual(self.dlq_entries(), [])

    def test_on_batch_a_poison_event_is_isolated_and_each_sub_batch_commits_once(self):
        # One SQL transaction per call of on_batch: its rows and the position
        # past its last event. A call failing for one event's sake is rolled
        # back whole (its rows were sent before it raised), then bisected:
        # each sub-batch that passes commits its own transaction, the poison
        # event is dead-lettered once with nothing of it applied.
        p = self.run_fw(self.script(BATCH_SCRIPT), env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open()
        self.db.c.insert_many([{"_id": i, "case": "poison" if i == 5 else None}
                               for i in range(12)])
        self.wait_dlq(1)
        self.wait_logged(11)
        want = sorted((str(i), "0") for i in range(12) if i != 5)
        self.assertEqual(self.log(), want, "each other event applied once, the poison one never")
        entries = self.dlq_entries()
        self.assertEqual([e["documentKey"] for e in entries], [{"_id": 5}], "dead-lettered once")
        self.assertIn("poison in a batch of 1", entries[0]["error"]["message"], "alone, bisected")
        # A crash and a start: the position committed with the last
        # sub-batch (or stored past the dead letter) keeps all of it from
        # running again.
        deadline = time.monotonic() + 30
        while '"_data"' not in (self.position() or "") and time.monotonic() < deadline:
            time.sleep(0.05)
        p.kill9()
        p = self.run_fw(self.script(BATCH_SCRIPT), env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open()
        self.assertEqual(p.count_log("resuming from the position committed"), 1)
        self.db.c.insert_one({"_id": 12})
        self.wait_logged(12)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("poison in a batch"), 0,
                         "the dead-lettered event did not run again")
        self.assertEqual(self.log(), sorted(want + [("12", "0")]))
        self.assertEqual(len(self.dlq_entries()), 1)
