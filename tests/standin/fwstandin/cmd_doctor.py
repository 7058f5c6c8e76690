"""What `flowwarden doctor` reads of a deployment, as mongod answers it: connectionStatus with
showPrivileges, the oplog's first and last entries (local.oplog.rs), and a standalone server's
refusal of change streams.

- connectionStatus (manual: reference/command/connectionStatus): authInfo.authenticatedUsers,
  authenticatedUserRoles and, with showPrivileges, authenticatedUserPrivileges (resource,
  actions). Without access control all three are empty.
- The built-in roles' privileges (manual: reference/built-in-roles): read gives changeStream,
  collStats, dbHash, dbStats, find, killCursors, listCollections, listIndexes,
  listSearchIndexes on the database's non-system collections; readWrite adds convertToCapped,
  createCollection, createIndex, dropCollection, dropIndex, insert, remove,
  renameCollectionSameDB, update; root (through readWriteAnyDatabase and backup) gives
  readWrite's actions on every database ({db: "", collection: ""}) and find on local.oplog.rs.
- local.oplog.rs: find sorted by {$natural: 1} or {$natural: -1} with limit gives the oldest or
  newest entry {ts, t, v, op, ns, o, wall}; the stand-in's oplog is capped by
  --oplog-max-entries, so its oldest entry moves. ts and wall are real; a DDL entry has
  mongod's shape (op "c", ns "<db>.$cmd", ui the collection's UUID, o the command: create,
  commitIndexBuild, dropIndexes, collMod, drop, renameCollection, dropDatabase; a view's
  create/drop is an insert/delete in <db>.system.views); a document's write is op "n" with a
  placeholder o; the filter is ignored: what reads the window needs, no more.
- A standalone mongod (--standalone) answers hello without setName and refuses $changeStream
  with 40573 "The $changeStream stage is only supported on replica sets"
  (document_source_change_stream.cpp, assertIsLegalSpecification).
"""

import datetime

from bson.binary import Binary
from bson.int64 import Int64

from . import oplog as oplogmod

from .bsonutil import encode, ts_value
from .errors import MongoError

READ_ACTIONS = ["changeStream", "collStats", "dbHash", "dbStats", "find", "killCursors",
                "listCollections", "listIndexes", "listSearchIndexes"]
READ_WRITE_ACTIONS = sorted(READ_ACTIONS + ["convertToCapped", "createCollection", "createIndex",
                                            "dropCollection", "dropIndex", "insert", "remove",
                                            "renameCollectionSameDB", "update"])
ROLES = ("read", "readWrite", "root")


def role_privileges(role, db):
    if role == "read":
        return [{"resource": {"db": db, "collection": ""}, "actions": sorted(READ_ACTIONS)}]
    if role == "readWrite":
        return [{"resource": {"db": db, "collection": ""}, "actions": READ_WRITE_ACTIONS}]
    if role == "root":
        return [{"resource": {"db": "", "collection": ""}, "actions": READ_WRITE_ACTIONS},
                {"resource": {"db": "local", "collection": "oplog.rs"}, "actions": ["find"]},
                {"resource": {"cluster": True},
                 "actions": ["listDatabases", "serverStatus", "replSetGetStatus"]}]
    return []


def cmd_connection_status(ctx):
    users = ctx.server.auth
    who = getattr(ctx.conn, "user", None)
    info = {"authenticatedUsers": [], "authenticatedUserRoles": []}
    privileges = []
    if users is not None and who:
        db, _, name = who.partition(".")
        info["authenticatedUsers"].append({"user": name, "db": db})
        for role, role_db in users.roles_of(name):
            info["authenticatedUserRoles"].append({"role": role, "db": role_db})
            privileges.extend(role_privileges(role, role_db))
    if ctx.body.get("showPrivileges"):
        info["authenticatedUserPrivileges"] = privileges
    return {"authInfo": info}


def may_read_oplog(ctx):
    users = ctx.server.auth
    who = getattr(ctx.conn, "user", None)
    if users is None or not who:
        return True
    return any(role == "root" for role, _ in users.roles_of(who.partition(".")[2]))


def find_oplog(ctx, make_result_cursor):
    """find on local.oplog.rs: {$natural: 1|-1} order, limit, projection of top-level fields."""
    if not may_read_oplog(ctx):
        raise MongoError(13, "Unauthorized", "not authorized on local to execute command "
                         "{ find: \"oplog.rs\" }")
    body = ctx.body
    sort = body.get("sort") or {}
    backward = sort.get("$natural") == -1
    limit = int(body.get("limit", 0) or 0)
    proj = body.get("projection") or {}
    store = ctx.store
    out = []
    with store.lock:
        log = store.oplog
        seqs = range(log.first_seq, log.end_seq)
        if backward:
            seqs = reversed(seqs)
        for seq in seqs:
            e = log.get(seq)
            if e is None:
                continue
            doc = {"ts": ts_value(e.tsv), "t": Int64(1), "v": Int64(2)}
            doc.update(_entry_shape(e))
            doc["wall"] = datetime.datetime.fromtimestamp(e.wall / 1000.0,
                                                          datetime.timezone.utc)
            if proj:
                doc = {k: v for k, v in doc.items() if proj.get(k)}
            out.append(encode(doc))
            if limit and len(out) >= limit:
                break
    return make_result_cursor(ctx, "local.oplog.rs", out, body.get("batchSize", 101),
                              bool(body.get("singleBatch")))


def _entry_shape(e):
    """op, ns, ui, o (and o2) of oplog entry `e` as mongod writes them (see the module's doc)."""
    desc = (e.desc or {}).get("operationDescription") or {}
    if e.view:
        key = {"_id": e.db + "." + e.coll}
        o = dict(key, **desc) if e.op == "create" else key
        return {"op": "i" if e.op == "create" else "d", "ns": e.ns, "o": o}
    if e.op == "create":
        o = dict({"create": e.coll}, **desc)
    elif e.op == "createIndexes":
        o = {"commitIndexBuild": e.coll, "indexes": desc.get("indexes", [])}
    elif e.op == "dropIndexes":
        spec = (desc.get("indexes") or [{}])[0]
        o = {"dropIndexes": e.coll, "index": spec.get("name")}
    elif e.op == "modify":
        o = dict({"collMod": e.coll}, **desc)
    elif e.op == "drop":
        o = {"drop": e.coll}
    elif e.op == "rename":
        o = {"renameCollection": e.ns, "to": "%s.%s" % e.to, "stayTemp": False}
        if "dropTarget" in desc:
            o["dropTarget"] = desc["dropTarget"]
    elif e.op == "dropDatabase":
        o = {"dropDatabase": 1}
    else:
        return {"op": "n", "ns": "", "o": {"msg": "entry"}}
    shape = {"op": "c", "ns": e.db + ".$cmd"}
    cuuid = oplogmod.token_uuid(oplogmod.entry_token(e))
    if cuuid is not None:
        shape["ui"] = Binary(cuuid.bytes, 4)
    shape["o"] = o
    if e.op == "dropIndexes":
        shape["o2"] = (desc.get("indexes") or [{}])[0]
    return shape


def refuse_change_stream(ctx):
    if getattr(ctx.server, "standalone", False):
        raise MongoError(40573, "Location40573",
                         "The $changeStream stage is only supported on replica sets")


COMMANDS = {"connectionStatus": cmd_connection_status}
