"""Multi-document transactions, as a replica-set mongod runs them.

What MongoDB does (manual "Transactions" and "Production Considerations"; server source
src/mongo/db/transaction/transaction_participant.cpp, beginOrContinue and its helpers;
error_labels.cpp) and what this module models:

* A statement carries `lsid`, `txnNumber` and `autocommit: false`; the first also carries
  `startTransaction: true`, and only the first may carry a `readConcern` (local, majority or
  snapshot); no statement may carry a `writeConcern` (72 InvalidOptions) but
  commitTransaction and abortTransaction. The txnNumber is the session's, shared with retryable
  writes (sessions.py): a higher one starts a new transaction or retryable write and aborts an
  open transaction of the session; a lower one is refused with 225 TransactionTooOld;
  startTransaction at the active number is refused on a replica set with 117
  ConflictingOperationInProgress; a continuing statement whose number is not the session's open
  transaction gets 251 NoSuchTransaction; a retryable write retried at a number a transaction
  used gets 217 IncompleteTransactionHistory.
* Snapshot isolation: reads see the data as of the transaction's start plus its own writes;
  nobody else sees its writes until commit. The stand-in keeps the before-image of every
  document changed while a transaction is open (Store.observer) to rebuild the snapshot.
* Write conflicts are found at write time (manual "In-progress Transactions and Write
  Conflicts"): a transaction writing a document another open transaction wrote, or one changed
  since its snapshot, fails with 112 WriteConflict labelled TransientTransactionError and is
  aborted; a write outside any transaction to a document an open transaction wrote waits until
  that transaction ends (commit, abort or expiry).
* A failed statement aborts the transaction (its later statements get 251); 251 and 112 are
  labelled TransientTransactionError (error_labels.cpp, isTransientTransactionError).
* commitTransaction applies every write at once through the store's public API, with one
  cluster time, and journals them as one record (--data-dir): a crash leaves all or none.
  Retried after success it answers ok again; after an abort it answers 251; abortTransaction
  after a commit answers 256 TransactionCommitted.
* A transaction not committed within transactionLifetimeLimitSeconds (60 s by default;
  --transaction-lifetime-limit-seconds) is aborted by a reaper, as mongod's periodic runner
  does; endSessions and killSessions abort those sessions' transactions.
* A standalone server refuses transactions with 20 IllegalOperation.

Not modelled: create/createIndexes inside a transaction (refused with 263), prepared and
cross-shard transactions, a transaction's snapshot of the collection catalog (a collection
dropped or created by others meanwhile is seen as it is now), the oplog's applyOps entry itself
(change events are what a stream shows), `lsid.uid` in the change events.
"""

import threading
import time

from bson.binary import Binary

from . import oplog as oplogmod
from .bsonutil import encode
from .errors import MongoError
from .storage import INTERNAL_DBS, Collection, DuplicateKey, check_collection_name

TRANSIENT = "TransientTransactionError"
DEFAULT_LIFETIME_S = 60.0
ABSENT = None

# The commands a transaction may run (the manual's "Operations in Transactions"; count is not
# allowed, distinct is on an unsharded collection).
ALLOWED = frozenset((
    "find", "insert", "update", "delete", "findAndModify", "findandmodify", "aggregate",
    "getMore", "killCursors", "distinct", "commitTransaction", "abortTransaction"))
END_COMMANDS = ("commitTransaction", "abortTransaction")
WRITE_COMMANDS = ("insert", "update", "delete", "findAndModify", "findandmodify")
READ_CONCERN_LEVELS = ("local", "majority", "snapshot")


def _key(lsid):
    if not isinstance(lsid, dict) or "id" not in lsid:
        return None
    ident = lsid["id"]
    return bytes(ident) if isinstance(ident, (bytes, bytearray)) else repr(ident)


def write_conflict():
    return MongoError(112, "WriteConflict", "WriteConflict error: this operation conflicted "
                      "with another operation. Please retry your operation or "
                      "multi-document transaction.", [TRANSIENT])


def not_supported(msg):
    return MongoError(263, "OperationNotSupportedInTransaction", msg)


class Retry(Exception):
    """A write outside any transaction waited for one that changed its document: run the
    statement again (not a MongoError: the write commands' per-statement handlers let it by)."""


class Txn:
    """One multi-document transaction of one session."""

    def __init__(self, key, lsid, number, snapshot_seq, expires):
        self.key = key
        self.lsid = lsid
        self.number = number
        self.state = "open"         # open, committed, aborted
        self.snapshot_seq = snapshot_seq
        self.expires = expires
        self.writes = {}            # ns -> {_id key: document, or ABSENT once deleted}
        self.ops = []               # (op, db, coll, ...) in order, applied at commit
        self.owned = set()          # (ns, _id key) this transaction wrote
        self.views = {}             # ns -> TxnColl

    @property
    def open(self):
        return self.state == "open"


class Manager:
    """Every session's transaction, the document owners and the before-images (all under the
    store's lock)."""

    def __init__(self, server, lifetime_s=DEFAULT_LIFETIME_S):
        self.server = server
        self.store = server.store
        self.lifetime = float(lifetime_s)
        self.by_key = {}        # session key -> its latest Txn
        self.owners = {}        # (ns, _id key) -> the open Txn that wrote it
        self.history = {}       # (ns, _id key) -> [(seq, before-image or ABSENT)]
        self.hist_keys = {}     # ns -> set of _id keys in history
        self.seq = 0            # counts writes made while a transaction is open
        self.open_count = 0
        self.committing = None
        self._reaper = None
        self.local = threading.local()     # per thread: writes let through (run_outside)
        self.store.observer = self.observe

    # ---- the store's hook: every write outside a transaction's private view ----

    def observe(self, c, k, old):
        self.local.applied = getattr(self.local, "applied", 0) + 1
        if self.open_count == 0:
            return
        key = (c.ns, k)
        owner = self.owners.get(key)
        if owner is not None and owner.open and owner is not self.committing:
            # A write outside the transaction waits for it to end (the manual's "In-progress
            # Transactions and Write Conflicts"); expiry bounds the wait. mongod then retries
            # the write from the start (writeConflictRetry): so does `run_outside`.
            while owner.open:
                self.store.cond.wait(max(0.01, min(0.5, owner.expires - time.monotonic())))
                self.reap()
            if c.docs.get(k) is not old:
                self.local.applied -= 1
                raise Retry()
        self.seq += 1
        self.history.setdefault(key, []).append((self.seq, old))
        self.hist_keys.setdefault(c.ns, set()).add(k)

    def snapshot_get(self, txn, ns, k, base):
        """The document with _id key k as the transaction's snapshot has it (None if none)."""
        for seq, old in self.history.get((ns, k), ()):
            if seq > txn.snapshot_seq:
                return old
        return base.docs.get(k) if base is not None else None

    def changed_since(self, txn, ns, k):
        hist = self.history.get((ns, k))
        return bool(hist) and hist[-1][0] > txn.snapshot_seq

    # ---- statements ----

    def begin_or_continue(self, ctx):
        """The Txn this statement runs in (validated as mongod validates it)."""
        body, name = ctx.body, ctx.name
        if getattr(ctx.server, "standalone", False):
            raise MongoError(20, "IllegalOperation", "Transaction numbers are only allowed on "
                             "a replica set member or mongos")
        if body.get("autocommit") is not False:
            raise MongoError(72, "InvalidOptions", "Specifying autocommit=true is not allowed."
                             if "autocommit" in body else "startTransaction requires "
                             "autocommit: false")
        key = _key(body.get("lsid"))
        if key is None or "txnNumber" not in body:
            raise MongoError(72, "InvalidOptions", "A transaction requires 'lsid' and "
                             "'txnNumber' with 'autocommit: false'")
        start = "startTransaction" in body
        if start and body["startTransaction"] is not True:
            raise MongoError(72, "InvalidOptions",
                             "Specifying startTransaction=false is not allowed.")
        if name not in ALLOWED:
            raise not_supported("Cannot run '%s' in a multi-document transaction." % name)
        if "writeConcern" in body and name not in END_COMMANDS:
            raise MongoError(72, "InvalidOptions",
                             "Cannot set write concern after starting a transaction.")
        if "readConcern" in body:
            level = (body["readConcern"] or {}).get("level", "local")
            if not start:
                raise MongoError(72, "InvalidOptions", "Only the first command in a "
                                 "transaction may specify a readConcern")
            if level not in READ_CONCERN_LEVELS:
                raise MongoError(72, "InvalidOptions", "The readConcern level must be either "
                                 "'local' (default), 'majority' or 'snapshot' in order to run "
                                 "in a transaction")
        if ctx.db in INTERNAL_DBS and name not in END_COMMANDS:
            raise not_supported("Cannot run command against the '%s' database in a "
                                "transaction." % ctx.db)
        number = int(body["txnNumber"])
        from . import sessions
        state = sessions.of(ctx.server).state_of(key)
        txn = self.by_key.get(key)
        if state is not None and number < state[0]:
            raise MongoError(225, "TransactionTooOld", "Cannot start transaction %d on session "
                             "because a newer transaction %d has already started on this "
                             "session." % (number, state[0]))
        if start:
            if state is not None and number == state[0]:
                raise MongoError(117, "ConflictingOperationInProgress", "Only servers in a "
                                 "sharded cluster can start a new transaction at the active "
                                 "transaction number")
            if txn is not None and txn.open:
                self.abort(txn)
            sessions.of(ctx.server).set_number(key, number)
            txn = Txn(key, body["lsid"], number, self.seq,
                      time.monotonic() + self.lifetime)
            self.by_key[key] = txn
            self.open_count += 1
            self._start_reaper()
            return txn
        if txn is None or txn.number != number or state is None or state[0] != number:
            raise MongoError(251, "NoSuchTransaction", "Given transaction number %d does not "
                             "match any in-progress transactions. The active transaction "
                             "number is %s" % (number, state[0] if state else -1), [TRANSIENT])
        return txn

    def check_usable(self, txn, name):
        if txn.state == "aborted":
            raise MongoError(251, "NoSuchTransaction", "Transaction with { txnNumber: %d } has "
                             "been aborted." % txn.number, [TRANSIENT])
        if txn.state == "committed" and name != "commitTransaction":
            raise MongoError(256, "TransactionCommitted", "Transaction with { txnNumber: %d } "
                             "has been committed." % txn.number)

    def on_retryable_write(self, key, number):
        """A retryable write on the session: refused at a transaction's number, else it ends
        the session's open transaction (a new txnNumber aborts it)."""
        txn = self.by_key.get(key)
        if txn is None:
            return
        if txn.number == number:
            raise MongoError(217, "IncompleteTransactionHistory", "Cannot retry a retryable "
                             "write that has been converted into a transaction")
        if number > txn.number and txn.open:
            self.abort(txn)

    # ---- writes inside a transaction ----

    def claim(self, txn, ns, k):
        owner = self.owners.get((ns, k))
        if (owner is not None and owner is not txn and owner.open) \
                or self.changed_since(txn, ns, k):
            raise write_conflict()
        self.owners[(ns, k)] = txn
        txn.owned.add((ns, k))

    # ---- the end of a transaction ----

    def _finish(self, txn, state):
        txn.state = state
        self.open_count -= 1
        for key in txn.owned:
            if self.owners.get(key) is txn:
                del self.owners[key]
        txn.owned = set()
        txn.views = {}
        self._prune()
        self.store.cond.notify_all()

    def _prune(self):
        if self.open_count == 0:
            self.history.clear()
            self.hist_keys.clear()
            return
        oldest = min(t.snapshot_seq for t in self.by_key.values() if t.open)
        for key in list(self.history):
            kept = [h for h in self.history[key] if h[0] > oldest]
            if kept:
                self.history[key] = kept
            else:
                del self.history[key]
                self.hist_keys.get(key[0], set()).discard(key[1])

    def abort(self, txn):
        if txn.open:
            txn.ops = []
            txn.writes = {}
            self._finish(txn, "aborted")

    def commit(self, txn):
        """Apply every write with one cluster time; journal them as one record."""
        store = self.store
        if not txn.ops:
            self._finish(txn, "committed")
            return
        if not self._applicable(txn):
            self.abort(txn)
            raise write_conflict()
        tsv, wall = store.clock.tick(), oplogmod.wall_millis()
        first = store.oplog.end_seq
        mark = len(store.pending)
        store.pinned = (tsv, wall)
        self.committing = txn
        try:
            for op in txn.ops:
                c = store.get_or_create(op[1], op[2])
                if op[0] == "i":
                    store.insert(c, op[3])
                elif op[0] == "u":
                    store.update(c, c.docs[op[3]], op[4], op[5])
                else:
                    store.delete(c, c.docs[op[3]])
        finally:
            store.pinned = None
            self.committing = None
        oplogmod.mark_transaction(store.oplog, first, txn.lsid, txn.number)
        if store.journal is not None:
            recs = store.pending[mark:]
            store.pending[mark:] = [encode({"o": "txn", "lsid": txn.lsid, "n": txn.number,
                                            "r": [Binary(r) for r in recs]})]
        self._finish(txn, "committed")
        store.commit()

    def _applicable(self, txn):
        """Whether every write still finds what it found (a collection dropped meanwhile does
        not keep the transaction's documents): checked before anything is applied."""
        from .bsonutil import value_key
        exists = {}
        for op in txn.ops:
            if op[0] == "i":
                k = value_key(op[3]["_id"])
            else:
                k = op[3]
            key = (op[1], op[2], k)
            if key not in exists:
                c = self.store.coll(op[1], op[2])
                exists[key] = c is not None and k in c.docs
            if exists[key] == (op[0] == "i"):
                return False
            exists[key] = op[0] != "d"
        return True

    def reap(self):
        now = time.monotonic()
        for txn in list(self.by_key.values()):
            if txn.open and txn.expires <= now:
                self.abort(txn)

    def end_sessions(self, lsids):
        for lsid in lsids:
            txn = self.by_key.get(_key(lsid))
            if txn is not None:
                self.abort(txn)

    def kill_sessions(self, lsids):
        """killSessions: those sessions' open transactions aborted; [] kills every session."""
        if not lsids:
            for txn in list(self.by_key.values()):
                self.abort(txn)
            return
        self.end_sessions(lsids)

    def _start_reaper(self):
        if self._reaper is not None:
            return
        interval = max(0.05, min(1.0, self.lifetime / 4.0))

        def loop():
            while not self.server.shutdown_event.wait(interval):
                with self.store.lock:
                    self.reap()

        self._reaper = threading.Thread(target=loop, name="txn-reaper", daemon=True)
        self._reaper.start()


# ---- a transaction's private view of the store ----

class OverlayDocs:
    """A collection's documents as a transaction sees them: its writes over its snapshot."""

    def __init__(self, mgr, txn, ns, base):
        self.mgr, self.txn, self.ns, self.base = mgr, txn, ns, base

    def get(self, k, default=None):
        mine = self.txn.writes.get(self.ns)
        if mine is not None and k in mine:
            doc = mine[k]
        else:
            doc = self.mgr.snapshot_get(self.txn, self.ns, k, self.base)
        return default if doc is None else doc

    def keys(self):
        seen = dict.fromkeys(self.base.docs) if self.base is not None else {}
        seen.update(dict.fromkeys(self.mgr.hist_keys.get(self.ns, ())))
        seen.update(dict.fromkeys(self.txn.writes.get(self.ns, ())))
        return [k for k in seen if self.get(k) is not None]

    __iter__ = lambda self: iter(self.keys())

    def values(self):
        return [self.get(k) for k in self.keys()]

    def items(self):
        return [(k, self.get(k)) for k in self.keys()]

    def __contains__(self, k):
        return self.get(k) is not None

    def __getitem__(self, k):
        doc = self.get(k)
        if doc is None:
            raise KeyError(k)
        return doc

    def __len__(self):
        return len(self.keys())


class _NoIdIndex:
    @staticmethod
    def usable():
        return False


_NO_ID_INDEX = _NoIdIndex()


class TxnColl:
    """A collection seen from a transaction; what it does not override is the stored one's."""

    def __init__(self, mgr, txn, db, name, base):
        self._base = base if base is not None else Collection(db, name)
        self.db, self.name, self.ns = db, name, db + "." + name
        self.docs = OverlayDocs(mgr, txn, self.ns, base)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    @property
    def id_index(self):
        # The stored collection's _id index knows neither this transaction's writes nor its
        # snapshot: reads sorted on _id scan the view instead (cmd_crud.matching_by_id).
        return _NO_ID_INDEX

    def check_unique(self, doc, k):
        for ix in self._base.unique_indexes():
            mine = {kt for kt, _ in ix.keys_for(doc)}
            for other_k, other in self.docs.items():
                if other_k == k:
                    continue
                for kt, combo in ix.keys_for(other):
                    if kt in mine:
                        raise DuplicateKey(self._base, ix, ix.key_value(combo))


class TxnView:
    """What a statement in a transaction sees as `ctx.store`: reads from the transaction's
    snapshot plus its writes, writes kept private until commit. Anything else is the store's."""

    def __init__(self, mgr, txn):
        self._mgr, self._txn, self._store = mgr, txn, mgr.store

    def __getattr__(self, attr):
        return getattr(self._store, attr)

    def coll(self, db, name):
        ns = db + "." + name
        view = self._txn.views.get(ns)
        if view is None:
            base = self._store.coll(db, name)
            if base is None and ns not in self._txn.writes:
                return None
            view = self._txn.views[ns] = TxnColl(self._mgr, self._txn, db, name, base)
        return view

    def require_coll(self, db, name):
        c = self.coll(db, name)
        if c is None:
            raise MongoError(26, "NamespaceNotFound", "ns does not exist: %s.%s" % (db, name))
        return c

    def get_or_create(self, db, name):
        c = self.coll(db, name)
        if c is None:
            check_collection_name(db, name)
            self._txn.writes.setdefault(db + "." + name, {})
            c = self.coll(db, name)
        return c

    def _write(self, c, k, doc):
        self._mgr.claim(self._txn, c.ns, k)
        self._txn.writes.setdefault(c.ns, {})[k] = doc

    def insert(self, c, doc, raw=None):
        from .bsonutil import value_key
        if "_id" not in doc:
            raise MongoError(2, "BadValue", "document to insert has no _id")
        if next(iter(doc)) != "_id":
            doc = dict(_id=doc["_id"], **{f: v for f, v in doc.items() if f != "_id"})
        k = value_key(doc["_id"])
        if k in c.docs:
            raise DuplicateKey(c._base, c.indexes["_id_"], {"_id": doc["_id"]})
        c.check_unique(doc, k)
        self._write(c, k, doc)
        self._txn.ops.append(("i", c.db, c.name, doc))
        return doc

    def update(self, c, old, new, ud, raw=None):
        # raw (the new document's encoding, a speed-up of the stored path) is not kept: the
        # commit writes through Store.update, which encodes it again.
        from .bsonutil import value_key
        if next(iter(new)) != "_id":
            new = dict(_id=new["_id"], **{f: v for f, v in new.items() if f != "_id"})
        k = value_key(new["_id"])
        c.check_unique(new, k)
        self._write(c, k, new)
        self._txn.ops.append(("u", c.db, c.name, k, new, ud))
        return new

    def delete(self, c, doc):
        from .bsonutil import value_key
        k = value_key(doc["_id"])
        self._write(c, k, ABSENT)
        self._txn.ops.append(("d", c.db, c.name, k))

    def commit(self):
        """A statement's end: nothing becomes visible before commitTransaction."""


# ---- the command layer's entry ----

_MAKE_LOCK = threading.Lock()


def of(server):
    with _MAKE_LOCK:
        mgr = getattr(server, "transactions", None)
        if mgr is None:
            mgr = server.transactions = Manager(
                server, getattr(server, "txn_lifetime_s", DEFAULT_LIFETIME_S))
        return mgr


def wants(body):
    return "startTransaction" in body or "autocommit" in body


def run(ctx, handler):
    """Run one statement of a transaction (the request asked for one: `wants`)."""
    mgr = of(ctx.server)
    store = ctx.store
    with store.lock:
        mgr.reap()
        txn = mgr.begin_or_continue(ctx)
        mgr.check_usable(txn, ctx.name)
        if ctx.name == "commitTransaction":
            if txn.open:
                mgr.commit(txn)
            return {}
        if ctx.name == "abortTransaction":
            mgr.abort(txn)
            return {}
        ctx.txn = txn
        ctx.store = TxnView(mgr, txn)
    try:
        target = ctx.body.get(ctx.name)
        if ctx.name in WRITE_COMMANDS and isinstance(target, str) \
                and target.startswith("system."):
            # write_ops_exec.cpp, doTransactionValidationForWrites: before any statement.
            raise MongoError(50791, "Location50791", "Cannot write to system collection "
                             "%s.%s within a transaction." % (ctx.db, target))
        pipeline = ctx.body.get("pipeline") if ctx.name == "aggregate" else None
        if isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict) \
                and "$changeStream" in pipeline[0]:
            raise not_supported("Operation not permitted in transaction.")
        result = handler(ctx)
    except Exception:
        with store.lock:
            mgr.abort(txn)   # a failed statement aborts the transaction
        raise
    finally:
        ctx.store = store
    errors = result.get("writeErrors") if isinstance(result, dict) else None
    if errors:
        with store.lock:
            mgr.abort(txn)
        for we in errors:
            if we.get("code") == 112:
                raise write_conflict()
    return result


def run_outside(ctx, handler):
    """Run a command outside any transaction; when one of its writes had to wait for a
    transaction that changed the document, run it again as mongod's writeConflictRetry does
    (only when nothing of it was applied yet: otherwise the statement fails with 112)."""
    mgr = getattr(ctx.server, "transactions", None)
    if mgr is None:
        return handler(ctx)
    while True:
        mgr.local.applied = 0
        try:
            return handler(ctx)
        except Retry:
            if mgr.local.applied:
                with ctx.store.lock:
                    ctx.store.commit()
                raise write_conflict()


def _outside(ctx):
    # Reached only without autocommit: false (a statement of a transaction goes through run).
    raise MongoError(50768, "Location50768", "%s must be run within a transaction" % ctx.name)


COMMANDS = {"commitTransaction": _outside, "abortTransaction": _outside}
