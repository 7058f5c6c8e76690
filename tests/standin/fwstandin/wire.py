"""MongoDB wire protocol: parse OP_QUERY / OP_MSG requests, build OP_REPLY / OP_MSG replies.

Only the opcodes a 6.0 server still accepts are handled: OP_QUERY (drivers use it for the
handshake and libmongoc's RTT monitor keeps using it) and OP_MSG. Kind-1 document sequences are
kept as raw byte slices so that bulk inserts never decode a document twice.
"""

import struct

from . import bsonutil
from .errors import MongoError

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013
OP_COMPRESSED = 2012

MSG_CHECKSUM_PRESENT = 1 << 0
MSG_MORE_TO_COME = 1 << 1
MSG_EXHAUST_ALLOWED = 1 << 16

_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")


def _make_crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _make_crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), the checksum OP_MSG uses. Pure Python: drivers rarely send it."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Request:
    """One decoded request: the command body plus any kind-1 sequences (raw documents)."""

    __slots__ = ("request_id", "opcode", "flags", "db", "body", "sequences",
                 "more_to_come", "exhaust_allowed")

    def __init__(self, request_id, opcode, flags, db, body, sequences):
        self.request_id = request_id
        self.opcode = opcode
        self.flags = flags
        self.db = db
        self.body = body
        self.sequences = sequences
        self.more_to_come = bool(opcode == OP_MSG and flags & MSG_MORE_TO_COME)
        self.exhaust_allowed = bool(opcode == OP_MSG and flags & MSG_EXHAUST_ALLOWED)


def split_documents(buf, start, end):
    """Slice a run of concatenated BSON documents into a list of bytes objects."""
    docs = []
    append = docs.append
    unpack = _INT32.unpack_from
    pos = start
    # A slice of bytes is one copy; of a memoryview, a view and then the copy.
    src = buf if type(buf) is bytes else memoryview(buf)
    while pos < end:
        (length,) = unpack(buf, pos)
        if length < 5 or pos + length > end:
            raise MongoError(9, "FailedToParse", "invalid BSON document in document sequence")
        append(bytes(src[pos:pos + length]) if src is not buf else buf[pos:pos + length])
        pos += length
    return docs


def _cstring(buf, pos):
    end = buf.index(b"\x00", pos)
    return buf[pos:end].decode("utf-8"), end + 1


def parse_message(header, payload):
    """Turn one message (16-byte header already unpacked, payload = the rest) into a Request."""
    _length, request_id, _response_to, opcode = header
    if opcode == OP_MSG:
        (flags,) = _UINT32.unpack_from(payload, 0)
        end = len(payload)
        if flags & MSG_CHECKSUM_PRESENT:
            end -= 4
            (expected,) = _UINT32.unpack_from(payload, end)
            raw_header = _HEADER.pack(*header)
            if crc32c(raw_header + payload[:end]) != expected:
                raise MongoError(9, "FailedToParse", "OP_MSG checksum does not match contents")
        pos = 4
        body = None
        sequences = {}
        while pos < end:
            kind = payload[pos]
            pos += 1
            if kind == 0:
                (length,) = _INT32.unpack_from(payload, pos)
                if body is not None:
                    raise MongoError(40430, "Location40430",
                                     "Multiple body sections in message")
                body = bsonutil.decode(payload[pos:pos + length])
                pos += length
            elif kind == 1:
                (size,) = _INT32.unpack_from(payload, pos)
                ident, doc_start = _cstring(payload, pos + 4)
                seq_end = pos + size
                sequences.setdefault(ident, []).extend(
                    split_documents(payload, doc_start, seq_end))
                pos = seq_end
            else:
                raise MongoError(40432, "Location40432", "Unknown section kind %d" % kind)
        if body is None:
            raise MongoError(40587, "Location40587", "OP_MSG messages must have a body")
        db = body.get("$db")
        if not isinstance(db, str):
            raise MongoError(40571, "Location40571", "OP_MSG requests require a $db argument")
        return Request(request_id, opcode, flags, db, body, sequences)
    if opcode == OP_QUERY:
        (flags,) = _INT32.unpack_from(payload, 0)
        full_name, pos = _cstring(payload, 4)
        pos += 8  # numberToSkip, numberToReturn
        (length,) = _INT32.unpack_from(payload, pos)
        query = bsonutil.decode(payload[pos:pos + length])
        if "$query" in query and isinstance(query["$query"], dict):
            query = query["$query"]
        db, _, coll = full_name.partition(".")
        return Request(request_id, opcode, flags, db, query, {"$cmd": coll})
    if opcode == OP_COMPRESSED:
        raise MongoError(
            2, "BadValue", "OP_COMPRESSED is not supported: no compressor was negotiated")
    raise MongoError(2, "BadValue", "unsupported opcode %d" % opcode)


_REQUEST_IDS = iter(range(1, 1 << 31))


def op_msg_reply(response_to, body_bytes):
    """An OP_MSG reply with a single kind-0 section. The checksum flag is never set."""
    length = 16 + 4 + 1 + len(body_bytes)
    return b"".join((_HEADER.pack(length, next(_REQUEST_IDS), response_to, OP_MSG),
                     b"\x00\x00\x00\x00\x00", body_bytes))


def op_reply(response_to, body_bytes):
    """A legacy OP_REPLY carrying one document (answers OP_QUERY commands)."""
    length = 16 + 20 + len(body_bytes)
    return b"".join((_HEADER.pack(length, next(_REQUEST_IDS), response_to, OP_REPLY),
                     struct.pack("<iqii", 8, 0, 0, 1), body_bytes))


HEADER = _HEADER
