"""BSON helpers: one codec for the whole server, byte-level element builders, value keys.

The element builders exist for speed: change events and getMore replies are assembled from
pre-encoded pieces with bytes.join instead of being re-encoded document by document.
"""

import datetime
import struct

import bson
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

# UNSPECIFIED keeps Binary subtypes 3 and 4 as Binary, so documents round-trip unchanged.
CODEC = CodecOptions(document_class=dict, tz_aware=False,
                     uuid_representation=UuidRepresentation.UNSPECIFIED)

_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_UINT64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")


def decode(data):
    return bson.decode(data, CODEC)


def encode(doc):
    """BSON of a dict, _id first (as bson.encode writes a top-level document). The common
    value types are encoded here, byte for byte as bson.encode does (its C encoder spends
    ~3 us per call plus ~0.5 us per value probing for `_type_marker`: most of a small
    document's cost); anything else goes to bson.encode."""
    if type(doc) is dict and (not doc or "_id" not in doc or next(iter(doc)) == "_id"):
        try:
            return _fast_doc(doc)
        except (_Slow, UnicodeEncodeError, OverflowError, struct.error, RecursionError):
            pass
    return bson.encode(doc, codec_options=CODEC)


class _Slow(Exception):
    """A value _fast_doc leaves to bson.encode."""


_PACK_I32 = struct.Struct("<i").pack
_PACK_I64 = struct.Struct("<q").pack
_PACK_DBL = struct.Struct("<d").pack
_PACK_TS = struct.Struct("<II").pack
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_DATETIME_MS = bson._datetime_to_millis     # what bson.encode stores for a datetime
_LIST_KEYS = [str(i).encode() + b"\x00" for i in range(1024)]


def _fast_doc(doc):
    out = []
    _fast_elements(doc.items(), out)
    body = b"".join(out)
    return _PACK_I32(len(body) + 5) + body + b"\x00"


def _fast_list(values):
    n = len(values)
    keys = _LIST_KEYS if n <= len(_LIST_KEYS) else [str(i).encode() + b"\x00"
                                                    for i in range(n)]
    out = []
    _fast_elements(zip(keys, values), out, True)
    body = b"".join(out)
    return _PACK_I32(len(body) + 5) + body + b"\x00"


def _fast_elements(items, out, keyed=False):
    """Appends each (name, value)'s element to out; names are str (keyed: bytes ending in
    NUL already). Raises _Slow at a value (or name) only bson.encode handles."""
    add = out.append
    for k, v in items:
        if keyed:
            name = k
        elif type(k) is str and "\x00" not in k:
            name = k.encode() + b"\x00"
        else:
            raise _Slow()
        t = type(v)
        if t is str:
            b = v.encode()
            add(b"\x02" + name + _PACK_I32(len(b) + 1) + b + b"\x00")
        elif t is int:
            if _INT32_MIN <= v <= _INT32_MAX:
                add(b"\x10" + name + _PACK_I32(v))
            else:
                add(b"\x12" + name + _PACK_I64(v))     # struct.error past int64: bson's error
        elif t is float:
            add(b"\x01" + name + _PACK_DBL(v))
        elif t is dict:
            add(b"\x03" + name + _fast_doc(v))
        elif t is list:
            add(b"\x04" + name + _fast_list(v))
        elif t is ObjectId:
            add(b"\x07" + name + v.binary)
        elif t is bool:
            add(b"\x08" + name + (b"\x01" if v else b"\x00"))
        elif v is None:
            add(b"\x0a" + name)
        elif t is Int64:
            add(b"\x12" + name + _PACK_I64(v))
        elif t is datetime.datetime:
            add(b"\x09" + name + _PACK_I64(_DATETIME_MS(v)))
        elif t is Timestamp:
            add(b"\x11" + name + _PACK_TS(v.inc, v.time))
        elif t is Binary and v.subtype != 2:
            add(b"\x05" + name + _PACK_I32(len(v)) + bytes((v.subtype,)) + v)
        else:
            raise _Slow()


def decode_all(data):
    return bson.decode_all(data, CODEC)


# ---- element builders (name is bytes without the trailing NUL) ----

def e_str(name, value):
    raw = value.encode("utf-8")
    return b"\x02" + name + b"\x00" + _INT32.pack(len(raw) + 1) + raw + b"\x00"


def e_doc(name, raw_doc):
    return b"\x03" + name + b"\x00" + raw_doc


def e_arr(name, raw_doc):
    return b"\x04" + name + b"\x00" + raw_doc


def e_ts(name, tsv):
    """Timestamp element; tsv is (seconds << 32) | increment, which is also its wire layout."""
    return b"\x11" + name + b"\x00" + _UINT64.pack(tsv)


def e_date(name, millis):
    return b"\x09" + name + b"\x00" + _INT64.pack(millis)


def e_int64(name, value):
    return b"\x12" + name + b"\x00" + _INT64.pack(value)


def e_int32(name, value):
    return b"\x10" + name + b"\x00" + _INT32.pack(value)


def e_double(name, value):
    return b"\x01" + name + b"\x00" + _DOUBLE.pack(value)


def e_null(name):
    return b"\x0A" + name + b"\x00"


def e_bool(name, value):
    return b"\x08" + name + b"\x00" + (b"\x01" if value else b"\x00")


def make_doc(elements):
    """Wrap already-encoded elements (bytes) into a document."""
    return _INT32.pack(len(elements) + 5) + elements + b"\x00"


_ARRAY_KEYS = []


def array_keys(n):
    """Pre-built element prefixes b'\\x03<i>\\x00' for array positions 0..n-1."""
    if len(_ARRAY_KEYS) < n:
        start = len(_ARRAY_KEYS)
        _ARRAY_KEYS.extend(b"\x03" + str(i).encode() + b"\x00"
                           for i in range(start, max(n, 2 * start, 1024)))
    return _ARRAY_KEYS


def doc_array(raw_docs):
    """Encode a list of raw documents as a BSON array document, joined in one pass."""
    n = len(raw_docs)
    keys = array_keys(n)
    parts = [None] * (2 * n)
    parts[0::2] = keys[:n]
    parts[1::2] = raw_docs
    body = b"".join(parts)
    return _INT32.pack(len(body) + 5) + body + b"\x00"


def ts_value(tsv):
    return Timestamp(tsv >> 32, tsv & 0xFFFFFFFF)


def tsv_of(ts):
    return (ts.time << 32) | ts.inc


EPOCH = datetime.datetime(1970, 1, 1)


def millis_to_datetime(ms):
    return EPOCH + datetime.timedelta(milliseconds=ms)


def datetime_to_millis(dt):
    if dt.tzinfo is not None:
        dt = dt.replace(tzinfo=None) - dt.utcoffset()
    delta = dt - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


# ---- value keys: hashable, equal exactly when MongoDB considers two values equal ----

def value_key(v):
    """Hashable key for index lookups (1, 1.0 and Int64(1) are the same _id in MongoDB)."""
    t = type(v)
    if t is int or t is float or t is Int64 or t is str or t is ObjectId:
        return v
    if t is bool:
        return ("bool", v)
    if t is dict:
        return ("doc",) + tuple((k, value_key(x)) for k, x in v.items())
    if t is list:
        return ("arr",) + tuple(value_key(x) for x in v)
    if t is Decimal128:
        return v.to_decimal()
    if t is Regex:
        return ("regex", v.pattern, v.flags)
    if t is Binary:
        return ("bin", v.subtype, bytes(v))
    if v is None:
        return ("null",)
    try:
        hash(v)
        return v
    except TypeError:
        return ("repr", repr(v))


# ---- mongod-style value formatting, as in E11000 "dup key: { _id: 1 }" ----

def format_value(v):
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if t is float:
        return repr(v)
    if t is int or t is Int64:
        return str(int(v))
    if t is ObjectId:
        return "ObjectId('%s')" % v
    if t is datetime.datetime:
        return "new Date(%d)" % datetime_to_millis(v)
    if t is dict:
        return format_doc(v)
    if t is list:
        if not v:
            return "[]"
        return "[ " + ", ".join(format_value(x) for x in v) + " ]"
    if t is Timestamp:
        return "Timestamp(%d, %d)" % (v.time, v.inc)
    if t is Binary:
        return "BinData(%d, %s)" % (v.subtype, bytes(v).hex().upper())
    if t is Decimal128:
        return 'NumberDecimal("%s")' % v
    if t is Regex:
        return "/%s/%s" % (v.pattern, v.flags if isinstance(v.flags, str) else "")
    return str(v)


def format_doc(d):
    if not d:
        return "{}"
    return "{ " + ", ".join("%s: %s" % (k, format_value(x)) for k, x in d.items()) + " }"


def format_doc_compact(d):
    """Document::toString style used in change-stream error messages: {a: 1, b: "x"}."""
    def fmt(v):
        if isinstance(v, dict):
            return "{" + ", ".join("%s: %s" % (k, fmt(x)) for k, x in v.items()) + "}"
        return format_value(v)
    return fmt(d)
