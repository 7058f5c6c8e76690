"""Open cursors (find/aggregate results and change streams) and cursor-reply encoding.

Replies are built as a list of byte pieces joined once with the message header, so a 16 MiB
getMore is copied a single time.
"""

import random
import struct
import time

from .bsonutil import array_keys, e_int64, e_str
from .errors import MongoError

_INT32 = struct.Struct("<i")
CURSOR_TIMEOUT_S = 600.0    # mongod's cursorTimeoutMillis default
MAX_BATCH_BYTES = 16 * 1024 * 1024 - 64 * 1024


class RawReply:
    """A reply document given as pieces; `length` is the document's total size."""

    __slots__ = ("parts", "length")

    def __init__(self, parts, length):
        self.parts = parts
        self.length = length


class ResultCursor:
    """A cursor over an already computed result (find, aggregate, listIndexes, ...)."""

    is_change_stream = False

    def __init__(self, ns, raw_docs):
        self.id = 0
        self.ns = ns
        self.docs = raw_docs
        self.pos = 0
        self.killed = False
        self.last_used = time.monotonic()

    def fill(self, limit):
        self.last_used = time.monotonic()
        out = []
        size = 0
        docs = self.docs
        i = self.pos
        end = min(len(docs), i + limit) if limit else len(docs)
        while i < end:
            d = docs[i]
            if out and size + len(d) > MAX_BATCH_BYTES:
                break
            out.append(d)
            size += len(d)
            i += 1
        self.pos = i
        return out

    @property
    def exhausted(self):
        return self.pos >= len(self.docs)


class CursorRegistry:
    def __init__(self):
        self.cursors = {}

    def register(self, cursor):
        while True:
            cid = random.getrandbits(62) + 1
            if cid not in self.cursors:
                break
        cursor.id = cid
        self.cursors[cid] = cursor
        return cid

    def get(self, cid):
        return self.cursors.get(cid)

    def remove(self, cid):
        return self.cursors.pop(cid, None)

    def kill(self, cid):
        cur = self.cursors.pop(cid, None)
        if cur is not None:
            cur.killed = True
        return cur

    def sweep(self):
        """Drop cursors idle longer than mongod's default 10-minute timeout."""
        now = time.monotonic()
        for cid, cur in list(self.cursors.items()):
            if now - cur.last_used > CURSOR_TIMEOUT_S:
                self.kill(cid)


def cursor_not_found(cid):
    return MongoError(43, "CursorNotFound", "cursor id %d not found" % cid)


def cursor_reply(batch_name, raw_docs, cursor_id, ns, extra_cursor=b"", tail=b""):
    """{cursor: {<batch_name>: [...], <extra_cursor>, id, ns}, <tail>} as a RawReply.

    `tail` holds the already-encoded top-level elements after `cursor` (ok, times, ...).
    """
    n = len(raw_docs)
    keys = array_keys(n)
    arr_parts = [None] * (2 * n)
    arr_parts[0::2] = keys[:n]
    arr_parts[1::2] = raw_docs
    arr_body = sum(map(len, arr_parts))
    arr_len = arr_body + 5
    after = extra_cursor + e_int64(b"id", cursor_id) + e_str(b"ns", ns) + b"\x00"
    batch_head = b"\x04" + batch_name + b"\x00"
    cursor_len = 4 + len(batch_head) + arr_len + len(after)
    top_len = 4 + 8 + cursor_len + len(tail) + 1
    parts = [_INT32.pack(top_len), b"\x03cursor\x00", _INT32.pack(cursor_len), batch_head,
             _INT32.pack(arr_len)]
    parts.extend(arr_parts)
    parts.append(b"\x00")
    parts.append(after)
    parts.append(tail)
    parts.append(b"\x00")
    return RawReply(parts, top_len)
