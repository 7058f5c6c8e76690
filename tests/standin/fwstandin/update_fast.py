"""The update-by-_id fast path: a statement {q: {_id: <literal>}, u: {$inc/$set: {<top-level
field>: <scalar>}}} on a document that exists, as mongod's IDHACK plan and update driver run it.

mongod answers `{_id: <literal>}` with a point lookup on the _id index (no query planning) and
applies `$inc`/`$set` on top-level fields without a general walk (update_driver.cpp,
modifier_table.cpp). The stand-in's general path (cmd_crud._apply_one over update.py) parses the
update into a path tree, checks conflicts, locates each path and compiles the filter for every
statement: most of a bulk write's time. This module recognises the simple shape once and
applies it directly, with the general path's exact results: the same new document (fields
created in path order at the end), the same updateDescription (changed fields in path order,
binary no-ops left out), and `nModified` 0 for a no-op. Anything else (a dotted or `$` path, an
operator but `$inc`/`$set`, a non-scalar value, two operators on one field, `$inc` on a
non-number or overflowing, a missing document: the upsert or n = 0) returns None, and the
general path runs the statement and reports its error exactly as before.
"""

import datetime
from functools import cmp_to_key

from bson.int64 import Int64
from bson.objectid import ObjectId

from . import numbers as num
from .compare import MISSING, identical
from .update import _compare_paths

# The statement fields the fast path knows (anything else, e.g. hint, collation, arrayFilters,
# goes the general way, which checks it).
_KEYS = frozenset(("q", "u", "upsert", "multi"))
# _id literals answered by a point lookup: value_key() is the value itself (bool, None,
# documents, arrays, regexes go the general way).
_ID_TYPES = (str, int, ObjectId, Int64)
_NUMBERS = (int, float, Int64)
# $set values kept as they are (immutable: the general path's deepcopy returns them as is).
_SCALARS = (int, float, Int64, str, bool, type(None), ObjectId, datetime.datetime)
_PATH_ORDER = cmp_to_key(_compare_paths)
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def plan(st):
    """(the _id, [(field, is $inc, argument)] in mongod's apply order) when the statement has
    the simple shape, else None."""
    if not _KEYS.issuperset(st) or st.get("multi", False) is not False:
        return None
    q = st.get("q")
    if type(q) is not dict or len(q) != 1:
        return None
    _id = q.get("_id", MISSING)
    if type(_id) not in _ID_TYPES:
        return None
    u = st.get("u")
    if type(u) is not dict or not u:
        return None
    if len(u) == 1:
        # One operator on one field (S6b's {$inc: {n: 1}}): no duplicate or order to check.
        for op, arg in u.items():
            if type(arg) is dict and len(arg) == 1:
                for field, value in arg.items():
                    if op == "$inc":
                        allowed = _NUMBERS
                    elif op == "$set":
                        allowed = _SCALARS
                    else:
                        return None
                    if (not field or field[0] == "$" or "." in field or field == "_id"
                            or type(value) not in allowed):
                        return None
                    return _id, [(field, op == "$inc", value)]
    ops = []
    seen = set()
    for op, arg in u.items():
        if op == "$inc":
            inc, allowed = True, _NUMBERS
        elif op == "$set":
            inc, allowed = False, _SCALARS
        else:
            return None
        if type(arg) is not dict or not arg:
            return None
        for field, value in arg.items():
            if (not field or field[0] == "$" or "." in field or field == "_id"
                    or field in seen or type(value) not in allowed):
                return None
            seen.add(field)
            ops.append((field, inc, value))
    if len(ops) > 1:
        ops.sort(key=lambda o: _PATH_ORDER(([o[0]], )))
    return _id, ops


def apply(doc, ops):
    """(new document, updateDescription) of ops over doc, or None when the general path must
    run it (to raise its error). The description is empty for a no-op; doc is not changed."""
    new = None
    updated = {}
    for field, inc, arg in ops:
        cur = doc.get(field, MISSING)
        if inc and cur is not MISSING:
            t = type(cur)
            if t is int and type(arg) is int:
                # int32 + int32 staying in int32 (numbers.add's first case, without its
                # dispatch); anything wider goes through numbers.add.
                value = cur + arg
                if not (_I32_MIN <= value <= _I32_MAX and _I32_MIN <= cur <= _I32_MAX
                        and _I32_MIN <= arg <= _I32_MAX):
                    try:
                        value = num.add(cur, arg, on_long_overflow="error")
                    except num.Overflow:
                        return None
            elif t is not int and t is not float and t is not Int64:
                return None     # a non-number (the general path's error) or a Decimal128
            else:
                try:
                    value = num.add(cur, arg, on_long_overflow="error")
                except num.Overflow:
                    return None
        else:
            value = arg
        if cur is not MISSING:
            t = type(cur)
            if t is type(value) and (t is int or t is str or t is Int64):
                if cur == value:
                    continue    # compare.identical's first case
            elif identical(cur, value):
                continue
        if new is None:
            new = dict(doc)
        new[field] = value
        updated[field] = value
    if new is None:
        return doc, {}
    return new, {"updatedFields": updated, "removedFields": [], "truncatedArrays": []}


def _value_size(v):
    """The size of a value of one of plan()'s types as bsonutil.encode writes it, or None for
    one it would not write that way (an int past int64, a string that is not UTF-8)."""
    t = type(v)
    if t is int:
        if _I32_MIN <= v <= _I32_MAX:
            return 4
        return 8 if _I64_MIN <= v <= _I64_MAX else None
    if t is float or t is Int64 or t is datetime.datetime:
        return 8
    if t is str:
        try:
            return len(v.encode()) + 5
        except UnicodeEncodeError:
            return None
    if t is bool:
        return 1
    if v is None:
        return 0
    if t is ObjectId:
        return 12
    return None


def new_size(size, doc, updated):
    """len(encode(new)) for new = doc with the fields of `updated` (apply's updatedFields:
    top-level, plan()'s types) set, from size = len(encode(doc)); None when a value is not
    one whose size is known here (the caller encodes)."""
    for field, value in updated.items():
        cur = doc.get(field, MISSING)
        t = type(value)
        if t is type(cur) and (t is float or t is Int64 or (
                t is int and _I32_MIN <= value <= _I32_MAX and _I32_MIN <= cur <= _I32_MAX)):
            continue    # a counter's new value: the same type and width, the same size
        vs = _value_size(value)
        if vs is None:
            return None
        if cur is MISSING:
            try:
                size += len(field.encode()) + 2 + vs     # type byte, name, NUL, value
            except UnicodeEncodeError:
                return None
        else:
            cs = _value_size(cur)
            if cs is None:
                return None
            size += vs - cs
    return size
