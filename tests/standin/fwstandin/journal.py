"""Append-only journal that makes acknowledged writes survive kill -9 (--data-dir).

Records are BSON documents written back to back. Every command's records are written and
fsync'd in one go before the reply leaves (group commit), so a reply means durable. A torn
record at the tail can only belong to an unacknowledged command; replay drops it. When the file
grows well past the size of the state it describes, it is rewritten as a snapshot (collections,
indexes, documents, retained oplog) through a temporary file and an atomic rename.
"""

import fcntl
import os
import struct

from . import bsonutil

_INT32 = struct.Struct("<i")
MIN_COMPACT_BYTES = 1024 * 1024 * 1024  # rewrites copy everything: keep them rare


class DataDirInUse(Exception):
    pass


class Journal:
    FILE = "journal.bson"

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        self.path = os.path.join(directory, self.FILE)
        self._lockf = open(os.path.join(directory, "standin.lock"), "w")
        try:
            fcntl.flock(self._lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DataDirInUse("data directory %s is in use by another stand-in" % directory)
        self.f = None
        self.size = 0
        self.base_size = 0

    def load(self):
        """Yield every complete record; cut off a torn tail left by a crash mid-write."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            data = f.read()
        pos = 0
        good = 0
        n = len(data)
        while pos + 5 <= n:
            (length,) = _INT32.unpack_from(data, pos)
            if length < 5 or pos + length > n or data[pos + length - 1] != 0:
                break
            try:
                rec = bsonutil.decode(data[pos:pos + length])
            except Exception:
                break
            pos += length
            good = pos
            yield rec
        if good != n:
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())

    def open_for_append(self):
        self.f = open(self.path, "ab")
        self.size = self.f.tell()
        if not self.base_size:
            self.base_size = self.size

    def append(self, parts):
        data = b"".join(parts)
        self.f.write(data)
        self.f.flush()
        os.fsync(self.f.fileno())
        self.size += len(data)

    def wants_compaction(self):
        return self.size > max(MIN_COMPACT_BYTES, 3 * self.base_size)

    def rewrite(self, records):
        """Replace the journal by `records` (bytes), atomically."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            buf = []
            size = 0
            for rec in records:
                buf.append(rec)
                size += len(rec)
                if len(buf) >= 4096:
                    f.write(b"".join(buf))
                    buf = []
            f.write(b"".join(buf))
            f.flush()
            os.fsync(f.fileno())
        if self.f is not None:
            self.f.close()
        os.replace(tmp, self.path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.f = open(self.path, "ab")
        self.size = self.base_size = size

    def close(self):
        """Flush and release the data directory (the lock goes with the file)."""
        if self.f is not None:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            self.f = None
        if not self._lockf.closed:
            self._lockf.close()
