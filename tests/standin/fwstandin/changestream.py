"""Change-stream cursors: open with resume options, scan the oplog, build batches.

Fast path (default fullDocument, no pre-images, no user stages): a batch is the entries' own
pre-encoded bytes. Slow path: decode the event, add post/pre-images, run the user stages through
the document engine, re-encode. Batches stop at the count limit or at 16 MiB.
"""

import copy
import time

from bson.binary import Binary

from . import bsonutil
from . import oplog as oplogmod
from .bsonutil import e_doc, e_str, make_doc
from .errors import MongoError
from .storage import INTERNAL_DBS, MAX_BSON

MAX_BATCH_BYTES = MAX_BSON - 64 * 1024
# A getMore builds its batch in runs of this many events, letting other commands in between
# (ChangeStream.fill_yielding).
YIELD_EVENTS = 1000
SPEC_FIELDS = ("fullDocument", "fullDocumentBeforeChange", "resumeAfter", "startAfter",
               "startAtOperationTime", "allChangesForCluster", "showExpandedEvents")
FULL_DOCUMENT_MODES = ("default", "updateLookup", "whenAvailable", "required")
BEFORE_CHANGE_MODES = ("off", "whenAvailable", "required")
# The order ChangeStreamDefaultEventTransformation::applyTransformation adds the fields in
# (change_stream_event_transform.cpp); collectionUUID, operationDescription and
# stateBeforeChange come only with showExpandedEvents.
EVENT_ORDER = ("_id", "operationType", "clusterTime", "collectionUUID", "wallTime",
               "fullDocument", "ns", "documentKey", "operationDescription", "updateDescription",
               "stateBeforeChange", "to")

# Codes a 6.0 server labels ResumableChangeStreamError on a change-stream getMore.
RESUMABLE_CODES = frozenset((6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
                             63, 150, 13388, 234, 133, 43))
NON_RESUMABLE_CODES = frozenset((280, 286))
SPLIT_STAGE = "$changeStreamSplitLargeEvent"


def non_resumable(code, name, msg):
    return MongoError(code, name, msg, ["NonResumableChangeStreamError"])


def history_lost():
    return non_resumable(286, "ChangeStreamHistoryLost",
                         "Resume of change stream was not possible, as the resume point may no "
                         "longer be in the oplog.")


def too_large(size):
    return MongoError(10334, "BSONObjectTooLarge",
                      "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and "
                      "16793600(16MB)" % (size, size))


def _split_stage(stages):
    """(stages without a final $changeStreamSplitLargeEvent, whether it was there)."""
    at = [i for i, s in enumerate(stages) if isinstance(s, dict) and SPLIT_STAGE in s]
    if not at:
        return stages, False
    if at != [len(stages) - 1]:
        raise MongoError(7182802, "Location7182802",
                         "$changeStreamSplitLargeEvent must be the last stage in the pipeline")
    spec = stages[-1][SPLIT_STAGE]
    if not isinstance(spec, dict) or spec:
        raise MongoError(7182800, "Location7182800",
                         "$changeStreamSplitLargeEvent spec should be an empty object")
    return stages[:-1], True


# $changeStreamSplitLargeEvent (document_source_change_stream_split_large_event.h): an event
# is split only when its BSON is larger than kBSONObjMaxChangeEventSize, BSONObjMaxInternalSize
# (16 MiB + 16 KiB) less 8 KiB. 6.0.9/7.0 compare the event alone (8.x adds its token's size).
MAX_CHANGE_EVENT_SIZE = MAX_BSON + 16 * 1024 - 8 * 1024


def unsplittable(size, limit):
    return MongoError(7182500, "Location7182500",
                      "Splitting change event failed: fragment size %d is greater than maximum "
                      "allowed fragment size %d" % (size, limit))


def split_event(raw, token):
    """The fragments of an event over MAX_CHANGE_EVENT_SIZE, cut as MongoDB's splitChangeEvent
    (change_stream_split_event_helpers.cpp) cuts them: the fields but _id ordered by their BSON
    element size, then name; each fragment opens with its own _id (the event's token with the
    0-based fragment number) and splitEvent {fragment, of}, and takes fields in that order while
    they fit in MAX_CHANGE_EVENT_SIZE less the token's size (the fragment's size is measured
    with its $sortKey metadata, as mongod does). A fragment over the limit (one field too large)
    raises 7182500. The fragments therefore do not keep the event's field order."""
    ev = bsonutil.decode(raw)
    token_doc = {"_data": token}
    limit = MAX_CHANGE_EVENT_SIZE - len(bsonutil.encode(token_doc))
    fields = sorted(((len(bsonutil.encode({k: v})) - 5, k.encode(), k, v)
                     for k, v in ev.items() if k != "_id"), key=lambda f: f[:2])
    if not fields:
        raise MongoError(7182502, "Location7182502",
                         "Cannot split an empty event or an event containing solely '_id' field")
    groups = []
    i = 0
    while i < len(fields):
        frag_token = {"_data": oplogmod.make_fragment_token(token, len(groups))}
        head = {"_id": frag_token, "splitEvent": {"fragment": len(groups) + 1, "of": 0}}
        size = len(bsonutil.encode(dict(head, **{"$sortKey": {"": frag_token}})))
        group = [head]
        while True:
            group.append(fields[i])
            size += fields[i][0]
            i += 1
            if i >= len(fields) or size + fields[i][0] > limit:
                break
        if size > limit:
            raise unsplittable(size, limit)
        groups.append(group)
    out = []
    for head, *members in groups:
        head["splitEvent"]["of"] = len(groups)
        head.update((k, v) for _, _, k, v in members)
        out.append(bsonutil.encode(head))
    return out


def _event_summary(ev):
    summary = {"operationType": ev.get("operationType"), "ns": ev.get("ns"),
               "clusterTime": ev.get("clusterTime")}
    return bsonutil.format_doc_compact({k: v for k, v in summary.items() if v is not None})


class ChangeStream:
    """One change-stream cursor. All methods run with Store.lock held."""

    is_change_stream = True

    def __init__(self, store, db, coll, spec, stages, version=(6, 0)):
        self.store = store
        self.version = version
        self.id = 0
        self.killed = False
        self.closed = False
        self.last_used = time.monotonic()
        stages, self.split = _split_stage(stages)
        self.stages = stages
        self.pending_fragments = None   # [seq, tsv, fragments, next index]
        self.resume_fragment = None     # (seq, fragments already read) from a fragment token
        self._stage_fn = None
        if stages:
            from . import aggregate
            self._stage_fn = aggregate.compile_event_stages(stages)
        self._parse_level(db, coll, spec)
        self._parse_modes(spec)
        self.fast = (self.full_document == "default" and self.before_change == "off"
                     and not stages and not self.show_expanded)
        self.pending_invalidate = None
        self._position(spec)

    # ---- opening ----

    def _parse_level(self, db, coll, spec):
        for key in spec:
            if key not in SPEC_FIELDS or (key == "showExpandedEvents" and self.version < (6, 0)):
                raise MongoError(40415, "Location40415",
                                 "BSON field '$changeStream.%s' is an unknown field." % key)
        # showExpandedEvents (6.0+): the DDL events (oplog.EXPANDED_OPS, views' create and
        # drop), collectionUUID on every event with one, operationDescription on DDL events
        # and updateDescription.disambiguatedPaths (change_stream_event_transform.cpp).
        # Without it a stream sees none of that, as before.
        self.show_expanded = bool(spec.get("showExpandedEvents", False))
        cluster = bool(spec.get("allChangesForCluster", False))
        if cluster:
            if db != "admin" or coll is not None:
                raise MongoError(
                    73, "InvalidNamespace",
                    "A $changeStream with 'allChangesForCluster:true' may only be opened on "
                    "the 'admin' database, and with no collection name")
            self.level, self.db, self.coll = "cluster", None, None
            self.ns = "admin.$cmd.aggregate"
            return
        if db in INTERNAL_DBS:
            raise MongoError(73, "InvalidNamespace",
                             "$changeStream may not be opened on the internal %s database"
                             % db)
        if coll is None:
            self.level, self.db, self.coll = "db", db, None
            self.ns = db + ".$cmd.aggregate"
        else:
            if coll.startswith("system."):
                raise MongoError(73, "InvalidNamespace",
                                 "$changeStream may not be opened on the internal %s.%s "
                                 "collection" % (db, coll))
            self.level, self.db, self.coll = "coll", db, coll
            self.ns = db + "." + coll

    def _parse_modes(self, spec):
        fd = spec.get("fullDocument", "default")
        if self.version < (6, 0) and fd not in ("default", "updateLookup"):
            # 5.0's spec has fullDocument as a plain string, checked after parsing
            # (document_source_change_stream.cpp at r5.0, uassert 40575); the enum with
            # whenAvailable/required (and BadValue for other values) came with 6.0.
            raise MongoError(40575, "Location40575",
                             "unrecognized value for the 'fullDocument' option to the "
                             "$changeStream stage. Expected \"default\" or \"updateLookup\", "
                             "got \"%s\"" % (fd,))
        if fd not in FULL_DOCUMENT_MODES:
            raise MongoError(2, "BadValue", "Enumeration value '%s' for field "
                             "'$changeStream.fullDocument' is not a valid value." % (fd,))
        fdbc = spec.get("fullDocumentBeforeChange", "off")
        if fdbc not in BEFORE_CHANGE_MODES:
            raise MongoError(2, "BadValue", "Enumeration value '%s' for field "
                             "'$changeStream.fullDocumentBeforeChange' is not a valid value."
                             % (fdbc,))
        self.full_document = fd
        self.before_change = fdbc

    def _position(self, spec):
        store = self.store
        log = store.oplog
        given = [k for k in ("resumeAfter", "startAfter", "startAtOperationTime") if k in spec]
        if len(given) > 1:
            raise MongoError(40674, "Location40674",
                             "Only one type of resume option is allowed, but multiple were "
                             "found.")
        if not given:
            # Start strictly after everything that exists: reserve a fresh cluster time, so
            # the aggregate's operationTime (libmongoc's resume point when it has no token)
            # lies after the last existing entry.
            start = store.clock.tick()
            self.pos = log.end_seq
            self.pbrt = oplogmod.make_token(start, event=False)
            self.start_tsv = start
            return
        key = given[0]
        if key == "startAtOperationTime":
            ts = spec[key]
            if not hasattr(ts, "time") or not hasattr(ts, "inc"):
                raise MongoError(14, "TypeMismatch", "BSON field "
                                 "'$changeStream.startAtOperationTime' is the wrong type, "
                                 "expected type 'timestamp'")
            tsv = bsonutil.tsv_of(ts)
            if log.history_lost(tsv):
                raise history_lost()
            self.pos = log.seq_at_or_after(tsv)
            self.pbrt = oplogmod.make_token(tsv, event=False)
            self.start_tsv = tsv
            return
        token = oplogmod.Token.from_value(spec[key])
        self.start_tsv = token.tsv
        if token.from_invalidate and key == "resumeAfter":
            raise MongoError(260, "InvalidResumeToken",
                             "Attempting to resume a change stream using 'resumeAfter' is not "
                             "allowed from an invalidate notification.")
        if log.history_lost(token.tsv):
            raise history_lost()
        self.pbrt = token.data
        if not token.is_event:
            self.pos = log.seq_at_or_after(token.tsv)
            return
        seq, entry = oplogmod.find_token(log, token)
        # The token's event must be one this stream would show: a collection's stream resumed
        # with a token of another collection's event fails as mongod's
        # DocumentSourceChangeStreamEnsureResumeTokenPresent fails it, never reading past it
        # (document_source_change_stream_check_resumability.cpp; the change streams spec's
        # prose test of resumeAfter with another collection's token).
        if entry is None or not self._relevant(entry):
            raise non_resumable(280, "ChangeStreamFatalError",
                                "cannot resume stream; the resume token was not found. "
                                "{_data: \"%s\"}" % token.data)
        if token.fragment is not None:
            if not self.split:
                raise non_resumable(280, "ChangeStreamFatalError",
                                    "cannot resume from a split event's fragment token without "
                                    "$changeStreamSplitLargeEvent as the last stage")
            self.pos = seq
            self.resume_fragment = (seq, token.fragment)
            return
        self.pos = seq + 1
        if not token.from_invalidate and self._invalidates(entry):
            self.pending_invalidate = entry

    # ---- scanning ----

    def _relevant(self, e):
        if e.expanded and not self.show_expanded:
            return False
        if self.level == "coll":
            return e.ns == self.ns
        if self.level == "db":
            return e.db == self.db and not (e.coll or "").startswith("system.")
        return e.db not in INTERNAL_DBS

    def _invalidates(self, e):
        if self.level == "coll":
            return e.op in ("drop", "rename")
        if self.level == "db":
            return e.op == "dropDatabase"
        return False

    def fill_yielding(self, limit, pause):
        """fill(limit) in runs of YIELD_EVENTS events with pause() between them, which lets
        other clients' commands take the store's lock, and the cursor's kill checked after it.
        mongod's plan executor yields its locks every internalQueryExecYieldIterations (1000)
        works or internalQueryExecYieldPeriodMS (10 ms) (src/mongo/db/query/
        plan_yield_policy.cpp), and under WiredTiger a write to another collection does not
        wait for a change stream's getMore at all: without the pauses a checkpoint write
        waited here for a whole batch to be built (issue 41)."""
        out = self.fill(min(limit, YIELD_EVENTS))
        size = sum(len(x) for x in out)
        ran = len(out)
        while (ran == YIELD_EVENTS and len(out) < limit and not self.closed
               and self.pending_fragments is None and self.pending_invalidate is None):
            pause()
            if self.killed:
                raise MongoError(237, "CursorKilled", "cursor id %d was killed" % self.id)
            more = self.fill(min(limit - len(out), YIELD_EVENTS), used=size)
            ran = len(more)
            out += more
            size += sum(len(x) for x in more)
        return out

    def fill(self, limit, used=0):
        """Up to `limit` events from the current position; updates the position and PBRT.
        used: bytes of the batch already taken by an earlier run of fill_yielding's."""
        self.last_used = time.monotonic()
        out = []
        if self.closed:
            return out
        if self.pending_invalidate is not None:
            return self._emit_invalidate(out, self.pending_invalidate)
        if self.pending_fragments is not None:
            return self._emit_fragments(out, limit)
        log = self.store.oplog
        if self.pos < log.first_seq:
            raise MongoError(136, "CappedPositionLost",
                             "CollectionScan died due to position in capped collection being "
                             "deleted.")
        entries = log.entries
        base = log.base
        i = self.pos - base
        n = len(entries)
        size = 0
        last_token = None
        scanned = None
        level_coll = self.level == "coll"
        ns = self.ns
        fast = self.fast
        hide_expanded = not self.show_expanded
        while i < n and len(out) < limit:
            e = entries[i]
            if level_coll:
                if e.ns != ns or (e.expanded and hide_expanded):
                    i += 1
                    scanned = e
                    continue
            elif not self._relevant(e):
                i += 1
                scanned = e
                continue
            raw = e.raw if fast else self._transform(e)
            resumed = self.resume_fragment
            self.resume_fragment = None
            if raw is not None:
                if len(raw) > (MAX_CHANGE_EVENT_SIZE if self.split else MAX_BSON):
                    if not self.split:
                        raise too_large(len(raw))
                    if out or used:
                        break   # fragments travel in batches of their own
                    token = oplogmod.entry_token(e)
                    frags = split_event(raw, token)
                    # A fragment token's number is the fragment it was read with (0-based):
                    # resuming from it goes on with the one after.
                    start = resumed[1] + 1 if resumed and resumed[0] == base + i else 0
                    self.pos = base + i
                    self.pending_fragments = [base + i, token, frags, start]
                    return self._emit_fragments(out, limit)
                if resumed and resumed[0] == base + i:
                    raise non_resumable(280, "ChangeStreamFatalError",
                                        "Attempted to resume from a split event fragment, but "
                                        "the event in the resumed stream was not large enough "
                                        "to be split")
                if (out or used) and used + size + len(raw) > MAX_BATCH_BYTES:
                    break
                out.append(raw)
                size += len(raw)
                last_token = e
            i += 1
            scanned = e
            if self._invalidates(e):
                self.pos = base + i
                self._set_pbrt(last_token, scanned)
                return self._emit_invalidate(out, e)
        self.pos = base + i
        self._set_pbrt(last_token, scanned)
        return out

    def _emit_fragments(self, out, limit):
        seq, token, frags, k = self.pending_fragments
        size = 0
        while k < len(frags) and len(out) < limit:
            if out and size + len(frags[k]) > MAX_BATCH_BYTES:
                break
            out.append(frags[k])
            size += len(frags[k])
            k += 1
        if k:
            # The position is the last fragment handed out, never the whole event's token.
            self.pbrt = oplogmod.make_fragment_token(token, k - 1)
        if k >= len(frags):
            self.pending_fragments = None
            self.pos = seq + 1
        else:
            self.pending_fragments[3] = k
        return out

    def _set_pbrt(self, last_event_entry, last_scanned):
        best = self.pbrt
        if last_event_entry is not None:
            tok = oplogmod.entry_token(last_event_entry)
            if tok > best:
                best = tok
        if last_scanned is not None and last_scanned is not last_event_entry:
            tok = oplogmod.make_token(last_scanned.tsv, event=False)
            if tok > best:
                best = tok
        self.pbrt = best

    def _emit_invalidate(self, out, entry):
        raw = oplogmod.invalidate_event(entry)
        if self.stages:
            raw = self._run_stages(bsonutil.decode(raw))
        if raw is not None:
            out.append(raw)
        self.pbrt = oplogmod.invalidate_token(entry)
        self.pending_invalidate = None
        self.closed = True
        return out

    # ---- slow path ----

    def _transform(self, e):
        ev = bsonutil.decode(e.raw)
        op = ev["operationType"]
        if op == "update" and self.full_document != "default":
            if self.full_document == "updateLookup":
                c = self.store.coll(e.db, e.coll)
                ev["fullDocument"] = c.docs.get(e.key) if c is not None else None
            else:
                post = e.post if e.images else None
                if post is None and self.full_document == "required":
                    raise MongoError(47, "NoMatchingDocument",
                                     "Change stream was configured to require a post-image "
                                     "for all update events, but the post-image was not found "
                                     "for event: " + _event_summary(ev))
                ev["fullDocument"] = post
        if self.before_change != "off" and op in ("update", "replace", "delete"):
            if self.version < (6, 0):
                # 5.0 accepts fullDocumentBeforeChange but takes pre-images from the oplog of a
                # collection with recordPreImages (not played here), never from 6.0's
                # changeStreamPreAndPostImages (document_source_lookup_change_pre_image.cpp
                # at r5.0): "required" fails every such event, "whenAvailable" omits them.
                if self.before_change == "required":
                    raise MongoError(51770, "Location51770",
                                     "Change stream was configured to require a pre-image for "
                                     "all update, delete and replace events, but no pre-image "
                                     "optime was recorded for event: " + _event_summary(ev))
            elif not e.images:
                if self.before_change == "required":
                    raise MongoError(51770, "Location51770",
                                     "Change stream was configured to require a pre-image for "
                                     "all update, delete and replace events, but pre-image id "
                                     "was not available for event: " + _event_summary(ev))
                # whenAvailable: the field is there, null (DocumentSourceChangeStreamAddPreImage,
                # document_source_change_stream_add_pre_image.cpp; the spec test
                # change-streams-pre_and_post_images "fullDocumentBeforeChange:whenAvailable
                # with changeStreamPreAndPostImages disabled").
                ev["fullDocumentBeforeChange"] = None
            else:
                if e.pre is None and self.before_change == "required":
                    raise MongoError(47, "NoMatchingDocument",
                                     "Change stream was configured to require a pre-image for "
                                     "all update, delete and replace events, but the pre-image "
                                     "was not found for event: " + _event_summary(ev))
                ev["fullDocumentBeforeChange"] = e.pre
        if self.show_expanded:
            self._add_expanded(e, ev, op)
        if self.stages:
            # Stored documents must never be reachable from a user stage's output.
            for k in ("fullDocument", "fullDocumentBeforeChange"):
                if isinstance(ev.get(k), dict):
                    ev[k] = copy.deepcopy(ev[k])
        ordered = {k: ev[k] for k in EVENT_ORDER if k in ev}
        for k, v in ev.items():
            if k not in ordered:
                ordered[k] = v
        if self.stages:
            return self._run_stages(ordered)
        return bsonutil.encode(ordered)

    @staticmethod
    def _add_expanded(e, ev, op):
        """The fields showExpandedEvents adds (change_stream_event_transform.cpp): the
        collection's UUID (none for dropDatabase, nor for a view's events, made from
        system.views), operationDescription and stateBeforeChange of a DDL event, and
        disambiguatedPaths in an update's description, {} when no path is ambiguous."""
        cuuid = None if e.view else oplogmod.token_uuid(ev["_id"]["_data"])
        if cuuid is not None:
            ev["collectionUUID"] = Binary(cuuid.bytes, 4)
        desc = e.desc or {}
        for k in ("operationDescription", "stateBeforeChange"):
            if k in desc:
                ev[k] = copy.deepcopy(desc[k])
        if op == "update" and isinstance(ev.get("updateDescription"), dict):
            ev["updateDescription"]["disambiguatedPaths"] = copy.deepcopy(
                desc.get("disambiguatedPaths", {}))

    def _run_stages(self, ev):
        from . import aggregate
        out = self._stage_fn(ev)
        if out is None:
            return None
        if not aggregate.event_id_unchanged(ev, out):
            err = aggregate.change_stream_id_modified_error(ev, out)
            if "NonResumableChangeStreamError" not in err.labels:
                err.labels.append("NonResumableChangeStreamError")
            raise err
        return bsonutil.encode(out)

    def pbrt_element(self):
        return e_doc(b"postBatchResumeToken", make_doc(e_str(b"_data", self.pbrt)))
