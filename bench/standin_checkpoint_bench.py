#!/usr/bin/python3
"""The stand-in's cost per checkpoint write, in process (no socket, no threads).

    /usr/bin/python3 bench/standin_checkpoint_bench.py [--writes 2000] [--profile]

Builds the OP_MSG flowwarden's ordered checkpoint save sends (checkpoint_store.c's
save_checkpoint with order_t: `update` of `_fw_checkpoints`, one statement
`{q: {_id: <stream>, writerGen: {$not: {$gt: <gen>}}, $or: [{writerId: {$ne: <oid>}},
{writerSeq: {$lt: <seq>}}]}, u: {$set: {lastProcessedToken, lastSeenToken, scriptVersion,
updatedAt, writerGen, writerId, writerSeq}}, upsert: true}`, a retryable write with its own
txnNumber), then times `wire.parse_message` + `commands.execute` of --writes such messages
(each a new seq and token, as a catch-up sends them) on a Server that is not listening.
Prints the CPU per write; --profile prints cProfile's top functions instead. For exact
counts, run it under `valgrind --tool=callgrind` with two --writes values, and again with
--build-only (the messages made, none run), and take the differences.
"""

import argparse
import datetime
import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "standin"))

import bson  # noqa: E402
from bson.binary import Binary  # noqa: E402
from bson.int64 import Int64  # noqa: E402
from bson.objectid import ObjectId  # noqa: E402

from fwstandin import commands, wire  # noqa: E402
from fwstandin.server import Server  # noqa: E402
from standin_update_bench import message, profile_or_time  # noqa: E402


def statement(writer, gen, seq):
    tok = {"_data": "8263A1B2C3000000%02X2B022C0100296E5A1004%032X46645F696400" % (seq % 256, seq)}
    return bson.encode({
        "q": {"_id": "s2", "writerGen": {"$not": {"$gt": Int64(gen)}},
              "$or": [{"writerId": {"$ne": writer}}, {"writerSeq": {"$lt": Int64(seq)}}]},
        "u": {"$set": {"lastProcessedToken": tok, "lastSeenToken": tok,
                       "scriptVersion": "sha256:0123456789abcdef",
                       "updatedAt": datetime.datetime(2026, 1, 1) + datetime.timedelta(
                           milliseconds=seq),
                       "writerGen": Int64(gen), "writerId": writer, "writerSeq": Int64(seq)}},
        "upsert": True})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writes", type=int, default=2000)
    p.add_argument("--warm", type=int, default=20)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--build-only", action="store_true",
                   help="make the messages and stop (the harness's own cost)")
    args = p.parse_args()

    server = Server()
    server.load()
    conn = commands.Connection(1, ("127.0.0.1", 0))
    lsid = Binary(uuid.uuid4().bytes, 4)
    writer = ObjectId()
    msgs = [message(i + 1, statement(writer, 3, i + 1), lsid, coll="_fw_checkpoints", ordered=True)
            for i in range(args.warm + args.writes)]
    warm, timed = msgs[:args.warm], msgs[args.warm:]
    if args.build_only:
        return 0

    def run(ms, first=False):
        for header, payload in ms:
            reply = commands.execute(server, conn, wire.parse_message(header, payload))
            if first:
                first = False   # the upsert that creates the checkpoint
            elif b"writeErrors" in reply or b"nModified\x00\x01\x00\x00\x00" not in reply:
                raise SystemExit("unexpected reply: %r" % bson.decode(reply[21:]))

    run(warm, first=True)
    dt = profile_or_time(run, timed, args.profile)
    if dt is None:
        return 0
    print("%d checkpoint writes: %.1f us CPU per write" % (args.writes, dt / args.writes * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
