"""Handshake, diagnostics and DDL commands: hello, buildInfo, serverStatus, create, drop,
indexes, listings, renameCollection, collMod, configureFailPoint."""

import datetime
import os
import time

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId

from . import auth
from .cmd_crud import check_fields, coll_name, make_result_cursor
from .bsonutil import encode
from .errors import MongoError
from .storage import check_collection_name, check_db_name

MAX_BSON = 16 * 1024 * 1024
MAX_MESSAGE = 48000000
MAX_WRITE_BATCH = 100000
VERSION = "6.0.9"  # what 6.0 plays (version_string)
# What hello and buildInfo say for each version the stand-in can play (--server-version):
# maxWireVersion 13 is MongoDB 5.0, 17 is 6.0, 21 is 7.0 (src/mongo/db/wire_version.h).
# 7.0 plays 6.0's behaviour plus what 7.0 added that flowwarden uses ($toHashedIndexKey).
WIRE_VERSIONS = {(5, 0): 13, (6, 0): 17, (7, 0): 21}


def version_string(server):
    major, minor = getattr(server, "version", (6, 0))
    # 6.0 plays 6.0.9, the first 6.0 with $changeStreamSplitLargeEvent (changestream.py).
    return "%d.%d.%d" % (major, minor, 9 if (major, minor) == (6, 0) else 0)


# ---- handshake and diagnostics ----

def local_time(server):
    """The server's wall clock as hello and serverStatus report it (localTime), shifted by
    --clock-offset-ms: a server whose clock is that far ahead (negative: behind)."""
    return datetime.datetime.utcnow() + datetime.timedelta(
        milliseconds=getattr(server, "clock_offset_ms", 0))


def cmd_hello(ctx):
    body = ctx.body
    server = ctx.server
    client = body.get("client")
    if isinstance(client, dict):
        app = client.get("application")
        if isinstance(app, dict) and isinstance(app.get("name"), str):
            ctx.conn.app_name = app["name"]
    tv = body.get("topologyVersion")
    if isinstance(tv, dict) and "maxAwaitTimeMS" in body:
        # Awaitable hello: the topology never changes, so answer when the wait runs out (or at
        # shutdown). Answering at once would make pooled clients monitor in a hot loop.
        if tv.get("processId") == server.process_id and tv.get("counter") == 0:
            server.shutdown_event.wait(max(0, int(body["maxAwaitTimeMS"])) / 1000.0)
    me = server.host
    reply = {}
    if body.get("helloOk"):
        reply["helloOk"] = True
    reply["topologyVersion"] = server.topology_version()
    if not getattr(server, "standalone", False):
        reply["hosts"] = [me]
        reply["setName"] = server.replset
        reply["setVersion"] = 1
    if ctx.name == "hello":
        reply["isWritablePrimary"] = True
    else:
        reply["ismaster"] = True
    reply["secondary"] = False
    if not getattr(server, "standalone", False):
        reply["primary"] = me
        reply["me"] = me
        reply["electionId"] = ObjectId("7fffffff0000000000000001")
    with ctx.store.lock:
        tsv = ctx.store.clock.last
    from .bsonutil import ts_value
    now = datetime.datetime.utcnow().replace(microsecond=0)
    optime = {"ts": ts_value(tsv), "t": Int64(1)}
    if not getattr(server, "standalone", False):
        reply["lastWrite"] = {"opTime": optime, "lastWriteDate": now, "majorityOpTime": optime,
                              "majorityWriteDate": now}
    reply["maxBsonObjectSize"] = MAX_BSON
    reply["maxMessageSizeBytes"] = MAX_MESSAGE
    reply["maxWriteBatchSize"] = MAX_WRITE_BATCH
    reply["localTime"] = local_time(server)
    reply["logicalSessionTimeoutMinutes"] = 30
    reply["connectionId"] = ctx.conn.id
    reply["minWireVersion"] = 0
    reply["maxWireVersion"] = WIRE_VERSIONS[getattr(server, "version", (6, 0))]
    reply["readOnly"] = False
    auth.hello_fields(ctx, reply)
    return reply


def cmd_ping(ctx):
    return {}


def cmd_build_info(ctx):
    major, minor = getattr(ctx.server, "version", (6, 0))
    return {"version": version_string(ctx.server), "gitVersion": "flowwarden-standin",
            "modules": [], "allocator": "system", "javascriptEngine": "none",
            "sysInfo": "deprecated", "versionArray": [major, minor, 9 if (major, minor) == (6, 0) else 0, 0],
            "openssl": {"running": "disabled", "compiled": "disabled"},
            "buildEnvironment": {}, "bits": 64, "debug": False,
            "maxBsonObjectSize": MAX_BSON, "storageEngines": ["wiredTiger"]}


def cmd_server_status(ctx):
    server = ctx.server
    uptime = time.monotonic() - server.started
    with ctx.store.lock:
        stats = dict(ctx.store.stats)
        oplog_len = len(ctx.store.oplog)
        tsv = ctx.store.clock.last
    from .bsonutil import ts_value
    return {"host": server.host, "version": version_string(server), "process": "mongod", "pid": Int64(os.getpid()),
            "uptime": float(int(uptime)), "uptimeMillis": Int64(int(uptime * 1000)),
            "uptimeEstimate": Int64(int(uptime)), "localTime": local_time(server),
            "connections": {"current": server.open_connections,
                            "available": 1000000 - server.open_connections,
                            "totalCreated": server.total_connections},
            "opcounters": {k: Int64(v) for k, v in stats.items()},
            "repl": {"setName": server.replset, "isWritablePrimary": True, "secondary": False,
                     "hosts": [server.host], "primary": server.host, "me": server.host,
                     "lastWrite": {"opTime": {"ts": ts_value(tsv), "t": Int64(1)}}},
            "oplog": {"entries": oplog_len, "maxEntries": ctx.store.oplog.max_entries},
            "storageEngine": {"name": "wiredTiger", "persistent": server.persistent}}


def cmd_end_sessions(ctx):
    # Ending a session aborts its open transaction (transactions.py).
    txns = getattr(ctx.server, "transactions", None)
    ids = ctx.body.get("endSessions")
    if txns is not None and isinstance(ids, list):
        with ctx.store.lock:
            txns.end_sessions([i for i in ids if isinstance(i, dict)])
    return {}


def cmd_kill_sessions(ctx):
    """killSessions (server kill_sessions_command.cpp, manual "killSessions"): [{id: UUID}, ...]
    kills those sessions, aborting their open transactions at once, and replies {ok: 1}; an
    unknown session is no error; an empty array kills every session of the (here: only) user.
    Not admin-only, and any user may kill its own sessions."""
    ids = ctx.body.get("killSessions")
    if not isinstance(ids, list):
        raise MongoError(14, "TypeMismatch", "BSON field 'KillSessionsCmd.killSessions' is the "
                         "wrong type '%s', expected type 'array'" % type(ids).__name__)
    for i in ids:
        if not isinstance(i, dict) or "id" not in i:
            raise MongoError(40414, "Location40414", "BSON field 'KillSessionsCmd.killSessions."
                             "id' is missing but a required field")
    txns = getattr(ctx.server, "transactions", None)
    if txns is not None:
        with ctx.store.lock:
            txns.kill_sessions(ids)
    return {}


def cmd_get_parameter(ctx):
    """getParameter (server_parameters_commands' CmdGet; admin only): the named parameters the
    stand-in has, or all with getParameter: "*"; none of them: "no option found to get". Only
    transactionLifetimeLimitSeconds (--transaction-lifetime-limit-seconds) is modelled."""
    if ctx.db != "admin":
        raise MongoError(13, "Unauthorized",
                         "getParameter may only be run against the admin database.")
    lifetime = getattr(ctx.server, "txn_lifetime_s", 60.0)
    params = {"transactionLifetimeLimitSeconds": int(lifetime) if lifetime == int(lifetime)
              else lifetime}
    everything = ctx.body.get("getParameter") == "*"
    out = {k: v for k, v in params.items() if everything or k in ctx.body}
    if not out:
        raise MongoError(72, "InvalidOptions", "no option found to get")
    return out


def cmd_configure_fail_point(ctx):
    if ctx.db != "admin":
        raise MongoError(13, "Unauthorized",
                         "configureFailPoint may only be run against the admin database.")
    body = ctx.body
    name = body.get("configureFailPoint")
    if "mode" not in body:
        raise MongoError(9, "FailedToParse", "Missing mode argument")
    data = body.get("data", {})
    if not isinstance(data, dict):
        raise MongoError(14, "TypeMismatch", "the 'data' field must be an object")
    count = ctx.server.failpoints.configure(name, body["mode"], data)
    return {"count": count}


# ---- DDL ----

CREATE_OPTIONS = ("create", "changeStreamPreAndPostImages", "writeConcern", "viewOn", "pipeline")


def cmd_create(ctx):
    for key in ctx.body:
        if key not in CREATE_OPTIONS and key not in ctx.GENERIC_FIELDS:
            raise MongoError(2, "BadValue", "create option '%s' is not supported by the "
                             "flowwarden stand-in" % key)
    name = coll_name(ctx, "create")
    check_db_name(ctx.db)
    check_collection_name(ctx.db, name)
    opts = {}
    if "viewOn" in ctx.body:
        return _create_view(ctx, name)
    if "pipeline" in ctx.body:
        raise MongoError(9, "FailedToParse", "'pipeline' requires 'viewOn' to also be specified")
    if "changeStreamPreAndPostImages" in ctx.body:
        opts["changeStreamPreAndPostImages"] = {
            "enabled": bool(ctx.body["changeStreamPreAndPostImages"].get("enabled"))}
    with ctx.store.lock:
        _check_free(ctx.store, ctx.db, name)
        ctx.store.create_collection(ctx.db, name, opts)
        ctx.store.commit()
    return {}


def _check_free(store, db, name):
    if store.coll(db, name) is not None or store.view(db, name) is not None:
        raise MongoError(48, "NamespaceExists",
                         "Collection already exists. NS: %s.%s" % (db, name))


def _create_view(ctx, name):
    """create with viewOn (manual: reference/command/create): the view is kept, listed and
    dropped, and its create/drop events made; reading through it is not played."""
    view_on = ctx.body["viewOn"]
    pipeline = ctx.body.get("pipeline", [])
    if not isinstance(view_on, str) or not view_on:
        raise MongoError(14, "TypeMismatch", "BSON field 'create.viewOn' is the wrong type, "
                         "expected type 'string'")
    if not isinstance(pipeline, list):
        raise MongoError(14, "TypeMismatch", "BSON field 'create.pipeline' is the wrong type, "
                         "expected type 'array'")
    if "changeStreamPreAndPostImages" in ctx.body:
        raise MongoError(72, "InvalidOptions",
                         "option not supported on a view: changeStreamPreAndPostImages")
    with ctx.store.lock:
        _check_free(ctx.store, ctx.db, name)
        ctx.store.create_view(ctx.db, name, view_on, pipeline)
        ctx.store.commit()
    return {}


def cmd_drop(ctx):
    check_fields(ctx, ("drop",))
    name = coll_name(ctx, "drop")
    with ctx.store.lock:
        if ctx.store.view(ctx.db, name) is not None:
            ctx.store.drop_view(ctx.db, name)
            ctx.store.commit()
            return {"ns": ctx.db + "." + name}
        if ctx.store.coll(ctx.db, name) is None:
            raise MongoError(26, "NamespaceNotFound", "ns not found")
        n = ctx.store.drop_collection(ctx.db, name)
        ctx.store.commit()
    return {"nIndexesWas": n, "ns": ctx.db + "." + name}


def cmd_drop_database(ctx):
    check_fields(ctx, ("dropDatabase",))
    if ctx.db in ("admin", "config", "local"):
        raise MongoError(20, "IllegalOperation",
                         "Dropping the '%s' database is prohibited." % ctx.db)
    with ctx.store.lock:
        dropped = ctx.store.drop_database(ctx.db)
        ctx.store.commit()
    return {"dropped": ctx.db} if dropped else {}


def _split_ns(value, field):
    if not isinstance(value, str) or "." not in value:
        raise MongoError(73, "InvalidNamespace", "Invalid %s namespace: %s" % (field, value))
    db, _, coll = value.partition(".")
    return db, coll


def cmd_rename_collection(ctx):
    check_fields(ctx, ("renameCollection", "to", "dropTarget", "stayTemp"))
    if ctx.db != "admin":
        raise MongoError(13, "Unauthorized",
                         "renameCollection may only be run against the admin database.")
    src_db, src = _split_ns(ctx.body.get("renameCollection"), "source")
    dst_db, dst = _split_ns(ctx.body.get("to"), "target")
    check_collection_name(dst_db, dst)
    store = ctx.store
    with store.lock:
        if store.coll(src_db, src) is None:
            raise MongoError(26, "NamespaceNotFound",
                             "Source collection %s.%s does not exist" % (src_db, src))
        if (src_db, src) == (dst_db, dst):
            raise MongoError(20, "IllegalOperation",
                             "Can't rename a collection to itself")
        target = store.coll(dst_db, dst)
        if target is not None or store.view(dst_db, dst) is not None:
            if not ctx.body.get("dropTarget") or target is None:
                raise MongoError(48, "NamespaceExists", "target namespace exists")
            store.drop_collection(dst_db, dst)
        store.rename_collection(src_db, src, dst_db, dst,
                                target.uuid if target is not None else None)
        store.commit()
    return {}


def cmd_coll_mod(ctx):
    check_fields(ctx, ("collMod", "changeStreamPreAndPostImages", "index"))
    name = coll_name(ctx, "collMod")
    store = ctx.store
    reply = {}
    with store.lock:
        c = store.coll(ctx.db, name)
        if c is None:
            raise MongoError(26, "NamespaceNotFound", "ns does not exist")
        old_options = {"uuid": Binary(c.uuid.bytes, 4), **c.info_options()}
        index_old = None
        if "changeStreamPreAndPostImages" in ctx.body:
            spec = ctx.body["changeStreamPreAndPostImages"]
            if not isinstance(spec, dict) or not isinstance(spec.get("enabled"), bool):
                raise MongoError(40414, "Location40414", "BSON field 'collMod."
                                 "changeStreamPreAndPostImages.enabled' is missing but a "
                                 "required field")
            store.set_pre_post(c, spec["enabled"])
        if "index" in ctx.body:
            ix_spec = ctx.body["index"]
            ix = _find_index(c, ix_spec.get("name", ix_spec.get("keyPattern")))
            if "expireAfterSeconds" in ix_spec:
                if ix.ttl is None:
                    raise MongoError(72, "InvalidOptions", "no expireAfterSeconds field to "
                                     "update")
                reply["expireAfterSeconds_old"] = ix.ttl
                index_old = {"expireAfterSeconds": ix.ttl}
                store.set_ttl(c, ix.name, ix_spec["expireAfterSeconds"])
                reply["expireAfterSeconds_new"] = ix_spec["expireAfterSeconds"]
        # mongod logs every collMod, one that changes nothing included (the spec test
        # "modify events are reported" sends {collMod: name} alone).
        command = {k: v for k, v in ctx.body.items()
                   if k != "collMod" and k not in ctx.GENERIC_FIELDS}
        store.modify_event(c, command, old_options, index_old)
        store.commit()
    return reply


def _find_index(c, name_or_key):
    for ix in c.indexes.values():
        if ix.name == name_or_key or (isinstance(name_or_key, dict)
                                      and ix.spec["key"] == name_or_key):
            return ix
    if isinstance(name_or_key, dict):
        raise MongoError(27, "IndexNotFound",
                         "can't find index with key: %s" % _fmt(name_or_key))
    raise MongoError(27, "IndexNotFound", "index not found with name [%s]" % name_or_key)


def _fmt(v):
    from .bsonutil import format_doc
    return format_doc(v)


INDEX_OPTIONS = ("key", "name", "unique", "sparse", "expireAfterSeconds",
                 "partialFilterExpression", "background", "v", "ns")


def _normalize_index(spec):
    if not isinstance(spec, dict) or not isinstance(spec.get("key"), dict) or not spec["key"]:
        raise MongoError(9, "FailedToParse", "The 'key' field must be a non-empty object")
    for k in spec:
        if k not in INDEX_OPTIONS:
            raise MongoError(197, "InvalidIndexSpecificationOption",
                             "The field '%s' is not valid for an index specification. "
                             "(not supported by the flowwarden stand-in)" % k)
    for field, direction in spec["key"].items():
        if isinstance(direction, str) or not isinstance(direction, (int, float)) \
                or direction == 0:
            raise MongoError(67, "CannotCreateIndex", "Values in the index key pattern can only"
                             " be 1 or -1 (special index types are not supported by the "
                             "stand-in): %s: %r" % (field, direction))
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise MongoError(9, "FailedToParse", "The 'name' field is a required property of an "
                         "index specification")
    out = {"v": 2, "key": spec["key"], "name": name}
    for opt in ("unique", "sparse"):
        if spec.get(opt):
            out[opt] = True
    if "expireAfterSeconds" in spec:
        secs = spec["expireAfterSeconds"]
        if not isinstance(secs, (int, float)) or isinstance(secs, bool) or secs < 0:
            raise MongoError(2, "BadValue", "TTL index 'expireAfterSeconds' option must be "
                             "numeric and >= 0, but received: %r" % (secs,))
        if len(spec["key"]) != 1:
            raise MongoError(67, "CannotCreateIndex",
                             "TTL indexes are single-field indexes, compound indexes do not "
                             "support TTL.")
        out["expireAfterSeconds"] = int(secs)
    if "partialFilterExpression" in spec:
        out["partialFilterExpression"] = spec["partialFilterExpression"]
    return out


def _same_index(a, b):
    keys = ("key", "unique", "sparse", "expireAfterSeconds", "partialFilterExpression")
    return all(encode({"v": a.get(k)}) == encode({"v": b.get(k)}) for k in keys)


def cmd_create_indexes(ctx):
    check_fields(ctx, ("createIndexes", "indexes", "commitQuorum"))
    name = coll_name(ctx, "createIndexes")
    specs = ctx.body.get("indexes")
    if not isinstance(specs, list) or not specs:
        raise MongoError(2, "BadValue", "Must specify at least one index to create")
    specs = [_normalize_index(s) for s in specs]
    store = ctx.store
    with store.lock:
        created_coll = store.coll(ctx.db, name) is None
        c = store.get_or_create(ctx.db, name)
        before = len(c.indexes)
        new = []
        for spec in specs:
            existing = c.indexes.get(spec["name"])
            same_key = [ix for ix in c.indexes.values() if ix.spec["key"] == spec["key"]]
            if existing is not None:
                if _same_index(existing.spec, spec):
                    continue
                raise MongoError(86, "IndexKeySpecsConflict" if existing.spec["key"]
                                 != spec["key"] else "IndexOptionsConflict",
                                 "An existing index has the same name as the requested index. "
                                 "When index names are not specified, they are auto generated "
                                 "and can cause conflicts. Please refer to our documentation. "
                                 "Requested index: %s, existing index: %s"
                                 % (_fmt(spec), _fmt(existing.spec)))
            if same_key:
                if _same_index(same_key[0].spec, spec):
                    continue
                raise MongoError(85, "IndexOptionsConflict",
                                 "Index already exists with a different name: %s"
                                 % same_key[0].name)
            if spec["name"] == "_id_" or spec["key"] == {"_id": 1}:
                continue
            new.append(spec)
        built = []
        try:
            for spec in new:
                store.create_index(c, spec)
                built.append(spec)
        finally:
            if built:
                store.index_events(c, built)
            store.commit()
    reply = {"numIndexesBefore": before, "numIndexesAfter": before + len(new)}
    if created_coll:
        reply = {"createdCollectionAutomatically": True, **reply}
    else:
        reply = {"createdCollectionAutomatically": False, **reply}
    if not new:
        reply["note"] = "all indexes already exist"
    return reply


def cmd_list_indexes(ctx):
    check_fields(ctx, ("listIndexes", "cursor"))
    name = coll_name(ctx, "listIndexes")
    with ctx.store.lock:
        c = ctx.store.coll(ctx.db, name)
        if c is None:
            raise MongoError(26, "NamespaceNotFound", "ns does not exist: %s.%s"
                             % (ctx.db, name))
        raw = [encode(ix.spec) for ix in c.indexes.values()]
    batch = (ctx.body.get("cursor") or {}).get("batchSize", 101)
    return make_result_cursor(ctx, ctx.db + "." + name, raw, batch)


def cmd_drop_indexes(ctx):
    check_fields(ctx, ("dropIndexes", "deleteIndexes", "index"))
    name = coll_name(ctx, ctx.name)
    target = ctx.body.get("index")
    store = ctx.store
    with store.lock:
        c = store.coll(ctx.db, name)
        if c is None:
            raise MongoError(26, "NamespaceNotFound", "ns not found %s.%s" % (ctx.db, name))
        n = len(c.indexes)
        if target == "*":
            victims = [ix.name for ix in c.indexes.values() if not ix.is_id]
        elif isinstance(target, list):
            victims = [_find_index(c, t).name for t in target]
        else:
            victims = [_find_index(c, target).name]
        for v in victims:
            if v == "_id_":
                raise MongoError(72, "InvalidOptions", "cannot drop _id index")
        for v in victims:
            store.drop_index(c, v)
        store.commit()
    return {"nIndexesWas": n}


def cmd_list_collections(ctx):
    check_fields(ctx, ("listCollections", "filter", "nameOnly", "authorizedCollections",
                       "cursor"))
    flt = ctx.body.get("filter") or {}
    name_only = bool(ctx.body.get("nameOnly"))
    from . import query
    out = []
    with ctx.store.lock:
        for c in list(ctx.store.dbs.get(ctx.db, {}).values()):
            if name_only:
                info = {"name": c.name, "type": "collection"}
            else:
                from bson.binary import Binary
                info = {"name": c.name, "type": "collection", "options": c.info_options(),
                        "info": {"readOnly": False, "uuid": Binary(c.uuid.bytes, 4)},
                        "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
            if not flt or query.matches(info, flt):
                out.append(encode(info))
        for name, spec in list(ctx.store.views.get(ctx.db, {}).items()):
            info = {"name": name, "type": "view"}
            if not name_only:
                info["options"] = dict(spec)
                info["info"] = {"readOnly": True}
            if not flt or query.matches(info, flt):
                out.append(encode(info))
    batch = (ctx.body.get("cursor") or {}).get("batchSize", 101)
    return make_result_cursor(ctx, ctx.db + ".$cmd.listCollections", out, batch)


def cmd_list_databases(ctx):
    check_fields(ctx, ("listDatabases", "filter", "nameOnly", "authorizedDatabases"))
    if ctx.db != "admin":
        raise MongoError(13, "Unauthorized",
                         "listDatabases may only be run against the admin database.")
    from . import query
    flt = ctx.body.get("filter") or {}
    dbs = []
    with ctx.store.lock:
        names = set(ctx.store.dbs) | {"admin", "config", "local"}
        for name in sorted(names):
            colls = ctx.store.dbs.get(name, {})
            size = sum(len(encode(d)) for c in colls.values() for d in c.docs.values())
            size = max(size, 8192) if name in ctx.store.dbs or name == "local" else 8192
            entry = {"name": name} if ctx.body.get("nameOnly") else \
                {"name": name, "sizeOnDisk": Int64(size), "empty": False}
            if not flt or query.matches(entry, flt):
                dbs.append(entry)
    if ctx.body.get("nameOnly"):
        return {"databases": dbs}
    total = sum(d.get("sizeOnDisk", 0) for d in dbs)
    return {"databases": dbs, "totalSize": Int64(total), "totalSizeMb": Int64(total >> 20)}


COMMANDS = {
    "hello": cmd_hello, "isMaster": cmd_hello, "ismaster": cmd_hello, "ping": cmd_ping,
    "buildInfo": cmd_build_info, "buildinfo": cmd_build_info,
    "serverStatus": cmd_server_status, "endSessions": cmd_end_sessions,
    "killSessions": cmd_kill_sessions, "getParameter": cmd_get_parameter,
    "configureFailPoint": cmd_configure_fail_point, "create": cmd_create, "drop": cmd_drop,
    "dropDatabase": cmd_drop_database, "renameCollection": cmd_rename_collection,
    "collMod": cmd_coll_mod, "createIndexes": cmd_create_indexes,
    "listIndexes": cmd_list_indexes, "dropIndexes": cmd_drop_indexes,
    "deleteIndexes": cmd_drop_indexes, "listCollections": cmd_list_collections,
    "listDatabases": cmd_list_databases,
}
