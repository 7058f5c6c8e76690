"""CRUD, cursor and aggregate commands. Matching, updating and pipelines are the engine's job
(query.py, update.py, aggregate.py, compare.py); this module applies their results to the store
and shapes replies like mongod 6.0.
"""

import copy
import datetime
import time

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex

from . import bsonutil, idindex, sessions, sortlimit
from .bsonutil import encode, value_key
from .changestream import ChangeStream, RESUMABLE_CODES
from .cursors import ResultCursor, cursor_not_found
from .errors import MongoError
from .expressions import operation_now
from .failpoints import code_name
from .storage import DuplicateKey, Store, check_collection_name

DEFAULT_BATCH = 101
DEFAULT_AWAIT_MS = 1000


def _yield_lock(store):
    """Between runs of a getMore's build: a command waiting for the store's lock takes it now
    (sleep(0) lets Python's other threads run); without one this costs next to nothing."""
    store.lock.release()
    try:
        time.sleep(0)
    finally:
        store.lock.acquire()


class _Engine:
    """The document engine's modules, imported on first use (query, update, aggregate, compare,
    update_fast) and kept: a write asks for them once per statement."""

    def __init__(self):
        self.mods = [None] * 5

    def __getitem__(self, i):
        m = self.mods[i]
        if m is None:
            import importlib
            m = self.mods[i] = importlib.import_module(
                "." + ("query", "update", "aggregate", "compare",
                                      "update_fast")[i], __package__)
        return m


_ENGINE = _Engine()


def warm_engine():
    """Imports the engine's modules ahead of their first use (run on a thread of its own once
    the stand-in listens): the first statement that needs them (the first update by more than
    `_id`, the first filtered find) cost 5-25 ms more than the next ones, a per-process start
    cost mongod does not have, which showed in the first round of every benchmark."""
    for i in range(len(_ENGINE.mods)):
        _ENGINE[i]


def _engine():
    return _ENGINE


class CursorResult:
    """What a cursor-returning command hands to the reply builder."""

    def __init__(self, batch_name, docs, cursor_id, ns, extra=b"", fields=None):
        self.batch_name = batch_name
        self.docs = docs
        self.cursor_id = cursor_id
        self.ns = ns
        self.extra = extra
        self.fields = fields or {}


def coll_name(ctx, key):
    name = ctx.body.get(key)
    if not isinstance(name, str):
        raise MongoError(73, "InvalidNamespace",
                         "collection name has invalid type %s" % type(name).__name__)
    if not name:
        raise MongoError(73, "InvalidNamespace", "Invalid namespace specified '%s.'" % ctx.db)
    return name


def check_fields(ctx, allowed):
    for key in ctx.body:
        if key not in allowed and key not in ctx.GENERIC_FIELDS:
            raise MongoError(40415, "Location40415", "BSON field '%s.%s' is an unknown field."
                             % (ctx.name, key))


def check_collation(spec, where):
    if spec is not None and spec != {} and spec.get("locale") != "simple":
        raise MongoError(2, "BadValue", "%s: collation is not supported by the flowwarden "
                         "stand-in (only {locale: 'simple'})" % where)


def _id_literal(flt):
    """True when the filter is {_id: <literal>}: the _id index's point lookup answers it."""
    if len(flt) == 1 and "_id" in flt:
        v = flt["_id"]
        return not isinstance(v, (dict, list, bsonutil.Regex)) and type(v).__name__ != "Pattern"
    return False


def candidates(c, flt):
    """Documents that may match: a direct _id lookup when the filter is {_id: <literal>}."""
    if c is None:
        return []
    if _id_literal(flt):
        d = c.docs.get(value_key(flt["_id"]))
        return [d] if d is not None else []
    return list(c.docs.values())


def matching(c, flt):
    if c is not None and _id_literal(flt):
        return candidates(c, flt)   # the lookup is the match (mongod's IDHACK)
    query = _engine()[0]
    return [d for d in candidates(c, flt) if query.matches(d, flt)]


def _id_sort_direction(sort):
    """1 or -1 when a (valid) sort spec is exactly {_id: 1} or {_id: -1}, else None."""
    if not isinstance(sort, dict) or len(sort) != 1 or "_id" not in sort:
        return None
    fields = _engine()[3].parse_sort_spec(sort)
    return fields[0][1]


def matching_by_id(c, flt, direction, want):
    """The documents matching flt in _id order (direction 1 or -1), at most `want` of them
    (0: all), read from the _id index: only the _id range the filter allows is walked (mongod's
    IXSCAN on _id_ with a limit). None when the index cannot serve it (an array _id)."""
    if c is None:
        return []
    ix = c.id_index
    if not ix.usable():
        return None
    docs = c.docs
    exact = idindex.exact_range(flt) if direction > 0 else None
    if exact is not None:
        # The range is the match: no document needs the filter (mongod's IXSCAN bounds
        # with no residual predicate).
        return [docs[vk] for vk in ix.between(*exact, want=want)]
    match = _engine()[0].matcher(flt)
    rng = idindex.id_range(flt)
    lo, hi = rng if rng else (None, None)
    out = []
    for vk in ix.scan(lo, hi, reverse=direction < 0):
        d = docs[vk]
        if match(d):
            out.append(d)
            if want and len(out) >= want:
                break
    return out


def write_error(index, err):
    if isinstance(err, DuplicateKey):
        return err.write_error(index)
    we = {"index": index, "code": err.code, "errmsg": err.errmsg}
    return we


def documents_of(ctx, field):
    seq = ctx.req.sequences.get(field) if ctx.req.sequences else None
    if isinstance(seq, list):
        return seq
    docs = ctx.body.get(field)
    if not isinstance(docs, list):
        raise MongoError(40414, "Location40414",
                         "BSON field '%s.%s' is missing but a required field" % (ctx.name, field))
    return docs


# ---- writes ----

def _storage_valid_embedded(doc):
    """mongod's BSONObj::storageValidEmbedded for an _id document: no $-prefixed field at any
    depth but a DBRef's ($ref first, then $id, $db)."""
    first = True
    for k, v in doc.items():
        if k.startswith("$") and not (
                (first and k == "$ref") or (not first and k in ("$id", "$db"))):
            raise MongoError(52, "DollarPrefixedFieldName", "%s is not valid for storage." % k)
        first = False
        if isinstance(v, dict):
            _storage_valid_embedded(v)
        elif isinstance(v, list):
            for item in v:
                if isinstance(item, dict):
                    _storage_valid_embedded(item)


def check_insert_id(doc):
    """The _id checks of mongod's fixDocumentForInsert (ops/insert.cpp): no array, regex or
    undefined, and an _id document valid for storage (the spec test insertOne-dots_and_dollars
    "Inserting document with dollar-prefixed key in _id yields server-side error")."""
    _id = doc.get("_id")
    if isinstance(_id, list):
        raise MongoError(2, "BadValue", "can't use an array for _id")
    if isinstance(_id, Regex) or hasattr(_id, "pattern"):
        raise MongoError(2, "BadValue", "can't use a regex for _id")
    if isinstance(_id, dict):
        _storage_valid_embedded(_id)


def parse_statements(ctx, field, allowed, required=(), items=None):
    """The command's statements (items: those of them to parse, else all), decoded, with
    their fields checked as mongod's IDL parser checks them before anything runs: an unknown
    field (40415; e.g. `sort` in an update before MongoDB 8.0) or a missing one (40414) fails
    the whole command, not one statement."""
    stmts = []
    if items is None:
        items = documents_of(ctx, field)
    if items and all(type(st) is bytes for st in items):
        items = bsonutil.decode_all(b"".join(items))    # one call: half the cost of one each
    for st in items:
        if isinstance(st, bytes):
            st = bsonutil.decode(st)
        if not isinstance(st, dict):
            raise MongoError(14, "TypeMismatch", "BSON field '%s.%s' is the wrong type, "
                             "expected type 'object'" % (ctx.name, field))
        for key in st:
            if key not in allowed:
                raise MongoError(40415, "Location40415", "BSON field '%s.%s.%s' is an unknown "
                                 "field." % (ctx.name, field, key))
        for key in required:
            if key not in st:
                raise MongoError(40414, "Location40414", "BSON field '%s.%s.%s' is missing but "
                                 "a required field" % (ctx.name, field, key))
        stmts.append(st)
    return stmts


# What a retryable write remembers of an inserted document (never modified).
_INSERTED = {"n": 1}


def cmd_insert(ctx):
    check_fields(ctx, ("insert", "documents", "ordered", "bypassDocumentValidation"))
    name = coll_name(ctx, "insert")
    docs = documents_of(ctx, "documents")
    ordered = ctx.body.get("ordered", True)
    store = ctx.store
    n = 0
    errors = []
    txn = sessions.begin(ctx)
    with store.lock:
        c = store.get_or_create(ctx.db, name)
        for i, item in enumerate(docs):
            if txn is not None and txn.executed(i) is not None:
                n += 1      # a retried statement that ran already (sessions.py)
                continue
            try:
                if txn is not None:
                    txn.about_to_write()
                if isinstance(item, bytes):
                    doc = bsonutil.decode(item)
                    raw = item
                else:
                    doc, raw = item, None
                if "_id" not in doc:
                    doc = dict(_id=ObjectId(), **doc)
                    raw = None
                check_insert_id(doc)
                store.insert(c, doc, raw)
                n += 1
                if txn is not None:
                    txn.record(i, _INSERTED)
            except MongoError as e:
                errors.append(write_error(i, e))
                if ordered:
                    break
        store.stats["insert"] += n
        store.commit()
    reply = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return reply


def _apply_one(c, doc, u, replacement, now):
    update = _engine()[1]
    if replacement == PIPELINE:
        new, ud = update.apply_pipeline_update(doc, update.check_pipeline_update(u))
    elif replacement:
        new = update.apply_replacement(doc, u)
        ud = None
    else:
        new, ud = update.apply_update(doc, u, now=now)
    if value_key(new.get("_id")) != value_key(doc["_id"]):
        raise MongoError(66, "ImmutableField",
                         "After applying the update, the (immutable) field '_id' was found to "
                         "have been altered to _id: %s" % bsonutil.format_value(new.get("_id")))
    return new, ud


def _upsert_doc(flt, u, replacement, now):
    update = _engine()[1]
    seed = update.upsert_seed(flt)
    if replacement == PIPELINE:
        new, _ = update.apply_pipeline_update(seed, update.check_pipeline_update(u),
                                              is_upsert_insert=True)
    elif replacement:
        new = dict(u)
        if "_id" not in new and "_id" in seed:
            new = dict(_id=seed["_id"], **new)
    else:
        new, _ = update.apply_update(seed, u, is_upsert_insert=True, now=now)
    if "_id" not in new:
        new = dict(_id=ObjectId(), **new)
    return new


# _check_update_spec's answer for an update given as an aggregation pipeline.
PIPELINE = "pipeline"


def _check_update_spec(u, multi, where):
    """False: operator update, True: replacement, PIPELINE: an update pipeline."""
    update = _engine()[1]
    if isinstance(u, list):
        update.check_pipeline_update(u)
        return PIPELINE
    if not isinstance(u, dict):
        raise MongoError(14, "TypeMismatch", "%s: update must be an object" % where)
    replacement = update.is_replacement(u)
    if replacement and multi:
        raise MongoError(9, "FailedToParse",
                         "multi update is not supported for replacement-style update")
    return replacement


def _same(new, old, ud=None):
    """(whether new's bytes are old's, new's bytes): the bytes go on to store.update. ud: an
    operator update's description, which logs every change but a binary no-op (update.py's
    set_value): one that names a field changed the document, as mongod's update driver knows
    from its log without comparing the documents' bytes."""
    raw = encode(new)
    if ud and (ud.get("updatedFields") or ud.get("removedFields") or ud.get("truncatedArrays")):
        return False, raw
    return raw == encode(old), raw


# An update by _id's results (never changed: a retryable write keeps them as they are).
_MODIFIED = {"n": 1, "nModified": 1}
_UNMODIFIED = {"n": 1, "nModified": 0}


def _update_by_id(store, c, fp, txn, fast, sized):
    """The result of the statement planned as fp (update_fast.plan's) when update_fast's path
    runs it (an existing document), else None: nothing was done and the general path runs
    it. c: the collection (None when there is none yet); fast: the update_fast module; sized:
    the store keeps sizes instead of bytes (a plain Store)."""
    if c is None:
        return None
    # The _id types plan() accepts are their own value_key (bsonutil.value_key).
    doc = c.docs.get(fp[0])
    if doc is None:
        return None
    # The new size from the old one: the new bytes are made when a read wants them (a
    # counter is often written far more often than it is read).
    res = fast.apply_sized(doc, fp[1], c.stored_size(fp[0], doc) if sized else None)
    if res is None:
        return None
    if txn is not None and txn.point.mode != "off":
        txn.about_to_write()
    new, ud, size = res
    if not ud:
        return _UNMODIFIED
    if size is not None:
        # plan()'s _id is its own value_key (the stored _id's when of the same type: 1
        # finds 1.0); its fields are top-level.
        if type(doc["_id"]) is type(fp[0]) and next(iter(new)) == "_id":
            store.update_sized(c, doc, new, ud, size, fp[0])
        else:
            store.update(c, doc, new, ud, size=size, top=True)
    else:
        store.update(c, doc, new, ud, encode(new))
    return _MODIFIED


def _update_filtered(store, c, st, txn, fast, sized):
    """The result of st, a statement update_fast.plan_filtered reads (a checkpoint write: an
    `_id` and a few predicates on top-level fields), run as mongod's plan for it runs it (the
    _id index's point bounds, a FETCH filtered by the rest): the document the `_id` finds,
    the predicates on it (filter_fast), then
    update_fast's apply. None when nothing was done and the general path runs it: no such
    shape, no collection or document (n = 0 or the upsert's insert), a value the predicates
    do not compare, a miss with upsert (the insert's duplicate key), an update apply() refuses
    (to raise its error)."""
    if c is None:
        return None
    fp = fast.plan_filtered(st)
    if fp is None:
        return None
    doc = c.docs.get(fp[0])     # plan_filtered's _id types are their own value_key
    if doc is None:
        return None
    matched = fast.filter_fast.match(doc, fp[2])
    if matched is None:
        return None
    if not matched:
        if st.get("upsert"):
            return None
        if txn is not None and txn.point.mode != "off":
            txn.about_to_write()
        return {"n": 0, "nModified": 0}
    return _update_by_id(store, c, fp, txn, fast, sized)


def _update_statement(store, db, name, st, txn, now, query):
    """One update statement through the general path: its result ({n, nModified} and
    `upserted`: the new _id)."""
    if st.get("arrayFilters"):
        raise MongoError(2, "BadValue", "arrayFilters are not supported by the "
                         "flowwarden stand-in")
    check_collation(st.get("collation"), "update")
    flt = st.get("q", {})
    u = st.get("u")
    multi = bool(st.get("multi", False))
    replacement = _check_update_spec(u, multi, "update")
    query.validate_filter(flt, upsert=bool(st.get("upsert")))
    if txn is not None:
        txn.about_to_write()
    c = store.coll(db, name)
    docs = matching(c, flt)
    if not multi:
        docs = docs[:1]
    result = {"n": len(docs), "nModified": 0}
    for doc in docs:
        new, ud = _apply_one(c, doc, u, replacement, now)
        same, raw = _same(new, doc, ud if replacement is False else None)
        if not same:
            store.update(c, doc, new, ud, raw)
            result["nModified"] += 1
    if not docs and st.get("upsert"):
        new = _upsert_doc(flt, u, replacement, now)
        c = store.get_or_create(db, name)
        store.insert(c, new)
        result = {"n": 1, "nModified": 0, "upserted": new["_id"]}
    return result


_UPDATE_FIELDS = ("q", "u", "multi", "upsert", "hint", "collation", "arrayFilters", "c",
                  "upsertSupplied")


def parse_updates(ctx, fast):
    """The update command's statements, checked as parse_statements checks them (before any
    runs), as two lists: each one's update_fast plan (_id, ops) when it has that shape, and
    each one decoded, or None for a statement of a shape seen before in a checked statement
    (update_fast.by_id_shape: its plan is known; decoded when the general path needs it)."""
    items = documents_of(ctx, "updates")
    if not items or not all(type(st) is bytes for st in items):
        stmts = parse_statements(ctx, "updates", _UPDATE_FIELDS, items=items)
        return [fast.plan(st) for st in stmts], stmts
    shape_of, planned = fast.by_id_shape, fast.SHAPES.get
    plans = []
    shapes = []
    todo = []
    for i, raw in enumerate(items):
        shape = shape_of(raw)
        ops = planned(shape[1]) if shape is not None else None
        if ops is None:
            plans.append(None)
            shapes.append(shape)
            todo.append(i)
        else:
            plans.append((shape[0], ops))
    stmts = [None] * len(items)
    if todo:
        # The others decoded and checked in one call, as before: their errors are those.
        decoded = parse_statements(ctx, "updates", _UPDATE_FIELDS,
                                   items=[items[i] for i in todo])
        for j, i in enumerate(todo):
            st = stmts[i] = decoded[j]
            fp = plans[i] = fast.plan(st)
            if shapes[j] is not None:
                fast.remember(shapes[j], st, fp)
    return plans, stmts


def cmd_update(ctx):
    check_fields(ctx, ("update", "updates", "ordered", "bypassDocumentValidation", "let"))
    if "let" in ctx.body:
        raise MongoError(2, "BadValue", "update: 'let' is not supported by the stand-in")
    name = coll_name(ctx, "update")
    fast = _engine()[4]
    plans, stmts = parse_updates(ctx, fast)
    items = documents_of(ctx, "updates")
    ordered = ctx.body.get("ordered", True)
    query = _engine()[0]
    store = ctx.store
    n = n_modified = 0
    upserted = []
    errors = []
    now = datetime.datetime.utcnow()
    txn = sessions.begin(ctx)
    sized = type(store) is Store
    with store.lock, operation_now(now):
        # Asked once: none of the command's statements ran yet (the usual case), so none is
        # looked up before it runs (each is still recorded, for a retry of the command).
        retried = txn is not None and not txn.fresh()
        db = ctx.db
        c = store.coll(db, name)
        for i, fp in enumerate(plans):
            done = txn.executed(i) if retried else None
            if done is not None:
                # A retried statement that ran already: its result, not a second run.
                n += done["n"]
                n_modified += done["nModified"]
                if "upserted" in done:
                    upserted.append({"index": i, "_id": done["upserted"]})
                continue
            try:
                result = None
                if fp is not None:
                    if store.observer is not None:
                        # Looked up again: a write that waited for a transaction (the
                        # observer) let other commands run, a drop among them. Without one,
                        # nothing lets go of the store's lock between statements.
                        c = store.coll(db, name)
                    result = _update_by_id(store, c, fp, txn, fast, sized)
                elif stmts[i] is not None:
                    if store.observer is not None:
                        c = store.coll(db, name)    # as above
                    result = _update_filtered(store, c, stmts[i], txn, fast, sized)
                if result is None:
                    st = stmts[i]
                    if st is None:
                        st = bsonutil.decode(items[i])  # a shape seen: decoded and checked
                    try:
                        result = _update_statement(store, db, name, st, txn, now, query)
                    finally:
                        c = store.coll(db, name)    # an upsert may have made it
                elif result is _MODIFIED:
                    n += 1
                    n_modified += 1
                    if txn is not None:
                        txn.record(i, result)
                    continue
                if "upserted" in result:
                    upserted.append({"index": i, "_id": result["upserted"]})
                n += result["n"]
                n_modified += result["nModified"]
                if txn is not None:
                    txn.record(i, result)
            except MongoError as e:
                errors.append(write_error(i, e))
                if ordered:
                    break
        store.stats["update"] += n
        store.commit()
    reply = {"n": n, "nModified": n_modified}
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    return reply


def cmd_delete(ctx):
    check_fields(ctx, ("delete", "deletes", "ordered", "let"))
    if "let" in ctx.body:
        # Refused, never ignored: a filter using $$var would otherwise fail with a misleading
        # "Use of undefined variable" (17276).
        raise MongoError(2, "BadValue", "delete: 'let' is not supported by the stand-in")
    name = coll_name(ctx, "delete")
    stmts = parse_statements(ctx, "deletes", ("q", "limit", "hint", "collation"), ("limit",))
    ordered = ctx.body.get("ordered", True)
    query = _engine()[0]
    store = ctx.store
    n = 0
    errors = []
    txn = sessions.begin(ctx)
    with store.lock:
        for i, st in enumerate(stmts):
            done = txn.executed(i) if txn is not None else None
            if done is not None:
                n += done["n"]      # a retried statement that ran already (sessions.py)
                continue
            try:
                limit = st["limit"]
                if limit not in (0, 1):
                    raise MongoError(9, "FailedToParse",
                                     "The limit field in delete objects must be 0 or 1. Got %s"
                                     % limit)
                check_collation(st.get("collation"), "delete")
                flt = st.get("q", {})
                query.validate_filter(flt)
                if txn is not None:
                    txn.about_to_write()
                c = store.coll(ctx.db, name)
                docs = matching(c, flt)
                if limit == 1:
                    docs = docs[:1]
                for doc in docs:
                    store.delete(c, doc)
                n += len(docs)
                if txn is not None:
                    txn.record(i, {"n": len(docs)})
            except MongoError as e:
                errors.append(write_error(i, e))
                if ordered:
                    break
        store.stats["delete"] += n
        store.commit()
    reply = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return reply


def cmd_find_and_modify(ctx):
    check_fields(ctx, ("findAndModify", "findandmodify", "query", "sort", "remove", "update",
                       "new", "fields", "upsert", "bypassDocumentValidation", "collation",
                       "arrayFilters", "hint", "let"))
    body = ctx.body
    name = coll_name(ctx, ctx.name)
    query, compare = _engine()[0], _engine()[3]
    flt = body.get("query") or {}
    remove = bool(body.get("remove", False))
    u = body.get("update")
    if body.get("arrayFilters") or "let" in body:
        raise MongoError(2, "BadValue", "findAndModify: arrayFilters/let are not supported by "
                         "the flowwarden stand-in")
    check_collation(body.get("collation"), "findAndModify")
    if remove and u is not None:
        raise MongoError(9, "FailedToParse", "Cannot specify both an update and remove=true")
    if not remove and u is None:
        raise MongoError(9, "FailedToParse", "Either an update or remove=true must be specified")
    if remove and (body.get("upsert") or body.get("new")):
        raise MongoError(9, "FailedToParse",
                         "Cannot specify both upsert=true and remove=true" if body.get("upsert")
                         else "Cannot specify both new=true and remove=true; 'remove' always "
                         "returns the deleted document")
    replacement = False if remove else _check_update_spec(u, False, "findAndModify")
    query.validate_filter(flt, upsert=bool(body.get("upsert")))
    fields = body.get("fields")
    store = ctx.store
    now = datetime.datetime.utcnow()
    txn = sessions.begin(ctx)
    if txn is not None:
        done = txn.executed(0)
        if done is not None:
            return dict(done)   # a retry of a findAndModify that ran: its reply again
        txn.about_to_write()
    with store.lock, operation_now(now):
        c = store.coll(ctx.db, name)
        docs = matching(c, flt)
        if body.get("sort"):
            docs = compare.sort_documents(docs, body["sort"])
        doc = docs[0] if docs else None
        leo = {"n": 0}
        value = None
        if doc is not None and remove:
            store.delete(c, doc)
            leo = {"n": 1}
            value = doc
        elif doc is not None:
            new, ud = _apply_one(c, doc, u, replacement, now)
            same, raw = _same(new, doc, ud if replacement is False else None)
            if not same:
                new = store.update(c, doc, new, ud, raw)
            leo = {"n": 1, "updatedExisting": True}
            value = new if body.get("new") else doc
        elif not remove:
            leo = {"n": 0, "updatedExisting": False}
            if body.get("upsert"):
                new = _upsert_doc(flt, u, replacement, now)
                c = store.get_or_create(ctx.db, name)
                new = store.insert(c, new)
                leo = {"n": 1, "updatedExisting": False, "upserted": new["_id"]}
                value = new if body.get("new") else None
        store.commit()
    if value is not None and fields:
        value = query.project(value, fields)
    reply = {"lastErrorObject": leo, "value": value}
    if txn is not None:
        txn.record(0, dict(reply))
    return reply


# ---- reads ----

FIND_FIELDS = ("find", "filter", "sort", "projection", "skip", "limit", "batchSize",
               "singleBatch", "hint", "collation", "allowDiskUse", "noCursorTimeout",
               "allowPartialResults", "oplogReplay", "tailable", "awaitData", "min", "max",
               "returnKey", "showRecordId", "let")


def cmd_find(ctx):
    check_fields(ctx, FIND_FIELDS)
    body = ctx.body
    for unsupported in ("tailable", "awaitData", "min", "max", "returnKey", "showRecordId",
                        "let"):
        if body.get(unsupported):
            raise MongoError(2, "BadValue", "find option '%s' is not supported by the "
                             "flowwarden stand-in" % unsupported)
    check_collation(body.get("collation"), "find")
    name = coll_name(ctx, "find")
    if ctx.db == "local" and name == "oplog.rs":
        from .cmd_doctor import find_oplog
        return find_oplog(ctx, make_result_cursor)
    query, compare = _engine()[0], _engine()[3]
    flt = body.get("filter") or {}
    query.validate_filter(flt)
    skip = int(body.get("skip", 0) or 0)
    limit = int(body.get("limit", 0) or 0)
    if skip < 0:
        raise MongoError(51024, "Location51024",
                         "BSON field 'skip' value must be >= 0, actual value '%d'" % skip)
    if limit < 0:
        raise MongoError(51024, "Location51024",
                         "BSON field 'limit' value must be >= 0, actual value '%d'" % limit)
    batch_size = body.get("batchSize", DEFAULT_BATCH)
    if batch_size < 0:
        raise MongoError(51024, "Location51024", "BSON field 'batchSize' value must be >= 0, "
                         "actual value '%d'" % batch_size)
    store = ctx.store
    with store.lock:
        store.stats["query"] += 1
        c = store.coll(ctx.db, name)
        direction = _id_sort_direction(body.get("sort"))
        docs = None
        if direction is not None:
            docs = matching_by_id(c, flt, direction, skip + limit if limit else 0)
        if docs is None:
            docs = matching(c, flt)
            if body.get("sort"):
                docs = compare.sort_documents(docs, body["sort"])
        if body.get("sort"):
            sortlimit.check(ctx.server, c, flt, body["sort"], docs, skip + limit if limit else 0,
                            body.get("allowDiskUse"), "Executor error during find command")
        if skip:
            docs = docs[skip:]
        if limit:
            docs = docs[:limit]
        proj = body.get("projection")
        if proj:
            raw = [encode(query.project(d, proj)) for d in docs]
        else:
            raw = [c.raw_of(d) for d in docs]   # the stored bytes (c: docs is not empty)
    return make_result_cursor(ctx, ctx.db + "." + name, raw, batch_size,
                              bool(body.get("singleBatch")))


def make_result_cursor(ctx, ns, raw_docs, batch_size, single_batch=False):
    cur = ResultCursor(ns, raw_docs)
    first = cur.fill(batch_size) if batch_size else []
    cid = 0
    if not single_batch and not cur.exhausted:
        with ctx.store.lock:
            cid = ctx.server.cursors.register(cur)
    return CursorResult(b"firstBatch", first, cid, ns)


def cmd_count(ctx):
    check_fields(ctx, ("count", "query", "limit", "skip", "hint", "collation", "fields"))
    check_collation(ctx.body.get("collation"), "count")
    name = coll_name(ctx, "count")
    flt = ctx.body.get("query") or {}
    _engine()[0].validate_filter(flt)
    with ctx.store.lock:
        n = len(matching(ctx.store.coll(ctx.db, name), flt))
    skip = int(ctx.body.get("skip", 0) or 0)
    limit = abs(int(ctx.body.get("limit", 0) or 0))
    n = max(0, n - skip)
    if limit:
        n = min(n, limit)
    return {"n": n}


def cmd_distinct(ctx):
    check_fields(ctx, ("distinct", "key", "query", "collation", "hint"))
    check_collation(ctx.body.get("collation"), "distinct")
    name = coll_name(ctx, "distinct")
    key = ctx.body.get("key")
    if not isinstance(key, str):
        raise MongoError(14, "TypeMismatch", "BSON field 'distinct.key' is the wrong type "
                         "'%s', expected type 'string'" % type(key).__name__)
    query = _engine()[0]
    flt = ctx.body.get("query") or {}
    query.validate_filter(flt)
    from .storage import MISSING, path_values
    seen = set()
    values = []
    with ctx.store.lock:
        for doc in matching(ctx.store.coll(ctx.db, name), flt):
            for v in path_values(doc, key.split(".")):
                if v is MISSING:
                    continue
                k = value_key(v)
                if k not in seen:
                    seen.add(k)
                    values.append(v)
    return {"values": values}


# ---- aggregate ----

def cmd_aggregate(ctx):
    check_fields(ctx, ("aggregate", "pipeline", "cursor", "explain", "allowDiskUse",
                       "collation", "hint", "let", "bypassDocumentValidation"))
    body = ctx.body
    if "let" in body:
        raise MongoError(2, "BadValue", "aggregate: 'let' is not supported by the stand-in")
    pipeline = body.get("pipeline")
    if not isinstance(pipeline, list):
        raise MongoError(14, "TypeMismatch", "'pipeline' option must be specified as an array")
    if body.get("explain"):
        raise MongoError(2, "BadValue", "aggregate explain is not supported by the flowwarden "
                         "stand-in")
    cursor_opts = body.get("cursor")
    if not isinstance(cursor_opts, dict):
        raise MongoError(9, "FailedToParse", "The 'cursor' option is required, except for "
                         "aggregate with the explain argument")
    batch_size = cursor_opts.get("batchSize", DEFAULT_BATCH)
    check_collation(body.get("collation"), "aggregate")
    target = body.get("aggregate")
    for i, stage in enumerate(pipeline):
        if not isinstance(stage, dict) or len(stage) != 1:
            raise MongoError(40323, "Location40323", "A pipeline stage specification object "
                             "must contain exactly one field.")
        if "$changeStream" in stage and i > 0:
            raise MongoError(40602, "Location40602",
                             "$changeStream is only valid as the first stage in a pipeline.")
    if pipeline and "$changeStream" in pipeline[0]:
        return open_change_stream(ctx, target, pipeline, batch_size)
    if not isinstance(target, str):
        raise MongoError(73, "InvalidNamespace", "{aggregate: 1} is not valid for '%s'; a "
                         "collection is required." % (next(iter(pipeline[0])) if pipeline
                                                      else "pipeline"))
    aggregate = _engine()[2]
    with ctx.store.lock:
        c = ctx.store.coll(ctx.db, target)
        docs = [copy.deepcopy(d) for d in c.docs.values()] if c is not None else []
        if ctx.server.version < (6, 0) and body.get("allowDiskUse") is not True:
            results = _run_pipeline_5_0(ctx, c, docs, pipeline)
        else:
            results = aggregate.run_pipeline(docs, pipeline)
        raw = [encode(d) for d in results]
    return make_result_cursor(ctx, ctx.db + "." + target, raw, batch_size)


def _run_pipeline_5_0(ctx, c, docs, pipeline):
    """The pipeline stage by stage, each $sort checked against 5.0's blocking-sort limit. A
    $sort preceded only by $match stages may be served by an index (its filter: their $and); a
    later one never is (sortlimit.py). A $limit right after a $sort makes it a top-k sort."""
    aggregate = _engine()[2]
    aggregate.compile_pipeline(pipeline)    # every stage's errors first, as before
    leading, flt = True, {"$and": []}
    for i, stage in enumerate(pipeline):
        name = next(iter(stage)) if isinstance(stage, dict) and stage else None
        if name == "$sort" and isinstance(stage["$sort"], dict):
            docs = aggregate.run_pipeline(docs, [stage])
            nxt = pipeline[i + 1] if i + 1 < len(pipeline) else None
            limit = nxt.get("$limit") if isinstance(nxt, dict) else None
            limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else 0
            sortlimit.check(ctx.server, c, flt, stage["$sort"], docs, limit, False,
                            "PlanExecutor error during aggregation", indexable=leading)
        else:
            docs = aggregate.run_pipeline(docs, [stage])
        if name == "$match" and leading:
            flt["$and"].append(stage["$match"])
        elif name != "$match":
            leading = False
    return docs


def open_change_stream(ctx, target, pipeline, batch_size):
    spec = pipeline[0]["$changeStream"]
    if not isinstance(spec, dict):
        raise MongoError(50808, "Location50808", "$changeStream stage expects a document as "
                         "argument")
    stages = pipeline[1:]
    if ctx.server.version < (6, 0):
        for stage in stages:
            if isinstance(stage, dict) and "$changeStreamSplitLargeEvent" in stage:
                # The stage came with 6.0.9 and 7.0 (document_source_change_stream_split_large
                # _event.cpp); a 5.0 parser does not know its name.
                raise MongoError(40324, "Location40324", "Unrecognized pipeline stage name: "
                                 "'$changeStreamSplitLargeEvent'")
    if isinstance(target, str):
        coll = target
    elif target == 1 and not isinstance(target, bool):
        coll = None
    else:
        raise MongoError(73, "InvalidNamespace", "Invalid aggregate namespace: the "
                         "'aggregate' field must be a collection name or 1")
    from .cmd_doctor import refuse_change_stream
    refuse_change_stream(ctx)
    store = ctx.store
    with store.lock:
        cs = ChangeStream(store, ctx.db, coll, spec, stages, ctx.server.version)
        batch = cs.fill(batch_size) if batch_size else []
        cid = 0 if cs.closed else ctx.server.cursors.register(cs)
        ctx.op_time = cs.start_tsv if not any(
            k in spec for k in ("resumeAfter", "startAfter", "startAtOperationTime")) \
            else store.clock.last
        extra = cs.pbrt_element()
    return CursorResult(b"firstBatch", batch, cid, cs.ns, extra)


def cmd_get_more(ctx):
    check_fields(ctx, ("getMore", "collection", "batchSize", "term", "lastKnownCommittedOpTime"))
    body = ctx.body
    cid = body.get("getMore")
    if not isinstance(cid, int) or isinstance(cid, bool):
        raise MongoError(14, "TypeMismatch", "BSON field 'getMore.getMore' is the wrong type, "
                         "expected type 'long'")
    coll = body.get("collection")
    if not isinstance(coll, str):
        raise MongoError(14, "TypeMismatch", "BSON field 'getMore.collection' is the wrong "
                         "type, expected type 'string'")
    batch_size = int(body.get("batchSize", 0) or 0)
    store = ctx.store
    registry = ctx.server.cursors
    with store.lock:
        store.stats["getmore"] += 1
        cur = registry.get(cid)
        if cur is None:
            raise cursor_not_found(cid)
        expected_ns = ctx.db + "." + coll
        if cur.ns != expected_ns:
            raise MongoError(13, "Unauthorized", "Requested getMore on namespace '%s', but "
                             "cursor belongs to a different namespace %s"
                             % (expected_ns, cur.ns))
        data = ctx.server.failpoints.check_getmore_checkout()
        if data is not None:
            registry.kill(cid)
            code = int(data.get("errorCode", 1))
            labels = data.get("errorLabels")
            if labels is None:
                labels = (["ResumableChangeStreamError"]
                          if cur.is_change_stream and code in RESUMABLE_CODES else [])
            raise MongoError(code, code_name(code),
                             "Hit the 'failGetMoreAfterCursorCheckout' failpoint", labels)
        if not cur.is_change_stream:
            batch = cur.fill(batch_size)
            if cur.exhausted:
                registry.remove(cid)
                cid = 0
            return CursorResult(b"nextBatch", batch, cid, cur.ns)
        ctx.is_change_stream_getmore = True
        max_ms = body.get("maxTimeMS", DEFAULT_AWAIT_MS)
        deadline = time.monotonic() + max(0, max_ms) / 1000.0
        limit = batch_size or (1 << 62)
        try:
            while True:
                # Between runs of its build the getMore lets other commands take the lock
                # for a moment, as mongod's query yields (a waiting writer gets it).
                batch = cur.fill_yielding(limit, lambda: _yield_lock(store))
                if batch or cur.closed:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                store.cond.wait(remaining)
                if cur.killed:
                    raise MongoError(237, "CursorKilled", "cursor id %d was killed" % cid)
        except MongoError:
            registry.kill(cid)
            raise
        if cur.closed:
            registry.remove(cid)
            cid = 0
        return CursorResult(b"nextBatch", batch, Int64(cid), cur.ns, cur.pbrt_element())


def cmd_kill_cursors(ctx):
    check_fields(ctx, ("killCursors", "cursors"))
    ids = ctx.body.get("cursors")
    if not isinstance(ids, list):
        raise MongoError(40414, "Location40414",
                         "BSON field 'killCursors.cursors' is missing but a required field")
    killed, not_found = [], []
    with ctx.store.lock:
        for cid in ids:
            if ctx.server.cursors.kill(cid) is not None:
                killed.append(Int64(cid))
            else:
                not_found.append(Int64(cid))
        ctx.store.cond.notify_all()
    return {"cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [],
            "cursorsUnknown": []}


COMMANDS = {
    "insert": cmd_insert, "update": cmd_update, "delete": cmd_delete,
    "findAndModify": cmd_find_and_modify, "findandmodify": cmd_find_and_modify,
    "find": cmd_find, "count": cmd_count, "distinct": cmd_distinct,
    "aggregate": cmd_aggregate, "getMore": cmd_get_more, "killCursors": cmd_kill_cursors,
}
