"""BSON value ordering, equality, type names and message formatting.

MongoDB orders values of different types by a fixed "canonical type" rank
and only then by value, so every comparison below starts with the rank.
Values are the Python objects `bson.decode` produces (pymongo 3.11), plus
MISSING, the marker the engine uses for "no such field" (sorted as null).
"""

import datetime
import math
import re
import uuid
from decimal import Decimal
from functools import cmp_to_key

from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.son import SON
from bson.timestamp import Timestamp

from .errors import MongoError


class _Missing:
    """Marker for an absent field; distinct from None (BSON null)."""

    __slots__ = ()

    def __repr__(self):
        return "MISSING"

    def __bool__(self):
        return False


MISSING = _Missing()


class _EmptyArrayKey:
    """Sort key of an empty array: MongoDB sorts it before null."""

    __slots__ = ()

    def __repr__(self):
        return "EMPTY_ARRAY_KEY"


EMPTY_ARRAY_KEY = _EmptyArrayKey()

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

RANK_MINKEY = -1
RANK_EMPTY_ARRAY = 0    # same slot as BSON undefined
RANK_NULL = 5
RANK_NUMBER = 10
RANK_STRING = 15
RANK_OBJECT = 20
RANK_ARRAY = 25
RANK_BINDATA = 30
RANK_OBJECTID = 35
RANK_BOOL = 40
RANK_DATE = 45
RANK_TIMESTAMP = 47
RANK_REGEX = 50
RANK_CODE = 60
RANK_CODE_WS = 65
RANK_MAXKEY = 100

_RE_PATTERN = type(re.compile(""))

# Exact-type lookup first: it is the hot path and keeps bool (an int
# subclass) and Code (a str subclass) from being mistaken for their bases.
_RANK_BY_TYPE = {
    type(None): RANK_NULL, _Missing: RANK_NULL, _EmptyArrayKey: RANK_EMPTY_ARRAY,
    int: RANK_NUMBER, Int64: RANK_NUMBER, float: RANK_NUMBER, Decimal128: RANK_NUMBER,
    str: RANK_STRING, dict: RANK_OBJECT, SON: RANK_OBJECT, DBRef: RANK_OBJECT,
    list: RANK_ARRAY, tuple: RANK_ARRAY,
    bytes: RANK_BINDATA, Binary: RANK_BINDATA, uuid.UUID: RANK_BINDATA,
    ObjectId: RANK_OBJECTID, bool: RANK_BOOL, datetime.datetime: RANK_DATE,
    Timestamp: RANK_TIMESTAMP, Regex: RANK_REGEX, _RE_PATTERN: RANK_REGEX,
    MinKey: RANK_MINKEY, MaxKey: RANK_MAXKEY,
}

NUMBER_TYPES = (int, Int64, float, Decimal128)


def canonical_rank(v):
    """Canonical type rank of a value (numbers share one rank)."""
    r = _RANK_BY_TYPE.get(type(v))
    if r is not None:
        return r
    if isinstance(v, Code):
        return RANK_CODE if v.scope is None else RANK_CODE_WS
    if isinstance(v, bool):
        return RANK_BOOL
    if isinstance(v, (int, float, Decimal128)):
        return RANK_NUMBER
    if isinstance(v, str):
        return RANK_STRING
    if isinstance(v, dict):
        return RANK_OBJECT
    if isinstance(v, (list, tuple)):
        return RANK_ARRAY
    if isinstance(v, (bytes, uuid.UUID)):
        return RANK_BINDATA
    if isinstance(v, datetime.datetime):
        return RANK_DATE
    raise MongoError(2, "BadValue", "unsupported BSON value of Python type %s"
                     % type(v).__name__)


def is_number(v):
    t = type(v)
    return t is int or t is float or t is Int64 or t is Decimal128 or (
        t is not bool and isinstance(v, NUMBER_TYPES))


def num_value(v):
    """A Python number comparable exactly with others (Decimal128 -> Decimal)."""
    return v.to_decimal() if type(v) is Decimal128 else v


def is_nan(v):
    if type(v) is float:
        return v != v
    if isinstance(v, Decimal):
        return v.is_nan()
    if type(v) is Decimal128:
        return v.to_decimal().is_nan()
    return False


def compare_numbers(a, b):
    """Numeric comparison across int/long/double/decimal; NaN sorts lowest."""
    a = num_value(a)
    b = num_value(b)
    an, bn = is_nan(a), is_nan(b)
    if an or bn:
        return 0 if an and bn else (-1 if an else 1)
    return -1 if a < b else (1 if a > b else 0)


_EPOCH = datetime.datetime(1970, 1, 1)


def datetime_ms(d):
    """Milliseconds since the epoch (what BSON stores) of a naive-UTC or aware datetime."""
    if d.tzinfo is not None:
        off = d.utcoffset()
        d = d.replace(tzinfo=None) - off
    delta = d - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def binary_parts(v):
    """(length, subtype, bytes) - MongoDB compares binData in that order."""
    if isinstance(v, uuid.UUID):
        return (16, 4, v.bytes)
    sub = getattr(v, "subtype", 0)
    return (len(v), sub, bytes(v))


_FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.LOCALE, "l"), (re.MULTILINE, "m"),
                 (re.DOTALL, "s"), (re.UNICODE, "u"), (re.VERBOSE, "x"))


def regex_parts(v):
    """(pattern, flag letters) of a bson Regex or a compiled Python pattern."""
    flags = v.flags
    if isinstance(flags, str):
        letters = "".join(sorted(flags))
    else:
        letters = "".join(ch for bit, ch in _FLAG_LETTERS if flags & bit)
    if isinstance(v, _RE_PATTERN) and "u" in letters:
        # Python sets UNICODE on every str pattern; pymongo encodes it as
        # 'u', which mongod ignores. Drop it so /a/ == re.compile('a').
        letters = letters.replace("u", "")
    return (v.pattern, letters)


def as_document(v):
    return v.as_doc() if type(v) is DBRef else v


def _cmp(a, b):
    return -1 if a < b else (1 if a > b else 0)


def _cmp_objects(a, b):
    a = as_document(a)
    b = as_document(b)
    ia, ib = iter(a.items()), iter(b.items())
    while True:
        ea = next(ia, None)
        eb = next(ib, None)
        if ea is None or eb is None:
            return 0 if ea is eb else (-1 if ea is None else 1)
        ra, rb = canonical_rank(ea[1]), canonical_rank(eb[1])
        if ra != rb:
            return -1 if ra < rb else 1
        c = _cmp(ea[0], eb[0])
        if c:
            return c
        c = _COMPARE_SAME_RANK[ra](ea[1], eb[1])
        if c:
            return c


def _cmp_arrays(a, b):
    for x, y in zip(a, b):
        c = compare_values(x, y)
        if c:
            return c
    return _cmp(len(a), len(b))


def _cmp_code(a, b):
    c = _cmp(str(a), str(b))
    if c or a.scope is None:
        return c
    return _cmp_objects(a.scope, b.scope)


_COMPARE_SAME_RANK = {
    RANK_MINKEY: lambda a, b: 0,
    RANK_EMPTY_ARRAY: lambda a, b: 0,
    RANK_NULL: lambda a, b: 0,
    RANK_NUMBER: compare_numbers,
    RANK_STRING: _cmp,
    RANK_OBJECT: _cmp_objects,
    RANK_ARRAY: _cmp_arrays,
    RANK_BINDATA: lambda a, b: _cmp(binary_parts(a), binary_parts(b)),
    RANK_OBJECTID: lambda a, b: _cmp(a.binary, b.binary),
    RANK_BOOL: _cmp,
    RANK_DATE: lambda a, b: _cmp(datetime_ms(a), datetime_ms(b)),
    RANK_TIMESTAMP: lambda a, b: _cmp((a.time, a.inc), (b.time, b.inc)),
    RANK_REGEX: lambda a, b: _cmp(regex_parts(a), regex_parts(b)),
    RANK_CODE: _cmp_code,
    RANK_CODE_WS: _cmp_code,
    RANK_MAXKEY: lambda a, b: 0,
}


def compare_values(a, b):
    """-1/0/1 under MongoDB's total order of BSON values (MISSING == null)."""
    ra, rb = canonical_rank(a), canonical_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    return _COMPARE_SAME_RANK[ra](a, b)


def values_equal(a, b):
    """MongoDB equality: same canonical type and compares equal (1 == 1.0)."""
    return compare_values(a, b) == 0


def identical(a, b):
    """Binary (type-exact) equality, used to tell a real change from a no-op.

    $set {a: 1.0} over {a: 1} is a change in MongoDB even though 1 == 1.0,
    because the stored bytes differ; Python's == cannot see that.
    """
    ta = type(a)
    if ta is type(b) and (ta is int or ta is str or ta is Int64):
        return a == b   # the same BSON type (int: int32 or int64 by its size, as encoded)
    if bson_type_number(a) != bson_type_number(b):
        return False
    if isinstance(a, dict):
        a, b = as_document(a), as_document(b)
        if len(a) != len(b):
            return False
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            if ka != kb or not identical(va, vb):
                return False
        return True
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if type(a) is float:
        if a != a:
            return b != b
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)    # -0.0 differs
    if type(a) is Decimal128:
        return a.bid == b.bid
    return compare_values(a, b) == 0


def hash_key(v):
    """Hashable stand-in for a value: equal keys iff values_equal().

    Lets $in, $group and $addToSet use dict/set lookups instead of pairwise
    comparison. Python already hashes 1, 1.0 and Decimal('1') alike.
    """
    r = canonical_rank(v)
    if r == RANK_NUMBER:
        n = num_value(v)
        return (r, "nan") if is_nan(n) else (r, n)
    if r == RANK_STRING or r == RANK_BOOL:
        return (r, v)
    if r == RANK_OBJECT:
        return (r, tuple((k, hash_key(x)) for k, x in as_document(v).items()))
    if r == RANK_ARRAY:
        return (r, tuple(hash_key(x) for x in v))
    if r == RANK_OBJECTID:
        return (r, v.binary)
    if r == RANK_DATE:
        return (r, datetime_ms(v))
    if r == RANK_TIMESTAMP:
        return (r, v.time, v.inc)
    if r == RANK_BINDATA:
        return (r, binary_parts(v))
    if r == RANK_REGEX:
        return (r, regex_parts(v))
    if r in (RANK_CODE, RANK_CODE_WS):
        return (r, str(v), None if v.scope is None else hash_key(v.scope))
    return (r,)


# ---------------------------------------------------------------- type names

_TYPE_NAMES = {
    1: "double", 2: "string", 3: "object", 4: "array", 5: "binData",
    6: "undefined", 7: "objectId", 8: "bool", 9: "date", 10: "null",
    11: "regex", 12: "dbPointer", 13: "javascript", 14: "symbol",
    15: "javascriptWithScope", 16: "int", 17: "timestamp", 18: "long",
    19: "decimal", -1: "minKey", 127: "maxKey",
}
TYPE_ALIASES = {name: num for num, name in _TYPE_NAMES.items()}


def bson_type_number(v):
    """BSON type code the value is encoded as (Python int -> int or long by size)."""
    t = type(v)
    if t is int:
        return 16 if INT32_MIN <= v <= INT32_MAX else 18
    if t is Int64:
        return 18
    if t is float:
        return 1
    if t is str:
        return 2
    if t is bool:
        return 8
    if v is None:
        return 10
    if t is Decimal128:
        return 19
    r = canonical_rank(v)
    if r == RANK_OBJECT:
        return 3
    if r == RANK_ARRAY:
        return 4
    if r == RANK_BINDATA:
        return 5
    if r == RANK_OBJECTID:
        return 7
    if r == RANK_DATE:
        return 9
    if r == RANK_REGEX:
        return 11
    if r == RANK_CODE:
        return 13
    if r == RANK_CODE_WS:
        return 15
    if r == RANK_TIMESTAMP:
        return 17
    if r == RANK_MINKEY:
        return -1
    if r == RANK_MAXKEY:
        return 127
    if r == RANK_NUMBER:    # int subclasses other than Int64/bool
        return 16 if INT32_MIN <= v <= INT32_MAX else 18
    if r == RANK_STRING:
        return 2
    raise MongoError(2, "BadValue", "value has no BSON type: %r" % (v,))


def bson_type_name(v):
    """MongoDB's $type alias for a value ("missing" for an absent field)."""
    if v is MISSING:
        return "missing"
    return _TYPE_NAMES[bson_type_number(v)]


# --------------------------------------------------------------- sorting

def parse_sort_spec(sort_spec, *, stage="$sort"):
    """[(path parts, +1/-1)] from an ordered {path: 1|-1} spec, validated as mongod does."""
    if not isinstance(sort_spec, dict):
        raise MongoError(15973, "Location15973",
                         "the %s key specification must be an object" % stage)
    if not sort_spec:
        raise MongoError(15976, "Location15976",
                         "%s stage must have at least one sort key" % stage)
    fields = []
    for path, direction in sort_spec.items():
        if isinstance(direction, dict):
            if "$meta" in direction:
                raise MongoError(238, "NotImplemented",
                                 "$meta sort is not supported by the flowwarden stand-in")
            raise MongoError(17312, "Location17312",
                             "$meta is the only expression supported by $sort right now")
        if not is_number(direction) or num_value(direction) not in (1, -1):
            raise MongoError(15975, "Location15975",
                             "%s key ordering must be 1 (for ascending) or -1 (for descending)"
                             % stage)
        if path == "" or "" in path.split("."):
            raise MongoError(40352, "Location40352",
                             "FieldPath cannot be constructed with empty string")
        fields.append((path.split("."), 1 if num_value(direction) == 1 else -1))
    return fields


def _sort_candidates(value, parts, i, out):
    """Values a dotted sort path reaches, as MongoDB's sort-key generator sees them.

    Arrays met on the way are traversed once; a document lacking the field
    (or a scalar where a document was needed) contributes null.
    """
    if i == len(parts):
        if isinstance(value, list):
            if value:
                out.extend(value)
            else:
                out.append(EMPTY_ARRAY_KEY)
        else:
            out.append(None if value is MISSING else value)
        return
    if isinstance(value, dict):
        value = as_document(value)
        _sort_candidates(value.get(parts[i], MISSING), parts, i + 1, out)
    elif isinstance(value, list):
        part = parts[i]
        if part.isdigit():
            # A numeric component indexes the array, as in index key generation.
            idx = int(part)
            _sort_candidates(value[idx] if idx < len(value) else MISSING, parts, i + 1, out)
            return
        if not value:
            out.append(None)
        for e in value:
            if isinstance(e, dict):
                _sort_candidates(e.get(part, MISSING), parts, i + 1, out)
            else:
                out.append(None)
    else:
        out.append(None)


def sort_key(doc, parts, direction):
    """The single value a document sorts by for one sort field."""
    if len(parts) == 1:
        v = doc.get(parts[0], MISSING)
        if not isinstance(v, list):
            return None if v is MISSING else v
        cands = list(v) if v else [EMPTY_ARRAY_KEY]
    else:
        cands = []
        _sort_candidates(doc, parts, 0, cands)
    best = cands[0]
    for c in cands[1:]:
        r = compare_values(c, best)
        if (r < 0 and direction > 0) or (r > 0 and direction < 0):
            best = c
    return best


def sort_documents(docs, sort_spec):
    """Documents sorted stably by a {path: 1|-1} spec with MongoDB's array/missing rules."""
    fields = parse_sort_spec(sort_spec)
    keyed = [([sort_key(d, parts, direction) for parts, direction in fields], d)
             for d in docs]
    directions = [direction for _, direction in fields]

    def cmp(x, y):
        for kx, ky, direction in zip(x[0], y[0], directions):
            c = compare_values(kx, ky)
            if c:
                return c * direction
        return 0

    keyed.sort(key=cmp_to_key(cmp))
    return [d for _, d in keyed]


# ------------------------------------------------------- message formatting

def _fmt_double(v):
    if math.isnan(v):
        return "nan.0"
    if math.isinf(v):
        return "inf.0" if v > 0 else "-inf.0"
    if v == int(v) and abs(v) < 1e15:
        return "%d.0" % int(v)
    return repr(v)


def fmt_value(v):
    """Render a value the way mongod's BSONElement::toString does in messages."""
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if v is None:
        return "null"
    if v is MISSING:
        return "missing"
    if t is float:
        return _fmt_double(v)
    if t is int or t is Int64:
        return str(int(v))
    if t is Decimal128:
        return 'NumberDecimal("%s")' % v
    if isinstance(v, Code):
        return str(v)
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, dict):
        v = as_document(v)
        if not v:
            return "{}"
        return "{ " + ", ".join("%s: %s" % (k, fmt_value(x)) for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        if not v:
            return "[]"
        return "[ " + ", ".join(fmt_value(x) for x in v) + " ]"
    if t is ObjectId:
        return "ObjectId('%s')" % v
    if t is datetime.datetime:
        return "new Date(%d)" % datetime_ms(v)
    if t is Timestamp:
        return "Timestamp(%d, %d)" % (v.time, v.inc)
    if isinstance(v, (Regex, _RE_PATTERN)):
        p, f = regex_parts(v)
        return "/%s/%s" % (p, f)
    if isinstance(v, (bytes, uuid.UUID)):
        n, sub, data = binary_parts(v)
        return "BinData(%d, %s)" % (sub, data.hex().upper())
    if t is MinKey:
        return "MinKey"
    if t is MaxKey:
        return "MaxKey"
    return repr(v)


def fmt_element(name, v):
    return "%s: %s" % (name, fmt_value(v))


def fmt_doc(doc):
    """Document in mongod's compact message style: {a: 1, b: "x"}."""
    return "{" + ", ".join(fmt_element(k, v) for k, v in as_document(doc).items()) + "}"
