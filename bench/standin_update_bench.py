#!/usr/bin/python3
"""The stand-in's cost per statement of S6b's bulk write, in process (no socket, no threads).

    /usr/bin/python3 bench/standin_update_bench.py [--rounds 40] [--batch 500] [--groups 100]
                                                   [--single] [--profile] [--warm 2]

Builds the OP_MSG a driver sends for S6b (`update` of --batch statements `{q: {_id: "gNN"},
u: {$inc: {n: 1}}, upsert: true, multi: false}` in a document sequence, ordered false, with
`lsid` and a new `txnNumber` each: a retryable write), then times `wire.parse_message` +
`commands.execute` of --rounds such messages on a Server that is not listening, after --warm
rounds (the first creates the --groups counters by upserts). --single sends one statement per
command instead (S6's `update_one`), --batch times over. Prints the CPU per statement;
--profile prints cProfile's top functions instead. For exact counts, run it under
`valgrind --tool=callgrind` with two --rounds values and take the difference.
"""

import argparse
import cProfile
import os
import pstats
import struct
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "standin"))

import bson  # noqa: E402
from bson.binary import Binary  # noqa: E402
from bson.int64 import Int64  # noqa: E402

from fwstandin import commands, wire  # noqa: E402
from fwstandin.server import Server  # noqa: E402


def message(txn, seq, lsid, coll="s6_totals", ordered=False):
    """The OP_MSG bytes (header unpacked, payload) of one retryable update command on
    bench.coll of the statements seq (their BSON, one after the other)."""
    body = bson.encode({"update": coll, "ordered": ordered, "$db": "bench",
                        "lsid": {"id": lsid}, "txnNumber": Int64(txn)})
    ident = b"updates\x00"
    payload = (b"\x00\x00\x00\x00" + b"\x00" + body + b"\x01"
               + struct.pack("<i", 4 + len(ident) + len(seq)) + ident + seq)
    return (16 + len(payload), txn, 0, wire.OP_MSG), payload


def profile_or_time(run, msgs, profile):
    """run(msgs) under cProfile (prints the top functions, returns None) or timed: the
    process CPU seconds it took."""
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        run(msgs)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return None
    t0 = time.process_time()
    run(msgs)
    return time.process_time() - t0


def statements(batch, groups, start):
    return b"".join(bson.encode({"q": {"_id": "g%02d" % ((start + i) % groups)},
                                 "u": {"$inc": {"n": 1}}, "upsert": True, "multi": False})
                    for i in range(batch))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--warm", type=int, default=2)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--single", action="store_true",
                   help="one statement per command (S6), --batch commands a round")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()

    server = Server()
    server.load()
    conn = commands.Connection(1, ("127.0.0.1", 0))
    lsid = Binary(uuid.uuid4().bytes, 4)
    # The statements encoded once (the harness's own work does not grow with --rounds).
    seqs = ([statements(1, args.groups, i) for i in range(args.groups)] if args.single
            else [statements(args.batch, args.groups, 0)])
    msgs = []
    txn = 0
    for r in range(args.warm + args.rounds):
        if args.single:
            for i in range(args.batch):
                txn += 1
                msgs.append(message(txn, seqs[i % args.groups], lsid))
        else:
            txn += 1
            msgs.append(message(txn, seqs[0], lsid))
    per_round = args.batch if args.single else 1
    warm, timed = msgs[:args.warm * per_round], msgs[args.warm * per_round:]

    def run(ms):
        for header, payload in ms:
            reply = commands.execute(server, conn, wire.parse_message(header, payload))
            if b"writeErrors" in reply:
                raise SystemExit("a write error: %r" % bson.decode(reply[21:]))

    run(warm)
    n = args.rounds * args.batch
    dt = profile_or_time(run, timed, args.profile)
    if dt is None:
        return 0
    print("%d statements (%s): %.2f us CPU per statement"
          % (n, "one per command" if args.single else "%d per command" % args.batch,
             dt / n * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
