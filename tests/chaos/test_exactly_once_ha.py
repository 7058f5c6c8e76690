"""exactly_once = true under ha (issue 39): the lease's fence inside the transaction.

- ha.mode = "shared", partitions = 2, two instances on one stand-in: kill -9 of either at
  random moments (restarted at once; its unit moves to the other and back) while orders flow
  through README's $inc read model: every counter equals a recomputation from the orders, 0
  lost, 0 doubled, nothing dead-lettered (3,000 orders and 4 kills; 20,000 and 20 with
  FW_CHAOS_LONG=1). The server's default transactionLifetimeLimitSeconds (60 s): a transaction
  a kill left open that nobody ends holds its documents for a minute, and the retry policy
  (8 attempts within about 6 s) then dead-letters the events it blocks.
- A deposed holder (leader mode and shared mode) whose lease was taken while its handler was
  inside the transaction commits nothing: its writes never appear, the new holder applies the
  event once, the old one stands by.
"""
import datetime
import http.server
import os
import random
import signal
import threading
import time
import unittest

from chaostest import LONG, StandInTestCase, figures
from fwtest import clean_env
from read_model import IncReadModel

EVENTS = 20_000 if LONG else 3_000
KILLS = 20 if LONG else 4
CUSTOMERS = 37
LEASE_MS = 1000

HANDLER = """
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" }, dlq = true,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    report({ n = order.n })
  end }
"""

SHARED = """
fw.defaults { ha = { mode = "shared", lease = "%dms" } }
fw.stream { name = "totals", collection = "orders", exactly_once = true, partitions = 2,
""" % LEASE_MS + HANDLER


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "total": 1 + n % 11}


class ReadModel(IncReadModel):
    """The $inc read model, and streams pinned to start before the first order."""

    def pinned(self, body):
        """body with the stream starting a second before the server's now: a unit whose first
        holder opens its change stream after the first orders arrive still reads them (from
        now, the orders before its open would never be its)."""
        at = self.db.command("hello")["localTime"] - datetime.timedelta(seconds=1)
        return body.replace("exactly_once = true,", 'exactly_once = true, checkpoint = '
                            '{ start_at = "%s" },' % at.strftime("%Y-%m-%dT%H:%M:%SZ"), 1)

    def holders(self):
        """{unit: owner} of the leases held now (expiresAt after the server's now)."""
        now = self.db.command("hello")["localTime"]
        return {d["_id"]: d["owner"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now}

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return time.monotonic()
            time.sleep(0.02)
        raise AssertionError("timed out after %.1f s waiting for %s (holders %s)"
                             % (timeout, what, self.holders()))


def owned_by(owner, proc):
    """Whether a lease owner id (host:pid:uuid) names proc."""
    return ":%d:" % proc.proc.pid in owner


class SharedKill9(ReadModel, StandInTestCase):
    standin_args = ("--server-version", "7.0")  # partitions: $toHashedIndexKey

    def write_all(self, events):
        for lo in range(0, events, 250):
            self.db.orders.insert_many([order(n) for n in range(lo, min(lo + 250, events))])

    def test_two_instances_killed_at_random_keep_every_counter_exact(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, EVENTS - 1), KILLS))
        script = self.script(self.pinned(SHARED))
        started = time.monotonic()
        procs = [self.run_fw(script), self.run_fw(script)]
        self.wait_for(lambda: sorted(len([u for u, o in self.holders().items()
                                          if owned_by(o, p)]) for p in procs) == [1, 1],
                      30, "one unit each")
        writer = threading.Thread(target=self.write_all, args=(EVENTS,), daemon=True)
        writer.start()
        dead, takeovers, logs = [], [], []

        def reports():
            return sum(p.report_count() for p in procs + dead)
        for target in kill_at:
            deadline = time.monotonic() + 120
            while reports() < target:
                self.assertLess(time.monotonic(), deadline, "event %d (seed %d)" % (target, seed))
                time.sleep(0.01)
            i = rng.randrange(2)
            victim = procs[i]
            victim.kill9()
            killed = time.monotonic()
            logs += ["%d: %s" % (victim.proc.pid, m) for m in victim.messages()
                     if "REPORT" not in m]
            dead.append(victim)
            procs[i] = self.run_fw(script)
            # Its units are taken by a live instance (the survivor, or the restarted one).
            taken = self.wait_for(lambda: len(self.holders()) == 2 and not any(
                owned_by(o, victim) for o in self.holders().values()), 30,
                "the killed instance's unit taken (seed %d)" % seed)
            takeovers.append(taken - killed)
        writer.join()
        self.wait_applied(EVENTS, 120)
        for p in procs:
            self.assertEqual(p.stop(), 0)
            logs += ["%d: %s" % (p.proc.pid, m) for m in p.messages() if "REPORT" not in m]
        got, want = self.totals(), self.want(self.db.orders.find())
        if got != want:
            print("\n".join(logs[:200]))
        applied = sum(v[0] for v in got.values())
        took = time.monotonic() - started
        called = {r["n"] for p in procs + dead for r in p.reports()}
        records = [len(d.get("lsids", [])) for d in self.db["_fw_checkpoints"].find(
            {"_id": {"$in": ["totals#0/2#sessions", "totals#1/2#sessions"]}})]
        figures("exactly_once_shared_kill", seed=seed, instances=2, partitions=2, events=EVENTS,
                kills=KILLS, applied=applied, lost=max(0, EVENTS - applied),
                doubled=max(0, applied - EVENTS), never_called=EVENTS - len(called),
                dead_letters=self.db["_fw_dlq"].count_documents({}),
                recorded_sessions="/".join(str(n) for n in records),
                takeover_max_s="%.2f" % max(takeovers),
                takeover_median_s="%.2f" % sorted(takeovers)[len(takeovers) // 2],
                seconds="%.1f" % took)
        self.assertEqual(got, want, "every counter exact after %d kills (seed %d)"
                         % (KILLS, seed))
        self.assertEqual(list(self.db["_fw_dlq"].find({}, {"_id": 1})), [],
                         "nothing dead-lettered (seed %d)" % seed)
        # Each unit committed its own position; its record of sessions holds its last holder's
        # (each take-over kills the earlier ones and takes them off): it does not grow with the
        # kills.
        ids = sorted(d["_id"] for d in self.db["_fw_checkpoints"].find(
            {"lastProcessedToken": {"$exists": True}}))
        self.assertEqual(ids, ["totals#0/2", "totals#1/2"])
        self.assertEqual(len(records), 2)
        for n in records:
            self.assertLessEqual(n, 2, "sessions recorded per unit after %d kills" % KILLS)


# The gated event's handler waits on the test's gate (an HTTP request the test holds) inside
# its transaction: after its write (WRITE_FIRST) or before any (WAIT_FIRST, so the
# transaction's snapshot starts after the new holder's commit and only the checkpoint's fence
# can refuse it).
GATED = """
fw.stream { name = "totals", collection = "orders", exactly_once = true, %s timeout = "120s",
  %s, dlq = true,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    local gated = order.n == tonumber(fw.env("FW_TEST_GATE_AT", "-1"))
    local function wait()
      report({ waiting = order.n })
      fw.http.get(fw.env("FW_TEST_GATE_URL"), { timeout = "100s" })
    end
    if gated and %s then wait() end
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    if gated and not %s then wait() end
    report({ n = order.n })
  end }
"""
WRITE_FIRST, WAIT_FIRST = "false", "true"
RETRY = 'retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" }'


def gated(mode, extra, order):
    return ('fw.defaults { ha = { mode = "%s", lease = "%dms" } }\n' % (mode, LEASE_MS)
            + GATED % (extra, RETRY, order, order))


class Gate:
    """An HTTP endpoint whose first request waits until open() (100 s at most); later ones
    answer at once."""

    def __init__(self):
        self.entered = threading.Event()
        self.opened = threading.Event()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                first = not gate.entered.is_set()
                gate.entered.set()
                if first:
                    gate.opened.wait(100)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d/gate" % self.server.server_address[1]

    def wait_entered(self, timeout):
        if not self.entered.wait(timeout):
            raise AssertionError("no handler reached the gate within %d s" % timeout)

    def open(self):
        self.opened.set()

    def close(self):
        self.opened.set()
        self.server.shutdown()
        self.server.server_close()


GATE_AT = 3


class DeposedHolder(ReadModel):
    """The scenarios of a holder deposed inside its transaction (a mixin: the sink's tests,
    test_exactly_once_sink.py, run them with the transactions on another deployment through
    sinked() and extra_env())."""
    standin_args = ("--server-version", "7.0")  # partitions: $toHashedIndexKey

    def setUp(self):
        super().setUp()
        self.gate = Gate()
        self.addCleanup(self.gate.close)

    def sinked(self, body):
        return body

    def extra_env(self):
        return {}

    def start(self, script):
        # clean_env: MONGOC_DISABLE_SHM, or a restarted process reusing a killed one's PID
        # prints libmongoc's "Falling back to malloc for counters." into the JSON log.
        env = clean_env(dict(FW_TEST_GATE_AT=str(GATE_AT), FW_TEST_GATE_URL=self.gate.url,
                             **self.extra_env()))
        return self.run_fw(script, env=env)

    def insert(self, lo, hi):
        self.db.orders.insert_many([{"_id": n, "n": n, "customer": "c", "total": 1}
                                    for n in range(lo, hi)])

    def finish(self, procs, old, fenced, scenario, takeover):
        """The deposed one stands by; events after the take-over flow; each applied once."""
        # Before more events: the new holder's next commits would conflict with the old one's
        # transaction (a WriteConflict the old one could end on instead of the fence).
        old.wait_log("role: standby (stopped handling", timeout=30)
        self.insert(GATE_AT + 1, GATE_AT + 6)
        self.wait_applied(GATE_AT + 6, 60)
        for p in procs:
            self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), {"c": (GATE_AT + 6, GATE_AT + 6)},
                         "each event applied once, the deposed holder's writes nowhere")
        self.assertEqual(list(self.db["_fw_dlq"].find({}, {"_id": 1})), [], "nothing dead-lettered")
        if fenced:
            # Its transaction began after the take-over: the fence in it refused the commit.
            aborted = [m for m in old.messages() if "its transaction is aborted" in m]
            self.assertEqual(len(aborted), 1, aborted)
            self.assertIn("was taken over by a newer leader", aborted[0])
        figures(scenario, takeover_s="%.2f" % takeover)

    def leader(self, order, retry=None):
        body = gated("leader", "", order)
        if retry:
            body = body.replace(RETRY, retry)
        script = self.script(self.sinked(self.pinned(body)))
        a = self.start(script)
        a.wait_open()
        b = self.start(script)
        b.wait_log("role: standby", timeout=30)
        self.insert(0, GATE_AT + 1)
        self.gate.wait_entered(60)
        # The handler reported before it reached the gate; its log line may still be on its way.
        self.wait_for(lambda: any("waiting" in r for r in a.reports()), 30, "a's report")
        self.assertEqual([r for r in a.reports() if "waiting" in r], [{"waiting": GATE_AT}])
        # A partition: a's lease client is cut off, so its lease expires under it.
        self.fail_point("alwaysOn", {
            "failCommands": ["update", "findAndModify", "aggregate"], "errorCode": 96,
            "appName": "flowwarden-lease-%d" % a.proc.pid})
        cut = time.monotonic()
        b.wait_log("role: leader (epoch", timeout=30)
        self.wait_applied(GATE_AT + 1, 60)
        took = time.monotonic() - cut
        self.assertEqual(self.totals(), {"c": (GATE_AT + 1, GATE_AT + 1)},
                         "the new leader applied the gated event once")
        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        self.gate.open()
        return [a, b], a, took

    def shared(self, order):
        # A pause (SIGSTOP: a stalled VM, a long GC) of the unit's holder: its leases and
        # its member document expire, the other instance takes the unit.
        script = self.script(self.sinked(self.pinned(gated("shared", "partitions = 2,", order))))
        procs = [self.start(script), self.start(script)]
        self.wait_for(lambda: sorted(len([u for u, o in self.holders().items()
                                          if owned_by(o, p)]) for p in procs) == [1, 1],
                      30, "one unit each")
        self.insert(0, GATE_AT + 1)
        self.gate.wait_entered(60)
        # The handler reported before it reached the gate; its log line may still be on its way.
        def waiting():
            return [p for p in procs if any("waiting" in r for r in p.reports())]
        self.wait_for(waiting, 30, "the gated handler's report")
        old = waiting()[0]
        new = procs[1] if old is procs[0] else procs[0]
        old.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: old.proc.poll() is None and old.proc.send_signal(signal.SIGCONT))
        paused = time.monotonic()
        self.wait_for(lambda: len(self.holders()) == 2 and all(
            owned_by(o, new) for o in self.holders().values()), 30, "both units held by the other")
        self.wait_applied(GATE_AT + 1, 60)
        took = time.monotonic() - paused
        self.assertEqual(self.totals(), {"c": (GATE_AT + 1, GATE_AT + 1)},
                         "the new holder applied the gated event once")
        old.proc.send_signal(signal.SIGCONT)
        self.gate.open()
        return procs, old, took


class DeposedHolderCommitsNothing(DeposedHolder, StandInTestCase):
    """The lease taken over while the holder's handler is inside its transaction: the new
    holder applies the event once; the old one's transaction commits nothing (the new holder's
    killSessions aborted it, or, begun after the take-over, the checkpoint's fence refuses it in
    the transaction) and it stands by."""

    def test_leader_deposed_after_its_write(self):
        procs, old, took = self.leader(WRITE_FIRST)
        self.finish(procs, old, False, "exactly_once_leader_deposed_after_write", took)

    def test_leader_deposed_on_its_last_attempt_dead_letters_nothing(self):
        # One attempt (retry = false): the attempt the new leader's killSessions failed is not
        # the event's failure; the event is the new leader's, which applies it.
        procs, old, took = self.leader(WRITE_FIRST, retry="retry = false")
        self.finish(procs, old, False, "exactly_once_leader_deposed_last_attempt", took)

    def test_leader_deposed_before_its_write_is_fenced_in_the_transaction(self):
        procs, old, took = self.leader(WAIT_FIRST)
        self.finish(procs, old, True, "exactly_once_leader_fenced", took)

    def test_shared_holder_deposed_after_its_write(self):
        procs, old, took = self.shared(WRITE_FIRST)
        self.finish(procs, old, False, "exactly_once_shared_deposed_after_write", took)

    def test_shared_holder_deposed_before_its_write_is_fenced_in_the_transaction(self):
        procs, old, took = self.shared(WAIT_FIRST)
        self.finish(procs, old, True, "exactly_once_shared_fenced", took)


class SessionsAcrossTerms(ReadModel, StandInTestCase):
    """The record of sessions under ha, with the server's default transaction lifetime (60 s):
    whoever takes the lease over ends the transaction a killed holder left open, whatever that
    holder's history; the retry policy (8 attempts in about 6 s) dead-letters what a transaction
    left open would block."""
    standin_args = ("--server-version", "7.0")
    command_log = True  # to see a's commitTransaction arrive

    def start(self, script, gate_at=-1, gate=None):
        env = clean_env(dict(FW_TEST_GATE_AT=str(gate_at),
                             FW_TEST_GATE_URL=gate.url if gate else "http://127.0.0.1:9/unused"))
        return self.run_fw(script, env=env)

    def insert(self, lo, hi):
        self.db.orders.insert_many([{"_id": n, "n": n, "customer": "c", "total": 1}
                                    for n in range(lo, hi)])

    def leader_script(self):
        return self.script(self.pinned(gated("leader", "", WRITE_FIRST)))

    def catch_up(self, p, lo, hi, since):
        self.insert(lo, hi)
        self.wait_applied(hi, 60)
        took = time.monotonic() - since
        self.assertEqual(p.stop(), 0)
        self.assertEqual(list(self.db["_fw_dlq"].find({}, {"_id": 1})), [], "nothing dead-lettered")
        self.assertEqual(self.totals(), {"c": (hi, hi)}, "each event applied exactly once")
        self.assertLess(took, 30, "the new leader did not wait out the transaction's lifetime")
        self.assertGreaterEqual(p.count_log("ended 1 server session(s) of an earlier run"), 1)
        return took

    def kill_inside_commit(self, a):
        """Kills a while its commit of event 5 is on its way (held by a fail point)."""
        self.insert(0, 5)
        self.wait_applied(5, 60)
        commits = len(self.commands("commitTransaction", db="admin"))
        self.fail_point({"times": 1}, {"failCommands": ["commitTransaction"],
                                       "blockConnection": True, "blockTimeMS": 20000,
                                       "errorCode": 8000})
        self.insert(5, 6)
        self.wait_for(lambda: len(self.commands("commitTransaction", db="admin")) > commits,
                      30, "a's commit of event 5 arriving")
        a.kill9()
        return time.monotonic()

    def test_a_leader_killed_inside_its_commit_holds_nothing_up(self):
        # The kill lands while commitTransaction is on its way: the transaction, with the
        # checkpoint's document written in it, stays open. The new leader fences that very
        # document, a write that waits for the transaction to end (MongoDB's manual,
        # "In-progress Transactions and Write Conflicts"): it must end it first.
        script = self.leader_script()
        a = self.start(script)
        a.wait_open()
        b = self.start(script)
        b.wait_log("role: standby", timeout=30)
        killed = self.kill_inside_commit(a)
        b.wait_open(timeout=60)
        took = self.catch_up(b, 6, 10, killed)
        figures("exactly_once_ha_kill_inside_commit", seconds="%.1f" % took)

    def test_a_lone_instance_killed_inside_its_commit_holds_nothing_up(self):
        # Without ha the restart reads the checkpoint (a read does not wait for the
        # transaction) and kills the session before anything writes it.
        script = self.script(self.pinned(GATED % ("", RETRY, WRITE_FIRST, WRITE_FIRST)))
        a = self.start(script)
        a.wait_open()
        killed = self.kill_inside_commit(a)
        b = self.start(script)
        b.wait_open(timeout=60)
        took = self.catch_up(b, 6, 10, killed)
        figures("exactly_once_kill_inside_commit", seconds="%.1f" % took)

    def test_a_leader_that_leads_again_records_the_session_it_uses(self):
        # a leads (session S recorded), loses its lease to b (which kills S and removes it from
        # the record), leads again once b is killed, then is killed itself inside a handler
        # call: the third instance must find the session of a's second term in the record.
        gate = Gate()
        self.addCleanup(gate.close)
        script = self.leader_script()
        a = self.start(script, 10, gate)
        a.wait_open()
        b = self.start(script)
        b.wait_log("role: standby", timeout=30)
        self.insert(0, 3)
        self.wait_applied(3, 60)
        self.fail_point("alwaysOn", {
            "failCommands": ["update", "findAndModify", "aggregate"], "errorCode": 96,
            "appName": "flowwarden-lease-%d" % a.proc.pid})
        b.wait_log("role: leader (epoch", timeout=30)
        self.insert(3, 5)
        self.wait_applied(5, 60)
        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        a.wait_log("role: standby (stopped handling", timeout=30)
        b.kill9()
        a.wait_log("role: leader (epoch", count=2, timeout=30)
        self.insert(5, 10)
        self.wait_applied(10, 60)
        self.insert(10, 11)
        gate.wait_entered(60)  # a's handler of event 10 inside its transaction
        a.kill9()
        killed = time.monotonic()
        c = self.start(script)
        c.wait_open(timeout=60)
        took = self.catch_up(c, 11, 15, killed)
        figures("exactly_once_ha_second_term_killed", seconds="%.1f" % took)


if __name__ == "__main__":
    unittest.main()
