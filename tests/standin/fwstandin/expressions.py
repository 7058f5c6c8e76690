"""Aggregation expressions ($project/$addFields values, $expr, $group keys).

Expressions are compiled once into closures taking a variables dict
({"CURRENT": doc, "ROOT": doc, ...}) because a change stream evaluates the
same pipeline for every event; parse errors therefore surface at compile time
like mongod's, and evaluation errors per document.
"""

import contextlib
import datetime
import math
import threading

from bson.int64 import Int64
from bson.objectid import ObjectId

from . import numbers as num
from .compare import (MISSING, RANK_MINKEY, bson_type_name, canonical_rank, compare_values,
                      datetime_ms, fmt_value, is_number, num_value)
from .errors import MongoError
from .hashing import hashed_index_key, known as hashing_known


BSON_MAX_INTERNAL_SIZE = 16 * 1024 * 1024 + 16 * 1024


def located(code, msg):
    """mongod reports assertion-site codes with codeName 'Location<code>'."""
    return MongoError(code, "Location%d" % code, msg)


def _type_error(msg):
    return MongoError(14, "TypeMismatch", msg)


def truthy(v):
    """Value::coerceToBool: false, null, missing and numeric zero are false."""
    if v is None or v is MISSING or v is False:
        return False
    if is_number(v):
        return not num.is_zero(v)
    return True


def nullish(v):
    return v is None or v is MISSING


def agg_compare(a, b):
    """Full BSON order as $eq/$lt/$cmp see it; missing is below null (not equal to it)."""
    if a is MISSING or b is MISSING:
        if a is b:
            return 0
        other = b if a is MISSING else a
        r = 1 if canonical_rank(other) == RANK_MINKEY else -1
        return r if a is MISSING else -r
    return compare_values(a, b)


# ------------------------------------------------------------ field paths

def resolve_path(value, parts, i=0):
    """Field path lookup with aggregation's array rule: map over arrays, drop misses."""
    while i < len(parts):
        if isinstance(value, dict):
            value = value.get(parts[i], MISSING)
            if value is MISSING:
                return MISSING
            i += 1
        elif isinstance(value, list):
            out = []
            for e in value:
                if isinstance(e, (dict, list)):
                    r = resolve_path(e, parts, i)
                    if r is not MISSING:
                        out.append(r)
            return out
        else:
            return MISSING
    return value


def _split_field_path(path):
    parts = path.split(".")
    for p in parts:
        if p == "":
            raise located(15998, "FieldPath field names may not be empty strings.")
        if p.startswith("$"):
            raise located(16410, "FieldPath field names may not start with '$'. "
                                 "Consider using $getField or $setField.")
    return parts


def _compile_path(text, scope):
    if text.startswith("$$"):
        body = text[2:]
        name, _, rest = body.partition(".")
        if name == "":
            raise located(16869, "empty variable names are not allowed")
        if name not in scope and name not in _BUILTIN_VARS:
            raise located(17276, "Use of undefined variable: %s" % name)
        parts = _split_field_path(rest) if rest else []
        if name == "REMOVE":
            return lambda vars_: MISSING
        if name == "NOW":
            return lambda vars_: _now()
        if not parts:
            return lambda vars_: vars_.get(name, MISSING)
        return lambda vars_: resolve_path(vars_.get(name, MISSING), parts)
    if text == "$":
        raise located(16872, "'$' by itself is not a valid FieldPath")
    parts = _split_field_path(text[1:])
    if len(parts) == 1:
        key = parts[0]

        def top(vars_):
            cur = vars_["CURRENT"]
            return cur.get(key, MISSING) if isinstance(cur, dict) else MISSING
        return top
    return lambda vars_: resolve_path(vars_["CURRENT"], parts)


_BUILTIN_VARS = {"CURRENT", "ROOT", "REMOVE", "NOW", "KEEP", "PRUNE", "DESCEND"}


_operation = threading.local()


def _now():
    # $$NOW is one value for the whole operation, as in mongod: a filter's $expr and an update
    # pipeline of the same command see the same instant (operation_now below).
    fixed = getattr(_operation, "now", None)
    if fixed is not None:
        return fixed
    d = datetime.datetime.utcnow()
    return d.replace(microsecond=d.microsecond // 1000 * 1000)


@contextlib.contextmanager
def operation_now(now):
    """Within the block $$NOW is `now` (truncated to milliseconds, as a BSON date)."""
    prev = getattr(_operation, "now", None)
    _operation.now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    try:
        yield
    finally:
        _operation.now = prev


# ------------------------------------------------------------ compilation

def compile_expression(spec, scope=frozenset()):
    """Compile an expression spec into fn(vars) -> value (MISSING when absent)."""
    if isinstance(spec, str):
        if spec.startswith("$"):
            return _compile_path(spec, scope)
        return lambda vars_: spec
    if isinstance(spec, list):
        items = [compile_expression(e, scope) for e in spec]

        def array(vars_):
            out = []
            for f in items:
                v = f(vars_)
                out.append(None if v is MISSING else v)
            return out
        return array
    if isinstance(spec, dict):
        return _compile_object(spec, scope)
    return lambda vars_: spec


def _compile_object(spec, scope):
    keys = list(spec)
    if keys and keys[0].startswith("$"):
        if len(keys) != 1:
            raise located(15983, "an expression specification must contain exactly one field, "
                                 "the name of the expression. Found %d fields in %s, while "
                                 "parsing object %s" % (len(keys), fmt_value(spec),
                                                        fmt_value(spec)))
        return compile_operator(keys[0], spec[keys[0]], scope)
    fields = []
    for k in keys:
        if k.startswith("$"):
            raise located(16410, "FieldPath field names may not start with '$'. "
                                 "Consider using $getField or $setField.")
        if "." in k:
            raise located(16412, "FieldPath field names may not contain '.'. "
                                 "Consider using $getField or $setField.")
        fields.append((k, compile_expression(spec[k], scope)))

    def obj(vars_):
        out = {}
        for k, f in fields:
            v = f(vars_)
            if v is not MISSING:
                out[k] = v
        return out
    return obj


def compile_operator(name, arg, scope):
    handler = _OPERATORS.get(name)
    if handler is None:
        if name in _KNOWN_UNSUPPORTED:
            raise MongoError(238, "NotImplemented",
                             "expression %s is not supported by the flowwarden stand-in" % name)
        raise MongoError(168, "InvalidPipelineOperator", "Unrecognized expression '%s'" % name)
    return handler(name, arg, scope)


def _args(name, arg, scope, count=None, minimum=None):
    raw = arg if isinstance(arg, list) else [arg]
    if count is not None and len(raw) != count:
        raise located(16020, "Expression %s takes exactly %d arguments. %d were passed in."
                      % (name, count, len(raw)))
    if minimum is not None and len(raw) < minimum:
        raise located(16021, "Expression %s takes at least %d arguments, and %d were passed in."
                      % (name, minimum, len(raw)))
    return [compile_expression(a, scope) for a in raw]


# ------------------------------------------------------------ operators

def _op_literal(name, arg, scope):
    return lambda vars_: arg


def _comparison(test):
    def build(name, arg, scope):
        a, b = _args(name, arg, scope, count=2)
        return lambda vars_: test(agg_compare(a(vars_), b(vars_)))
    return build


def _op_cmp(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)
    return lambda vars_: agg_compare(a(vars_), b(vars_))


def _op_and(name, arg, scope):
    fs = _args(name, arg, scope)
    return lambda vars_: all(truthy(f(vars_)) for f in fs)


def _op_or(name, arg, scope):
    fs = _args(name, arg, scope)
    return lambda vars_: any(truthy(f(vars_)) for f in fs)


def _op_not(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)
    return lambda vars_: not truthy(f(vars_))


def _op_cond(name, arg, scope):
    if isinstance(arg, dict):
        for k in arg:
            if k not in ("if", "then", "else"):
                raise located(17083, "Unrecognized parameter to $cond: %s" % k)
        for k, code in (("if", 17080), ("then", 17081), ("else", 17082)):
            if k not in arg:
                raise located(code, "Missing '%s' parameter to $cond" % k)
        c, t, e = (compile_expression(arg[k], scope) for k in ("if", "then", "else"))
    else:
        c, t, e = _args(name, arg, scope, count=3)
    return lambda vars_: t(vars_) if truthy(c(vars_)) else e(vars_)


def _op_if_null(name, arg, scope):
    fs = _args(name, arg, scope)
    if len(fs) < 2:
        raise located(1257300, "$ifNull needs at least two arguments, had: %d" % len(fs))

    def if_null(vars_):
        for f in fs[:-1]:
            v = f(vars_)
            if not nullish(v):
                return v
        return fs[-1](vars_)
    return if_null


def _numeric_args(name, values, allow_date=False):
    for v in values:
        if not (is_number(v) or (allow_date and isinstance(v, datetime.datetime))):
            if name == "$add":
                raise _type_error("$add only supports numeric or date types, not %s"
                                  % bson_type_name(v))
            raise _type_error("%s only supports numeric types, not %s"
                              % (name, bson_type_name(v)))


def _op_add(name, arg, scope):
    fs = _args(name, arg, scope)

    def add(vars_):
        values = [f(vars_) for f in fs]
        if any(nullish(v) for v in values):
            return None
        _numeric_args(name, values, allow_date=True)
        dates = [v for v in values if isinstance(v, datetime.datetime)]
        if len(dates) > 1:
            raise located(16612, "only one date allowed in an $add expression")
        total = 0
        for v in values:
            if not isinstance(v, datetime.datetime):
                total = num.add(total, v)
        if dates:
            ms = round(float(num_value(total))) if not isinstance(total, int) else total
            return dates[0] + datetime.timedelta(milliseconds=int(ms))
        return total
    return add


def _op_subtract(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)

    def subtract(vars_):
        x, y = a(vars_), b(vars_)
        if nullish(x) or nullish(y):
            return None
        if isinstance(x, datetime.datetime):
            if isinstance(y, datetime.datetime):
                return num.make(num.LONG, datetime_ms(x) - datetime_ms(y))
            if is_number(y):
                return x - datetime.timedelta(milliseconds=int(round(float(num_value(y)))))
        elif is_number(x) and is_number(y):
            return num.subtract(x, y)
        raise _type_error("can't $subtract %s from %s" % (bson_type_name(y), bson_type_name(x)))
    return subtract


def _op_multiply(name, arg, scope):
    fs = _args(name, arg, scope)

    def multiply(vars_):
        values = [f(vars_) for f in fs]
        if any(nullish(v) for v in values):
            return None
        _numeric_args(name, values)
        total = 1
        for v in values:
            total = num.multiply(total, v)
        return total
    return multiply


def _op_divide(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)

    def divide(vars_):
        x, y = a(vars_), b(vars_)
        if nullish(x) or nullish(y):
            return None
        if not (is_number(x) and is_number(y)):
            raise _type_error("$divide only supports numeric types, not %s and %s"
                              % (bson_type_name(x), bson_type_name(y)))
        if num.is_zero(y):
            raise MongoError(2, "BadValue", "can't $divide by zero")
        return num.divide(x, y)
    return divide


def _op_mod(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)

    def mod(vars_):
        x, y = a(vars_), b(vars_)
        if nullish(x) or nullish(y):
            return None
        if not (is_number(x) and is_number(y)):
            raise _type_error("$mod only supports numeric types, not %s and %s"
                              % (bson_type_name(x), bson_type_name(y)))
        if num.is_zero(y):
            raise located(16610, "can't $mod by zero")
        k = num.wider(num.kind(x), num.kind(y))
        if k in (num.INT, num.LONG):
            xi, yi = int(x), int(y)
            r = abs(xi) % abs(yi)
            return num.make(k, -r if xi < 0 else r)
        if k == num.DOUBLE:
            return math.fmod(float(x), float(y))
        dx, dy = num.to_decimal(x), num.to_decimal(y)
        return num.make_decimal(dx % dy)
    return mod


def _op_abs(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)

    def abs_(vars_):
        v = f(vars_)
        if nullish(v):
            return None
        _numeric_args(name, [v])
        k = num.kind(v)
        if k == num.DECIMAL:
            return num.make_decimal(abs(v.to_decimal()))
        if k == num.DOUBLE:
            return abs(v)
        return num.integral_result(k, abs(int(v)), "double")
    return abs_


def _op_to_hashed_index_key(name, arg, scope):
    """$toHashedIndexKey (7.0+): the value's hashed-index key as a long; missing hashes as null."""
    if not hashing_known():
        raise MongoError(168, "InvalidPipelineOperator", "Unrecognized expression '%s'" % name)
    (f,) = _args(name, arg, scope, count=1)
    return lambda vars_: Int64(hashed_index_key(f(vars_)))


def _op_concat(name, arg, scope):
    fs = _args(name, arg, scope)

    def concat(vars_):
        out = []
        for f in fs:
            v = f(vars_)
            if nullish(v):
                return None
            if not isinstance(v, str):
                raise located(16702, "$concat only supports strings, not %s" % bson_type_name(v))
            out.append(v)
        return "".join(out)
    return concat


def _op_substr_bytes(name, arg, scope):
    """$substrBytes: [string, start, length] in UTF-8 bytes (expression_string's
    ExpressionSubstrBytes): null gives "", a start past the end "", a negative length the rest;
    a cut inside a character is an error."""
    fs = _args(name, arg, scope, count=3)

    def substr(vars_):
        v, lo, n = (f(vars_) for f in fs)
        if not is_number(lo):
            raise located(16034, "%s: starting index must be a numeric type (is BSON type %s)"
                          % (name, bson_type_name(lo)))
        if not is_number(n):
            raise located(16035, "%s: length must be a numeric type (is BSON type %s)"
                          % (name, bson_type_name(n)))
        if lo < 0:
            raise located(50752, "%s: starting index must be non-negative (got: %d)"
                          % (name, int(lo)))
        raw = b"" if nullish(v) else to_string(v, name).encode("utf-8")
        lo, n = int(lo), int(n)
        if lo >= len(raw):
            return ""
        hi = len(raw) if n < 0 else min(len(raw), lo + n)
        if raw[lo] & 0xC0 == 0x80:
            raise located(28656, "%s:  Invalid range, starting index is a UTF-8 continuation byte."
                          % name)
        if hi < len(raw) and raw[hi] & 0xC0 == 0x80:
            raise located(28657, "%s:  Invalid range, ending index is in the middle of a UTF-8 "
                          "character." % name)
        return raw[lo:hi].decode("utf-8")
    return substr


def to_string(v, name):
    """String conversion used by $toUpper/$toLower/$toString."""
    if isinstance(v, str):
        return v
    if is_number(v):
        k = num.kind(v)
        if k == num.DOUBLE:
            return "%d" % v if v == int(v) and abs(v) < 1e15 else repr(v)
        return str(v) if k == num.DECIMAL else str(int(v))
    if isinstance(v, datetime.datetime):
        ms = datetime_ms(v)
        d = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)
        return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)
    if isinstance(v, ObjectId):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    raise located(16007, "can't convert from BSON type %s to String" % bson_type_name(v))


def _case_op(convert):
    def build(name, arg, scope):
        (f,) = _args(name, arg, scope, count=1)

        def case(vars_):
            v = f(vars_)
            if nullish(v):
                return ""
            return convert(to_string(v, name))
        return case
    return build


def _op_to_string(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)

    def to_str(vars_):
        v = f(vars_)
        return None if nullish(v) else to_string(v, name)
    return to_str


def _op_str_len_cp(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)

    def strlen(vars_):
        v = f(vars_)
        if not isinstance(v, str):
            raise located(34471, "$strLenCP requires a string argument, found: %s"
                          % bson_type_name(v))
        return len(v)
    return strlen


def _op_size(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)

    def size(vars_):
        v = f(vars_)
        if not isinstance(v, list):
            raise located(17124, "The argument to $size must be an array, but was of type: %s"
                          % bson_type_name(v))
        return len(v)
    return size


def _op_bson_size(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)

    def bson_size(vars_):
        from . import bsonutil
        v = f(vars_)
        if v is None or v is MISSING:
            return None
        if not isinstance(v, dict):
            raise located(31393, "$bsonSize requires a document input, found: %s"
                          % bson_type_name(v))
        size = len(bsonutil.encode(v))
        # ExpressionBsonSize::evaluate builds the BSON with the default size limit
        # (BSONObjMaxInternalSize, 16 MiB + 16 KiB): a larger document fails there.
        if size > BSON_MAX_INTERNAL_SIZE:
            raise MongoError(10334, "BSONObjectTooLarge",
                             "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and "
                             "16793600(16MB)" % (size, size))
        return size
    return bson_size


def _op_is_array(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)
    return lambda vars_: isinstance(f(vars_), list)


def _op_array_elem_at(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)

    def elem_at(vars_):
        arr, idx = a(vars_), b(vars_)
        if nullish(arr) or nullish(idx):
            return None
        if not isinstance(arr, list):
            raise located(28689, "$arrayElemAt's first argument must be an array, but is %s"
                          % bson_type_name(arr))
        if not is_number(idx):
            raise located(28690, "$arrayElemAt's second argument must be a numeric value, "
                                 "but is %s" % bson_type_name(idx))
        n = num_value(idx)
        if n != int(n) or not (-2 ** 31 <= int(n) < 2 ** 31):
            raise located(28691, "$arrayElemAt's second argument must be representable as "
                                 "a 32-bit integer: %s" % fmt_value(idx))
        n = int(n)
        if n < 0:
            n += len(arr)
        return arr[n] if 0 <= n < len(arr) else MISSING
    return elem_at


def _op_in(name, arg, scope):
    a, b = _args(name, arg, scope, count=2)

    def in_(vars_):
        v, arr = a(vars_), b(vars_)
        if not isinstance(arr, list):
            raise located(40081, "$in requires an array as a second argument, found: %s"
                          % bson_type_name(arr))
        return any(agg_compare(v, e) == 0 for e in arr)
    return in_


def _op_type(name, arg, scope):
    (f,) = _args(name, arg, scope, count=1)
    return lambda vars_: bson_type_name(f(vars_))


def _op_concat_arrays(name, arg, scope):
    fs = _args(name, arg, scope)

    def concat_arrays(vars_):
        out = []
        for f in fs:
            v = f(vars_)
            if nullish(v):
                return None
            if not isinstance(v, list):
                raise located(28664, "$concatArrays only supports arrays, not %s"
                              % bson_type_name(v))
            out.extend(v)
        return out
    return concat_arrays


def _op_merge_objects(name, arg, scope):
    fs = _args(name, arg, scope)

    def merge(vars_):
        out = {}
        for f in fs:
            v = f(vars_)
            if nullish(v):
                continue
            if not isinstance(v, dict):
                raise located(40400, "$mergeObjects requires object inputs, but input %s is of "
                                     "type %s" % (fmt_value(v), bson_type_name(v)))
            out.update(v)
        return out
    return merge


def _accumulator_expr(reduce_fn):
    """$sum/$avg/$min/$max as expressions: one array argument or several operands."""
    def build(name, arg, scope):
        fs = _args(name, arg, scope)

        def evaluate(vars_):
            if len(fs) == 1:
                v = fs[0](vars_)
                values = v if isinstance(v, list) else [v]
            else:
                values = [f(vars_) for f in fs]
            return reduce_fn(values)
        return evaluate
    return build


def sum_values(values):
    total = 0
    for v in values:
        if is_number(v):
            total = num.add(total, v)
    return total


def avg_values(values):
    nums = [v for v in values if is_number(v)]
    if not nums:
        return None
    total = sum_values(nums)
    if num.kind(total) == num.DECIMAL:
        return num.divide(total, num.make(num.DECIMAL, len(nums)))
    return float(num_value(total)) / len(nums)


def extreme_value(values, sign):
    best = MISSING
    for v in values:
        if nullish(v):
            continue
        if best is MISSING or compare_values(v, best) * sign > 0:
            best = v
    return None if best is MISSING else best


_BINDING_CODES = {
    # name: (not an object, unrecognized parameter, {missing parameter: code})
    "$let": (16874, 16875, {"vars": 16876, "in": 16877}),
    "$map": (16878, 16879, {"input": 16880, "in": 16882}),
    "$filter": (28646, 28647, {"input": 28648, "cond": 28650}),
}


def _bind_object(name, arg, allowed, required):
    not_object, unknown, missing = _BINDING_CODES[name]
    if not isinstance(arg, dict):
        raise located(not_object, "%s only supports an object as its argument" % name)
    for k in arg:
        if k not in allowed:
            raise located(unknown, "Unrecognized parameter to %s: %s" % (name, k))
    for k in required:
        if k not in arg:
            raise located(missing[k], "Missing '%s' parameter to %s" % (k, name))


def _var_name(name):
    """User variable names start with a lowercase letter (or non-ASCII), as mongod requires."""
    if not isinstance(name, str) or not name or not (name[0].islower() or ord(name[0]) > 127):
        raise located(16867, "'%s' starts with an invalid character for a user variable name"
                      % (name,))
    for c in name:
        if not (c.isalnum() or c == "_" or ord(c) > 127):
            raise located(16868, "'%s' contains an invalid character for a variable name: '%s'"
                          % (name, c))
    return name


def _op_let(name, arg, scope):
    _bind_object(name, arg, ("vars", "in"), ("vars", "in"))
    if not isinstance(arg["vars"], dict):
        raise located(10065, "invalid parameter: expected an object (vars)")
    bindings = [(_var_name(k), compile_expression(v, scope)) for k, v in arg["vars"].items()]
    inner = compile_expression(arg["in"], scope | {k for k, _ in bindings})

    def let(vars_):
        local = dict(vars_)
        for k, f in bindings:
            local[k] = f(vars_)
        return inner(local)
    return let


def _iteration(name, arg, scope, body_key):
    allowed = ("input", "as", body_key) + (("limit",) if name == "$filter" else ())
    _bind_object(name, arg, allowed, ("input", body_key))
    var = _var_name(arg.get("as", "this"))
    source = compile_expression(arg["input"], scope)
    body = compile_expression(arg[body_key], scope | {var})
    return var, source, body


def _op_map(name, arg, scope):
    var, source, body = _iteration(name, arg, scope, "in")

    def map_(vars_):
        arr = source(vars_)
        if nullish(arr):
            return None
        if not isinstance(arr, list):
            raise located(16883, "input to $map must be an array not %s" % bson_type_name(arr))
        out = []
        for e in arr:
            local = dict(vars_)
            local[var] = e
            v = body(local)
            out.append(None if v is MISSING else v)
        return out
    return map_


def _op_filter(name, arg, scope):
    var, source, body = _iteration(name, arg, scope, "cond")
    limit = compile_expression(arg["limit"], scope) if "limit" in arg else None

    def filter_(vars_):
        arr = source(vars_)
        if nullish(arr):
            return None
        if not isinstance(arr, list):
            raise located(28651, "input to $filter must be an array not %s"
                          % bson_type_name(arr))
        cap = None
        if limit is not None:
            cap = limit(vars_)
            if not nullish(cap):
                if not is_number(cap) or num_value(cap) != int(num_value(cap)) \
                        or num_value(cap) < 1:
                    raise located(327391, "$filter: limit must be greater than 0: %s"
                                  % fmt_value(cap))
                cap = int(num_value(cap))
            else:
                cap = None
        out = []
        for e in arr:
            local = dict(vars_)
            local[var] = e
            if truthy(body(local)):
                out.append(e)
                if cap is not None and len(out) >= cap:
                    break
        return out
    return filter_


_OPERATORS = {
    "$literal": _op_literal,
    "$eq": _comparison(lambda c: c == 0), "$ne": _comparison(lambda c: c != 0),
    "$gt": _comparison(lambda c: c > 0), "$gte": _comparison(lambda c: c >= 0),
    "$lt": _comparison(lambda c: c < 0), "$lte": _comparison(lambda c: c <= 0),
    "$cmp": _op_cmp,
    "$and": _op_and, "$or": _op_or, "$not": _op_not,
    "$cond": _op_cond, "$ifNull": _op_if_null,
    "$add": _op_add, "$subtract": _op_subtract, "$multiply": _op_multiply,
    "$divide": _op_divide, "$mod": _op_mod, "$abs": _op_abs,
    "$toHashedIndexKey": _op_to_hashed_index_key,
    "$concat": _op_concat, "$substrBytes": _op_substr_bytes, "$toUpper": _case_op(str.upper), "$toLower": _case_op(str.lower),
    "$toString": _op_to_string, "$strLenCP": _op_str_len_cp,
    "$size": _op_size, "$bsonSize": _op_bson_size, "$isArray": _op_is_array, "$arrayElemAt": _op_array_elem_at,
    "$in": _op_in, "$type": _op_type, "$concatArrays": _op_concat_arrays,
    "$mergeObjects": _op_merge_objects,
    "$sum": _accumulator_expr(sum_values), "$avg": _accumulator_expr(avg_values),
    "$max": _accumulator_expr(lambda vs: extreme_value(vs, 1)),
    "$min": _accumulator_expr(lambda vs: extreme_value(vs, -1)),
    "$let": _op_let, "$map": _op_map, "$filter": _op_filter,
}

# Real MongoDB operators this stand-in does not implement: reported as
# NotImplemented rather than "Unrecognized", which would be a lie.
_KNOWN_UNSUPPORTED = {
    "$acos", "$acosh", "$allElementsTrue", "$anyElementTrue", "$arrayToObject", "$asin",
    "$asinh", "$atan", "$atan2", "$atanh", "$binarySize", "$ceil", "$convert",
    "$cos", "$cosh", "$dateAdd", "$dateDiff", "$dateFromParts", "$dateFromString",
    "$dateSubtract", "$dateToParts", "$dateToString", "$dateTrunc", "$dayOfMonth",
    "$dayOfWeek", "$dayOfYear", "$degreesToRadians", "$exp", "$first", "$floor",
    "$function", "$getField", "$hour", "$indexOfArray", "$indexOfBytes", "$indexOfCP",
    "$isNumber", "$isoDayOfWeek", "$isoWeek", "$isoWeekYear", "$last", "$ln", "$log",
    "$log10", "$ltrim", "$meta", "$millisecond", "$minute", "$month", "$objectToArray",
    "$pow", "$radiansToDegrees", "$rand", "$range", "$reduce", "$regexFind",
    "$regexFindAll", "$regexMatch", "$replaceAll", "$replaceOne", "$reverseArray",
    "$round", "$rtrim", "$sampleRate", "$second", "$setDifference", "$setEquals",
    "$setField", "$setIntersection", "$setIsSubset", "$setUnion", "$sin", "$sinh",
    "$slice", "$sortArray", "$split", "$sqrt", "$stdDevPop", "$stdDevSamp", "$strcasecmp",
    "$strLenBytes", "$substr", "$substrCP", "$switch", "$tan", "$tanh",
    "$toBool", "$toDate", "$toDecimal", "$toDouble", "$toInt", "$toLong", "$toObjectId",
    "$trim", "$trunc", "$tsIncrement", "$tsSecond", "$unsetField", "$week", "$year", "$zip",
    "$firstN", "$lastN", "$maxN", "$minN", "$top", "$topN", "$bottom", "$bottomN",
    "$median", "$percentile", "$bitAnd", "$bitOr", "$bitXor", "$bitNot",
}


def root_vars(doc):
    """The variables an expression sees at the top of a pipeline stage."""
    return {"CURRENT": doc, "ROOT": doc}


def evaluate(spec, doc):
    """One-shot convenience: compile and evaluate against a document."""
    return compile_expression(spec)(root_vars(doc))
