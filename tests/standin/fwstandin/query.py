"""Query filters: parse once into closures, then match documents fast.

A user $match after $changeStream runs per event, so a filter is compiled
into nested closures (compile_filter) and matches() caches compiled filters
keyed by their BSON encoding. The semantics follow mongod's matcher:

* a path reaching an array matches if the array itself or any element
  matches ("leaf expansion"); arrays met mid-path are traversed once, and a
  numeric component may also index the array;
* $ne, $nin, $not and {$exists: false} negate the whole path test, so
  {a: {$ne: 1}} rejects a: [1, 2];
* comparisons only match values of the same canonical type ("type
  bracketing"); null equality also matches a missing field.
"""

import operator
import re

from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex

from .compare import (MISSING, RANK_NUMBER, TYPE_ALIASES, as_document, bson_type_number,
                      canonical_rank, compare_values, hash_key, is_nan, is_number, num_value,
                      regex_parts)
from .errors import MongoError, bad_value
from .expressions import compile_expression, root_vars, truthy

_RE_PATTERN = type(re.compile(""))
_REGEX_TYPES = (Regex, _RE_PATTERN)

# Top-level operators whose argument is not a field path.
_LOGICAL = ("$and", "$or", "$nor")
_PATHLESS = _LOGICAL + ("$where", "$expr", "$text", "$comment", "$alwaysTrue", "$alwaysFalse",
                        "$jsonSchema")
_UNSUPPORTED_TOP = ("$where", "$text", "$jsonSchema", "$sampleRate")
_UNSUPPORTED_FIELD = ("$bitsAllSet", "$bitsAllClear", "$bitsAnySet", "$bitsAnyClear",
                      "$geoWithin", "$geoIntersects", "$near", "$nearSphere", "$within",
                      "$geometry", "$maxDistance", "$minDistance", "$center",
                      "$centerSphere", "$box", "$polygon", "$uniqueDocs")


def _not_implemented(what):
    return MongoError(238, "NotImplemented", "%s is not supported by the flowwarden stand-in"
                      % what)


# ------------------------------------------------------------ regexes

_REGEX_CACHE = {}
_FLAG_BITS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0}


def _pcre_to_python(pattern):
    """Translate the PCRE constructs Python spells differently (\\z, \\Z, named groups)."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt == "z":
                out.append(r"\Z")
            elif nxt == "Z":
                out.append(r"(?=\n?\Z)")
            elif nxt == "k" and i + 2 < n and pattern[i + 2] == "<":
                end = pattern.find(">", i + 3)
                if end < 0:
                    out.append(pattern[i:i + 2])
                else:
                    out.append("(?P=%s)" % pattern[i + 3:end])
                    i = end + 1
                    continue
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if pattern.startswith("(?<", i) and i + 3 < n and pattern[i + 3] not in "=!":
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def compile_regex(pattern, options):
    """Compiled Python regex for a MongoDB pattern + option letters (cached)."""
    key = (pattern, options)
    rx = _REGEX_CACHE.get(key)
    if rx is not None:
        return rx
    flags = 0
    for ch in options:
        if ch not in _FLAG_BITS:
            raise MongoError(51108, "Location51108", "invalid flag in regex options: %s" % ch)
        flags |= _FLAG_BITS[ch]
    try:
        rx = re.compile(_pcre_to_python(pattern), flags)
    except re.error as exc:
        raise MongoError(51091, "Location51091", "Regular expression is invalid: %s" % exc)
    if len(_REGEX_CACHE) > 1024:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[key] = rx
    return rx


def _regex_pred(pattern, options):
    rx = compile_regex(pattern, options)
    want = (pattern, "".join(sorted(options)))
    search = rx.search

    def pred(v):
        if type(v) is str:
            return search(v) is not None
        if isinstance(v, _REGEX_TYPES):
            return regex_parts(v) == want
        return False
    return pred


def _regex_value_pred(value):
    pattern, options = regex_parts(value)
    return _regex_pred(pattern, options)


# ------------------------------------------------------------ node shapes
#
# A compiled field operator is one of:
#   ("leaf", pred, expand)  - pred(value) on candidates; expand = also try
#                             the elements of an array found at the leaf
#   ("not", node)           - negation of the whole path test
#   ("and", [nodes])        - every child must hold (each on its own)

def _leaf(pred, expand=True):
    return ("leaf", pred, expand)


def _is_index(part):
    return part.isdigit() and (part == "0" or part[0] != "0")


def _path_matcher(parts, pred, expand):
    """doc -> bool: does any value the path reaches satisfy pred?"""
    if len(parts) == 1:
        key = parts[0]
        if expand:
            def top_expand(doc):
                v = doc.get(key, MISSING)
                if type(v) is list:
                    if pred(v):
                        return True
                    for e in v:
                        if pred(e):
                            return True
                    return False
                return pred(v)
            return top_expand
        return lambda doc: pred(doc.get(key, MISSING))

    n = len(parts)
    indexes = [int(p) if _is_index(p) else -1 for p in parts]

    def walk(v, i):
        if i == n:
            if pred(v):
                return True
            if expand and type(v) is list:
                for e in v:
                    if pred(e):
                        return True
            return False
        if isinstance(v, dict):
            return walk(v.get(parts[i], MISSING), i + 1)
        if type(v) is list:
            # Like mongod's BSONElementIterator: documents in the array are
            # searched for the field (even when it is numeric), and a numeric
            # component also selects the element at that offset. A scalar at
            # the offset only counts when the path ends there (unexpanded).
            part, idx = parts[i], indexes[i]
            last = i + 1 == n
            for j, e in enumerate(v):
                if isinstance(e, dict) and walk(e.get(part, MISSING), i + 1):
                    return True
                if j == idx:
                    if last:
                        if pred(e):
                            return True
                    elif isinstance(e, (dict, list)) and walk(e, i + 1):
                        return True
            return False
        if type(v) is DBRef:
            return walk(v.as_doc(), i)
        return pred(MISSING)

    def dotted(doc):
        # Fast path for the common all-subdocument case; arrays fall back to walk().
        v = doc
        for p in parts:
            if type(v) is dict:
                v = v.get(p, MISSING)
            elif v is MISSING or not isinstance(v, (list, dict, DBRef)):
                return pred(MISSING)
            else:
                return walk(doc, 0)
        if pred(v):
            return True
        if expand and type(v) is list:
            for e in v:
                if pred(e):
                    return True
        return False

    return dotted


def _doc_matcher(node, parts):
    kind = node[0]
    if kind == "leaf":
        return _path_matcher(parts, node[1], node[2])
    if kind == "not":
        inner = _doc_matcher(node[1], parts)
        return lambda doc: not inner(doc)
    children = [_doc_matcher(c, parts) for c in node[1]]
    return _all_of(children)


def _elem_pred(node):
    """The node applied to one value, without path traversal ($elemMatch values)."""
    kind = node[0]
    if kind == "leaf":
        return node[1]
    if kind == "not":
        inner = _elem_pred(node[1])
        return lambda v: not inner(v)
    preds = [_elem_pred(c) for c in node[1]]
    return lambda v: all(p(v) for p in preds)


def _all_of(matchers):
    if len(matchers) == 1:
        return matchers[0]
    if len(matchers) == 2:
        a, b = matchers
        return lambda doc: a(doc) and b(doc)
    return lambda doc: all(m(doc) for m in matchers)


# ------------------------------------------------------------ leaf predicates

def _eq_pred(rhs):
    if rhs is None:
        return lambda v: v is None or v is MISSING
    t = type(rhs)
    if t is str:
        return lambda v: type(v) is str and v == rhs
    if t is ObjectId:
        return lambda v: type(v) is ObjectId and v == rhs
    if isinstance(rhs, _REGEX_TYPES):
        want = regex_parts(rhs)
        return lambda v: isinstance(v, _REGEX_TYPES) and regex_parts(v) == want
    rank = canonical_rank(rhs)
    if rank == RANK_NUMBER:
        target = num_value(rhs)
        if is_nan(target):
            return lambda v: is_number(v) and is_nan(num_value(v))

        def num_eq(v):
            tv = type(v)
            if tv is int or tv is float or tv is Int64:
                return v == target
            if tv is Decimal128:
                return v.to_decimal() == target
            return False
        return num_eq
    return lambda v: (v is not MISSING and canonical_rank(v) == rank
                      and compare_values(v, rhs) == 0)


_CMP_FUNCS = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _cmp_pred(op, rhs):
    test = _CMP_FUNCS[op]
    inclusive = op in ("$gte", "$lte")
    if type(rhs) in (MinKey, MaxKey):
        # mongod: everything is above MinKey and below MaxKey.
        lower = type(rhs) is MinKey
        rank = canonical_rank(rhs)

        def key_bound(v):
            if v is MISSING:
                return False
            if canonical_rank(v) == rank:
                return inclusive
            return lower == (op in ("$gt", "$gte"))
        return key_bound
    if rhs is None:
        if inclusive:
            return lambda v: v is None or v is MISSING
        return lambda v: False
    rank = canonical_rank(rhs)
    if rank == RANK_NUMBER:
        target = num_value(rhs)
        if is_nan(target):
            if inclusive:
                return lambda v: is_number(v) and is_nan(num_value(v))
            return lambda v: False

        def num_cmp(v):
            tv = type(v)
            if tv is float and v != v:
                # mongod: a NaN compares false to every number but NaN
                # (expression_leaf.cpp, ComparisonMatchExpression::matchesSingleElement);
                # Python's Decimal would raise InvalidOperation on the comparison.
                return False
            if tv is int or tv is float or tv is Int64:
                return test(v, target)
            if tv is Decimal128:
                d = v.to_decimal()
                return not d.is_nan() and test(d, target)
            return False
        return num_cmp
    if type(rhs) is str:
        return lambda v: type(v) is str and test(v, rhs)

    def generic(v):
        if v is MISSING or canonical_rank(v) != rank:
            return False
        return test(compare_values(v, rhs), 0)
    return generic


def _in_pred(values, op):
    if not isinstance(values, list):
        raise bad_value("%s needs an array" % op)
    regexes = []
    keys = set()
    for v in values:
        if isinstance(v, _REGEX_TYPES):
            regexes.append(_regex_value_pred(v))
        elif isinstance(v, dict) and v and next(iter(v)).startswith("$"):
            raise bad_value("cannot nest $ under %s" % op)
        else:
            keys.add(hash_key(v))

    def pred(v):
        if hash_key(v) in keys:
            return True
        for r in regexes:
            if r(v):
                return True
        return False
    return pred


def _parse_type_codes(arg):
    items = arg if isinstance(arg, list) else [arg]
    if not items:
        raise MongoError(9, "FailedToParse", "$type must match at least one type")
    codes, number = set(), False
    for t in items:
        if isinstance(t, str):
            if t == "number":
                number = True
            elif t in TYPE_ALIASES:
                codes.add(TYPE_ALIASES[t])
            else:
                raise bad_value("Unknown type name alias: %s" % t)
        elif is_number(t):
            n = num_value(t)
            if is_nan(n) or n != int(n) or int(n) not in TYPE_ALIASES.values():
                raise bad_value("Invalid numerical type code: %s" % t)
            codes.add(int(n))
        else:
            raise MongoError(14, "TypeMismatch",
                             "type must be represented as a number or a string")
    return codes, number


def _type_pred(arg):
    codes, number = _parse_type_codes(arg)

    def pred(v):
        if v is MISSING:
            return False
        if number and is_number(v):
            return True
        return bson_type_number(v) in codes
    return pred


def _size_pred(arg):
    if not is_number(arg) or type(arg) is Decimal128:
        raise bad_value("$size needs a number")
    n = num_value(arg)
    if is_nan(n) or n != int(n):
        raise bad_value("$size must be a whole number")
    if type(arg) is not float and not -2 ** 31 <= n < 2 ** 31:
        raise bad_value("$size must be representable as a 32-bit integer")
    if n < 0:
        raise bad_value("$size may not be negative")
    n = int(n)
    return lambda v: type(v) is list and len(v) == n


def _mod_pred(arg):
    if not isinstance(arg, list):
        raise bad_value("malformed mod, needs to be an array")
    if len(arg) < 2:
        raise bad_value("malformed mod, not enough elements")
    if len(arg) > 2:
        raise bad_value("malformed mod, too many elements")
    divisor, remainder = arg
    if not is_number(divisor):
        raise bad_value("malformed mod, divisor not a number")
    if not is_number(remainder):
        raise bad_value("malformed mod, remainder not a number")
    for name, v in (("divisor", divisor), ("remainder", remainder)):
        x = num_value(v)
        if is_nan(x) or x in (float("inf"), float("-inf")):
            raise bad_value("malformed mod, %s value is invalid :: caused by :: Unable to "
                            "coerce NaN/Inf to integral type" % name)
    d, r = int(num_value(divisor)), int(num_value(remainder))
    if d == 0:
        raise bad_value("divisor cannot be 0")

    def pred(v):
        if not is_number(v):
            return False
        x = num_value(v)
        if is_nan(x) or x in (float("inf"), float("-inf")):
            return False
        x = int(x)
        rem = abs(x) % abs(d)
        return (-rem if x < 0 else rem) == r
    return pred


def _elem_match_node(arg):
    if not isinstance(arg, dict):
        raise bad_value("$elemMatch needs an Object")
    first = next(iter(arg), None)
    if first is not None and first.startswith("$") and first not in _PATHLESS:
        inner = _elem_pred(_compile_operators(arg, ""))
    else:
        sub = compile_filter(arg, top=False)

        def inner(e):
            return isinstance(e, dict) and sub(e)

    def pred(v):
        if type(v) is not list:
            return False
        for e in v:
            if inner(e):
                return True
        return False
    return _leaf(pred, expand=False)


def _all_node(arg):
    if not isinstance(arg, list):
        raise bad_value("$all needs an array")
    if not arg:
        return _leaf(lambda v: False)
    # As in mongod, the first element decides whether this is an $elemMatch list.
    is_elem_match = [isinstance(x, dict) and next(iter(x), None) == "$elemMatch" for x in arg]
    if is_elem_match[0]:
        if not all(is_elem_match):
            raise bad_value("$all/$elemMatch has to be consistent")
        return ("and", [_elem_match_node(x["$elemMatch"]) for x in arg])
    nodes = []
    for x in arg:
        if isinstance(x, _REGEX_TYPES):
            nodes.append(_leaf(_regex_value_pred(x)))
        elif isinstance(x, dict) and x and next(iter(x)).startswith("$"):
            raise bad_value("no $ expressions in $all")
        else:
            nodes.append(_leaf(_eq_pred(x)))
    return ("and", nodes)


def _not_node(arg, path):
    if isinstance(arg, _REGEX_TYPES):
        return ("not", _leaf(_regex_value_pred(arg)))
    if not isinstance(arg, dict):
        raise bad_value("$not needs a regex or a document")
    if not arg:
        raise bad_value("$not cannot be empty")
    return ("not", _compile_operators(arg, path))


def _compile_operators(ops, path):
    """{$gt: 1, $lt: 5, ...} for one path -> node (an AND of each operator)."""
    nodes = []
    regex = options = None
    for op, arg in ops.items():
        if op == "$eq":
            nodes.append(_leaf(_eq_pred(arg)))
        elif op == "$ne":
            if isinstance(arg, _REGEX_TYPES):
                raise bad_value("Can't have regex as arg to $ne.")
            nodes.append(("not", _leaf(_eq_pred(arg))))
        elif op in _CMP_FUNCS:
            if isinstance(arg, _REGEX_TYPES):
                raise bad_value("Can't have RegEx as arg to predicate over field '%s'." % path)
            nodes.append(_leaf(_cmp_pred(op, arg)))
        elif op == "$in":
            nodes.append(_leaf(_in_pred(arg, op)))
        elif op == "$nin":
            nodes.append(("not", _leaf(_in_pred(arg, op))))
        elif op == "$exists":
            exists = _leaf(lambda v: v is not MISSING, expand=False)
            nodes.append(exists if truthy(arg) else ("not", exists))
        elif op == "$type":
            nodes.append(_leaf(_type_pred(arg)))
        elif op == "$size":
            nodes.append(_leaf(_size_pred(arg), expand=False))
        elif op == "$all":
            nodes.append(_all_node(arg))
        elif op == "$elemMatch":
            nodes.append(_elem_match_node(arg))
        elif op == "$not":
            nodes.append(_not_node(arg, path))
        elif op == "$mod":
            nodes.append(_leaf(_mod_pred(arg)))
        elif op == "$regex":
            if type(arg) is not str and not isinstance(arg, _REGEX_TYPES):
                raise bad_value("$regex has to be a string")
            regex = arg
        elif op == "$options":
            if not isinstance(arg, str):
                raise bad_value("$options has to be a string")
            options = arg
        elif op == "$where":
            raise bad_value("$where cannot be applied to a field")
        elif op in _UNSUPPORTED_FIELD:
            raise _not_implemented("query operator %s" % op)
        else:
            raise bad_value("unknown operator: %s" % op)
    if options is not None and regex is None:
        raise bad_value("$options needs a $regex")
    if regex is not None:
        if isinstance(regex, _REGEX_TYPES):
            pattern, flags = regex_parts(regex)
            if options is not None and flags:
                raise MongoError(51074, "Location51074", "options set in both $regex and $options")
            nodes.append(_leaf(_regex_pred(pattern, options if options is not None else flags)))
        else:
            if "\x00" in regex:
                raise MongoError(51109, "Location51109",
                                 "Regular expression cannot contain an embedded null byte")
            nodes.append(_leaf(_regex_pred(regex, options or "")))
    return nodes[0] if len(nodes) == 1 else ("and", nodes)


def _field_matcher(path, value):
    parts = path.split(".")
    if isinstance(value, dict) and type(value) is not DBRef and value:
        first = next(iter(value))
        if first.startswith("$"):
            return _doc_matcher(_compile_operators(value, path), parts)
    if isinstance(value, _REGEX_TYPES):
        return _doc_matcher(_leaf(_regex_value_pred(value)), parts)
    return _doc_matcher(_leaf(_eq_pred(value)), parts)


def _logical_matcher(op, arg, allow_expr, top):
    if not isinstance(arg, list):
        raise bad_value("%s must be an array" % op)
    if not arg:
        raise bad_value("$and/$or/$nor must be a nonempty array")
    subs = []
    for clause in arg:
        if not isinstance(clause, dict):
            raise bad_value("$or/$and/$nor entries need to be full objects")
        subs.append(compile_filter(clause, allow_expr=allow_expr, top=top))
    if op == "$and":
        return _all_of(subs)
    if op == "$or":
        return subs[0] if len(subs) == 1 else (lambda doc: any(m(doc) for m in subs))
    return lambda doc: not any(m(doc) for m in subs)


def _top_level_matcher(op, arg, allow_expr, top):
    if op in _LOGICAL:
        return _logical_matcher(op, arg, allow_expr, top)
    if op == "$expr":
        # mongod's parseExpr (expression_parser.cpp): the level first, then the feature.
        if not top:
            raise bad_value("$expr can only be applied to the top-level document")
        if not allow_expr:
            raise MongoError(224, "QueryFeatureNotAllowed", "$expr is not allowed in this context")
        f = compile_expression(arg)
        return lambda doc: truthy(f(root_vars(doc)))
    if op == "$comment":
        return None
    if op == "$alwaysTrue":
        return lambda doc: True
    if op == "$alwaysFalse":
        return lambda doc: False
    if op in _UNSUPPORTED_TOP:
        raise _not_implemented("query operator %s" % op)
    if op == "$not":
        raise bad_value("unknown top level operator: $not. If you are trying to negate an "
                        "entire expression, use $nor.")
    raise bad_value("unknown top level operator: %s. If you have a field name that starts "
                    "with a '$' symbol, consider using $getField or $setField." % op)


# ------------------------------------------------------------ public API

def compile_filter(filt, allow_expr=True, top=True):
    """Compile a query filter into a callable doc -> bool (raises MongoError if invalid).

    allow_expr False: $expr at any depth is refused (224), as mongod's parser does without the
    kExpr feature; top False: the filter is an $elemMatch's, where $expr is a BadValue."""
    if not isinstance(filt, dict):
        raise MongoError(14, "TypeMismatch", "filter must be an object")
    matchers = []
    for key, value in filt.items():
        if key.startswith("$"):
            m = _top_level_matcher(key, value, allow_expr, top)
            if m is not None:
                matchers.append(m)
        else:
            matchers.append(_field_matcher(key, value))
    if not matchers:
        return lambda doc: True
    return _all_of(matchers)


def validate_filter(filt, upsert=False):
    """Raise MongoError exactly where mongod would reject the filter.

    upsert: the query of an upsert (update or findAndModify with upsert: true), parsed without
    $expr, and the refusal reworded as mongod's update parser does (parsed_update.cpp in
    5.0/6.x, parsed_update_base.cpp in 7.0, canonical_update.cpp in 8.x)."""
    try:
        fn = compile_filter(filt, allow_expr=not upsert)
        # What the statement's match compiles next (matches, matcher): the same predicate,
        # as allow_expr only refuses; compiled once (a checkpoint write's filter is new each
        # time, so the cache never has it).
        _remember(_FILTER_CACHE, filt, fn)
    except MongoError as e:
        if upsert and e.code == 224:
            raise MongoError(224, "QueryFeatureNotAllowed",
                             "$expr is not allowed in the query predicate for an upsert")
        raise


_FILTER_CACHE = {}


def _remember(cache, spec, fn):
    if len(cache) >= 512:
        cache.clear()
    cache[repr(spec)] = fn


def _cached(cache, spec, build):
    """Memoize build(spec) keyed by repr(spec).

    repr is exact for BSON values (1, 1.0, True and Int64(1) all differ) and
    about 5x cheaper than bson.encode; keying by content rather than id()
    means a filter mutated after use never hits a stale entry.
    """
    key = repr(spec)
    fn = cache.get(key)
    if fn is None:
        fn = build(spec)
        if len(cache) >= 512:
            cache.clear()
        cache[key] = fn
    return fn


def matches(doc, filt):
    """Does the document match the filter? Compiled filters are cached (see _cached)."""
    return _cached(_FILTER_CACHE, filt, compile_filter)(doc)


def matcher(filt):
    """The filter's predicate (doc -> bool), for many documents (see _cached)."""
    return _cached(_FILTER_CACHE, filt, compile_filter)


def get_values(doc, dotted_path):
    """Values a dotted path reaches under query traversal rules (arrays are not flattened).

    Intermediate arrays are traversed (each element document is followed, a
    numeric component also indexes the array); missing branches are omitted.
    """
    out = []
    parts = dotted_path.split(".")
    indexes = [int(p) if _is_index(p) else -1 for p in parts]

    def walk(v, i):
        if i == len(parts):
            if v is not MISSING:
                out.append(v)
            return
        if isinstance(v, dict):
            walk(as_document(v).get(parts[i], MISSING), i + 1)
        elif type(v) is DBRef:
            walk(v.as_doc(), i)
        elif type(v) is list:
            for j, e in enumerate(v):
                if isinstance(e, dict):
                    walk(e.get(parts[i], MISSING), i + 1)
                if j == indexes[i] and (i + 1 == len(parts) or isinstance(e, (dict, list))):
                    walk(e, i + 1)

    walk(doc, 0)
    return out


_PROJECTION_CACHE = {}


def compile_projection(projection):
    """Find-command projection -> callable doc -> projected doc."""
    from .projection import Projection
    return Projection(projection, find=True).apply


def project(doc, projection):
    """Apply a find() projection (inclusion/exclusion/expressions/$slice/$elemMatch)."""
    if not projection:
        return dict(doc)
    return _cached(_PROJECTION_CACHE, projection, compile_projection)(doc)
