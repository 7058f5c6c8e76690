"""Matching rules of MongoDB's unified test format (the subset the spec runner uses).

The rules are those of the format's "Evaluating Matches" section (mongodb/specifications,
source/unified-test-format/unified-test-format.md): a root-level document may hold fields the
expectation does not name, a nested one may not; numbers compare by value whatever their BSON
type (Decimal128 excepted); operators `$$exists`, `$$type`, `$$unsetOrMatches`,
`$$matchesEntity`, `$$matchesHexBytes`, `$$lte`, `$$matchAsDocument`, `$$matchAsRoot` and
`$$sessionLsid` (no session entities here: any lsid matches).
"""

import datetime
import json

from bson import json_util
from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

_MISSING = object()


class Mismatch(AssertionError):
    pass


def _number(v):
    return isinstance(v, (int, float, Int64)) and not isinstance(v, bool)


def _type_names(v):
    if v is None:
        return {"null"}
    if isinstance(v, bool):
        return {"bool"}
    if isinstance(v, Int64):
        return {"long"}
    if isinstance(v, int):
        return {"int"} if -2 ** 31 <= v < 2 ** 31 else {"long"}
    if isinstance(v, float):
        return {"double"}
    if isinstance(v, Decimal128):
        return {"decimal"}
    if isinstance(v, str):
        return {"string"}
    if isinstance(v, dict):
        return {"object"}
    if isinstance(v, (list, tuple)):
        return {"array"}
    if isinstance(v, (bytes, Binary)):
        return {"binData"}
    if isinstance(v, ObjectId):
        return {"objectId"}
    if isinstance(v, datetime.datetime):
        return {"date"}
    if isinstance(v, Timestamp):
        return {"timestamp"}
    if isinstance(v, Regex) or hasattr(v, "pattern"):
        return {"regex"}
    if isinstance(v, Code):
        return {"javascript", "javascriptWithScope"}
    if isinstance(v, MinKey):
        return {"minKey"}
    if isinstance(v, MaxKey):
        return {"maxKey"}
    if isinstance(v, DBRef):
        return {"object", "dbPointer"}
    return {type(v).__name__}


def _operator(expected):
    if isinstance(expected, dict) and len(expected) == 1:
        key = next(iter(expected))
        if key.startswith("$$"):
            return key, expected[key]
    return None, None


class Matcher:
    def __init__(self, entities):
        self.entities = entities

    def match(self, expected, actual, path="", root=True):
        """Raise Mismatch (naming the path) unless `actual` matches `expected`."""
        op, arg = _operator(expected)
        if op is not None:
            return self._special(op, arg, actual, path, root)
        if isinstance(expected, dict):
            if not isinstance(actual, dict):
                raise Mismatch("%s: expected a document, got %r" % (path or "<root>", actual))
            for key, value in expected.items():
                sub = "%s.%s" % (path, key) if path else key
                vop, varg = _operator(value)
                if vop == "$$exists":
                    if bool(varg) != (key in actual):
                        raise Mismatch("%s: expected %s" % (
                            sub, "present" if varg else "absent"))
                    continue
                if key not in actual:
                    if vop == "$$unsetOrMatches":
                        continue
                    raise Mismatch("%s: missing (expected %r)" % (sub, value))
                self.match(value, actual[key], sub, root=False)
            if not root:
                extra = [k for k in actual if k not in expected]
                if extra:
                    raise Mismatch("%s: unexpected fields %s" % (path or "<root>", extra))
            return
        if isinstance(expected, list):
            if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
                raise Mismatch("%s: expected %r, got %r" % (path or "<root>", expected, actual))
            # Documents directly in a root-level array are root-level too (a find's
            # expectResult lists documents with only the fields the test cares about).
            for i, (e, a) in enumerate(zip(expected, actual)):
                self.match(e, a, "%s.%d" % (path, i), root=root)
            return
        if _number(expected) and _number(actual):
            if float(expected) != float(actual):
                raise Mismatch("%s: expected %r, got %r" % (path or "<root>", expected, actual))
            return
        if isinstance(expected, bool) != isinstance(actual, bool) or expected != actual:
            raise Mismatch("%s: expected %r, got %r" % (path or "<root>", expected, actual))

    def _special(self, op, arg, actual, path, root):
        where = path or "<root>"
        if op == "$$exists":
            if bool(arg) != (actual is not _MISSING):
                raise Mismatch("%s: expected %s" % (where, "present" if arg else "absent"))
        elif op == "$$type":
            names = set([arg] if isinstance(arg, str) else arg)
            if not names & _type_names(actual):
                raise Mismatch("%s: expected type %s, got %r" % (where, sorted(names), actual))
        elif op == "$$unsetOrMatches":
            if actual is not _MISSING:
                self.match(arg, actual, path, root)
        elif op == "$$matchesEntity":
            self.match(self.entities[arg], actual, path, root)
        elif op == "$$matchesHexBytes":
            if bytes(actual) != bytes.fromhex(arg):
                raise Mismatch("%s: expected bytes %s" % (where, arg))
        elif op == "$$lte":
            if not (_number(actual) and actual <= arg):
                raise Mismatch("%s: expected <= %r, got %r" % (where, arg, actual))
        elif op == "$$matchAsDocument":
            self.match(arg, json_util.loads(actual), path, root=False)
        elif op == "$$matchAsRoot":
            self.match(arg, actual, path, root=True)
        elif op == "$$sessionLsid":
            if not isinstance(actual, dict):
                raise Mismatch("%s: expected an lsid" % where)
        else:
            raise Mismatch("%s: operator %s is not supported by this runner" % (where, op))


def loads(text):
    """Parse a test file's extended JSON, keeping key order."""
    return json_util.loads(text)


def dumps(value):
    return json.dumps(json.loads(json_util.dumps(value)), sort_keys=False)[:400]
