"""The _id index: a collection's _ids kept in MongoDB's order, as mongod's `_id_` index.

A find sorted by _id (with or without a range on _id) walks it instead of filtering and sorting
the whole collection: the snapshot's chunks (`{_id: {$gt: b, $lte: u}}`, sorted by _id, limit
n) then cost what they read, not what the collection holds. The order is compare.py's
compare_values (MongoDB's order of BSON values: canonical type first, NaN below every number);
each _id gets a Python key that sorts the same way, kept in a sorted list with bisect.

An _id that is an array (the stand-in accepts one; mongod refuses it) matches range filters
element by element, which no single place in an ordering can serve: while a collection holds
one (or an _id of a type compare.py does not rank), the callers fall back to the full scan.
"""

import bisect
import functools

from bson.objectid import ObjectId

from . import compare
from .compare import (RANK_DATE, RANK_MAXKEY, RANK_MINKEY, RANK_NULL, RANK_NUMBER,
                      RANK_OBJECTID, RANK_STRING, RANK_TIMESTAMP, RANK_BOOL)

_CMP_KEY = functools.cmp_to_key(compare.compare_values)


def order_key(v):
    """A key Python orders as compare.compare_values orders the values."""
    if type(v) is ObjectId:
        return (RANK_OBJECTID, v.binary)
    r = compare.canonical_rank(v)
    if r == RANK_NUMBER:
        n = compare.num_value(v)
        return (r, (0, 0) if compare.is_nan(n) else (1, n))
    if r == RANK_STRING:
        return (r, str(v))
    if r == RANK_BOOL:
        return (r, bool(v))
    if r == RANK_DATE:
        return (r, compare.datetime_ms(v))
    if r == RANK_TIMESTAMP:
        return (r, (v.time, v.inc))
    if r in (RANK_NULL, RANK_MINKEY, RANK_MAXKEY):
        return (r, 0)
    return (r, _CMP_KEY(v))


class IdIndex:
    """The _ids of one collection in order: parallel lists of order keys and value_keys."""

    def __init__(self):
        self.keys = []      # order_key(_id), sorted
        self.vks = []       # bsonutil.value_key(_id), in the same order
        self.odd = 0        # _ids that are arrays or have no key: no range is served then

    @staticmethod
    def _key(_id):
        try:
            return order_key(_id), isinstance(_id, list)
        except Exception:   # noqa: BLE001 - a type compare.py does not rank: never served
            return (RANK_MAXKEY + 1, id(_id)), True

    def add(self, _id, vk):
        if type(_id) is ObjectId:
            ok, odd = (RANK_OBJECTID, _id.binary), False
        else:
            ok, odd = self._key(_id)
        keys = self.keys
        if not keys or not ok < keys[-1]:
            # The common case: a driver's ObjectIds grow, so the new one goes last.
            keys.append(ok)
            self.vks.append(vk)
        else:
            i = bisect.bisect_right(keys, ok)
            keys.insert(i, ok)
            self.vks.insert(i, vk)
        self.odd += odd

    def remove(self, _id, vk):
        ok, odd = self._key(_id)
        i = bisect.bisect_left(self.keys, ok)
        n = len(self.keys)
        vks = self.vks
        while i < n and not (vks[i] is vk or vks[i] == vk) and self.keys[i] == ok:
            i += 1
        if i < n and (vks[i] is vk or vks[i] == vk):    # `is`: a NaN _id
            del self.keys[i]
            del self.vks[i]
            self.odd -= odd

    def usable(self):
        return self.odd == 0

    def scan(self, lo=None, hi=None, reverse=False):
        """value_keys from order key lo to hi (both included; None: open), in order or
        reversed. A generator: the caller stops when it has enough."""
        keys = self.keys
        i = 0 if lo is None else bisect.bisect_left(keys, lo)
        j = len(keys) if hi is None else bisect.bisect_right(keys, hi)
        vks = self.vks
        if reverse:
            # Equal keys (NaN _ids) keep their order, as a stable sort leaves them.
            k = j - 1
            while k >= i:
                start = k
                while start > i and keys[start - 1] == keys[k]:
                    start -= 1
                for m in range(start, k + 1):
                    yield vks[m]
                k = start - 1
        else:
            for k in range(i, j):
                yield vks[k]


    def between(self, lo, lo_incl, hi, hi_incl, want=0):
        """The value_keys from order key lo to hi (None: open), each end included or not,
        in order; at most `want` of them (0: all)."""
        keys = self.keys
        if lo is None:
            i = 0
        else:
            i = (bisect.bisect_left if lo_incl else bisect.bisect_right)(keys, lo)
        if hi is None:
            j = len(keys)
        else:
            j = (bisect.bisect_right if hi_incl else bisect.bisect_left)(keys, hi)
        if want and j > i + want:
            j = i + want
        return self.vks[i:j]


_BOUND_OPS = ("$gt", "$gte", "$lt", "$lte", "$eq")
# exact_range: the bounds it serves alone (no match needed): ObjectIds and strings, whose
# order (bytes; UTF-8 keeps code point order) is all there is to their comparison.
_EXACT_TYPES = (ObjectId, str)


def exact_range(flt):
    """(lo, lo included, hi, hi included) when the filter is nothing but bounds on _id
    ($gt, $gte, $lt, $lte of ObjectIds or strings, one type, alone or in a top-level $and):
    the _id index range is then exactly the documents that match. Else None."""
    if not isinstance(flt, dict) or len(flt) != 1:
        return None
    k, v = next(iter(flt.items()))
    if k == "_id":
        clauses = [v]
    elif k == "$and" and isinstance(v, list) and v:
        clauses = []
        for sub in v:
            if not isinstance(sub, dict) or len(sub) != 1 or "_id" not in sub:
                return None
            clauses.append(sub["_id"])
    else:
        return None
    lo = hi = None
    lo_incl = hi_incl = True
    kind = None
    for c in clauses:
        if type(c) is not dict or not c:
            return None
        for op, rhs in c.items():
            t = type(rhs)
            if op not in ("$gt", "$gte", "$lt", "$lte") or t not in _EXACT_TYPES \
                    or (kind is not None and t is not kind):
                return None
            kind = t
            b = order_key(rhs)
            if op in ("$gt", "$gte"):
                if lo is None or b > lo or (b == lo and op == "$gt"):
                    lo, lo_incl = b, op == "$gte"
            elif hi is None or b < hi or (b == hi and op == "$lt"):
                hi, hi_incl = b, op == "$lte"
    rank = RANK_OBJECTID if kind is ObjectId else RANK_STRING
    if lo is None:
        lo = (rank,)
    if hi is None:
        hi = (rank, _TOP)
    return lo, lo_incl, hi, hi_incl


def _plain_bound(v):
    """The order key of a bound a range on the index can use, or None."""
    if v is None or isinstance(v, (dict, list)):
        return None
    try:
        r = compare.canonical_rank(v)
    except Exception:   # noqa: BLE001 - a type the engine refuses: the scan reports it
        return None
    if r in (RANK_MINKEY, RANK_MAXKEY, RANK_NULL) or (r == RANK_NUMBER and compare.is_nan(
            compare.num_value(v))):
        return None
    if r not in (RANK_NUMBER, RANK_STRING, RANK_OBJECTID, RANK_DATE, RANK_BOOL,
                 RANK_TIMESTAMP):
        return None
    return order_key(v)


def id_range(flt):
    """(lo, hi) order keys (None: open) that hold every _id `flt` can match, when the filter
    pins _id to a range of one type (`{_id: {$gt: a, $lte: b}}`, alone or in a top-level
    $and, or `{_id: v}`), else None (no range: the whole index). Type bracketing (query.py)
    keeps $gt/$lt within the bound's canonical type, so the range ends at that type."""
    parts = []
    if not isinstance(flt, dict):
        return None
    for k, v in flt.items():
        if k == "_id":
            parts.append(v)
        elif k == "$and" and isinstance(v, list):
            for sub in v:
                if isinstance(sub, dict) and "_id" in sub:
                    parts.append(sub["_id"])
    lo = hi = None
    rank = None
    for p in parts:
        if isinstance(p, dict) and p and all(isinstance(op, str) and op.startswith("$")
                                             for op in p):
            ops = [(op, rhs) for op, rhs in p.items() if op in _BOUND_OPS]
        elif not isinstance(p, dict):
            ops = [("$eq", p)]
        else:
            ops = []
        for op, rhs in ops:
            b = _plain_bound(rhs)
            if b is None:
                continue
            if rank is not None and b[0] != rank:
                return None     # two types: leave it to the scan
            rank = b[0]
            if op in ("$gt", "$gte", "$eq") and (lo is None or b > lo):
                lo = b
            if op in ("$lt", "$lte", "$eq") and (hi is None or b < hi):
                hi = b
    if rank is None:
        return None
    # Within the bound's type: from its first key to its last.
    if lo is None:
        lo = (rank,)
    if hi is None:
        hi = (rank, _TOP)
    return lo, hi


class _Top:
    """Above every key of a rank: (rank, _TOP) ends a rank's range."""

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return True

    def __eq__(self, other):
        return isinstance(other, _Top)

    def __le__(self, other):
        return isinstance(other, _Top)

    def __ge__(self, other):
        return True

    __hash__ = object.__hash__


_TOP = _Top()
