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

A bulk write's statements mostly share one shape: S6b's 500 statements differ only in their
`_id`. mongod reads each statement in place (its IDL parser over the message's BSON, no copy
into objects); the stand-in decoded each into dicts and planned it again. `by_id_shape` reads
a raw statement `{q: {_id: <string, int32, int64 or ObjectId>}, <rest>}` without decoding it:
the `_id` and the rest's bytes; a rest seen before in a statement that decoded, passed the
command's field checks and planned (`remember`) gives the same plan, so the statement is
neither decoded nor planned again.
"""

import datetime
import struct
from functools import cmp_to_key

from bson.int64 import Int64
from bson.objectid import ObjectId

from . import bsonutil
from . import filter_fast
from . import numbers as num
from .compare import MISSING, identical
from .update import _compare_paths, copy_value

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


def _plain(v, depth=0):
    """A $set value plan_filtered() takes: one of _SCALARS, or a document of such values (a
    resume token) with plain field names (no `$`, no dot, not empty), nested at most 8 deep."""
    t = type(v)
    if t in _SCALARS:
        return True
    if t is not dict or depth >= 8:
        return False
    for k, x in v.items():
        if type(k) is not str or not k or k[0] == "$" or "." in k or not _plain(x, depth + 1):
            return False
    return True


def plan_filtered(st):
    """(the _id, ops as plan()'s, the rest of the filter as filter_fast's predicates) of a
    statement {q: {_id: <literal>, <filter_fast's shapes>}, u: {$set/$inc: <top-level
    fields>}} whose $set values are scalars or plain documents (a checkpoint write), else
    None. Its ops' document values are copied when applied (apply())."""
    if not _KEYS.issuperset(st) or st.get("multi", False) is not False:
        return None
    got = filter_fast.parse(st.get("q"))
    if got is None or type(got[0]) not in _ID_TYPES:
        return None
    u = st.get("u")
    if type(u) is not dict or not u:
        return None
    ops = []
    seen = set()
    for op, arg in u.items():
        if op == "$inc":
            inc = True
        elif op == "$set":
            inc = False
        else:
            return None
        if type(arg) is not dict or not arg:
            return None
        for field, value in arg.items():
            if (not field or field[0] == "$" or "." in field or field == "_id"
                    or field in seen or not (type(value) in _NUMBERS if inc else _plain(value))):
                return None
            seen.add(field)
            ops.append((field, inc, value))
    if len(ops) > 1:
        ops.sort(key=lambda o: _PATH_ORDER(([o[0]], )))
    return got[0], ops, got[1]


# The bytes of a statement from its 5th: q's type, name and length, then the first element's
# type and name and its first 4 bytes (a string's length, an int32's value).
_HEAD = struct.Struct("<3siB4si")
_INT32 = struct.Struct("<i")
_Q = b"\x03q\x00"
_ID = b"_id\x00"
# The bytes of a statement after q -> its plan's ops, for those remembered (bounded: cleared
# when full). SHAPES.get(by_id_shape(raw)[1]): the ops of a statement of a shape seen before.
SHAPES = {}
SHAPES_MAX = 1024


def by_id_shape(raw):
    """(the _id, the statement's bytes after q) of raw, a statement's BSON, when it starts
    with q = {_id: <a string, int32, int64 or ObjectId>} and nothing else, else None. Nothing
    after q is read: the caller matches those bytes against statements it decoded."""
    try:
        qm, qlen, t, idm, n = _HEAD.unpack_from(raw, 4)
    except struct.error:
        return None
    if qm != _Q or idm != _ID:
        return None
    end = 7 + qlen      # q's end: its last byte is its terminating NUL
    if end >= len(raw):
        return None     # q past the statement's end (the statement's own NUL after it)
    if t == 2:
        # n: the string's bytes and its NUL; q ends right after that NUL.
        if n < 1 or end != 21 + n or raw[19 + n] != 0 or raw[20 + n] != 0:
            return None
        try:
            _id = raw[20:19 + n].decode()
        except UnicodeDecodeError:
            return None     # decoded, it fails as before
    elif t == 0x10:
        if end != 21 or raw[20] != 0:
            return None
        _id = n
    elif t == 0x12:
        if end != 25 or raw[24] != 0:
            return None
        _id = Int64(int.from_bytes(raw[16:24], "little", signed=True))
    elif t == 0x07:
        if end != 29 or raw[28] != 0:
            return None
        _id = ObjectId(raw[16:28])
    else:
        return None
    return _id, raw[end:]


def remember(shape, st, fp):
    """Keeps plan(st)'s ops (fp) for statements with the same bytes after q as st's raw
    (shape: its by_id_shape()). st: the statement decoded, which passed the command's field
    checks. Not kept when those bytes hold another `q` (the decoded statement's, which the
    shape's would not be)."""
    rest = shape[1]
    if fp is None:
        return
    if "q" in bsonutil.decode(_INT32.pack(len(rest) + 4) + rest):
        return      # a second q after the first (a duplicate key): decode such statements
    if len(SHAPES) >= SHAPES_MAX:
        SHAPES.clear()
    SHAPES[rest] = fp[1]


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
        elif type(arg) is dict:
            value = copy_value(arg)     # plan_filtered's document: the general path's copy
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


def apply_sized(doc, ops, size):
    """(new document, updateDescription, new size): apply(doc, ops) and, when it changed doc,
    new_size(size, doc, its updatedFields); size: doc's encoded size, or None (then the new
    size is None). None when apply() gives None. A counter's $inc of an int32 that stays an
    int32 (S6b's statement) is worked out here without apply()'s loop: the same document and
    description, and the same size."""
    if len(ops) == 1:
        field, inc, arg = ops[0]
        if inc and type(arg) is int:
            cur = doc.get(field)
            if type(cur) is int:
                value = cur + arg
                if (_I32_MIN <= value <= _I32_MAX and _I32_MIN <= cur <= _I32_MAX
                        and _I32_MIN <= arg <= _I32_MAX):
                    if value == cur:
                        return doc, {}, size
                    new = dict(doc)
                    new[field] = value
                    return new, {"updatedFields": {field: value}, "removedFields": [],
                                 "truncatedArrays": []}, size
    res = apply(doc, ops)
    if res is None:
        return None
    new, ud = res
    if ud and size is not None:
        size = new_size(size, doc, ud["updatedFields"])
    return new, ud, size


def _value_size(v):
    """The size of a value of one of plan()'s types or a document of them as bsonutil.encode
    writes it, or None for one it would not write that way (an int past int64, a string that
    is not UTF-8) or of another type."""
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
    if t is dict:
        # A document of such values (plan_filtered's resume token): its length, each
        # element's type byte, name and NUL, its terminating NUL.
        size = 5
        for k, x in v.items():
            vs = _value_size(x)
            if vs is None or type(k) is not str:
                return None
            try:
                size += len(k.encode()) + 2 + vs
            except UnicodeEncodeError:
                return None
        return size
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
