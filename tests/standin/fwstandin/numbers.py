"""Numeric arithmetic with MongoDB's type widening (int < long < double < decimal).

Python has one int type, but BSON distinguishes int32 and int64, and the
result type of $inc, $add or $sum is observable by clients. "Kind" below is
the BSON type number: 16 int, 18 long, 1 double, 19 decimal.
"""

from decimal import Decimal, localcontext

from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64

from .compare import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, bson_type_number

INT, LONG, DOUBLE, DECIMAL = 16, 18, 1, 19
_WIDTH = {INT: 0, LONG: 1, DOUBLE: 2, DECIMAL: 3}

DECIMAL_CONTEXT = create_decimal128_context()


class Overflow(Exception):
    """An int64 result does not fit; the caller decides what MongoDB does then."""


def kind(v):
    return bson_type_number(v)


def wider(k1, k2):
    return k1 if _WIDTH[k1] >= _WIDTH[k2] else k2


def to_decimal(v):
    """Exact-enough Decimal of a number; doubles go through 15 digits as mongod does."""
    t = type(v)
    if t is Decimal128:
        return v.to_decimal()
    if t is float:
        if v != v or v in (float("inf"), float("-inf")):
            return Decimal(repr(v).replace("inf", "Infinity"))
        return Decimal(format(v, ".15g"))
    if isinstance(v, Decimal):
        return v
    return Decimal(int(v))


def make_decimal(d):
    with localcontext(DECIMAL_CONTEXT):
        return Decimal128(+d)


def make(kind_, value):
    """Box a Python number as the BSON kind (int32 stays a plain int)."""
    if kind_ == INT:
        return int(value)
    if kind_ == LONG:
        return Int64(value)
    if kind_ == DOUBLE:
        return float(value)
    return make_decimal(to_decimal(value))


def integral_result(kind_, value, on_long_overflow):
    """Box an exact integer result of int/long arithmetic, widening on overflow.

    int results that leave int32 become long (always, in both update and
    aggregation); long results that leave int64 either become double
    (aggregation) or raise Overflow (update operators).
    """
    if kind_ == INT and INT32_MIN <= value <= INT32_MAX:
        return int(value)
    if INT64_MIN <= value <= INT64_MAX:
        return Int64(value)
    if on_long_overflow == "double":
        return float(value)
    raise Overflow()


def add(a, b, on_long_overflow="double"):
    k = wider(kind(a), kind(b))
    if k in (INT, LONG):
        return integral_result(k, int(a) + int(b), on_long_overflow)
    if k == DOUBLE:
        return float(a) + float(b)
    with localcontext(DECIMAL_CONTEXT):
        return make_decimal(to_decimal(a) + to_decimal(b))


def subtract(a, b):
    k = wider(kind(a), kind(b))
    if k in (INT, LONG):
        return integral_result(k, int(a) - int(b), "double")
    if k == DOUBLE:
        return float(a) - float(b)
    with localcontext(DECIMAL_CONTEXT):
        return make_decimal(to_decimal(a) - to_decimal(b))


def multiply(a, b, on_long_overflow="double"):
    k = wider(kind(a), kind(b))
    if k in (INT, LONG):
        return integral_result(k, int(a) * int(b), on_long_overflow)
    if k == DOUBLE:
        return float(a) * float(b)
    with localcontext(DECIMAL_CONTEXT):
        return make_decimal(to_decimal(a) * to_decimal(b))


def divide(a, b):
    """a / b as double, or decimal when either side is decimal (caller checks zero)."""
    if kind(a) == DECIMAL or kind(b) == DECIMAL:
        with localcontext(DECIMAL_CONTEXT):
            return make_decimal(to_decimal(a) / to_decimal(b))
    return float(a) / float(b)


def is_zero(v):
    return to_decimal(v) == 0 if type(v) is Decimal128 else v == 0
