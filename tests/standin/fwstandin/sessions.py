"""Retryable writes: what mongod keeps per logical session so a retry is not applied twice.

A write command that carries `lsid` and `txnNumber` is a retryable write. mongod keeps, per
session, its highest txnNumber and which of that transaction's statements ran
(TransactionParticipant, transaction_participant.cpp; on disk config.transactions and the
oplog chain of the statements' entries):

* a higher txnNumber starts a new transaction: what the session remembered is dropped;
* a lower one is refused with 225 TransactionTooOld;
* the same one is a retry: each statement already executed is not run again, its result is
  rebuilt (from its oplog entry in mongod, from the result kept here), and only the others
  run.

Statement ids are the command's `stmtIds[i]`, else its `stmtId` (default 0) plus the index i,
as mongod numbers them (write_ops::getStmtIdForWriteAt). Only statements that succeeded are
remembered; an error is not, so its retry runs it.

The `onPrimaryTransactionalWrite` fail point fires for each statement of a retryable write
that executes (onWriteOpCompletedOnPrimary): `closeConnection` (default true) ends the
connection; `failBeforeCommitExceptionCode` fails the statement before it commits, so it is not
applied. The stand-in checks it before applying the statement, which has the same outcome.

Kept in memory only (a restart forgets, as a restarted mongod would not: documented in
docs/testing.md).
"""

import threading
import uuid

from .errors import MongoError
from .failpoints import code_name


def _lsid_text(lsid):
    ident = lsid.get("id")
    if isinstance(ident, (bytes, bytearray)) and len(ident) == 16:
        return "%s" % uuid.UUID(bytes=bytes(ident))
    return repr(ident)


def _key(lsid):
    if not isinstance(lsid, dict) or "id" not in lsid:
        return None
    ident = lsid["id"]
    return bytes(ident) if isinstance(ident, (bytes, bytearray)) else repr(ident)


class Sessions:
    """Every session's last txnNumber and its executed statements (thread-safe)."""

    MAX_SESSIONS = 100_000

    def __init__(self):
        self.lock = threading.Lock()
        self.by_lsid = {}   # key -> [txnNumber, {stmtId: result}]

    def begin(self, ctx):
        """The retryable write `ctx` runs as (a Txn), or None when it is not one."""
        body = ctx.body
        if "txnNumber" not in body or getattr(ctx, "txn", None) is not None:
            return None     # not a retryable write, or a statement of a transaction
        key = _key(body.get("lsid"))
        if key is None:
            raise MongoError(50768, "Location50768",
                             "Transaction number requires a session ID to also be specified")
        number = int(body["txnNumber"])
        txns = getattr(ctx.server, "transactions", None)
        if txns is not None:
            # The session's txnNumber is shared with its transactions (transactions.py); the
            # store's lock first, as a transaction's statement takes them.
            with ctx.server.store.lock:
                txns.on_retryable_write(key, number)
        with self.lock:
            state = self.by_lsid.get(key)
            if state is None or number > state[0]:
                if state is None and len(self.by_lsid) >= self.MAX_SESSIONS:
                    self.by_lsid.pop(next(iter(self.by_lsid)))
                state = [number, {}]
                self.by_lsid[key] = state
            elif number < state[0]:
                raise MongoError(225, "TransactionTooOld",
                                 "Cannot start transaction %d on session %s because a newer "
                                 "transaction %d has already started."
                                 % (number, _lsid_text(body["lsid"]), state[0]))
        return Txn(ctx, state, body)

    def state_of(self, key):
        """[txnNumber, statements] of the session, or None."""
        with self.lock:
            return self.by_lsid.get(key)

    def set_number(self, key, number):
        """A transaction starts at `number`: the session's retryable-write history goes."""
        with self.lock:
            self.by_lsid[key] = [number, {}]


class Txn:
    def __init__(self, ctx, state, body):
        self.ctx = ctx
        self.state = state
        ids = body.get("stmtIds")
        self.stmt_ids = ids if isinstance(ids, list) else None
        self.base = int(body.get("stmtId", 0))
        # onPrimaryTransactionalWrite: a caller may skip about_to_write() while its mode is
        # "off" (a statement's check without a call).
        self.point = ctx.server.failpoints.points["onPrimaryTransactionalWrite"]

    def stmt_id(self, i):
        ids = self.stmt_ids
        if ids is not None and i < len(ids):
            return int(ids[i])
        return self.base + i

    def fresh(self):
        """True when no statement of this transaction ran yet and the statement ids are the
        command's own (stmtId + i, all different): then none of the command's statements
        can have run already, and executed() need not be asked statement by statement. Asked
        once, at the start of the command."""
        return not self.state[1] and self.stmt_ids is None

    def executed(self, i):
        """The result kept for statement i if it ran already in this transaction, else None."""
        return self.state[1].get(self.stmt_id(i))

    def record(self, i, result):
        self.state[1][self.base + i if self.stmt_ids is None else self.stmt_id(i)] = result

    def about_to_write(self):
        """Evaluate onPrimaryTransactionalWrite for a statement that is about to execute."""
        data = self.ctx.server.failpoints.check_transactional_write()
        if data is None:
            return
        if data.get("closeConnection", True):
            self.ctx.close_connection = True
        if "failBeforeCommitExceptionCode" in data:
            code = int(data["failBeforeCommitExceptionCode"])
            raise MongoError(code, code_name(code),
                             "Failing write for test due to failPoint")


_MAKE_LOCK = threading.Lock()


def of(server):
    """The server's Sessions, made on first use."""
    with _MAKE_LOCK:
        sessions = getattr(server, "sessions", None)
        if sessions is None:
            sessions = server.sessions = Sessions()
        return sessions


def begin(ctx):
    return of(ctx.server).begin(ctx)
