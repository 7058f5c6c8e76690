"""The oplog: a capped, totally ordered list of entries, each carrying its change event pre-encoded.

Why pre-encoded: a change-stream getMore on the fast path is then a slice of this list joined
into one reply, which is what lets one Python thread feed a C client hundreds of thousands of
events per second.

Resume tokens are hex strings whose head is encoded as MongoDB's (resume_token.cpp builds a
KeyString of clusterTime, version, tokenType, txnOpIndex, fromInvalidate, collection UUID,
eventIdentifier; key_string.cpp encodes a Timestamp as 82 + 8 bytes, an int 0 as 29 and a
positive int as 2A + its byte count, then (value << 1) big-endian, a bool as 6E/6F):

    82 | clusterTime (16 hex: seconds, increment) | version (2B02: 1, 2B04: 2) | token type
    (29: high-water-mark, 2C0100: event, 128) | txnOpIndex (29: 0) | fromInvalidate (6E/6F)

so string order equals event order within one version, and the version sorts right after the
clusterTime, as on a server: a version-2 token sorts after every version-1 token of its
clusterTime (--token-version 2 makes every token version 2, the events already in the oplog
included, as a server whose feature compatibility version moved renders them).

A high-water-mark token is that head alone. An event token goes on with the collection UUID (01 +
32 hex, or 00 when there is none; our own encoding from here on) and the event identifier, the
hex of the BSON {operationType, documentKey} (MongoDB's v2 shape, which this stand-in also uses
for version 1; {operationType} for events without a documentKey). A long string _id therefore
makes a long token, as on a real server: a 2,000-byte _id gives a token of over 4,000 characters.

A high-water-mark token at time T sorts before every event at T, so resuming from it replays
events with clusterTime >= T; an event token resumes strictly after that event.

A fragment of an event split by $changeStreamSplitLargeEvent has the event's token followed by
the fragment number (8 hex, 0-based as MongoDB's fragmentNum); resuming from it goes on with the
next fragment.
"""

import bisect
import operator
import time
import uuid as uuidmod

from bson.int64 import Int64

from . import bsonutil
from .bsonutil import e_date, e_doc, e_str, e_ts, make_doc
from .errors import MongoError

PREFIX_LEN = 32   # the head of an event token with txnOpIndex 0

# The version of the tokens made (--token-version); 1 by default.
TOKEN_VERSION = 1
_VERSION_AT = 18  # the version's 4 hex digits, right after the clusterTime


def ks_int(n):
    """A non-negative int as key_string.cpp encodes it, in hex."""
    if n == 0:
        return "29"
    v = n << 1
    size = (v.bit_length() + 7) // 8
    return "%02X" % (0x2A + size) + v.to_bytes(size, "big").hex().upper()


# make_token's middle for a write's event (not in a transaction, not an invalidate).
_EVENT_TOKEN_MID = ks_int(TOKEN_VERSION) + ks_int(0x80) + ks_int(0) + "6E"


def _read_ks_int(data, at):
    """(value, next position) of the int encoded at data[at]; ValueError when it is none."""
    kind = int(data[at:at + 2], 16)
    if kind == 0x29:
        return 0, at + 2
    size = kind - 0x2A
    if not 1 <= size <= 8 or len(data) < at + 2 + 2 * size:
        raise ValueError("not an int")
    return int(data[at + 2:at + 2 + 2 * size], 16) >> 1, at + 2 + 2 * size


def parse_head(data):
    """(version, token type, txnOpIndex, fromInvalidate, end of the head) of a token."""
    version, at = _read_ks_int(data, _VERSION_AT)
    kind, at = _read_ks_int(data, at)
    txn, at = _read_ks_int(data, at)
    inval = data[at:at + 2]
    if inval not in ("6E", "6F"):
        raise ValueError("no fromInvalidate")
    return version, kind, txn, inval == "6F", at + 2


def with_token_version(raw):
    """An encoded event (its _id._data first, at byte 24) with its token in TOKEN_VERSION."""
    if TOKEN_VERSION == 1 or raw[24 + _VERSION_AT:24 + _VERSION_AT + 4] != b"2B02":
        return raw
    v = ks_int(TOKEN_VERSION).encode("ascii")
    return raw[:24 + _VERSION_AT] + v + raw[24 + _VERSION_AT + 4:]


def make_fragment_token(token, fragment_num):
    """The token of fragment `fragment_num` (0-based) of the event whose token is `token`."""
    return token + "%08X" % fragment_num


def make_token(tsv, event=True, from_invalidate=False, txn_index=0, ident=""):
    """`ident` (event tokens): the hex of the collection UUID and the event identifier, as
    event_ident() makes it."""
    if event and not txn_index and not from_invalidate:
        return "82%016X%s%s" % (tsv, _EVENT_TOKEN_MID, ident)   # a write's event
    return "82%016X%s%s%s%s%s" % (tsv, ks_int(TOKEN_VERSION), ks_int(0x80 if event else 0),
                                  ks_int(txn_index), "6F" if from_invalidate else "6E",
                                  ident if event else "")


def event_ident(op, key_raw=None, cuuid=None):
    """The hex tail of an event token: collection UUID, then BSON {operationType, documentKey}."""
    ident = e_str(b"operationType", op)
    if key_raw is not None:
        ident += e_doc(b"documentKey", key_raw)
    uuid_hex = "01" + cuuid.bytes.hex().upper() if cuuid is not None else "00"
    return uuid_hex + make_doc(ident).hex().upper()


def _bad_token(data, why):
    return MongoError(2, "BadValue", "Invalid resume token: %r %s" % (
        data if len(data) <= 80 else data[:80] + "...", why))


def _parse_tail(data, head):
    """(fragment number or None) of an event token's tail (after `head` characters); raises on
    a malformed one."""
    rest = data[head:]
    if rest.startswith("01"):
        bytes.fromhex(rest[2:34])
        if len(rest) < 34:
            raise ValueError("short uuid")
        rest = rest[34:]
    elif rest.startswith("00"):
        rest = rest[2:]
    else:
        raise ValueError("no uuid")
    size = int.from_bytes(bytes.fromhex(rest[:8]), "little")
    if len(rest) < 8 or size < 5 or len(rest) < 2 * size:
        raise ValueError("short identifier")
    bsonutil.decode(bytes.fromhex(rest[:2 * size]))
    rest = rest[2 * size:]
    if not rest:
        return None
    if len(rest) != 8:
        raise ValueError("bad fragment")
    return int(rest, 16)


class Token:
    """A parsed resume token."""

    __slots__ = ("tsv", "is_event", "txn_index", "from_invalidate", "data", "fragment")

    def __init__(self, data):
        if not isinstance(data, str) or len(data) < 28 or not data.startswith("82"):
            raise _bad_token(data if isinstance(data, str) else repr(data),
                             "is not a token issued by this deployment")
        try:
            self.tsv = int(data[2:18], 16)
            version, kind, self.txn_index, inval, head = parse_head(data)
        except ValueError:
            raise _bad_token(data, "is not a token issued by this deployment")
        self.fragment = None
        if kind == 0x80:
            try:
                self.fragment = _parse_tail(data, head)
            except Exception:
                raise _bad_token(data, "has no valid event identifier")
        elif len(data) != head:
            raise _bad_token(data, "is a high-water-mark token with an event identifier")
        # resume_token.cpp: versions 0, 1 and 2 (0 has another layout, never made here)
        if (version not in (1, 2) or kind not in (0, 0x80)
                or (self.fragment is not None and inval)):
            raise _bad_token(data, "is malformed")
        self.is_event = kind == 0x80
        self.from_invalidate = inval
        self.data = data

    @classmethod
    def from_value(cls, value):
        if not isinstance(value, dict) or not isinstance(value.get("_data"), str):
            raise MongoError(2, "BadValue",
                             "Invalid resume token: expected {_data: <hex string>}, got %s"
                             % bsonutil.format_value(value))
        return cls(value["_data"])


class Clock:
    """Cluster time: (seconds, increment), strictly increasing, never behind a persisted time."""

    def __init__(self, last_tsv=0):
        self.last = last_tsv

    def tick(self):
        secs = int(time.time())
        if secs > (self.last >> 32):
            self.last = (secs << 32) | 1
        else:
            self.last += 1
        return self.last

    def tick_wall(self):
        """(tick(), the wall time in ms) from one reading of the clock."""
        now = time.time()
        secs = int(now)
        if secs > (self.last >> 32):
            self.last = (secs << 32) | 1
        else:
            self.last += 1
        return self.last, int(now * 1000)

    def advance_past(self, tsv):
        if tsv > self.last:
            self.last = tsv


def wall_millis():
    return int(time.time() * 1000)


# ---- change event encoding ----

_OPTYPE = {name: e_str(b"operationType", name) for name in (
    "insert", "update", "replace", "delete", "drop", "rename", "dropDatabase", "invalidate",
    "create", "createIndexes", "dropIndexes", "modify")}
# The events only a stream opened with showExpandedEvents sees (change_stream_filter_helpers.cpp
# adds their oplog entries to the stream's filter only then): create (a collection or a view),
# createIndexes, dropIndexes, modify (collMod).
EXPANDED_OPS = frozenset(("create", "createIndexes", "dropIndexes", "modify"))
_NS_CACHE = {}


def ns_element(db, coll):
    key = (db, coll)
    elem = _NS_CACHE.get(key)
    if elem is None:
        if len(_NS_CACHE) > 100000:
            _NS_CACHE.clear()
        elem = e_doc(b"ns", make_doc(e_str(b"db", db) + e_str(b"coll", coll)))
        _NS_CACHE[key] = elem
    return elem


def id_element(token):
    return e_doc(b"_id", make_doc(e_str(b"_data", token)))


def build_event(op, tsv, wall, rest, key_raw=None, cuuid=None):
    """Encode one event: _id, operationType, clusterTime, wallTime, then `rest` (bytes).
    `key_raw` is the encoded documentKey (None for events without one)."""
    token = make_token(tsv, True, False, 0, event_ident(op, key_raw, cuuid))
    return make_doc(id_element(token) + _OPTYPE[op] + e_ts(b"clusterTime", tsv)
                    + e_date(b"wallTime", wall) + rest)


def entry_token(entry):
    """The token of the event an entry holds: its `_id._data` (the entry's raw event starts
    with it: _id document, then its _data string)."""
    raw = entry.raw
    n = int.from_bytes(raw[20:24], "little")
    return raw[24:24 + n - 1].decode("ascii")


def token_uuid(token):
    """The collection UUID an event token carries (uuid.UUID), or None."""
    head = parse_head(token)[4]
    if token[head:head + 2] != "01":
        return None
    return uuidmod.UUID(hex=token[head + 2:head + 34])


def invalidate_token(entry):
    """The invalidate after a drop, rename or dropDatabase has that event's token, marked
    fromInvalidate (as MongoDB makes it)."""
    token = entry_token(entry)
    head = parse_head(token)[4]
    return token[:head - 2] + "6F" + token[head:]


def invalidate_event(entry):
    token = invalidate_token(entry)
    return make_doc(id_element(token) + _OPTYPE["invalidate"] + e_ts(b"clusterTime", entry.tsv)
                    + e_date(b"wallTime", entry.wall))


class Entry:
    """One oplog entry. `raw` is the event as a default-mode change stream returns it.

    `desc`: what a stream opened with showExpandedEvents adds to the event (None: nothing but
    collectionUUID): operationDescription and stateBeforeChange of a DDL event, or the
    update's disambiguatedPaths. `expanded`: an event only such a stream sees (EXPANDED_OPS).
    `view`: a view's create or drop, made (as mongod makes them) from a write to
    <db>.system.views: a collection's stream never sees it, a database's only with
    showExpandedEvents (change_stream_filter_helpers.cpp, buildViewDefinitionEventFilter)."""

    __slots__ = ("tsv", "wall", "op", "db", "coll", "ns", "_raw", "_make", "key", "images",
                 "pre", "post", "to", "desc", "expanded", "view")

    def __init__(self, tsv, wall, op, db, coll, raw, key=None, images=False, pre=None,
                 post=None, to=None, desc=None, view=False, make=None):
        self.tsv = tsv
        self.wall = wall
        self.op = op
        self.db = db
        self.coll = coll
        self.ns = db + "." + coll if coll is not None else db
        self._raw = raw
        self._make = make
        self.key = key
        self.images = images
        self.pre = pre
        self.post = post
        self.to = to
        self.desc = desc
        self.expanded = view or op in EXPANDED_OPS
        self.view = view
        if view:
            self.ns = db + ".system.views"

    @property
    def raw(self):
        """The encoded event. An entry made with `make` (fn, args) instead of bytes encodes it
        on first read (a write's event is built when a stream reads it, as mongod builds
        events from its oplog entries), always to the same bytes: fn(*args) depends on
        nothing but its arguments, which are never changed (stored documents are not
        mutated)."""
        raw = self._raw
        if raw is None:
            fn, args = self._make
            raw = self._raw = fn(*args)
            self._make = None
        return raw

    @raw.setter
    def raw(self, value):
        self._raw = value
        self._make = None


_new_entry = object.__new__


def update_entry(tsv, wall, db, coll, ns, key, images, pre, post, make):
    """Entry(tsv, wall, "u", db, coll, None, key, images, pre, post, make=make) for a
    collection's update, ns being db + "." + coll (the collection's own), without the
    constructor's keyword handling: a bulk write makes one per statement."""
    e = _new_entry(Entry)
    e.tsv = tsv
    e.wall = wall
    e.op = "u"
    e.db = db
    e.coll = coll
    e.ns = ns
    e._raw = None
    e._make = make
    e.key = key
    e.images = images
    e.pre = pre
    e.post = post
    e.to = None
    e.desc = None
    e.expanded = False
    e.view = False
    return e


_TSV = operator.attrgetter("tsv")


class Oplog:
    """Capped list of entries addressed by a global sequence number (seq).

    Dropped entries are first set to None behind `head` and physically removed in bulk, so
    trimming is amortised O(1) while the cap stays exact.
    """

    def __init__(self, max_entries):
        self.max_entries = max(1, int(max_entries))
        self.entries = []
        self.base = 0           # seq of entries[0]
        self.head = 0           # index of the first live entry
        self.last_dropped_tsv = 0

    @property
    def first_seq(self):
        return self.base + self.head

    @property
    def end_seq(self):
        return self.base + len(self.entries)

    def __len__(self):
        return len(self.entries) - self.head

    def last_tsv(self):
        return self.entries[-1].tsv if len(self.entries) > self.head else 0

    def append(self, entry):
        self.entries.append(entry)
        if len(self.entries) - self.head > self.max_entries:
            self._trim()

    def _trim(self):
        entries = self.entries
        while len(entries) - self.head > self.max_entries:
            self.last_dropped_tsv = entries[self.head].tsv
            entries[self.head] = None
            self.head += 1
        if self.head > 1024 and self.head * 2 > len(entries):
            del entries[:self.head]
            self.base += self.head
            self.head = 0

    def seq_at_or_after(self, tsv):
        """First seq whose entry has clusterTime >= tsv."""
        i = bisect.bisect_left(self.entries, tsv, lo=self.head, key=_TSV)
        return self.base + i

    def find(self, tsv):
        """(seq, entry) of the entry with exactly this clusterTime, or (None, None)."""
        i = bisect.bisect_left(self.entries, tsv, lo=self.head, key=_TSV)
        if i < len(self.entries) and self.entries[i].tsv == tsv:
            return self.base + i, self.entries[i]
        return None, None

    def get(self, seq):
        return self.entries[seq - self.base]

    def history_lost(self, tsv):
        """True if an entry at or after tsv has been dropped."""
        return self.last_dropped_tsv != 0 and self.last_dropped_tsv >= tsv

    def iter_live(self):
        for i in range(self.head, len(self.entries)):
            yield self.entries[i]


def decode_event(entry):
    return bsonutil.decode(entry.raw)


def mark_transaction(oplog, first_seq, lsid, txn_number):
    """Make the entries from `first_seq` on the events of one committed transaction, as a
    replica set shows them (document_source_change_stream_unwind_transaction.cpp unwinds the
    commit's applyOps): each event gains `lsid` and `txnNumber`, all keep the commit's one
    clusterTime (the entries were made with it), and the i-th carries txnOpIndex i in its
    resume token, so tokens order the events within the transaction and a stream resumed from
    one goes on with the next event of the same transaction."""
    for i, seq in enumerate(range(first_seq, oplog.end_seq)):
        entry = oplog.get(seq)
        ev = bsonutil.decode(entry.raw)
        token = ev["_id"]["_data"]
        at = _read_ks_int(token, _read_ks_int(token, _VERSION_AT)[1])[1]
        end = _read_ks_int(token, at)[1]
        ev["_id"] = {"_data": token[:at] + ks_int(i) + token[end:]}
        ev["lsid"] = lsid
        ev["txnNumber"] = Int64(txn_number)  # a long in MongoDB's change-event schema
        entry.raw = bsonutil.encode(ev)


def find_token(oplog, token):
    """(seq, entry) of the event whose token is `token` (the events of a transaction share
    their clusterTime; their tokens differ by txnOpIndex), or (None, None)."""
    seq, entry = oplog.find(token.tsv)
    if entry is None:
        return None, None
    head = parse_head(token.data)[4]
    while seq < oplog.end_seq:
        e = oplog.get(seq)
        if e.tsv != token.tsv:
            break
        tok = entry_token(e)
        if tok[:head] == token.data[:head] or token.txn_index == 0:
            return seq, e
        seq += 1
    return None, None
