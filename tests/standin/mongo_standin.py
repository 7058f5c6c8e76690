#!/usr/bin/python3
"""MongoDB-wire-compatible stand-in: a one-node MongoDB 6.0 replica set for flowwarden's tests.

    /usr/bin/python3 tests/standin/mongo_standin.py --port 0

prints `ready 127.0.0.1:<port>` once it accepts connections; connect with
mongodb://127.0.0.1:<port>/?replicaSet=rs0. See docs/testing.md.
"""

import argparse
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import bson  # noqa: F401  (pymongo's bson, with its C extension)
except ImportError:
    sys.stderr.write("mongo_standin: the 'bson' module (Debian python3-pymongo) is missing; "
                     "run this with /usr/bin/python3\n")
    sys.exit(2)

from fwstandin import oplog as oplogmod  # noqa: E402
from fwstandin.auth import Users  # noqa: E402
from fwstandin.cmd_crud import warm_engine  # noqa: E402
from fwstandin.journal import DataDirInUse  # noqa: E402
from fwstandin.server import Server  # noqa: E402


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % text)
    return value


def _port(text):
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be between 0 and 65535, got %s" % text)
    return value


def _seconds(text):
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0, got %s" % text)
    return value


def _latency(text):
    value = float(text)
    if not 0 <= value <= 10000:
        raise argparse.ArgumentTypeError("must be between 0 and 10000 ms, got %s" % text)
    return value


def _auth(text):
    try:
        return Users.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _server_version(text):
    versions = {"5.0": (5, 0), "6.0": (6, 0), "7.0": (7, 0)}
    if text not in versions:
        raise argparse.ArgumentTypeError("must be 5.0, 6.0 or 7.0, got %s" % text)
    return versions[text]


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="mongo_standin.py",
        description="MongoDB 6.0 one-node replica set stand-in (wire compatible).")
    p.add_argument("--port", type=_port, default=27017,
                   help="TCP port on 127.0.0.1; 0 picks a free one (default 27017)")
    p.add_argument("--replset", default="rs0", help="replica set name (default rs0)")
    p.add_argument("--data-dir", default=None,
                   help="persist data, indexes and oplog here (default: in memory only)")
    p.add_argument("--oplog-max-entries", type=_positive_int, default=10_000_000,
                   help="oplog cap; the oldest entries are dropped beyond it (default 10000000)")
    p.add_argument("--ttl-interval", type=_seconds, default=60.0,
                   help="seconds between TTL monitor passes (default 60, like mongod)")
    p.add_argument("--log", default=None,
                   help="append one JSON line per command received to this file")
    p.add_argument("--latency-ms", type=_latency, default=0.0,
                   help="send every reply this many ms after it is ready, per connection and "
                        "in order (pipelined requests keep theirs): a network with that "
                        "round-trip time (default 0)")
    p.add_argument("--auth", type=_auth, default=None, metavar="USER:PASSWORD",
                   help="require authentication (SCRAM-SHA-256 or SCRAM-SHA-1) as USER, "
                        "a user of the admin database with every privilege (default: none)")
    p.add_argument("--user", action="append", default=[], metavar="USER:PASSWORD:ROLE@DB",
                   help="with --auth, one more user of the admin database holding the "
                        "built-in ROLE (read, readWrite or root) on DB; repeatable")
    p.add_argument("--standalone", action="store_true",
                   help="play a standalone mongod: hello without setName, change streams "
                        "refused (40573)")
    p.add_argument("--clock-offset-ms", type=int, default=0, metavar="MS",
                   help="hello's and serverStatus's localTime run MS ms ahead of this "
                        "machine's clock (negative: behind); $$NOW and the oplog keep the "
                        "real clock (default 0)")
    p.add_argument("--server-version", type=_server_version, default=(6, 0), metavar="X.Y",
                   help="the MongoDB version to play: 6.0 (default), 5.0 (hello's "
                        "maxWireVersion 13; refuses what 5.0 refuses: blocking sorts over "
                        "100 MB without allowDiskUse, 6.0-only change stream options) "
                        "or 7.0 (maxWireVersion 21; 6.0's behaviour plus $toHashedIndexKey, "
                        "which 5.0 and 6.0 do not know)")
    p.add_argument("--token-version", type=int, choices=(1, 2), default=1,
                   help="the version of the resume tokens (resume_token.cpp): 1 (default) or "
                        "2, which sorts after 1 at the same clusterTime; with --data-dir, the "
                        "events already stored come with it too, as a server whose feature "
                        "compatibility version moved renders them")
    p.add_argument("--transaction-lifetime-limit-seconds", type=_seconds, default=60.0,
                   metavar="S", help="abort a multi-document transaction not committed S "
                   "seconds after it started (mongod's transactionLifetimeLimitSeconds, "
                   "default 60)")
    args = p.parse_args(argv)
    if args.user and args.auth is None:
        p.error("--user needs --auth")
    for text in args.user:
        try:
            args.auth.add(text)
        except ValueError as e:
            p.error("--user: %s" % e)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    oplogmod.TOKEN_VERSION = args.token_version
    try:
        server = Server(replset=args.replset, data_dir=args.data_dir,
                        oplog_max_entries=args.oplog_max_entries,
                        ttl_interval=args.ttl_interval, log_path=args.log,
                        latency_ms=args.latency_ms, auth=args.auth,
                        server_version=args.server_version, standalone=args.standalone,
                        clock_offset_ms=args.clock_offset_ms,
                        txn_lifetime_s=args.transaction_lifetime_limit_seconds)
    except DataDirInUse as e:
        sys.stderr.write("mongo_standin: %s\n" % e)
        return 1
    server.load()
    try:
        server.listen(args.port)
    except OSError as e:
        sys.stderr.write("mongo_standin: cannot listen on 127.0.0.1:%d: %s\n" % (args.port, e))
        return 1

    def stop(signum, frame):
        # Runs in the main thread while it waits in accept(): setting the flag and closing
        # the listener makes the retried accept() fail and serve_forever() return.
        server.shutdown_event.set()
        try:
            server.listener.close()
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write("ready %s\n" % server.host)
    sys.stdout.flush()
    threading.Thread(target=warm_engine, name="warm-engine", daemon=True).start()
    server.serve_forever()
    server.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Connection threads may be blocked in socket reads; leave without waiting for them.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
