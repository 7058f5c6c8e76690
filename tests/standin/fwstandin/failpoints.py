"""Fail points with mongod's semantics: failCommand, failGetMoreAfterCursorCheckout and
onPrimaryTransactionalWrite (retryable writes, sessions.py).

A fail point is armed by `configureFailPoint` with mode {times: n} | {skip: n} | "alwaysOn" |
"off" and optional `data`. Each time it fires, {times: n} counts down and switches itself off at
zero, exactly like mongod.
"""

import threading

from .errors import MongoError

KNOWN = ("failCommand", "failGetMoreAfterCursorCheckout", "onPrimaryTransactionalWrite")

# Commands that failCommand never intercepts, as in mongod.
EXEMPT = ("configureFailPoint",)

RETRYABLE_WRITE_CODES = frozenset((6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435,
                                   13436))
WRITE_COMMANDS = ("insert", "update", "delete", "findAndModify")

CODE_NAMES = {
    1: "InternalError", 2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound",
    8: "UnknownError", 9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized",
    14: "TypeMismatch", 20: "IllegalOperation", 24: "LockTimeout", 26: "NamespaceNotFound",
    43: "CursorNotFound", 48: "NamespaceExists", 50: "MaxTimeMSExpired", 59: "CommandNotFound",
    63: "StaleShardVersion", 64: "WriteConcernFailed", 79: "UnknownReplWriteConcern",
    89: "NetworkTimeout", 91: "ShutdownInProgress", 96: "OperationFailed",
    100: "UnsatisfiableWriteConcern", 112: "WriteConflict", 133: "FailedToSatisfyReadPreference",
    134: "ReadConcernMajorityNotAvailableYet", 136: "CappedPositionLost", 150: "StaleEpoch",
    175: "QueryPlanKilled", 189: "PrimarySteppedDown", 202: "NetworkInterfaceExceededTimeLimit",
    234: "RetryChangeStream", 237: "CursorKilled",
    251: "NoSuchTransaction", 260: "InvalidResumeToken", 262: "ExceededTimeLimit",
    280: "ChangeStreamFatalError", 286: "ChangeStreamHistoryLost",
    407: "PooledConnectionAcquisitionExceededTimeLimit", 9001: "SocketException",
    10107: "NotWritablePrimary", 11000: "DuplicateKey", 11600: "InterruptedAtShutdown",
    11601: "Interrupted", 11602: "InterruptedDueToReplStateChange",
    13388: "StaleConfig", 13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}


def code_name(code):
    return CODE_NAMES.get(code, "Location%d" % code)


class FailPoint:
    def __init__(self, name):
        self.name = name
        self.mode = "off"
        self.remaining = 0      # for {times: n}
        self.skip = 0           # for {skip: n}
        self.data = {}
        self.entered = 0

    def configure(self, mode, data):
        if mode == "off":
            self.mode = "off"
        elif mode == "alwaysOn":
            self.mode = "alwaysOn"
        elif isinstance(mode, dict) and "times" in mode:
            n = int(mode["times"])
            if n < 0:
                raise MongoError(2, "BadValue", "'times' option to 'mode' must be positive")
            self.mode = "times" if n else "off"
            self.remaining = n
        elif isinstance(mode, dict) and "skip" in mode:
            self.mode = "skip"
            self.skip = int(mode["skip"])
        elif isinstance(mode, dict) and "activationProbability" in mode:
            raise MongoError(2, "BadValue", "mode 'activationProbability' is not supported by "
                             "the flowwarden stand-in")
        else:
            raise MongoError(2, "BadValue", "'mode' must be one of 'off', 'alwaysOn', "
                             "'times', and 'skip'")
        self.data = dict(data or {})

    def fire(self):
        """Consume one activation if the fail point is active now (call under the lock)."""
        if self.mode == "off":
            return False
        if self.mode == "skip":
            if self.skip > 0:
                self.skip -= 1
                return False
        elif self.mode == "times":
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode = "off"
        self.entered += 1
        return True


class FailPoints:
    def __init__(self):
        self.lock = threading.Lock()
        self.points = {name: FailPoint(name) for name in KNOWN}

    def configure(self, name, mode, data):
        fp = self.points.get(name)
        if fp is None:
            raise MongoError(2, "BadValue", "Cannot find failpoint %s" % name)
        with self.lock:
            count = fp.entered
            fp.configure(mode, data)
            fp.entered = 0
        return count

    def check_fail_command(self, cmd_name, app_name):
        """The failCommand data if it fires for this command, else None."""
        fp = self.points["failCommand"]
        if fp.mode == "off" or cmd_name in EXEMPT:
            return None
        with self.lock:
            data = fp.data
            cmds = data.get("failCommands") or []
            if cmd_name not in cmds and not (cmd_name.lower() == "ismaster"
                                             and ("isMaster" in cmds or "ismaster" in cmds)):
                return None
            if "appName" in data and data["appName"] != app_name:
                return None
            if not fp.fire():
                return None
            return dict(data)

    def check_transactional_write(self):
        """onPrimaryTransactionalWrite's data if it fires for this statement (sessions.py)."""
        fp = self.points["onPrimaryTransactionalWrite"]
        if fp.mode == "off":
            return None
        with self.lock:
            return dict(fp.data) if fp.fire() else None

    def check_getmore_checkout(self):
        fp = self.points["failGetMoreAfterCursorCheckout"]
        if fp.mode == "off":
            return None
        with self.lock:
            return dict(fp.data) if fp.fire() else None


def failpoint_error(data, cmd_name, body, is_change_stream=False):
    """The MongoError a fired failCommand with errorCode produces, labels as mongod adds them."""
    code = int(data["errorCode"])
    if "errorLabels" in data:
        labels = list(data["errorLabels"])
    else:
        labels = default_labels(code, cmd_name, body, is_change_stream)
    return MongoError(code, code_name(code), "Failing command via 'failCommand' failpoint",
                      labels)


def default_labels(code, cmd_name, body, is_change_stream):
    from .changestream import RESUMABLE_CODES
    labels = []
    if is_change_stream and code in RESUMABLE_CODES:
        labels.append("ResumableChangeStreamError")
    if (cmd_name in WRITE_COMMANDS and "txnNumber" in body
            and code in RETRYABLE_WRITE_CODES):
        labels.append("RetryableWriteError")
    return labels
