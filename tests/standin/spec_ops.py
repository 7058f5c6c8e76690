"""The unified format's operations, mapped onto pymongo 3.11 (spec_unified.py's runner).

Each operation checks its arguments against the ones it maps; an argument pymongo 3.11 cannot
send raises Unsupported, and the runner skips the test saying which (never sends something
else instead).
"""

import time
from collections import namedtuple

from bson.son import SON
from pymongo import (DeleteMany, DeleteOne, InsertOne, ReplaceOne, ReturnDocument, UpdateMany,
                     UpdateOne)
from pymongo.change_stream import (ClusterChangeStream, CollectionChangeStream,
                                   DatabaseChangeStream)
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.mongo_client import MongoClient

ITERATE_TIMEOUT = 10.0


class Unsupported(Exception):
    pass


FailPoint = namedtuple("FailPoint", "admin name")


def _args(args, allowed, rename=None):
    """pymongo keyword arguments from the test's, refusing those not in `allowed`."""
    rename = rename or {}
    out = {}
    for key, value in args.items():
        if key not in allowed:
            raise Unsupported("argument %s (pymongo 3.11 has no such option here)" % key)
        out[rename.get(key, key)] = value
    return out


_COMMON_RENAME = {"arrayFilters": "array_filters", "bypassDocumentValidation":
                  "bypass_document_validation"}


def _pairs(a, *keys):
    """pymongo 3.11 takes sort and hint specifications as lists of pairs."""
    for key in keys:
        if isinstance(a.get(key), dict):
            a[key] = list(a[key].items())
    return a


# --- results as the format names them -----------------------------------------------------

def bulk_result(d):
    upserted = {str(u["index"]): u["_id"] for u in d.get("upserted", [])}
    return {"deletedCount": d.get("nRemoved", 0), "insertedCount": d.get("nInserted", 0),
            "matchedCount": d.get("nMatched", 0), "modifiedCount": d.get("nModified", 0),
            "upsertedCount": d.get("nUpserted", 0), "upsertedIds": upserted,
            "insertedIds": {}}


def _update_result(r):
    out = {"matchedCount": r.matched_count, "modifiedCount": r.modified_count,
           "upsertedCount": 0 if r.upserted_id is None else 1}
    if r.upserted_id is not None:
        out["upsertedId"] = r.upserted_id
    return out


# --- collection operations ----------------------------------------------------------------

def _find_kwargs(args):
    a = _args(args, ("filter", "sort", "skip", "limit", "batchSize", "projection", "hint",
                     "collation", "comment", "allowDiskUse", "maxTimeMS", "min", "max",
                     "returnKey", "showRecordId", "noCursorTimeout"),
              {"batchSize": "batch_size", "allowDiskUse": "allow_disk_use",
               "maxTimeMS": "max_time_ms", "noCursorTimeout": "no_cursor_timeout",
               "returnKey": "return_key", "showRecordId": "show_record_id"})
    return _pairs(a, "sort", "hint")


def op_find(t, coll, args):
    a = _find_kwargs(args)
    return list(coll.find(a.pop("filter", {}), **a))


def op_find_one(t, coll, args):
    a = _find_kwargs(args)
    return coll.find_one(a.pop("filter", {}), **a)


def op_insert_one(t, coll, args):
    a = _args(args, ("document", "bypassDocumentValidation"), _COMMON_RENAME)
    r = coll.insert_one(a.pop("document"), **a)
    return {"insertedId": r.inserted_id}


def op_insert_many(t, coll, args):
    a = _args(args, ("documents", "ordered", "bypassDocumentValidation"), _COMMON_RENAME)
    r = coll.insert_many(a.pop("documents"), **a)
    return {"insertedIds": {str(i): v for i, v in enumerate(r.inserted_ids)}}


_UPDATE_ARGS = ("filter", "update", "upsert", "arrayFilters", "collation", "hint",
                "bypassDocumentValidation")


def _update(method):
    def op(t, coll, args):
        a = _pairs(_args(args, _UPDATE_ARGS, _COMMON_RENAME), "hint")
        return _update_result(getattr(coll, method)(a.pop("filter"), a.pop("update"), **a))
    return op


def op_replace_one(t, coll, args):
    a = _args(args, ("filter", "replacement", "upsert", "collation", "hint",
                     "bypassDocumentValidation"), _COMMON_RENAME)
    _pairs(a, "hint")
    return _update_result(coll.replace_one(a.pop("filter"), a.pop("replacement"), **a))


def _delete(method):
    def op(t, coll, args):
        a = _pairs(_args(args, ("filter", "collation", "hint")), "hint")
        return {"deletedCount": getattr(coll, method)(a.pop("filter"), **a).deleted_count}
    return op


def _fam(method, body_key):
    def op(t, coll, args):
        allowed = ["filter", "projection", "sort", "collation", "hint", "upsert",
                   "returnDocument", "arrayFilters", "bypassDocumentValidation"]
        if body_key:
            allowed.append(body_key)
        a = _args(args, allowed, _COMMON_RENAME)
        if "returnDocument" in a:
            a["return_document"] = (ReturnDocument.AFTER if a.pop("returnDocument") == "After"
                                    else ReturnDocument.BEFORE)
        _pairs(a, "sort", "hint")
        pos = [a.pop("filter")] + ([a.pop(body_key)] if body_key else [])
        return getattr(coll, method)(*pos, **a)
    return op


def op_aggregate(t, target, args):
    a = _args(args, ("pipeline", "batchSize", "allowDiskUse", "collation", "comment",
                     "maxTimeMS", "hint"), _COMMON_RENAME)
    _pairs(a, "hint")
    return list(target.aggregate(a.pop("pipeline"), **a))


def op_count_documents(t, coll, args):
    a = _pairs(_args(args, ("filter", "skip", "limit", "hint", "collation", "maxTimeMS")),
               "hint")
    return coll.count_documents(a.pop("filter"), **a)


def op_estimated_document_count(t, coll, args):
    a = _args(args, ("maxTimeMS",))
    return coll.estimated_document_count(**a)


def op_count(t, coll, args):
    a = _args(args, ("filter", "skip", "limit", "collation"))
    return coll.count(a.pop("filter", {}), **a)


def op_distinct(t, coll, args):
    a = _args(args, ("fieldName", "filter", "collation", "maxTimeMS"))
    return coll.distinct(a.pop("fieldName"), a.pop("filter", {}), **a)


_BULK = {"insertOne": (InsertOne, ("document",)),
         "updateOne": (UpdateOne, ("filter", "update", "upsert", "arrayFilters", "collation",
                                   "hint")),
         "updateMany": (UpdateMany, ("filter", "update", "upsert", "arrayFilters", "collation",
                                     "hint")),
         "replaceOne": (ReplaceOne, ("filter", "replacement", "upsert", "collation", "hint")),
         "deleteOne": (DeleteOne, ("filter", "collation", "hint")),
         "deleteMany": (DeleteMany, ("filter", "collation", "hint"))}


def op_bulk_write(t, coll, args):
    a = _args(args, ("requests", "ordered", "bypassDocumentValidation"), _COMMON_RENAME)
    requests, inserted = [], {}
    for i, req in enumerate(a.pop("requests")):
        (kind, body), = req.items()
        cls, allowed = _BULK[kind]
        kw = _pairs(_args(body, allowed, {"arrayFilters": "array_filters"}), "hint")
        if kind == "insertOne":
            inserted[i] = kw["document"]
            requests.append(cls(kw["document"]))
            continue
        pos = [kw.pop("filter")]
        if "update" in kw:
            pos.append(kw.pop("update"))
        if "replacement" in kw:
            pos.append(kw.pop("replacement"))
        requests.append(cls(*pos, **kw))
    r = coll.bulk_write(requests, **a)
    out = bulk_result(r.bulk_api_result)
    # pymongo sets the _id of each inserted document in place.
    out["insertedIds"] = {str(i): d["_id"] for i, d in inserted.items()}
    return out


def op_create_index(t, coll, args):
    a = _args(args, ("keys", "name", "unique"))
    return coll.create_index(list(a.pop("keys").items()), **a)


def op_drop_index(t, coll, args):
    a = _args(args, ("name",))
    coll.drop_index(a["name"])


def op_rename(t, coll, args):
    a = _args(args, ("to", "dropTarget"))
    coll.rename(a["to"], **({"dropTarget": a["dropTarget"]} if "dropTarget" in a else {}))


def op_list_indexes(t, coll, args):
    _args(args, ())
    return list(coll.list_indexes())


def op_list_index_names(t, coll, args):
    _args(args, ())
    return [ix["name"] for ix in coll.list_indexes()]


# --- database and client operations -------------------------------------------------------

def op_run_command(t, db, args):
    a = _args(args, ("command", "commandName", "readPreference"))
    if "readPreference" in a:
        raise Unsupported("runCommand readPreference")
    return db.command(SON(list(a["command"].items())))


def op_drop_collection(t, db, args):
    a = _args(args, ("collection",))
    db.drop_collection(a["collection"])


def op_create_collection(t, db, args):
    name = args["collection"]
    opts = [(k, v) for k, v in args.items() if k != "collection"]
    db.command(SON([("create", name)] + opts))
    return db[name]


def op_modify_collection(t, db, args):
    name = args["collection"]
    opts = [(k, v) for k, v in args.items() if k != "collection"]
    db.command(SON([("collMod", name)] + opts))


def op_list_collections(t, db, args):
    a = _args(args, ("filter",))
    return list(db.list_collections(filter=a.get("filter")))


def op_list_collection_names(t, db, args):
    a = _args(args, ("filter",))
    return db.list_collection_names(filter=a.get("filter"))


def op_list_databases(t, client, args):
    _args(args, ())
    return list(client.list_databases())


def op_list_database_names(t, client, args):
    _args(args, ())
    return client.list_database_names()


# --- change streams -----------------------------------------------------------------------

_STAGE_EXTRA = ("fullDocumentBeforeChange", "showExpandedEvents")


def _stream_class(base, stage_extra, command_extra):
    class Stream(base):
        def _change_stream_options(self):
            options = super()._change_stream_options()
            options.update(stage_extra)
            return options

        def _command_options(self):
            options = super()._command_options()
            options.update(command_extra)
            return options
    return Stream


def op_create_change_stream(t, target, args):
    a = _args(args, ("pipeline", "batchSize", "fullDocument", "fullDocumentBeforeChange",
                     "resumeAfter", "startAfter", "startAtOperationTime", "maxAwaitTimeMS",
                     "showExpandedEvents", "comment", "collation"))
    stage_extra = {k: a.pop(k) for k in _STAGE_EXTRA if k in a}
    command_extra = {"comment": a.pop("comment")} if "comment" in a else {}
    if isinstance(target, Collection):
        base = CollectionChangeStream
    elif isinstance(target, Database):
        base = DatabaseChangeStream
    elif isinstance(target, MongoClient):
        base = ClusterChangeStream
        target = target.admin
    else:
        raise Unsupported("createChangeStream on %s" % type(target).__name__)
    cls = _stream_class(base, stage_extra, command_extra)
    return cls(target, a.get("pipeline", []), a.get("fullDocument"), a.get("resumeAfter"),
               a.get("maxAwaitTimeMS"), a.get("batchSize"), a.get("collation"),
               a.get("startAtOperationTime"), None, a.get("startAfter"))


def op_iterate_until_document_or_error(t, stream, args):
    deadline = time.monotonic() + ITERATE_TIMEOUT
    while time.monotonic() < deadline:
        doc = stream.try_next()
        if doc is not None:
            return doc
    raise AssertionError("no change event within %.0f s" % ITERATE_TIMEOUT)


def op_iterate_once(t, stream, args):
    return stream.try_next()


def op_close(t, stream, args):
    stream.close()


# --- the test runner's own operations -----------------------------------------------------

def op_fail_point(t, _runner, args):
    client = t.entities[args["client"]]
    fp = args["failPoint"]
    client.admin.command(SON(list(fp.items())))
    t.failpoints.append(FailPoint(client.admin, fp["configureFailPoint"]))


def op_create_entities(t, _runner, args):
    t.entities.create(args["entities"])


def op_assert_collection_exists(t, _runner, args):
    names = t.runner.admin[args["databaseName"]].list_collection_names()
    if args["collectionName"] not in names:
        raise AssertionError("collection %s does not exist" % args["collectionName"])


def op_assert_collection_not_exists(t, _runner, args):
    names = t.runner.admin[args["databaseName"]].list_collection_names()
    if args["collectionName"] in names:
        raise AssertionError("collection %s exists" % args["collectionName"])


OPS = {
    "find": op_find, "findOne": op_find_one, "insertOne": op_insert_one,
    "insertMany": op_insert_many, "updateOne": _update("update_one"),
    "updateMany": _update("update_many"), "replaceOne": op_replace_one,
    "deleteOne": _delete("delete_one"), "deleteMany": _delete("delete_many"),
    "findOneAndUpdate": _fam("find_one_and_update", "update"),
    "findOneAndReplace": _fam("find_one_and_replace", "replacement"),
    "findOneAndDelete": _fam("find_one_and_delete", None),
    "aggregate": op_aggregate, "countDocuments": op_count_documents,
    "estimatedDocumentCount": op_estimated_document_count, "count": op_count,
    "distinct": op_distinct, "bulkWrite": op_bulk_write, "createIndex": op_create_index,
    "dropIndex": op_drop_index, "rename": op_rename, "listIndexes": op_list_indexes,
    "listIndexNames": op_list_index_names, "runCommand": op_run_command,
    "dropCollection": op_drop_collection, "createCollection": op_create_collection,
    "modifyCollection": op_modify_collection, "listCollections": op_list_collections,
    "listCollectionNames": op_list_collection_names, "listCollectionObjects":
    op_list_collections, "listDatabases": op_list_databases, "listDatabaseNames":
    op_list_database_names, "listDatabaseObjects": op_list_databases,
    "createChangeStream": op_create_change_stream,
    "iterateUntilDocumentOrError": op_iterate_until_document_or_error,
    "iterateOnce": op_iterate_once, "close": op_close,
    "failPoint": op_fail_point, "createEntities": op_create_entities,
    "assertCollectionExists": op_assert_collection_exists,
    "assertCollectionNotExists": op_assert_collection_not_exists,
}


def run(t, name, obj, args):
    fn = OPS.get(name)
    if fn is None:
        raise Unsupported("operation %s" % name)
    if "session" in args:
        raise Unsupported("sessions")
    target = None if obj == "testRunner" else t.entities[obj]
    return fn(t, target, args)
