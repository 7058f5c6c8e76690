"""Databases, collections and indexes, and every mutation of them.

Each public mutation (called with Store.lock held) checks constraints, takes a cluster time,
applies the change through a `_do_*` method, and queues a journal record. Replay after a restart
runs the very same `_do_*` methods with the recorded times, so a restarted stand-in rebuilds
byte-identical change events and resume tokens. `commit()` makes queued records durable before
the command is acknowledged, then wakes change-stream getMores waiting for new entries.
"""

import datetime
import itertools
import threading
import uuid as uuidmod

from bson.binary import Binary

from . import bsonutil
from . import oplog as oplogmod
from .bsonutil import (e_doc, e_int64, e_str, encode, make_doc, value_key, format_doc)
from .errors import MongoError
from .idindex import IdIndex

MAX_BSON = 16 * 1024 * 1024
INTERNAL_DBS = ("admin", "config", "local")
MISSING = object()


def path_values(value, parts, i=0):
    """Index keys a (possibly dotted) path yields, with arrays expanded like a multikey index."""
    if i == len(parts):
        if isinstance(value, list):
            return list(value) if value else [None]
        return [value]
    if isinstance(value, dict):
        if parts[i] in value:
            return path_values(value[parts[i]], parts, i + 1)
        return [MISSING]
    if isinstance(value, list):
        out = []
        if parts[i].isdigit() and int(parts[i]) < len(value):
            out.extend(path_values(value[int(parts[i])], parts, i + 1))
        for el in value:
            if isinstance(el, dict):
                out.extend(v for v in path_values(el, parts, i) if v is not MISSING)
        return out or [MISSING]
    return [MISSING]


def _matches(doc, flt):
    from . import query  # the document engine, loaded lazily so storage imports stay cheap
    return query.matches(doc, flt)


class DuplicateKey(MongoError):
    """E11000, worded exactly like mongod 6.0."""

    def __init__(self, coll, index, key_value):
        self.key_pattern = dict(index.key)
        self.key_value = key_value
        super().__init__(11000, "DuplicateKey",
                         "E11000 duplicate key error collection: %s index: %s dup key: %s"
                         % (coll.ns, index.name, format_doc(key_value)))

    def write_error(self, index):
        return {"index": index, "code": 11000, "keyPattern": self.key_pattern,
                "keyValue": self.key_value, "errmsg": self.errmsg}

    def to_reply(self):
        reply = super().to_reply()
        reply["keyPattern"] = self.key_pattern
        reply["keyValue"] = self.key_value
        return reply


class Index:
    def __init__(self, spec):
        self.spec = spec
        self.name = spec["name"]
        self.key = list(spec["key"].items())
        self.paths = [k.split(".") for k, _ in self.key]
        self.is_id = self.name == "_id_"
        self.unique = bool(spec.get("unique")) and not self.is_id
        self.sparse = bool(spec.get("sparse"))
        self.ttl = spec.get("expireAfterSeconds")
        self.partial = spec.get("partialFilterExpression")
        self.entries = {}   # unique indexes only: key tuple -> _id key of the owner

    def keys_for(self, doc):
        """[(hashable key, {field: value})] this document contributes to the index."""
        if self.partial is not None and not _matches(doc, self.partial):
            return []
        per_field = [path_values(doc, p) for p in self.paths]
        if self.sparse and all(all(v is MISSING for v in vals) for vals in per_field):
            return []
        out = []
        for combo in itertools.product(*per_field):
            combo = tuple(None if v is MISSING else v for v in combo)
            out.append((tuple(value_key(v) for v in combo), combo))
        return out

    def key_value(self, combo):
        return {k: v for (k, _), v in zip(self.key, combo)}


class Collection:
    def __init__(self, db, name, cuuid=None, options=None):
        self.uuid = cuuid or uuidmod.uuid4()
        self.options = dict(options or {})
        self.docs = {}
        # Each document's BSON as stored (what a find returns), by _id key; set by a write
        # that has it, dropped by a write that has not, made again on a read (raw_of).
        self.raws = {}
        # (document, its encoded size) by _id key for a document stored without its bytes by
        # an update that knew the size (update_fast): valid while that document is stored.
        self.sizes = {}
        self.id_index = IdIndex()   # the _ids in order, for sorts and ranges on _id
        self.indexes = {"_id_": Index({"v": 2, "key": {"_id": 1}, "name": "_id_"})}
        self._unique = []
        self._unique_key = None
        cspp = self.options.get("changeStreamPreAndPostImages") or {}
        self.pre_post = bool(cspp.get("enabled"))
        self.set_name(db, name)

    def set_name(self, db, name):
        self.db = db
        self.name = name
        self.ns = db + "." + name
        self.ns_elem = oplogmod.ns_element(db, name)

    def unique_indexes(self):
        # Cached: the insert path asks twice per document.
        if len(self.indexes) == 1:
            return ()   # _id_ alone (never in this list)
        key = tuple(self.indexes)
        if self._unique_key != key:
            self._unique = [ix for ix in self.indexes.values() if ix.unique]
            self._unique_key = key
        return self._unique

    def check_unique(self, doc, idkey):
        for ix in self.unique_indexes():
            for kt, combo in ix.keys_for(doc):
                owner = ix.entries.get(kt, MISSING)
                if owner is not MISSING and owner != idkey:
                    raise DuplicateKey(self, ix, ix.key_value(combo))

    def index_add(self, doc, idkey):
        for ix in self.unique_indexes():
            for kt, _ in ix.keys_for(doc):
                ix.entries[kt] = idkey

    def index_remove(self, doc, idkey):
        for ix in self.unique_indexes():
            for kt, _ in ix.keys_for(doc):
                if ix.entries.get(kt, MISSING) == idkey:
                    del ix.entries[kt]

    def stored_size(self, k, doc):
        """The encoded size of doc, the document stored under key k, when known without
        encoding it (its stored bytes, or the size an update kept), else None."""
        raw = self.raws.get(k)
        if raw is not None:
            return len(raw)
        known = self.sizes.get(k)
        return known[1] if known is not None and known[0] is doc else None

    def raw_of(self, doc):
        """doc's BSON: the stored bytes when doc is the stored document (it is never
        changed in place), else encoded."""
        k = value_key(doc["_id"])
        raw = self.raws.get(k)
        if raw is None or self.docs.get(k) is not doc:
            raw = encode(doc)
            if self.docs.get(k) is doc:
                self.raws[k] = raw
        return raw

    def info_options(self):
        opts = dict(self.options)
        if self.pre_post:
            opts["changeStreamPreAndPostImages"] = {"enabled": True}
        else:
            opts.pop("changeStreamPreAndPostImages", None)
        return opts


def _id_first(doc):
    if next(iter(doc)) == "_id":
        return doc
    out = {"_id": doc["_id"]}
    out.update((k, v) for k, v in doc.items() if k != "_id")
    return out


class Store:
    # Multi-document transactions (transactions.py) hook in here, and only here:
    # `observer(c, key, old)` runs before every public document mutation (old None for an
    # insert): it records the before-image for open snapshots and makes a write wait for a
    # transaction holding the document; `pinned` (tsv, wall) gives every mutation of a commit
    # the commit's one cluster time.
    observer = None
    pinned = None

    def __init__(self, oplog_max_entries, journal=None):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.dbs = {}
        self.views = {}          # db -> {name: {"viewOn": ..., "pipeline": [...]}}
        self.oplog = oplogmod.Oplog(oplog_max_entries)
        self.clock = oplogmod.Clock()
        self.journal = journal
        self.pending = []
        self.stats = {"insert": 0, "query": 0, "update": 0, "delete": 0, "getmore": 0,
                      "command": 0}

    # ---- lookups ----

    def coll(self, db, name):
        colls = self.dbs.get(db)
        return colls.get(name) if colls else None

    def require_coll(self, db, name):
        c = self.coll(db, name)
        if c is None:
            raise MongoError(26, "NamespaceNotFound", "ns does not exist: %s.%s" % (db, name))
        return c

    def all_collections(self):
        return [c for colls in self.dbs.values() for c in colls.values()]

    def now_tsv(self):
        return self.clock.last

    # ---- journal plumbing ----

    def _record(self, rec):
        if self.journal is not None:
            self.pending.append(rec if isinstance(rec, bytes) else encode(rec))

    def commit(self):
        """Make queued records durable (one fsync per command), then wake waiting streams."""
        if self.pending:
            self.journal.append(self.pending)
            self.pending = []
            if self.journal.wants_compaction():
                self.journal.rewrite(self.snapshot_records())
        self.cond.notify_all()

    # ---- internal mutations (shared with replay) ----

    def _do_create(self, db, name, cuuid, options):
        c = Collection(db, name, cuuid, options)
        self.dbs.setdefault(db, {})[name] = c
        return c

    def _do_insert(self, c, doc, raw, tsv, wall):
        k = value_key(doc["_id"])
        c.docs[k] = doc
        c.raws[k] = raw
        c.id_index.add(doc["_id"], k)
        if c.unique_indexes():
            c.index_add(doc, k)
        if raw[4:9] == b"\x07_id\x00":
            # ObjectId _id first (the common case): documentKey is the first 17 bytes' element.
            key_raw = make_doc(raw[4:21])
        else:
            key_raw = encode({"_id": doc["_id"]})
        ev = oplogmod.build_event("insert", tsv, wall, e_doc(b"fullDocument", raw) + c.ns_elem
                                  + e_doc(b"documentKey", key_raw), key_raw, c.uuid)
        self.oplog.append(oplogmod.Entry(tsv, wall, "i", c.db, c.name, ev, k))
        self.clock.advance_past(tsv)

    def _do_update(self, c, old, new, ud, tsv, wall, raw=None, k=None, top=False):
        """ud is the update description, or None for a replacement; raw: new's BSON, when
        the caller has it; k: value_key of its _id, when the caller has it; top: ud names
        top-level fields only (never ambiguous: no disambiguatedPaths). The change event is
        encoded when a stream first reads it (update_event)."""
        if k is None:
            k = value_key(new["_id"])
        if c.unique_indexes():
            c.index_remove(old, k)
            c.index_add(new, k)
        c.docs[k] = new
        if raw is not None:
            c.raws[k] = raw
        else:
            c.raws.pop(k, None)
        if c.sizes:
            c.sizes.pop(k, None)
        pp = c.pre_post
        dp = disambiguated_paths(old, new, ud) if ud is not None and not top else None
        self.oplog.append(oplogmod.Entry(
            tsv, wall, "u" if ud is not None else "r", c.db, c.name, None, k, images=pp,
            pre=old if pp else None, post=new if (pp and ud is not None) else None,
            desc={"disambiguatedPaths": dp} if dp else None,
            make=(update_event, (tsv, wall, c.ns_elem, c.uuid, new["_id"], ud,
                                 new if ud is None else None))))
        self.clock.advance_past(tsv)

    def _do_delete(self, c, doc, tsv, wall):
        k = value_key(doc["_id"])
        c.index_remove(doc, k)
        del c.docs[k]
        c.raws.pop(k, None)
        c.sizes.pop(k, None)
        c.id_index.remove(doc["_id"], k)
        pp = c.pre_post
        self.oplog.append(oplogmod.Entry(
            tsv, wall, "d", c.db, c.name, None, k, images=pp, pre=doc if pp else None,
            make=(delete_event, (tsv, wall, c.ns_elem, c.uuid, doc["_id"]))))
        self.clock.advance_past(tsv)

    def _do_drop(self, db, name, tsv, wall):
        colls = self.dbs.get(db, {})
        c = colls.pop(name, None)
        if not colls:
            self.dbs.pop(db, None)
        ev = oplogmod.build_event("drop", tsv, wall, oplogmod.ns_element(db, name),
                                  cuuid=c.uuid if c is not None else None)
        self.oplog.append(oplogmod.Entry(tsv, wall, "drop", db, name, ev))
        self.clock.advance_past(tsv)

    def _do_drop_database(self, db, tsv, wall):
        self.dbs.pop(db, None)
        ev = oplogmod.build_event("dropDatabase", tsv, wall,
                                  e_doc(b"ns", make_doc(e_str(b"db", db))))
        self.oplog.append(oplogmod.Entry(tsv, wall, "dropDatabase", db, None, ev))
        self.clock.advance_past(tsv)

    def _do_rename(self, db, name, to_db, to_name, tsv, wall, drop_target=None):
        c = self.dbs[db].pop(name)
        if not self.dbs[db]:
            del self.dbs[db]
        src_ns = c.ns_elem
        c.set_name(to_db, to_name)
        self.dbs.setdefault(to_db, {})[to_name] = c
        to_elem = e_doc(b"to", make_doc(e_str(b"db", to_db) + e_str(b"coll", to_name)))
        ev = oplogmod.build_event("rename", tsv, wall, src_ns + to_elem, cuuid=c.uuid)
        # operationDescription: the rename's oplog entry less renameCollection and stayTemp,
        # its `to` as {db, coll}; dropTarget (the dropped target's UUID) only when one was
        # dropped (change_stream_event_transform.cpp, kRenameCollectionOpType).
        opdesc = {"to": {"db": to_db, "coll": to_name}}
        if drop_target is not None:
            opdesc["dropTarget"] = Binary(bytes(drop_target), 4)
        self.oplog.append(oplogmod.Entry(tsv, wall, "rename", db, name, ev,
                                         to=(to_db, to_name),
                                         desc={"operationDescription": opdesc}))
        self.clock.advance_past(tsv)

    def _do_create_index(self, c, spec):
        ix = Index(spec)
        c.indexes[ix.name] = ix
        if ix.unique:
            for k, doc in c.docs.items():
                for kt, _ in ix.keys_for(doc):
                    ix.entries[kt] = k

    def _do_ddl_event(self, op, db, name, cuuid, desc, tsv, wall, view=False):
        """Append a DDL event (EXPANDED_OPS, or a view's drop) without changing any data:
        its default form is _id, operationType, clusterTime, wallTime, ns; `desc` holds the
        operationDescription (and stateBeforeChange) a showExpandedEvents stream adds."""
        ev = oplogmod.build_event(op, tsv, wall, oplogmod.ns_element(db, name), cuuid=cuuid)
        entry = oplogmod.Entry(tsv, wall, op, db, name, ev, desc=desc, view=view)
        self.oplog.append(entry)
        self.clock.advance_past(tsv)
        return entry

    def ddl_event(self, op, db, name, cuuid, desc, view=False):
        """Log a DDL change as mongod's oplog has it (an "op" journal record keeps it)."""
        tsv, wall = self._tick()
        entry = self._do_ddl_event(op, db, name, cuuid, desc, tsv, wall, view)
        self._record(entry_record(entry))

    def _tick(self):
        if self.pinned is not None:
            return self.pinned
        return self.clock.tick_wall()

    # ---- public mutations ----

    def create_collection(self, db, name, options=None):
        c = self._do_create(db, name, None, options)
        self._record({"o": "create", "db": db, "c": name, "uuid": Binary(c.uuid.bytes, 4),
                      "opts": c.options})
        if self.pinned is None:
            # A create event (explicit or implicit creation alike: mongod logs a "c" create
            # entry before the first insert). operationDescription is the entry's `o` less
            # `create`: the options, then idIndex (change_stream_event_transform.cpp,
            # kCreateOpType). Not inside a transaction's commit (see docs/testing.md).
            opdesc = dict(c.options)
            opdesc["idIndex"] = {"v": 2, "key": {"_id": 1}, "name": "_id_"}
            self.ddl_event("create", db, name, c.uuid, {"operationDescription": opdesc})
        return c

    def create_view(self, db, name, view_on, pipeline):
        """A view: kept and listed, and its create event made as mongod makes it from the
        insert into <db>.system.views (operationDescription: {viewOn, pipeline}; no
        collectionUUID). Reading through a view is not played."""
        spec = {"viewOn": view_on, "pipeline": list(pipeline)}
        self.views.setdefault(db, {})[name] = spec
        self._record({"o": "view", "db": db, "c": name, "spec": spec})
        self.ddl_event("create", db, name, None, {"operationDescription": dict(spec)},
                       view=True)

    def drop_view(self, db, name):
        views = self.views.get(db, {})
        views.pop(name)
        if not views:
            self.views.pop(db, None)
        self._record({"o": "unview", "db": db, "c": name})
        self.ddl_event("drop", db, name, None, None, view=True)

    def view(self, db, name):
        return self.views.get(db, {}).get(name)

    def get_or_create(self, db, name):
        c = self.coll(db, name)
        if c is None:
            check_collection_name(db, name)
            c = self.create_collection(db, name)
        return c

    def insert(self, c, doc, raw=None):
        if "_id" not in doc:
            raise MongoError(2, "BadValue", "document to insert has no _id")
        if raw is None or next(iter(doc)) != "_id":
            doc = _id_first(doc)
            raw = encode(doc)
        if len(raw) > MAX_BSON:
            raise MongoError(10334, "BSONObjectTooLarge",
                             "object to insert too large. size in bytes: %d, max size: %d"
                             % (len(raw), MAX_BSON))
        k = value_key(doc["_id"])
        if k in c.docs:
            raise DuplicateKey(c, c.indexes["_id_"], {"_id": doc["_id"]})
        if c.unique_indexes():
            c.check_unique(doc, k)
        if self.observer is not None:
            self.observer(c, k, None)
        tsv, wall = self._tick()
        self._do_insert(c, doc, raw, tsv, wall)
        if self.journal is not None:
            self.pending.append(make_doc(e_str(b"o", "i") + e_str(b"db", c.db)
                                         + e_str(b"c", c.name) + e_int64(b"t", tsv)
                                         + e_int64(b"w", wall) + e_doc(b"d", raw)))
        return doc

    def update(self, c, old, new, ud, raw=None, size=None, k=None, top=False):
        """Store `new` in place of `old`; ud None means replacement. raw: encode(new), when
        the caller has it already; size: instead of raw, len(encode(new)) when the caller
        knows it without encoding (update_fast): the bytes are then made when a read wants
        them (raw_of), as for a document loaded from the journal. k, top: as for
        _do_update (update_fast knows both)."""
        if size is None or next(iter(new)) != "_id":
            if raw is None or next(iter(new)) != "_id":
                new = _id_first(new)
                raw = encode(new)
            size = len(raw)
        if size > MAX_BSON:
            raise MongoError(17419, "Location17419",
                             "Resulting document after update is larger than 16777216")
        if k is None:
            k = value_key(new["_id"])
        if len(c.indexes) > 1:
            c.check_unique(new, k)
        if self.observer is not None:
            self.observer(c, k, old)
        tsv, wall = self._tick()
        self._do_update(c, old, new, ud, tsv, wall, raw, k, top)
        if raw is None:
            c.sizes[k] = (new, size)
        if self.journal is not None:
            self._record({"o": "u" if ud is not None else "r", "db": c.db, "c": c.name,
                          "t": tsv, "w": wall, "d": new, "ud": ud or {}})
        return new

    def update_sized(self, c, old, new, ud, size, k):
        """update(c, old, new, ud, size=size, k=k, top=True) for update_fast's statement:
        an operator update (ud) of top-level fields, the new size known, `new` with _id first
        (a copy of the stored document), k its _id's key. The same checks, entry and journal
        record, without the general case's branches (a bulk write runs this per statement)."""
        if size > MAX_BSON:
            raise MongoError(17419, "Location17419",
                             "Resulting document after update is larger than 16777216")
        unique = len(c.indexes) > 1
        if unique:
            c.check_unique(new, k)
        if self.observer is not None:
            self.observer(c, k, old)
        tsv, wall = self.pinned if self.pinned is not None else self.clock.tick_wall()
        if unique:
            c.index_remove(old, k)
            c.index_add(new, k)
        c.docs[k] = new
        c.raws.pop(k, None)
        c.sizes[k] = (new, size)
        pp = c.pre_post
        self.oplog.append(oplogmod.update_entry(
            tsv, wall, c.db, c.name, c.ns, k, pp, old if pp else None, new if pp else None,
            (update_event, (tsv, wall, c.ns_elem, c.uuid, new["_id"], ud, None))))
        if tsv > self.clock.last:
            self.clock.last = tsv
        if self.journal is not None:
            self._record({"o": "u", "db": c.db, "c": c.name, "t": tsv, "w": wall, "d": new,
                          "ud": ud})
        return new

    def delete(self, c, doc):
        if self.observer is not None:
            self.observer(c, value_key(doc["_id"]), doc)
        tsv, wall = self._tick()
        self._do_delete(c, doc, tsv, wall)
        self._record({"o": "d", "db": c.db, "c": c.name, "t": tsv, "w": wall,
                      "k": {"_id": doc["_id"]}})

    def drop_collection(self, db, name):
        c = self.require_coll(db, name)
        n = len(c.indexes)
        tsv, wall = self._tick()
        self._do_drop(db, name, tsv, wall)
        self._record({"o": "drop", "db": db, "c": name, "t": tsv, "w": wall})
        return n

    def drop_database(self, db):
        if db not in self.dbs and db not in self.views:
            return False
        for name in list(self.views.get(db, {})):
            self.drop_view(db, name)
        for name in list(self.dbs.get(db, {})):
            self.drop_collection(db, name)
        tsv, wall = self._tick()
        self._do_drop_database(db, tsv, wall)
        self._record({"o": "dropDatabase", "db": db, "t": tsv, "w": wall})
        return True

    def rename_collection(self, db, name, to_db, to_name, drop_target=None):
        """drop_target: the UUID (uuid.UUID) of the target collection dropped for it."""
        tsv, wall = self._tick()
        dt = drop_target.bytes if drop_target is not None else None
        self._do_rename(db, name, to_db, to_name, tsv, wall, dt)
        rec = {"o": "rename", "db": db, "c": name, "tdb": to_db, "tc": to_name,
               "t": tsv, "w": wall}
        if dt is not None:
            rec["dt"] = Binary(dt, 0)
        self._record(rec)

    def create_index(self, c, spec):
        ix = Index(spec)
        if ix.unique:
            seen = {}
            for k, doc in c.docs.items():
                for kt, combo in ix.keys_for(doc):
                    if seen.get(kt, k) != k:
                        raise DuplicateKey(c, ix, ix.key_value(combo))
                    seen[kt] = k
        self._do_create_index(c, spec)
        self._record({"o": "ci", "db": c.db, "c": c.name, "spec": spec})

    def index_events(self, c, specs):
        """The createIndexes event of indexes just built: operationDescription {indexes: [...]}
        as a commitIndexBuild entry gives it (change_stream_event_transform.cpp)."""
        self.ddl_event("createIndexes", c.db, c.name, c.uuid,
                       {"operationDescription": {"indexes": [dict(s) for s in specs]}})

    def drop_index(self, c, name):
        spec = dict(c.indexes[name].spec)
        del c.indexes[name]
        self._record({"o": "di", "db": c.db, "c": c.name, "name": name})
        # One dropIndexes entry per index, the dropped spec in o2 (kDropIndexesOpType).
        self.ddl_event("dropIndexes", c.db, c.name, c.uuid,
                       {"operationDescription": {"indexes": [spec]}})

    def modify_event(self, c, command, old_options, index_old=None):
        """The modify event of a collMod: operationDescription is the command less collMod;
        stateBeforeChange {collectionOptions: the options before (uuid included),
        indexOptions: the index's before, when one changed} (kModifyOpType)."""
        before = {"collectionOptions": old_options}
        if index_old is not None:
            before["indexOptions"] = index_old
        self.ddl_event("modify", c.db, c.name, c.uuid,
                       {"operationDescription": dict(command), "stateBeforeChange": before})

    def set_pre_post(self, c, enabled):
        c.pre_post = bool(enabled)
        self._record({"o": "mod", "db": c.db, "c": c.name, "pp": c.pre_post})

    def set_ttl(self, c, name, seconds):
        c.indexes[name].ttl = seconds
        c.indexes[name].spec["expireAfterSeconds"] = seconds
        self._record({"o": "ttl", "db": c.db, "c": c.name, "name": name, "secs": seconds})

    # ---- TTL monitor ----

    def ttl_pass(self):
        """Delete expired documents like mongod's TTL monitor (each delete is a change event)."""
        now = datetime.datetime.utcnow()
        with self.lock:
            for c in self.all_collections():
                for ix in list(c.indexes.values()):
                    if ix.ttl is None or len(ix.key) != 1:
                        continue
                    cutoff = now - datetime.timedelta(seconds=float(ix.ttl))
                    victims = []
                    for doc in c.docs.values():
                        dates = [v for v in path_values(doc, ix.paths[0])
                                 if isinstance(v, datetime.datetime)]
                        if dates and min(d.replace(tzinfo=None) for d in dates) <= cutoff:
                            victims.append(doc)
                    for doc in victims:
                        self.delete(c, doc)
                    self.stats["delete"] += len(victims)
            self.commit()

    # ---- persistence ----

    def apply_record(self, rec):
        """Replay one journal record (see the `_record` calls above and snapshot_records)."""
        o = rec["o"]
        if o == "i" or o == "load":
            c = self.coll(rec["db"], rec["c"])
            doc = rec["d"]
            if o == "load":
                k = value_key(doc["_id"])
                c.docs[k] = doc
                c.raws.pop(k, None)
                c.id_index.add(doc["_id"], k)
                c.index_add(doc, k)
            else:
                self._do_insert(c, doc, encode(doc), rec["t"], rec["w"])
        elif o in ("u", "r"):
            c = self.coll(rec["db"], rec["c"])
            new = rec["d"]
            old = c.docs[value_key(new["_id"])]
            self._do_update(c, old, new, rec["ud"] if o == "u" else None, rec["t"], rec["w"])
        elif o == "d":
            c = self.coll(rec["db"], rec["c"])
            self._do_delete(c, c.docs[value_key(rec["k"]["_id"])], rec["t"], rec["w"])
        elif o == "create":
            self._do_create(rec["db"], rec["c"], uuidmod.UUID(bytes=bytes(rec["uuid"])),
                            rec["opts"])
        elif o == "drop":
            self._do_drop(rec["db"], rec["c"], rec["t"], rec["w"])
        elif o == "dropDatabase":
            self._do_drop_database(rec["db"], rec["t"], rec["w"])
        elif o == "rename":
            dt = bytes(rec["dt"]) if rec.get("dt") is not None else None
            self._do_rename(rec["db"], rec["c"], rec["tdb"], rec["tc"], rec["t"], rec["w"], dt)
        elif o == "view":
            self.views.setdefault(rec["db"], {})[rec["c"]] = rec["spec"]
        elif o == "unview":
            self.views.get(rec["db"], {}).pop(rec["c"], None)
            if not self.views.get(rec["db"], True):
                self.views.pop(rec["db"], None)
        elif o == "ci":
            self._do_create_index(self.coll(rec["db"], rec["c"]), rec["spec"])
        elif o == "di":
            del self.coll(rec["db"], rec["c"]).indexes[rec["name"]]
        elif o == "mod":
            self.coll(rec["db"], rec["c"]).pre_post = rec["pp"]
        elif o == "ttl":
            ix = self.coll(rec["db"], rec["c"]).indexes[rec["name"]]
            ix.ttl = rec["secs"]
            ix.spec["expireAfterSeconds"] = rec["secs"]
        elif o == "op":
            to = tuple(rec["to"]) if rec.get("to") else None
            self.oplog.append(oplogmod.Entry(
                rec["t"], rec["w"], rec["op"], rec["db"], rec.get("c"),
                oplogmod.with_token_version(bytes(rec["e"])),
                value_key(rec["k"]["_id"]) if rec.get("k") else None, rec.get("img", False),
                rec.get("pre"), rec.get("post"), to, rec.get("desc"), rec.get("view", False)))
            self.clock.advance_past(rec["t"])
        elif o == "txn":
            # A committed transaction, journaled as one record (transactions.py): all of it
            # or, torn at a crash, none of it.
            first = self.oplog.end_seq
            for sub in rec["r"]:
                self.apply_record(bsonutil.decode(bytes(sub)))
            oplogmod.mark_transaction(self.oplog, first, rec["lsid"], rec["n"])
        elif o == "meta":
            self.oplog.last_dropped_tsv = max(self.oplog.last_dropped_tsv, rec["dropped"])
            self.clock.advance_past(rec["clock"])
        else:
            raise ValueError("unknown journal record %r" % o)

    def snapshot_records(self):
        """The current state as journal records: replaying them rebuilds it exactly."""
        yield encode({"o": "meta", "dropped": self.oplog.last_dropped_tsv,
                      "clock": self.clock.last})
        for c in self.all_collections():
            yield encode({"o": "create", "db": c.db, "c": c.name,
                          "uuid": Binary(c.uuid.bytes, 4), "opts": c.info_options()})
            for ix in c.indexes.values():
                if not ix.is_id:
                    yield encode({"o": "ci", "db": c.db, "c": c.name, "spec": ix.spec})
            for doc in c.docs.values():
                yield encode({"o": "load", "db": c.db, "c": c.name, "d": doc})
        for db, views in self.views.items():
            for name, spec in views.items():
                yield encode({"o": "view", "db": db, "c": name, "spec": spec})
        for e in self.oplog.iter_live():
            yield entry_record(e)


def update_event(tsv, wall, ns_elem, cuuid, _id, ud, new):
    """The event of an update (ud: its description) or a replacement (ud None, `new` the
    document it made) of document _id, in the collection whose ns element and UUID are given
    (as they were at the write: a later rename changes neither). An update's entry keeps only
    _id and its description until read, not the document version it made."""
    key_raw = encode({"_id": _id})
    key_elem = e_doc(b"documentKey", key_raw)
    if ud is None:
        op = "replace"
        rest = e_doc(b"fullDocument", encode(new)) + ns_elem + key_elem
    else:
        op = "update"
        desc = {"updatedFields": ud.get("updatedFields", {}),
                "removedFields": ud.get("removedFields", []),
                "truncatedArrays": ud.get("truncatedArrays", [])}
        rest = ns_elem + key_elem + e_doc(b"updateDescription", encode(desc))
    return oplogmod.build_event(op, tsv, wall, rest, key_raw, cuuid)


def delete_event(tsv, wall, ns_elem, cuuid, _id):
    key_raw = encode({"_id": _id})
    rest = ns_elem + e_doc(b"documentKey", key_raw)
    return oplogmod.build_event("delete", tsv, wall, rest, key_raw, cuuid)


def entry_record(e):
    """The "op" journal record that rebuilds oplog entry `e` as it is."""
    rec = {"o": "op", "t": e.tsv, "w": e.wall, "op": e.op, "db": e.db, "c": e.coll,
           "e": e.raw, "img": e.images}
    if e.key is not None:
        rec["k"] = {"_id": oplogmod.decode_event(e)["documentKey"]["_id"]}
    if e.pre is not None:
        rec["pre"] = e.pre
    if e.post is not None:
        rec["post"] = e.post
    if e.to is not None:
        rec["to"] = list(e.to)
    if e.desc is not None:
        rec["desc"] = e.desc
    if e.view:
        rec["view"] = True
    return encode(rec)


def _numeric_part(part):
    """FieldRef::isNumericPathComponentStrict: digits, no leading zero but "0" itself."""
    return part.isdigit() and part.isascii() and (part == "0" or part[0] != "0")


def _typed_path(doc, path):
    """[(part, is an array index)] along `path` in `doc` (a part not found is a field name)."""
    out = []
    cur = doc
    for part in path.split("."):
        if isinstance(cur, list) and _numeric_part(part):
            out.append((part, True))
            i = int(part)
            cur = cur[i] if i < len(cur) else None
        else:
            out.append((part, False))
            cur = cur.get(part) if isinstance(cur, dict) else None
    return out


def disambiguated_paths(old, new, ud):
    """updateDescription.disambiguatedPaths as change_stream_document_diff_parser.cpp makes it:
    a path is ambiguous from its first field name (not an array index) that is numeric (not as
    the path's first part) or holds a dot; each ambiguous path maps to its parts, array indices
    as ints. Paths of updatedFields and truncatedArrays are read in the new document, those of
    removedFields in the old one."""
    out = {}
    if not ud.get("truncatedArrays"):
        for path in ud.get("updatedFields", ()):
            if "." in path:
                break
        else:
            for path in ud.get("removedFields", ()):
                if "." in path:
                    break
            else:
                # top-level fields only: never ambiguous (the first part is not checked)
                return out
    paths = [(p, new) for p in ud.get("updatedFields", {})]
    paths += [(p, old) for p in ud.get("removedFields", [])]
    paths += [(t["field"], new) for t in ud.get("truncatedArrays", [])]
    for path, doc in paths:
        typed = _typed_path(doc, path)
        if any(not is_ix and ((i > 0 and _numeric_part(part)) or "." in part)
               for i, (part, is_ix) in enumerate(typed)):
            out[path] = [int(part) if is_ix else part for part, is_ix in typed]
    return out


def check_collection_name(db, name):
    if not isinstance(name, str) or not name:
        raise MongoError(73, "InvalidNamespace", "Invalid namespace specified '%s.%s'"
                         % (db, name))
    if "$" in name or "\x00" in name or name.startswith("."):
        raise MongoError(73, "InvalidNamespace", "Invalid collection name: %s" % name)
    if name.startswith("system."):
        raise MongoError(73, "InvalidNamespace",
                         "Invalid system namespace: %s.%s" % (db, name))


def check_db_name(db):
    if not db or any(ch in db for ch in '/\\. "$\x00'):
        raise MongoError(73, "InvalidNamespace", "Invalid database name: '%s'" % db)
