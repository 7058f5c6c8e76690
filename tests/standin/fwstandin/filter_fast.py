"""A filter `{_id: <literal>, <predicates on top-level fields>}` read into a list of
predicates and evaluated on the one document the `_id` finds, as mongod runs such a query: the
_id index bounded to the point (an IXSCAN of `_id_`, one key at most) and a FETCH
whose filter is the rest of the predicate, on that document (no closures compiled).

A checkpoint write's filter is such a filter (`{_id: <stream>, writerGen: {$not: {$gt: g}},
$or: [{writerId: {$ne: w}}, {writerSeq: {$lt: s}}]}`) and is new for every write (its
`writerSeq`): query.py compiles a filter into closures, which costs more than evaluating a
handful of predicates once. `parse` knows a small set of shapes: a field compared with a
literal (`v`, `{$eq|$ne|$gt|$gte|$lt|$lte: v}`, several at once), `$not` over such operators,
and `$and`/`$or` over documents of such predicates; a literal is a number (not NaN), a string,
an ObjectId or a date. Anything else (a dotted or `$` path, an array or document literal,
null, a regex, `$in`, `$exists`, ...) gives None: the general path runs the filter.

`match` answers for a document only when each field the predicates read is missing or a
scalar the comparison below handles exactly as query.py does (a number but NaN and
Decimal128, a string, an ObjectId, a date, a boolean, null); an array (whose elements would
be matched each) or a document gives None and the general path decides. The comparison is
MongoDB's: values of different canonical types never compare (type bracketing: `$gt: 5`
does not match a string, `$ne: 5` does), and a missing field is null, which no literal of
these types equals or compares with (so `$ne`/`$not` match it, `$lt` does not).
"""

import datetime

from bson.int64 import Int64
from bson.objectid import ObjectId

from .compare import MISSING, canonical_rank, compare_values

_LITERALS = (int, Int64, float, str, ObjectId, datetime.datetime)
# Stored values compared here; bool and None compare by rank only (no literal has theirs).
_STORED = _LITERALS + (bool, type(None))
_OPS = {"$eq": (0, ), "$ne": None, "$gt": (1, ), "$gte": (0, 1), "$lt": (-1, ),
        "$lte": (-1, 0)}


def _literal(v):
    t = type(v)
    if t not in _LITERALS:
        return False
    if t is float and v != v:
        return False    # NaN: query.py's own comparison rules
    return True


def _field(name, spec, out):
    """Appends the predicates of `name: spec` to out; False when not of a known shape."""
    if not name or name[0] == "$" or "." in name or name == "_id" or type(name) is not str:
        return False
    if type(spec) is not dict:
        if not _literal(spec):
            return False
        out.append((name, "$eq", spec, False))
        return True
    if not spec:
        return False
    for op, v in spec.items():
        if op == "$not":
            if type(v) is not dict or not v:
                return False
            inner = []
            for iop, iv in v.items():
                if iop not in _OPS or not _literal(iv):
                    return False
                inner.append((iop, iv))
            out.append((name, "$not", inner, True))
        elif op in _OPS and _literal(v):
            out.append((name, op, v, False))
        else:
            return False
    return True


def _conjunction(flt, out):
    """Appends flt's predicates (a document of field predicates, $and, $or) to out."""
    if type(flt) is not dict or not flt:
        return False
    for key, spec in flt.items():
        if key == "$and" or key == "$or":
            if type(spec) is not list or not spec:
                return False
            branches = []
            for clause in spec:
                preds = []
                if not _conjunction(clause, preds):
                    return False
                branches.append(preds)
            if key == "$and":
                for preds in branches:
                    out.extend(preds)
            else:
                out.append((None, "$or", branches, False))
        elif not _field(key, spec, out):
            return False
    return True


def parse(flt):
    """(the _id, predicates) of a filter of the shapes above, else None."""
    if type(flt) is not dict or len(flt) < 2:
        return None
    _id = flt.get("_id", MISSING)
    if _id is MISSING:
        return None
    preds = []
    for key, spec in flt.items():
        if key == "_id":
            continue
        if not _conjunction({key: spec}, preds):
            return None
    return _id, preds


class _Unknown(Exception):
    """A stored value this module does not compare: the general path decides."""


def _test(cur, op, v):
    if cur is MISSING:
        return op == "$ne"
    if type(cur) not in _STORED or (type(cur) is float and cur != cur):
        raise _Unknown
    if canonical_rank(cur) != canonical_rank(v):
        return op == "$ne"
    c = compare_values(cur, v)
    if op == "$ne":
        return c != 0
    return c in _OPS[op]


def _all(doc, preds):
    for field, op, arg, _ in preds:
        if op == "$or":
            if not any(_all(doc, branch) for branch in arg):
                return False
        elif op == "$not":
            cur = doc.get(field, MISSING)
            if all(_test(cur, iop, iv) for iop, iv in arg):
                return False
        elif not _test(doc.get(field, MISSING), op, arg):
            return False
    return True


def match(doc, preds):
    """True/False: does doc (the one document the filter's _id found) match preds (parse's);
    None when a value read is one this module does not compare (the caller runs the
    general matcher)."""
    try:
        return _all(doc, preds)
    except _Unknown:
        return None
