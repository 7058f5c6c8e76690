"""Command dispatch: fail points, errors, and the fields every reply carries.

Every reply gets `ok`, `$clusterTime` {clusterTime, signature {hash, keyId}} and
`operationTime`, like a replica-set member. Fields the stand-in does not implement but drivers
always send (lsid, txnNumber, $clusterTime, $readPreference, writeConcern, readConcern,
comment, maxTimeMS, API version) are accepted and ignored.
"""

import time

from bson.binary import Binary
from bson.int64 import Int64

from . import auth, bsonutil, cmd_admin, cmd_crud, cmd_doctor, transactions, wire
from .bsonutil import ts_value
from .cursors import RawReply, cursor_reply
from .errors import MongoError
from .failpoints import failpoint_error

COMMANDS = {}
COMMANDS.update(cmd_crud.COMMANDS)
COMMANDS.update(cmd_admin.COMMANDS)
COMMANDS.update(auth.COMMANDS)
COMMANDS.update(cmd_doctor.COMMANDS)
COMMANDS.update(transactions.COMMANDS)

GENERIC_FIELDS = frozenset((
    "$db", "lsid", "txnNumber", "$clusterTime", "$readPreference", "writeConcern",
    "readConcern", "comment", "maxTimeMS", "apiVersion", "apiStrict", "apiDeprecationErrors",
    "$client", "client", "compression", "saslSupportedMechs", "speculativeAuthenticate",
    "helloOk", "topologyVersion", "maxAwaitTimeMS", "loadBalanced", "$queryOptions",
    "mayBypassWriteBlocking", "startTransaction", "autocommit"))

# OP_QUERY is only accepted for the handshake, as on a 6.0 server.
OP_QUERY_COMMANDS = ("hello", "isMaster", "ismaster")

# NotPrimaryError and ShutdownError categories.
STATE_CHANGE_CODES = frozenset((10107, 13435, 13436, 189, 11602, 91, 11600))

_ZERO_HASH = Binary(b"\x00" * 20, 0)
CLOSE = object()


class Connection:
    """Per-connection state the commands may read (client app name) or update."""

    def __init__(self, conn_id, peer):
        self.id = conn_id
        self.peer = peer
        self.app_name = None
        self.user = None        # "db.user" once authenticated (--auth)
        self.sasl = None        # the SASL conversation under way (auth.Conversation)


class Context:
    GENERIC_FIELDS = GENERIC_FIELDS

    def __init__(self, server, conn, req, name):
        self.server = server
        self.store = server.store
        self.conn = conn
        self.req = req
        self.db = req.db
        self.body = req.body
        self.name = name
        self.op_time = None
        self.is_change_stream_getmore = False
        self.close_connection = False
        self.txn = None         # the transaction this statement runs in (transactions.py)


def cluster_time_doc(tsv):
    return {"clusterTime": ts_value(tsv), "signature": {"hash": _ZERO_HASH, "keyId": Int64(0)}}


def _tail_elements(fields, tsv, op_tsv):
    doc = dict(fields)
    doc.setdefault("ok", 1.0)
    doc["$clusterTime"] = cluster_time_doc(tsv)
    doc["operationTime"] = ts_value(op_tsv)
    return bsonutil.encode(doc)[4:-1]


def execute(server, conn, req):
    """Run one request; returns reply bytes, None (moreToCome) or CLOSE (fail point)."""
    body = req.body
    name = next(iter(body)) if body else ""
    start = time.monotonic()
    ctx = Context(server, conn, req, name)
    wce = None
    try:
        if req.opcode == wire.OP_QUERY:
            if req.sequences.get("$cmd") != "$cmd" or name not in OP_QUERY_COMMANDS:
                raise MongoError(
                    352, "UnsupportedOpQueryCommand",
                    "Unsupported OP_QUERY command: %s. The client driver may require an "
                    "upgrade. For more details see "
                    "https://dochub.mongodb.org/core/legacy-opcode-removal" % name)
        handler = COMMANDS.get(name)
        server.log_command(name, req)
        if handler is None:
            raise MongoError(59, "CommandNotFound", "no such command: '%s'" % name)
        auth.check(server, conn, name)
        with server.store.lock:
            server.store.stats["command"] += 1
        data = server.failpoints.check_fail_command(name, conn.app_name)
        if data is not None:
            if data.get("blockConnection"):
                time.sleep(max(0, int(data.get("blockTimeMS", 0))) / 1000.0)
            if data.get("closeConnection"):
                return CLOSE
            if "errorCode" in data:
                # mongod labels ResumableChangeStreamError only what it can see is a change
                # stream: an aggregate whose pipeline opens with $changeStream, or a getMore
                # whose cursor's originating command does (error_labels.cpp,
                # isResumableChangeStreamError). failCommand fires before the getMore checks
                # its cursor out, so there is no originating command and no label: that is
                # why the drivers' tests use failGetMoreAfterCursorCheckout (SERVER-46091;
                # the spec test "change stream does not resume if error does not contain
                # ResumableChangeStreamError").
                pipeline = body.get("pipeline") if name == "aggregate" else None
                is_cs = bool(pipeline and isinstance(pipeline[0], dict)
                             and "$changeStream" in pipeline[0])
                raise failpoint_error(data, name, body, is_cs)
            wce = data.get("writeConcernError")
        if transactions.wants(body):
            result = transactions.run(ctx, handler)     # a statement of a transaction
        else:
            result = transactions.run_outside(ctx, handler)
        error = None
    except MongoError as e:
        result = None
        error = e
    except Exception as e:  # a bug in the stand-in must still answer, never hang a client
        server.log_exception(name, e)
        result = None
        error = MongoError(1, "InternalError", "stand-in internal error in %s: %r" % (name, e))
    if ctx.close_connection:
        return CLOSE    # onPrimaryTransactionalWrite ended the session (sessions.py)
    if req.more_to_come:
        return None
    with server.store.lock:
        tsv = server.store.clock.last
    op_tsv = ctx.op_time if ctx.op_time is not None else tsv
    if error is not None:
        fields = error.to_reply()
        if error.code in STATE_CHANGE_CODES:
            # mongod 4.4+ appends its topologyVersion to "not primary" and shutdown errors;
            # drivers compare it with their own and ignore the error as stale when equal.
            fields["topologyVersion"] = server.topology_version()
        body_bytes = bsonutil.encode({**fields, "$clusterTime": cluster_time_doc(tsv),
                                      "operationTime": ts_value(op_tsv)})
        return _wrap(req, body_bytes)
    extra = {}
    if wce is not None:
        extra["writeConcernError"] = wce
        from .failpoints import RETRYABLE_WRITE_CODES, WRITE_COMMANDS
        if "errorLabels" in data:
            # The fail point's errorLabels replace the labels mongod would give
            # (error_labels.cpp, getErrorLabels: errorLabelsOverride).
            if data["errorLabels"]:
                extra["errorLabels"] = list(data["errorLabels"])
        elif (name in WRITE_COMMANDS and "txnNumber" in body
                and wce.get("code") in RETRYABLE_WRITE_CODES):
            extra["errorLabels"] = ["RetryableWriteError"]
    if isinstance(result, cmd_crud.CursorResult):
        tail = _tail_elements({**result.fields, **extra}, tsv, op_tsv)
        raw = cursor_reply(result.batch_name, result.docs, int(result.cursor_id), result.ns,
                           result.extra, tail)
        return _wrap_raw(req, raw)
    result.update(extra)
    result.setdefault("ok", 1.0)
    result["$clusterTime"] = cluster_time_doc(tsv)
    result["operationTime"] = ts_value(op_tsv)
    return _wrap(req, bsonutil.encode(result))


def _wrap(req, body_bytes):
    if req.opcode == wire.OP_QUERY:
        return wire.op_reply(req.request_id, body_bytes)
    return wire.op_msg_reply(req.request_id, body_bytes)


def _wrap_raw(req, raw):
    if not isinstance(raw, RawReply):
        return _wrap(req, raw)
    if req.opcode == wire.OP_QUERY:
        return wire.op_reply(req.request_id, b"".join(raw.parts))
    length = 16 + 5 + raw.length
    head = wire.HEADER.pack(length, next(wire._REQUEST_IDS), req.request_id, wire.OP_MSG)
    return b"".join([head, b"\x00\x00\x00\x00\x00"] + raw.parts)
