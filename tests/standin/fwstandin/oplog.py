"""The oplog: a capped, totally ordered list of entries, each carrying its change event pre-encoded.

Why pre-encoded: a change-stream getMore on the fast path is then a slice of this list joined
into one reply, which is what lets one Python thread feed a C client hundreds of thousands of
events per second.

Resume tokens are our own KeyString-like hex strings. Fixed width, upper-case hex, so string
order equals event order:

    82 | clusterTime (16 hex: seconds, increment) | 01 version | token type (00 high-water-mark,
    80 event) | txnOpIndex (8 hex) | fromInvalidate (00/01)

A high-water-mark token at time T sorts before every event at T, so resuming from it replays
events with clusterTime >= T; an event token resumes strictly after that event.

A fragment of an event split by $changeStreamSplitLargeEvent has the event's token followed by
the fragment number (4 hex, 1-based); resuming from it goes on with the next fragment.
"""

import bisect
import operator
import time

from . import bsonutil
from .bsonutil import e_date, e_doc, e_str, e_ts, make_doc
from .errors import MongoError

TOKEN_LEN = 32
FRAGMENT_TOKEN_LEN = 36


def make_fragment_token(tsv, fragment):
    return make_token(tsv) + "%04X" % fragment


def make_token(tsv, event=True, from_invalidate=False, txn_index=0):
    return "82%016X01%02X%08X%02X" % (tsv, 0x80 if event else 0, txn_index,
                                      1 if from_invalidate else 0)


class Token:
    """A parsed resume token."""

    __slots__ = ("tsv", "is_event", "txn_index", "from_invalidate", "data", "fragment")

    def __init__(self, data):
        if (not isinstance(data, str) or len(data) not in (TOKEN_LEN, FRAGMENT_TOKEN_LEN)
                or not data.startswith("82")
                or data[18:20] != "01"):
            raise MongoError(
                2, "BadValue",
                "Invalid resume token: %r is not a token issued by this deployment" % (data,))
        try:
            self.tsv = int(data[2:18], 16)
            kind = int(data[20:22], 16)
            self.txn_index = int(data[22:30], 16)
            inval = int(data[30:32], 16)
            self.fragment = int(data[32:36], 16) if len(data) == FRAGMENT_TOKEN_LEN else 0
        except ValueError:
            raise MongoError(2, "BadValue", "Invalid resume token: %r is not hex" % (data,))
        if (kind not in (0, 0x80) or inval not in (0, 1)
                or (self.fragment and (kind != 0x80 or inval))):
            raise MongoError(2, "BadValue", "Invalid resume token: %r" % (data,))
        self.is_event = kind == 0x80
        self.from_invalidate = inval == 1
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

    def advance_past(self, tsv):
        if tsv > self.last:
            self.last = tsv


def wall_millis():
    return int(time.time() * 1000)


# ---- change event encoding ----

_OPTYPE = {name: e_str(b"operationType", name) for name in (
    "insert", "update", "replace", "delete", "drop", "rename", "dropDatabase", "invalidate")}
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


def build_event(op, tsv, wall, rest, from_invalidate=False):
    """Encode one event: _id, operationType, clusterTime, wallTime, then `rest` (bytes)."""
    token = make_token(tsv, True, from_invalidate)
    return make_doc(id_element(token) + _OPTYPE[op] + e_ts(b"clusterTime", tsv)
                    + e_date(b"wallTime", wall) + rest)


def invalidate_event(entry):
    return build_event("invalidate", entry.tsv, entry.wall, b"", from_invalidate=True)


class Entry:
    """One oplog entry. `raw` is the event as a default-mode change stream returns it."""

    __slots__ = ("tsv", "wall", "op", "db", "coll", "ns", "raw", "key", "images", "pre",
                 "post", "to")

    def __init__(self, tsv, wall, op, db, coll, raw, key=None, images=False, pre=None,
                 post=None, to=None):
        self.tsv = tsv
        self.wall = wall
        self.op = op
        self.db = db
        self.coll = coll
        self.ns = db + "." + coll if coll is not None else db
        self.raw = raw
        self.key = key
        self.images = images
        self.pre = pre
        self.post = post
        self.to = to


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
