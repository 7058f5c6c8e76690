"""$toHashedIndexKey: the hash mongod gives a value in a hashed index.

As mongod computes it (src/mongo/db/hasher.cpp, BSONElementHasher::hash64 with seed 0): an MD5
over the 4-byte little-endian seed, then for the element the 4-byte little-endian *canonical*
type (so int, long, double and decimal hash alike, as do string and symbol), then its value:
numbers as the 8-byte little-endian long of safeNumberLongForHash, any other scalar as its raw
BSON value bytes, and an object or array as each of its elements in turn (canonical type, field
name with its NUL, value) ending with the end-of-object marker (canonical type 0 alone). The
result is the first 8 bytes of the digest read as a little-endian signed long. A missing value
hashes as null (the expression turns missing into null before hashing).

The walk is over the value's BSON encoding, so every BSON type is covered the same way.
"""

import hashlib
import struct
from decimal import ROUND_HALF_EVEN

from bson.decimal128 import Decimal128

from .bsonutil import encode
from .compare import MISSING

# The version the process plays (server.py): $toHashedIndexKey first appears in MongoDB 7.0
# (its manual page and jstests, requires_fcv_70); older servers do not know the expression.
_PLAYED = {"version": (6, 0)}


def play_version(version):
    _PLAYED["version"] = tuple(version)


def known():
    """Whether the version played knows $toHashedIndexKey."""
    return _PLAYED["version"] >= (7, 0)


_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# BSON type byte -> canonical type (mongo/bson/bsontypes.h, canonicalizeBSONType).
_CANONICAL = {
    0xFF: -1, 0x00: 0, 0x06: 0, 0x0A: 5,
    0x01: 10, 0x10: 10, 0x12: 10, 0x13: 10,
    0x02: 15, 0x0E: 15, 0x03: 20, 0x04: 25, 0x05: 30, 0x07: 35, 0x08: 40,
    0x09: 45, 0x11: 47, 0x0B: 50, 0x0C: 55, 0x0D: 60, 0x0F: 65, 0x7F: 100,
}
_NUMBERS = (0x01, 0x10, 0x12, 0x13)


def _safe_long_of_double(d):
    """safeNumberLongForHash for a double: NaN 0, 2^63 itself -2^63 (kept from old servers),
    beyond the range clamped, otherwise truncated toward zero."""
    if d != d:
        return 0
    if d == 9223372036854775808.0:
        return INT64_MIN
    if d > INT64_MAX:
        return INT64_MAX
    if d < INT64_MIN:
        return INT64_MIN
    return int(d)


def _safe_long_of_decimal(raw):
    d = Decimal128(raw).to_decimal()
    if d.is_nan():
        return 0
    if d.is_infinite():
        return INT64_MAX if d > 0 else INT64_MIN
    i = int(d.to_integral_value(rounding=ROUND_HALF_EVEN))
    return max(INT64_MIN, min(INT64_MAX, i))


def _value_size(t, buf, pos):
    """Length of the value of type byte t starting at buf[pos]."""
    fixed = {0x01: 8, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x06: 0, 0x10: 4, 0x11: 8,
             0x12: 8, 0x13: 16, 0xFF: 0, 0x7F: 0}
    if t in fixed:
        return fixed[t]
    if t in (0x02, 0x0D, 0x0E):
        return 4 + _I32.unpack_from(buf, pos)[0]
    if t in (0x03, 0x04, 0x0F):
        return _I32.unpack_from(buf, pos)[0]
    if t == 0x05:
        return 5 + _I32.unpack_from(buf, pos)[0]
    if t == 0x0B:
        end = buf.index(b"\x00", pos)
        return buf.index(b"\x00", end + 1) + 1 - pos
    if t == 0x0C:
        return 4 + _I32.unpack_from(buf, pos)[0] + 12
    raise ValueError("unknown BSON type 0x%02x" % t)


def _hash_value(h, t, buf, pos, size):
    h.update(_I32.pack(_CANONICAL[t]))
    _hash_body(h, t, buf, pos, size)


def _hash_body(h, t, buf, pos, size):
    if t in _NUMBERS:
        if t == 0x10:
            n = _I32.unpack_from(buf, pos)[0]
        elif t == 0x12:
            n = _I64.unpack_from(buf, pos)[0]
        elif t == 0x01:
            n = _safe_long_of_double(_F64.unpack_from(buf, pos)[0])
        else:
            n = _safe_long_of_decimal(bytes(buf[pos:pos + 16]))
        h.update(_I64.pack(n))
    elif t in (0x03, 0x04):
        _hash_document(h, buf, pos)
    elif t == 0x0F:
        code_len = _I32.unpack_from(buf, pos + 4)[0]
        h.update(buf[pos + 8:pos + 8 + code_len])
        _hash_document(h, buf, pos + 8 + code_len)
    else:
        h.update(buf[pos:pos + size])


def _hash_document(h, buf, start):
    """Each element with its field name, then the end marker (canonical type 0, nothing else)."""
    pos = start + 4
    while buf[pos] != 0:
        t = buf[pos]
        name_end = buf.index(b"\x00", pos + 1)
        vpos = name_end + 1
        size = _value_size(t, buf, vpos)
        h.update(_I32.pack(_CANONICAL[t]))
        h.update(buf[pos + 1:name_end + 1])
        _hash_body(h, t, buf, vpos, size)
        pos = vpos + size
    h.update(_I32.pack(0))


def hashed_index_key(value, seed=0):
    """The signed 64-bit hash mongod's $toHashedIndexKey returns for `value` (a Python int)."""
    if value is MISSING:
        value = None
    buf = encode({"": value})
    t = buf[4]
    vpos = 6  # length (4), type (1), empty name's NUL (1)
    h = hashlib.md5(_I32.pack(seed))
    _hash_value(h, t, buf, vpos, _value_size(t, buf, vpos))
    return _I64.unpack(h.digest()[:8])[0]
