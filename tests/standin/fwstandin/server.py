"""Sockets, connection threads, the TTL monitor, startup replay and the command log.

One thread per connection keeps blocking semantics simple: an awaitable hello or a change-stream
getMore just waits (on an Event or the store's Condition) without affecting other clients.
"""

import collections
import datetime
import gc
import json
import os
import socket
import sys
import threading
import time
import traceback

from bson.objectid import ObjectId

from . import commands, wire
from .cursors import CursorRegistry
from .errors import MongoError
from .failpoints import FailPoints
from .journal import Journal
from .storage import Store
from . import bsonutil
from . import hashing

MAX_MESSAGE = 48000000 + 16 * 1024 * 1024


class Server:
    def __init__(self, replset="rs0", data_dir=None, oplog_max_entries=10_000_000,
                 ttl_interval=60.0, log_path=None, latency_ms=0.0, auth=None,
                 server_version=(6, 0), standalone=False, clock_offset_ms=0,
                 txn_lifetime_s=60.0):
        self.replset = replset
        # --transaction-lifetime-limit-seconds: mongod's transactionLifetimeLimitSeconds.
        self.txn_lifetime_s = float(txn_lifetime_s)
        # --standalone: a mongod without --replSet (hello without setName, no change streams).
        self.standalone = bool(standalone)
        # --clock-offset-ms: what hello's and serverStatus's localTime add to this machine's
        # clock (only those: $$NOW and the oplog's wall times keep the real clock).
        self.clock_offset_ms = int(clock_offset_ms)
        # (major, minor) the stand-in plays: (6, 0), or (5, 0) with 5.0's refusals (the
        # blocking-sort limit, sortlimit.py; 6.0-only change stream options, changestream.py).
        self.version = tuple(server_version)
        hashing.play_version(self.version)  # $toHashedIndexKey is 7.0's (hashing.py)
        self.auth = auth            # auth.Users (--auth), or None: no authentication
        self.latency = float(latency_ms) / 1000.0
        self.persistent = data_dir is not None
        self.journal = Journal(data_dir) if data_dir else None
        self.store = Store(oplog_max_entries, self.journal)
        self.cursors = CursorRegistry()
        self.failpoints = FailPoints()
        self.process_id = ObjectId()
        self.started = time.monotonic()
        self.shutdown_event = threading.Event()
        self.ttl_interval = float(ttl_interval)
        self.open_connections = 0
        self.total_connections = 0
        self._conn_lock = threading.Lock()
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None
        self._log_lock = threading.Lock()
        self.listener = None
        self.host = None
        self.port = None

    def topology_version(self):
        """Never changes: one node, always primary."""
        from bson.int64 import Int64
        return {"processId": self.process_id, "counter": Int64(0)}

    # ---- startup ----

    def load(self):
        """Replay the journal (if any), then resume the clock safely past everything issued."""
        # Stored documents are plain acyclic dicts; with the default thresholds the cyclic
        # collector rescans them over and over during bulk inserts and halves throughput.
        gc.set_threshold(200000, 50, 100)
        # Like replica-set initiation, which writes the first oplog entry: cluster time starts
        # at "now", never at Timestamp(0, 0).
        self.store.clock.tick()
        if self.journal is None:
            return
        n = 0
        for rec in self.journal.load():
            self.store.apply_record(rec)
            n += 1
        if n:
            # Cluster times handed out before the crash (e.g. a change stream's start time)
            # were not all journaled; starting one second ahead keeps every new write after
            # them, so no startAtOperationTime resume can miss an event.
            now = int(time.time())
            last = self.store.clock.last
            self.store.clock.last = max(last, (max(now, last >> 32) + 1) << 32)
        self.journal.open_for_append()
        if n and self.journal.wants_compaction():
            self.journal.rewrite(self.store.snapshot_records())

    def listen(self, port):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(256)
        # accept() wakes up twice a second: Python runs signal handlers only in the main
        # thread, and a SIGTERM the kernel hands to another thread would otherwise leave
        # the main thread blocked in accept() until the next connection.
        sock.settimeout(0.5)
        self.listener = sock
        self.port = sock.getsockname()[1]
        self.host = "127.0.0.1:%d" % self.port
        return self.port

    # ---- serving ----

    def serve_forever(self):
        threading.Thread(target=self._ttl_loop, name="ttl-monitor", daemon=True).start()
        while not self.shutdown_event.is_set():
            try:
                sock, addr = self.listener.accept()
            except OSError:
                if self.shutdown_event.is_set():
                    break
                continue
            with self._conn_lock:
                self.total_connections += 1
                conn_id = self.total_connections
                self.open_connections += 1
            t = threading.Thread(target=self._serve_connection,
                                 args=(sock, commands.Connection(conn_id, addr)),
                                 name="conn%d" % conn_id, daemon=True)
            t.start()

    def _serve_connection(self, sock, conn):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = sock.makefile("rb", buffering=1 << 16)
        delayed = DelayedSender(sock, self.latency) if self.latency > 0 else None
        send = delayed.send if delayed else sock.sendall
        try:
            while not self.shutdown_event.is_set():
                hdr = rfile.read(16)
                if len(hdr) < 16:
                    break
                header = wire.HEADER.unpack(hdr)
                length = header[0]
                if length < 16 or length > MAX_MESSAGE:
                    break
                payload = rfile.read(length - 16)
                if len(payload) < length - 16:
                    break
                try:
                    req = wire.parse_message(header, payload)
                except MongoError as e:
                    body = bsonutil.encode(e.to_reply())
                    if header[3] == wire.OP_QUERY:
                        send(wire.op_reply(header[1], body))
                    else:
                        send(wire.op_msg_reply(header[1], body))
                    continue
                reply = commands.execute(self, conn, req)
                if reply is commands.CLOSE:
                    break
                if reply:
                    send(reply)
        except (OSError, ValueError):
            pass
        finally:
            if delayed:
                delayed.close()
            try:
                rfile.close()
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            with self._conn_lock:
                self.open_connections -= 1

    def _ttl_loop(self):
        while not self.shutdown_event.wait(self.ttl_interval):
            try:
                self.store.ttl_pass()
                with self.store.lock:
                    self.cursors.sweep()
            except Exception as e:  # keep monitoring; report the bug in the log
                self.log_exception("ttlMonitor", e)

    def shutdown(self):
        """Stop accepting, let an in-flight commit finish, and close the journal."""
        self.shutdown_event.set()
        try:
            self.listener.close()
        except OSError:
            pass
        with self.store.lock:
            self.store.cond.notify_all()
            if self.journal is not None:
                self.journal.close()
        if self._log is not None:
            with self._log_lock:
                self._log.flush()

    # ---- command log (--log) ----

    def log_command(self, name, req):
        if self._log is None:
            return
        rec = {"t": datetime.datetime.utcnow().isoformat() + "Z", "cmd": name, "db": req.db,
               "summary": summarize(name, req)}
        line = json.dumps(rec, default=str)
        with self._log_lock:
            self._log.write(line + "\n")
            self._log.flush()

    def log_exception(self, name, exc):
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write("stand-in internal error in %s:\n%s" % (name, text))
        if self._log is not None:
            with self._log_lock:
                self._log.write(json.dumps({"t": datetime.datetime.utcnow().isoformat() + "Z",
                                            "cmd": name, "internalError": repr(exc)}) + "\n")
                self._log.flush()


class DelayedSender:
    """--latency-ms: a connection's replies leave `delay` seconds after they are ready, in the
    order they were made, as over a network with that round-trip time. The connection's thread
    goes on reading (and answering) pipelined requests meanwhile; this thread sends."""

    def __init__(self, sock, delay):
        self.sock = sock
        self.delay = delay
        self.queue = collections.deque()
        self.cond = threading.Condition()
        self.closed = False
        self.broken = False
        self.thread = threading.Thread(target=self._run, name="delayed-send", daemon=True)
        self.thread.start()

    def send(self, data):
        if self.broken:
            raise OSError("the connection is closed")
        with self.cond:
            self.queue.append((time.monotonic() + self.delay, data))
            self.cond.notify()

    def _run(self):
        while True:
            with self.cond:
                while not self.queue and not self.closed:
                    self.cond.wait()
                if not self.queue:
                    return
                due, data = self.queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                self.sock.sendall(data)
            except OSError:
                self.broken = True
                return

    def close(self):
        """Sends what is queued (each reply at its time), then returns."""
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join(self.delay + 10.0)


def summarize(name, req):
    """A short description of a command: its target and sizes, never document contents."""
    body = req.body
    target = body.get(name) if body else None
    out = {}
    if isinstance(target, (str, int)) and not isinstance(target, bool):
        out["target"] = target
    for field in ("documents", "updates", "deletes"):
        seq = req.sequences.get(field) if isinstance(req.sequences, dict) else None
        if isinstance(seq, list):
            out[field] = len(seq)
        elif isinstance(body.get(field), list):
            out[field] = len(body[field])
    if name == "aggregate" and isinstance(body.get("pipeline"), list):
        out["stages"] = [next(iter(s)) for s in body["pipeline"] if isinstance(s, dict) and s]
    if name in ("find", "count", "delete", "update") and isinstance(body.get("filter"), dict):
        out["filterFields"] = list(body["filter"])[:10]
    if name == "getMore":
        out["collection"] = body.get("collection")
        if "maxTimeMS" in body:
            out["maxTimeMS"] = body["maxTimeMS"]
    if name == "configureFailPoint":
        out["mode"] = body.get("mode")
        data = body.get("data") or {}
        out["data"] = sorted(data) if isinstance(data, dict) else None
    out["fields"] = [k for k in body if k not in ("$db", "lsid", "$clusterTime")][:12]
    return out
