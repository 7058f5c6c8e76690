"""Run MongoDB's driver specification tests (unified test format) against the stand-in.

The test files are MongoDB's own (mongodb/specifications, source/<group>/tests/unified/): they
stay outside this repository (their licence) and are read at test time from
$FW_SPEC_TESTS_DIR, or else <repo>/../shared/spec-tests. Without them the runner says so and
exits 77 (ctest reports SKIP). Groups: change-streams, crud, retryable-reads, retryable-writes.

The client is pymongo 3.11 (Debian's python3-pymongo), so the driver's own behaviour (resume,
retryable reads and writes) is pymongo's; the stand-in plays a one-node 7.0 replica set.
Only a subset of the format is understood (createEntities with client/database/collection,
initialData, the CRUD and change-stream operations, expectResult, expectError, expectEvents for
command events, outcome, runOnRequirements, failPoint); a test that needs more is skipped and
says why. spec_skips.py lists the tests expected not to pass, each group with its reason.

    /usr/bin/python3 spec_unified.py [-v] [--all] [--group G] [-k SUBSTRING] [--fail-list]

--all runs the listed expected skips too (the way to measure what they still do).
Exit status: 0 when every test run passed, 1 when one failed, 77 without the files.
"""

import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pymongo  # noqa: E402
from bson.son import SON  # noqa: E402
from pymongo import monitoring  # noqa: E402
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError  # noqa: E402
from pymongo.read_concern import ReadConcern  # noqa: E402
from pymongo.read_preferences import ReadPreference  # noqa: E402
from pymongo.write_concern import WriteConcern  # noqa: E402

import spec_ops  # noqa: E402
import spec_skips  # noqa: E402
from spec_match import Matcher, Mismatch, dumps, loads  # noqa: E402
from standin_process import StandIn  # noqa: E402

# A client re-checks a server it marked unknown (after a network error) no sooner than this;
# pymongo's own test suite lowers it the same way, or each closeConnection test waits 0.5 s.
pymongo.common.MIN_HEARTBEAT_INTERVAL = 0.02

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GROUPS = ("change-streams", "crud", "retryable-reads", "retryable-writes")
SERVER_VERSION = (7, 0, 0)
SKIP = 77
# Commands never reported to a test (the format's "security-sensitive" list and the handshake).
SENSITIVE = frozenset(("hello", "ismaster", "isMaster", "saslStart", "saslContinue",
                       "getnonce", "authenticate", "createUser", "updateUser",
                       "copydbsaslstart", "copydbgetnonce", "copydb", "endSessions",
                       "configureFailPoint"))


class Skip(Exception):
    """The test needs something this runner or its client does not have."""


def spec_dir():
    d = os.environ.get("FW_SPEC_TESTS_DIR") or os.path.join(REPO, "..", "shared", "spec-tests")
    return os.path.abspath(d)


def _version(text):
    parts = [int(p) for p in str(text).split(".")]
    return tuple((parts + [0, 0, 0])[:3])


def requirement_met(req):
    """None if one runOnRequirements entry holds here, else the reason it does not."""
    if "minServerVersion" in req and SERVER_VERSION < _version(req["minServerVersion"]):
        return "needs server >= %s" % req["minServerVersion"]
    if "maxServerVersion" in req and SERVER_VERSION > _version(req["maxServerVersion"]):
        return "needs server <= %s" % req["maxServerVersion"]
    if "topologies" in req and "replicaset" not in req["topologies"]:
        return "topology %s" % "/".join(req["topologies"])
    if req.get("serverless") == "require":
        return "serverless only"
    if req.get("auth") is True:
        return "needs auth"
    if req.get("csfle"):
        return "needs CSFLE"
    if "serverParameters" in req:
        return "needs server parameters %s" % sorted(req["serverParameters"])
    return None


def requirements_met(reqs):
    if not reqs:
        return None
    reasons = [requirement_met(r) for r in reqs]
    return None if None in reasons else "; ".join(sorted(set(reasons)))


class Listener(monitoring.CommandListener):
    def __init__(self):
        self.events = []
        self.recording = True
        self.databases = {}     # request id -> database (pymongo 3.11 names it on start only)

    def _add(self, kind, event, extra):
        if self.recording and event.command_name not in SENSITIVE:
            db = self.databases.get((event.request_id, event.connection_id))
            self.events.append((kind, event.command_name, db, extra))

    def started(self, event):
        self.databases[(event.request_id, event.connection_id)] = event.database_name
        self._add("commandStartedEvent", event, event.command)

    def succeeded(self, event):
        self._add("commandSucceededEvent", event, event.reply)

    def failed(self, event):
        self._add("commandFailedEvent", event, event.failure)


class Entities(dict):
    def __init__(self, uri):
        super().__init__()
        self.uri = uri
        self.clients = {}       # id -> (MongoClient, Listener, spec)

    def create(self, specs):
        for spec in specs:
            (kind, body), = spec.items()
            if kind == "client":
                self._client(body)
            elif kind == "database":
                opts = _options(body.get("databaseOptions", {}))
                self[body["id"]] = self[body["client"]].get_database(body["databaseName"],
                                                                      **opts)
            elif kind == "collection":
                opts = _options(body.get("collectionOptions", {}))
                self[body["id"]] = self[body["database"]].get_collection(
                    body["collectionName"], **opts)
            else:
                raise Skip("entity %s" % kind)

    def _client(self, body):
        for key in body:
            if key not in ("id", "observeEvents", "ignoreCommandMonitoringEvents", "uriOptions",
                           "useMultipleMongoses", "observeSensitiveCommands"):
                raise Skip("client option %s" % key)
        observe = body.get("observeEvents", [])
        if any(e not in ("commandStartedEvent", "commandSucceededEvent", "commandFailedEvent")
               for e in observe):
            raise Skip("observes %s" % [e for e in observe if not e.startswith("command")])
        listener = Listener()
        kwargs = dict(body.get("uriOptions", {}))
        # A state-change error (ShutdownInProgress in a writeConcernError...) marks the server
        # unknown; pymongo's monitor then waits out its awaitable hello (heartbeatFrequencyMS)
        # before selecting it again. 100 ms instead of 10 s keeps such tests short.
        kwargs.setdefault("heartbeatFrequencyMS", 100)
        if "appname" in kwargs:
            kwargs["appName"] = kwargs.pop("appname")
        client = pymongo.MongoClient(self.uri, event_listeners=[listener],
                                     serverSelectionTimeoutMS=10000, **kwargs)
        self[body["id"]] = client
        self.clients[body["id"]] = (client, listener, body)

    def close(self):
        for client, listener, _ in self.clients.values():
            listener.recording = False
            client.close()


def _options(opts):
    out = {}
    for key, value in opts.items():
        if key == "readConcern":
            out["read_concern"] = ReadConcern(**value)
        elif key == "writeConcern":
            wc = dict(value)
            if "wtimeoutMS" in wc:
                wc["wtimeout"] = wc.pop("wtimeoutMS")
            out["write_concern"] = WriteConcern(**wc)
        elif key == "readPreference":
            out["read_preference"] = getattr(ReadPreference, _mode(value["mode"]))
        elif key == "timeoutMS":
            raise Skip("timeoutMS (CSOT)")
        else:
            raise Skip("entity option %s" % key)
    return out


def _mode(mode):
    return {"primary": "PRIMARY", "primaryPreferred": "PRIMARY_PREFERRED",
            "secondary": "SECONDARY", "secondaryPreferred": "SECONDARY_PREFERRED",
            "nearest": "NEAREST"}[mode]


def error_facts(exc):
    """(is_client_error, code, code_name, labels, message) of a pymongo exception."""
    if isinstance(exc, BulkWriteError):
        d = exc.details or {}
        errs = d.get("writeErrors") or []
        wces = d.get("writeConcernErrors") or []
        first = errs[0] if errs else (wces[0] if wces else {})
        labels = d.get("errorLabels") or []
        return False, first.get("code"), first.get("codeName"), labels, str(d)
    if isinstance(exc, OperationFailure):
        # A WriteConcernError's details are the writeConcernError document alone in pymongo
        # 3.11: the reply's top-level errorLabels are not kept (spec_skips.py).
        d = exc.details or {}
        return False, exc.code, d.get("codeName"), d.get("errorLabels") or [], str(exc)
    labels = []
    if isinstance(exc, PyMongoError) and hasattr(exc, "_error_labels"):
        labels = list(exc._error_labels)
    return True, None, None, labels, str(exc)


class Test:
    def __init__(self, runner, path, doc, test):
        self.runner = runner
        self.path = path
        self.doc = doc
        self.test = test
        self.entities = None
        self.failpoints = []
        self.matcher = None

    def run(self):
        self.entities = Entities(self.runner.uri)
        self.matcher = Matcher(self.entities)
        self.entities["globalClient"] = self.runner.admin
        try:
            self.entities.create(self.doc.get("createEntities", []))
            self._initial_data()
            for listener in [c[1] for c in self.entities.clients.values()]:
                listener.events.clear()
            for op in self.test.get("operations", []):
                self._operation(op)
            for _, listener, _ in self.entities.clients.values():
                listener.recording = False
            self._expect_events()
            self._outcome()
        finally:
            self._cleanup()

    def _initial_data(self):
        admin = self.runner.admin
        for data in self.doc.get("initialData", []):
            db = admin.get_database(data["databaseName"],
                                    write_concern=WriteConcern(w="majority"))
            db.drop_collection(data["collectionName"])
            opts = data.get("createOptions", {})
            db.command(SON([("create", data["collectionName"])] + list(opts.items())))
            if data["documents"]:
                db[data["collectionName"]].insert_many(data["documents"])

    def _cleanup(self):
        for fp in self.failpoints:
            try:
                fp.admin.command("configureFailPoint", fp.name, mode="off")
            except PyMongoError:
                pass
        self.entities.close()

    def _operation(self, op):
        name = op["name"]
        expect_error = op.get("expectError")
        try:
            result = spec_ops.run(self, name, op.get("object"), op.get("arguments", {}))
        except (Skip, Mismatch, spec_ops.Unsupported):
            raise
        except Exception as exc:  # noqa: BLE001 - any client error is a test outcome
            if expect_error is None:
                if op.get("ignoreResultAndError"):
                    return
                raise Mismatch("%s raised %s: %s" % (name, type(exc).__name__, exc))
            self._check_error(name, expect_error, exc)
            return
        if expect_error is not None:
            raise Mismatch("%s succeeded (%s), expected an error %s" % (
                name, dumps(result), dumps(expect_error)))
        if "expectResult" in op and not op.get("ignoreResultAndError"):
            try:
                self.matcher.match(op["expectResult"], result)
            except Mismatch as e:
                raise Mismatch("%s result: %s\n  got %s" % (name, e, dumps(result)))
        if "saveResultAsEntity" in op:
            self.entities[op["saveResultAsEntity"]] = result

    def _check_error(self, name, exp, exc):
        is_client, code, code_name, labels, msg = error_facts(exc)
        where = "%s error %s(%s)" % (name, type(exc).__name__, msg[:300])
        if exp.get("isClientError") is True and not is_client:
            raise Mismatch("%s: expected a client error" % where)
        if exp.get("isClientError") is False and is_client:
            raise Mismatch("%s: expected a server error" % where)
        if exp.get("isTimeoutError"):
            raise Skip("isTimeoutError (CSOT)")
        if "errorContains" in exp and exp["errorContains"].lower() not in msg.lower():
            raise Mismatch("%s: expected the message to contain %r" % (where, exp["errorContains"]))
        if "errorCode" in exp and code != exp["errorCode"]:
            raise Mismatch("%s: expected code %s, got %s" % (where, exp["errorCode"], code))
        if "errorCodeName" in exp and code_name != exp["errorCodeName"]:
            raise Mismatch("%s: expected codeName %s, got %s" % (
                where, exp["errorCodeName"], code_name))
        for label in exp.get("errorLabelsContain", []):
            if label not in labels:
                raise Mismatch("%s: expected label %s, got %s" % (where, label, labels))
        for label in exp.get("errorLabelsOmit", []):
            if label in labels:
                raise Mismatch("%s: label %s must be absent, got %s" % (where, label, labels))
        if "errorResponse" in exp:
            details = getattr(exc, "details", None)
            if details is None:
                raise Mismatch("%s: expected a server reply" % where)
            self.matcher.match(exp["errorResponse"], details)
        if "expectResult" in exp:
            if not isinstance(exc, BulkWriteError):
                raise Skip("expectError.expectResult on %s" % name)
            self.matcher.match(exp["expectResult"], spec_ops.bulk_result(exc.details))

    def _expect_events(self):
        for block in self.test.get("expectEvents", []):
            kind = block.get("eventType", "command")
            if kind != "command":
                raise Skip("%s events" % kind)
            client, listener, spec = self.entities.clients[block["client"]]
            observed = set(spec.get("observeEvents", []))
            ignored = set(spec.get("ignoreCommandMonitoringEvents", []))
            actual = [e for e in listener.events if e[0] in observed and e[1] not in ignored]
            expected = block["events"]
            if block.get("ignoreExtraEvents"):
                actual = actual[:len(expected)]
            names = [(e[0], e[1]) for e in actual]
            if len(actual) != len(expected):
                raise Mismatch("client %s: expected %d events %s, got %d: %s" % (
                    block["client"], len(expected), [next(iter(e)) + ":" + str(
                        next(iter(e.values())).get("commandName")) for e in expected],
                    len(actual), names))
            for i, (exp, act) in enumerate(zip(expected, actual)):
                (ekind, ebody), = exp.items()
                kind_, cmd, db, payload = act
                where = "event %d (%s %s)" % (i, kind_, cmd)
                if ekind != kind_:
                    raise Mismatch("%s: expected %s" % (where, ekind))
                if "commandName" in ebody and ebody["commandName"] != cmd:
                    raise Mismatch("%s: expected command %s" % (where, ebody["commandName"]))
                if "databaseName" in ebody and ebody["databaseName"] != db:
                    raise Mismatch("%s: expected database %s, got %s" % (
                        where, ebody["databaseName"], db))
                for key in ("command", "reply"):
                    if key in ebody:
                        try:
                            self.matcher.match(ebody[key], payload)
                        except Mismatch as e:
                            raise Mismatch("%s %s: %s\n  got %s" % (where, key, e,
                                                                     dumps(payload)))
                for key in ebody:
                    if key not in ("command", "reply", "commandName", "databaseName",
                                   "hasServiceId", "hasServerConnectionId"):
                        raise Skip("event field %s" % key)

    def _outcome(self):
        for data in self.test.get("outcome", []):
            coll = self.runner.admin.get_database(
                data["databaseName"], read_concern=ReadConcern("local"))[data["collectionName"]]
            docs = list(coll.find({}, sort=[("_id", 1)]))
            try:
                self.matcher.match(data["documents"], docs, root=False)
            except Mismatch as e:
                raise Mismatch("outcome %s.%s: %s\n  got %s" % (
                    data["databaseName"], data["collectionName"], e, dumps(docs)))


class Runner:
    def __init__(self, args):
        self.args = args
        self.uri = None
        self.admin = None
        self.counts = {}
        self.failures = []

    def tests(self, root):
        for group in GROUPS:
            if self.args.group and group != self.args.group:
                continue
            for path in sorted(glob.glob(os.path.join(root, group, "unified", "*.json"))):
                with open(path, encoding="utf-8") as f:
                    doc = loads(f.read())
                for test in doc["tests"]:
                    yield group, path, doc, test

    def record(self, group, outcome, name, why=""):
        c = self.counts.setdefault(group, {"run": 0, "pass": 0, "fail": 0, "skip": 0})
        c[outcome] += 1
        if outcome in ("pass", "fail"):
            c["run"] += 1
        if outcome == "fail":
            self.failures.append((name, why))
        if self.args.verbose or (outcome == "fail" and not self.args.quiet):
            print("%-4s %s%s" % (outcome.upper(), name, (": " + why) if why else ""),
                  flush=True)

    def run_one(self, group, path, doc, test):
        name = "%s/%s: %s" % (group, os.path.basename(path)[:-5], test["description"])
        if self.args.k and self.args.k not in name:
            return
        why = (requirements_met(doc.get("runOnRequirements"))
               or requirements_met(test.get("runOnRequirements")))
        if why is None and test.get("skipReason"):
            why = "skipReason: %s" % test["skipReason"]
        if why is None and not self.args.all:
            why = spec_skips.reason(group, os.path.basename(path), test["description"])
            if why is not None:
                why = "expected: " + why
        if why is not None:
            self.record(group, "skip", name, why)
            return
        started = time.monotonic()
        try:
            Test(self, path, doc, test).run()
        except (Skip, spec_ops.Unsupported) as e:
            self.record(group, "skip", name, "runner: %s" % e)
        except Mismatch as e:
            self.record(group, "fail", name, str(e))
        except Exception as e:  # noqa: BLE001
            self.record(group, "fail", name, "%s: %s" % (type(e).__name__, e))
        else:
            self.record(group, "pass", name)
        finally:
            took = time.monotonic() - started
            if took > self.args.slow:
                print("SLOW %.1f s %s" % (took, name), flush=True)

    def main(self, root):
        standin = StandIn(["--server-version", "7.0"])
        self.uri = standin.start()
        self.admin = pymongo.MongoClient(self.uri, serverSelectionTimeoutMS=10000)
        start = time.monotonic()
        try:
            for group, path, doc, test in self.tests(root):
                self.run_one(group, path, doc, test)
        finally:
            self.admin.close()
            status = standin.stop()
        print("\n%-17s %5s %5s %5s %5s" % ("group", "run", "pass", "fail", "skip"))
        for group in GROUPS:
            c = self.counts.get(group)
            if c:
                print("%-17s %5d %5d %5d %5d" % (group, c["run"], c["pass"], c["fail"],
                                                 c["skip"]))
        print("%.1f s" % (time.monotonic() - start))
        if self.args.fail_list:
            for name, _ in self.failures:
                print("FAILED", name)
        if status != 0:
            print("the stand-in exited with status %s:\n%s" % (status, standin.last_stderr))
            return 1
        return 1 if self.failures else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print each failure")
    p.add_argument("--all", action="store_true", help="also run the expected skips")
    p.add_argument("--group", choices=GROUPS)
    p.add_argument("-k", help="only tests whose name contains this")
    p.add_argument("--fail-list", action="store_true")
    p.add_argument("--slow", type=float, default=5.0, help="print tests slower than this")
    args = p.parse_args(argv)
    root = spec_dir()
    if not os.path.isdir(root):
        print("SKIP: MongoDB's specification tests are not at %s (set FW_SPEC_TESTS_DIR, or "
              "put them in ../shared/spec-tests beside the repository; docs/testing.md)" % root)
        return SKIP
    return Runner(args).main(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
