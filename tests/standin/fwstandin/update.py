"""Update documents: operator updates, replacements and upsert seeds.

apply_update() mirrors mongod's update tree: all paths are parsed and
checked for conflicts first, then applied in path order (lexicographic, with
numeric components compared as numbers - MongoDB 5.0+), and every real change
is logged the way the $v:2 oplog diff records it so the change event's
updateDescription comes out as mongod 6.0 reports it:

* an existing field that changes is reported at its full dotted path;
* a field created under missing parents is reported at the first missing
  component, with the whole new subtree as its value;
* $push that only appends reports each new element ("tags.2"); other array
  operators report the whole array; truncatedArrays stays empty (only
  pipeline updates produce it: apply_pipeline_update, element by element).

The input document is never mutated: containers on modified paths are copied
on first touch (copy-on-write), everything else is shared.
"""

import copy
import datetime
from functools import cmp_to_key

from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from . import numbers as num
from .compare import (MISSING, bson_type_name, compare_values, datetime_ms, fmt_element,
                      fmt_value, identical, is_number, num_value, sort_key, values_equal)
from .errors import MongoError, bad_value, failed_to_parse, type_mismatch

_OPERATORS = ("$set", "$unset", "$inc", "$mul", "$push", "$pull", "$pullAll", "$addToSet",
              "$pop", "$setOnInsert", "$min", "$max", "$rename", "$currentDate")
# Operators that set a whole value and so take the "Updating the path ... to"
# immutable-field message (mongod's canSetObjectValue()).
_SETS_OBJECT = ("$set", "$setOnInsert", "$min", "$max", "$rename")


def _unknown_modifier(name):
    return failed_to_parse("Unknown modifier: %s. Expected a valid update modifier or "
                           "pipeline-style update specified as an array" % name)


def _path_not_viable(field, container_name, container):
    return MongoError(28, "PathNotViable", "Cannot create field '%s' in element {%s}"
                      % (field, fmt_element(container_name, container)))


def _is_index(part):
    return part.isdigit() and (part == "0" or part[0] != "0")


def is_replacement(update):
    """True for a replacement document, False for an operator update.

    The first key decides, as in mongod; a later key of the other kind is an
    error. Pipeline-style (array) updates go to check_pipeline_update instead.
    """
    if isinstance(update, list):
        raise MongoError(238, "NotImplemented",
                         "a pipeline-style update goes through check_pipeline_update")
    if not isinstance(update, dict):
        raise failed_to_parse("Update argument must be either an object or an array")
    keys = list(update)
    if not keys:
        return True
    if keys[0].startswith("$"):
        for k in keys:
            if not k.startswith("$"):
                raise _unknown_modifier(k)
        return False
    for k in keys:
        if k.startswith("$"):
            raise _dollar_in_replacement(k)
    return True


def _dollar_in_replacement(k):
    return MongoError(52, "DollarPrefixedFieldName",
                      "The dollar ($) prefixed field '%s' in '%s' is not allowed in the context "
                      "of an update's replacement document. Consider using an aggregation "
                      "pipeline with $replaceWith." % (k, k))


# ------------------------------------------------------------ parsing

def _split_update_path(path):
    if path == "":
        raise MongoError(56, "EmptyFieldName", "An empty update path is not valid.")
    parts = path.split(".")
    for p in parts:
        if p == "":
            raise MongoError(56, "EmptyFieldName", "The update path '%s' contains an empty "
                                                   "field name, which is not allowed." % path)
        if p == "$" or (p.startswith("$[") and p.endswith("]")):
            raise MongoError(238, "NotImplemented", "positional update operators ('%s') are not "
                             "supported by the flowwarden stand-in" % path)
        if p.startswith("$"):
            raise MongoError(52, "DollarPrefixedFieldName",
                             "The dollar ($) prefixed field '%s' in '%s' is not allowed in the "
                             "context of an update's replacement document. Consider using an "
                             "aggregation pipeline with $replaceWith." % (p, path))
    return parts


# Values no update changes in place: copy_value sets them as they are.
_IMMUTABLE = (str, int, float, bytes, type(None), datetime.datetime, ObjectId, Timestamp,
              Decimal128)


def copy_value(v):
    """A copy of an update's value, as copy.deepcopy makes it: new dicts and lists, the
    immutable values themselves (deepcopy takes an Int64 or an ObjectId through copy's
    reduce protocol: most of a checkpoint write's $set)."""
    t = type(v)
    if t is dict:
        return {k: copy_value(x) for k, x in v.items()}
    if t is list:
        return [copy_value(x) for x in v]
    if isinstance(v, _IMMUTABLE):
        return v
    return copy.deepcopy(v)


class _ConflictTree:
    """Registered update paths; a path equal to or prefixing another conflicts (code 40)."""

    def __init__(self):
        self.root = {}

    def add(self, parts):
        node = self.root
        for i, p in enumerate(parts):
            child = node.get(p)
            last = i == len(parts) - 1
            if child is not None and (child is True or last):
                raise MongoError(40, "ConflictingUpdateOperators",
                                 "Updating the path '%s' would create a conflict at '%s'"
                                 % (".".join(parts), ".".join(parts[:i + 1])))
            if last:
                node[p] = True
            else:
                node = node.setdefault(p, {})


def _parse_push(arg):
    """(values, position, sort, slice) for $push, validated like mongod's PushNode."""
    if not (isinstance(arg, dict) and type(arg) is not DBRef and "$each" in arg):
        return [arg], None, None, None
    clauses = {}
    for name, value in arg.items():
        if name not in ("$each", "$slice", "$sort", "$position"):
            raise bad_value("Unrecognized clause in $push: %s" % name)
        clauses[name] = value
    each = clauses["$each"]
    if not isinstance(each, list):
        raise bad_value("The argument to $each in $push must be an array but it was of type: %s"
                        % bson_type_name(each))
    position = sort = slice_ = None
    if "$slice" in clauses:
        slice_ = _integer_clause(clauses["$slice"], "The value for $slice must be an integer "
                                 "value but was given type: %s")
    if "$sort" in clauses:
        sort = _parse_push_sort(clauses["$sort"])
    if "$position" in clauses:
        position = _integer_clause(clauses["$position"], "The value for $position must be an "
                                   "integer value, not of type: %s")
    return list(each), position, sort, slice_


def _integer_clause(v, msg):
    if not is_number(v) or num_value(v) != int(num_value(v)):
        raise bad_value(msg % bson_type_name(v))
    return int(num_value(v))


def _parse_push_sort(spec):
    if isinstance(spec, dict):
        if not spec:
            raise bad_value("The $sort pattern is empty when it should be a set of fields.")
        fields = []
        for path, direction in spec.items():
            if not is_number(direction) or num_value(direction) not in (1, -1):
                raise bad_value("The $sort element value must be either 1 or -1")
            if path == "" or "" in path.split("."):
                raise bad_value("The $sort field is a dotted field but has an empty part: %s"
                                % path)
            fields.append((path.split("."), int(num_value(direction))))
        return fields
    if is_number(spec):
        if num_value(spec) not in (1, -1):
            raise bad_value("The $sort element value must be either 1 or -1")
        return int(num_value(spec))
    raise bad_value("The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} "
                    "to sort embedded fields")


def _parse_argument(op, path, arg):
    """Validate an operator's argument at parse time, returning its prepared form."""
    if op in ("$inc", "$mul"):
        if not is_number(arg):
            verb = "increment" if op == "$inc" else "multiply"
            raise type_mismatch("Cannot %s with non-numeric argument: {%s}"
                                % (verb, fmt_element(path, arg)))
        return arg
    if op == "$push":
        return _parse_push(arg)
    if op == "$addToSet":
        if isinstance(arg, dict) and type(arg) is not DBRef and next(iter(arg), None) == "$each":
            each = arg["$each"]
            if not isinstance(each, list):
                raise type_mismatch("The argument to $each in $addToSet must be an array but it "
                                    "was of type %s" % bson_type_name(each))
            if len(arg) > 1:
                raise bad_value("Found unexpected fields after $each in $addToSet: %s"
                                % fmt_value(arg))
            values = each
        else:
            values = [arg]
        deduped = []
        for v in values:
            if not any(values_equal(v, d) for d in deduped):
                deduped.append(v)
        return deduped
    if op == "$pullAll":
        if not isinstance(arg, list):
            raise bad_value("$pullAll requires an array argument but was given a %s"
                            % bson_type_name(arg))
        return arg
    if op == "$pull":
        return _pull_matcher(arg)
    if op == "$pop":
        if not is_number(arg):
            raise failed_to_parse("Expected a number in: %s" % fmt_element(path, arg))
        if num_value(arg) not in (1, -1):
            raise failed_to_parse("$pop expects 1 or -1, found: %s" % fmt_value(arg))
        return int(num_value(arg))
    if op == "$currentDate":
        if isinstance(arg, bool):
            return "date"
        if isinstance(arg, dict) and type(arg) is not DBRef:
            if list(arg) != ["$type"] or arg["$type"] not in ("date", "timestamp"):
                raise bad_value("The '$type' string field is required to be 'date' or "
                                "'timestamp': {$currentDate: {field : {$type: 'date'}}}")
            return arg["$type"]
        raise bad_value("%s is not valid type for $currentDate. Please use a boolean ('true') "
                        "or a $type expression ({$type: 'timestamp/date'})."
                        % bson_type_name(arg))
    if op == "$rename":
        if not isinstance(arg, str):
            raise bad_value("The 'to' field for $rename must be a string: %s"
                            % fmt_element(path, arg))
        if arg == path:
            raise bad_value("The source and target field for $rename must differ: %s"
                            % fmt_element(path, arg))
        if arg.startswith(path + ".") or path.startswith(arg + "."):
            raise bad_value("The source and target field for $rename must not be on the same "
                            "path: %s" % fmt_element(path, arg))
        return _split_update_path(arg)
    return arg


def _pull_matcher(arg):
    """Element predicate for $pull: a query for documents/operators, else equality."""
    from .query import compile_filter
    if isinstance(arg, dict) and type(arg) is not DBRef:
        first = next(iter(arg), None)
        if first is not None and first.startswith("$") and first not in ("$and", "$or",
                                                                          "$nor", "$expr"):
            wrapped = compile_filter({"x": arg})
            return lambda e: wrapped({"x": e})
        sub = compile_filter(arg)
        return lambda e: isinstance(e, dict) and sub(e)
    return lambda e: values_equal(e, arg)


def _compare_paths(a, b):
    """mongod 5.0+ order of update paths: field names lexicographic, array indexes numeric."""
    for x, y in zip(a[0], b[0]):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        return -1 if x < y else 1
    return len(a[0]) - len(b[0])


def parse_update(update):
    """Validate an operator update; returns [(parts, op, prepared argument)] in apply order."""
    if is_replacement(update):
        raise failed_to_parse("Update document requires atomic operators")
    conflicts = _ConflictTree()
    ops = []
    for op, operand in update.items():
        if op not in _OPERATORS:
            if op == "$bit":
                raise MongoError(238, "NotImplemented",
                                 "$bit is not supported by the flowwarden stand-in")
            raise _unknown_modifier(op)
        if not isinstance(operand, dict) or type(operand) is DBRef:
            raise failed_to_parse("Modifiers operate on fields but we found type %s instead. "
                                  "For example: {$mod: {<field>: ...}} not {%s}"
                                  % (bson_type_name(operand), fmt_element(op, operand)))
        for path, arg in operand.items():
            parts = _split_update_path(path)
            prepared = _parse_argument(op, path, arg)
            if op == "$rename":
                conflicts.add(parts)
                conflicts.add(prepared)
                ops.append((prepared, op, parts))    # applied at the destination
            else:
                conflicts.add(parts)
                ops.append((parts, op, prepared))
    ops.sort(key=cmp_to_key(_compare_paths))
    return ops


# ------------------------------------------------------------ applying

class _Location:
    """Where a path lands: container + key of the deepest existing parent.

    If `depth` < len(parts) - 1, parts[depth] is missing and everything
    below it must be created. `blocked` is set when a scalar (or an array
    with a non-numeric key) stands in the way.
    """

    __slots__ = ("container", "key", "value", "depth", "blocked", "through_array",
                 "parent_name")

    def __init__(self):
        self.value = MISSING
        self.blocked = False
        self.through_array = False


class _Updater:
    def __init__(self, doc, is_upsert_insert, now):
        self.doc = dict(doc)
        self.owned = {id(self.doc)}
        self.is_upsert_insert = is_upsert_insert
        self.now = now
        self.updated = {}    # dotted path -> parts (values read at the end)
        self.removed = []
        self.id_immutable = "_id" in doc

    # -- navigation -----------------------------------------------------

    def _own(self, parent, key, child):
        if id(child) in self.owned:
            return child
        child = dict(child) if isinstance(child, dict) else list(child)
        self.owned.add(id(child))
        parent[int(key) if isinstance(parent, list) else key] = child
        return child

    def _locate(self, parts):
        loc = _Location()
        cur, name = self.doc, None
        for i, part in enumerate(parts):
            if isinstance(cur, dict):
                child = cur.get(part, MISSING)
            elif isinstance(cur, list):
                loc.through_array = True
                if not _is_index(part):
                    loc.blocked = True
                    loc.container, loc.key, loc.depth, loc.parent_name = cur, part, i, name
                    return loc
                idx = int(part)
                child = cur[idx] if idx < len(cur) else MISSING
            else:
                loc.blocked = True
                loc.container, loc.key, loc.depth, loc.parent_name = cur, part, i, name
                return loc
            if child is MISSING or i == len(parts) - 1:
                loc.container, loc.key, loc.value, loc.depth = cur, part, child, i
                loc.parent_name = name
                return loc
            if isinstance(child, (dict, list)) and type(child) is not DBRef:
                cur = self._own(cur, part, child)
            else:
                cur = child
            name = part
        raise AssertionError("unreachable")

    def _put(self, container, key, value):
        if isinstance(container, list):
            idx = int(key)
            if idx >= len(container):
                container.extend([None] * (idx + 1 - len(container)))
            container[idx] = value
        else:
            container[key] = value

    # -- change bookkeeping ---------------------------------------------

    def _check_id(self, op, parts, value, created):
        if parts[0] != "_id" or not self.id_immutable:
            return
        path = ".".join(parts)
        if op in _SETS_OBJECT and (len(parts) == 1 or created):
            raise MongoError(66, "ImmutableField", "Updating the path '%s' to %s would modify "
                             "the immutable field '_id'" % (path, fmt_element(parts[-1], value)))
        raise MongoError(66, "ImmutableField", "Performing an update on the path '%s' would "
                         "modify the immutable field '_id'" % path)

    def _log_update(self, parts):
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) in self.updated:
                return
        self.updated[".".join(parts)] = parts

    def set_value(self, op, parts, value, loc=None):
        """Set parts to value (creating parents); logs unless it is a binary no-op."""
        loc = loc or self._locate(parts)
        if loc.blocked:
            raise _path_not_viable(loc.key, loc.parent_name, loc.container)
        created = loc.depth < len(parts) - 1 or loc.value is MISSING
        if not created and identical(loc.value, value):
            return
        self._check_id(op, parts, value, created)
        if loc.depth < len(parts) - 1:
            for part in reversed(parts[loc.depth + 1:]):
                value = {part: value}
        self._put(loc.container, loc.key, value)
        self._log_update(parts[:loc.depth + 1])

    # -- operators --------------------------------------------------------

    def apply(self, parts, op, arg):
        getattr(self, "op_" + op[1:])(parts, op, arg)

    def op_set(self, parts, op, arg):
        self.set_value(op, parts, copy_value(arg))

    def op_setOnInsert(self, parts, op, arg):
        if self.is_upsert_insert:
            self.set_value(op, parts, copy_value(arg))

    def op_unset(self, parts, op, arg):
        loc = self._locate(parts)
        if loc.blocked or loc.depth < len(parts) - 1 or loc.value is MISSING:
            return
        self._check_id(op, parts, None, False)
        if isinstance(loc.container, list):
            if loc.value is None:
                return
            loc.container[int(loc.key)] = None
            self._log_update(parts)
        else:
            del loc.container[loc.key]
            self.removed.append(".".join(parts))

    def _arith(self, parts, op, arg):
        loc = self._locate(parts)
        current = MISSING if loc.blocked or loc.depth < len(parts) - 1 else loc.value
        if current is MISSING:
            value = arg if op == "$inc" else num.make(num.kind(arg), 0)
            return self.set_value(op, parts, value, loc)
        if not is_number(current):
            raise type_mismatch("Cannot apply %s to a value of non-numeric type. {%s} has the "
                                "field '%s' of non-numeric type %s"
                                % (op, self._id_text(), parts[-1], bson_type_name(current)))
        try:
            if op == "$inc":
                value = num.add(current, arg, on_long_overflow="error")
            else:
                value = num.multiply(current, arg, on_long_overflow="error")
        except num.Overflow:
            raise bad_value("Failed to apply %s operations to current value ((NumberLong)%d) "
                            "for document {%s}" % (op, int(current), self._id_text()))
        self.set_value(op, parts, value, loc)

    op_inc = op_mul = _arith

    def _id_text(self):
        return fmt_element("_id", self.doc["_id"]) if "_id" in self.doc else "no id"

    def _compare_set(self, parts, op, arg):
        loc = self._locate(parts)
        current = MISSING if loc.blocked or loc.depth < len(parts) - 1 else loc.value
        if current is not MISSING:
            c = compare_values(arg, current)
            if (op == "$min" and c >= 0) or (op == "$max" and c <= 0):
                return
        self.set_value(op, parts, copy.deepcopy(arg), loc)

    op_min = op_max = _compare_set

    def op_currentDate(self, parts, op, kind):
        now = self.now or datetime.datetime.utcnow()
        if kind == "timestamp":
            value = Timestamp(datetime_ms(now) // 1000, 1)
        else:
            value = now.replace(microsecond=now.microsecond // 1000 * 1000)
        self.set_value(op, parts, value)

    def _existing_array(self, parts):
        loc = self._locate(parts)
        if loc.blocked or loc.depth < len(parts) - 1 or loc.value is MISSING:
            return loc, MISSING
        return loc, loc.value

    def op_push(self, parts, op, prepared):
        values, position, sort, slice_ = prepared
        loc, current = self._existing_array(parts)
        if current is MISSING:
            new, _ = _perform_push([], copy.deepcopy(values), position, sort, slice_)
            return self.set_value(op, parts, new, loc)
        if not isinstance(current, list):
            raise bad_value("The field '%s' must be an array but is of type %s in document {%s}"
                            % (".".join(parts), bson_type_name(current), self._id_text()))
        new, result = _perform_push(list(current), copy.deepcopy(values), position, sort,
                                    slice_)
        if result == "noop":
            return
        self._check_id(op, parts, new, False)
        self._put(loc.container, loc.key, new)
        if result == "append":
            for i in range(len(current), len(new)):
                self._log_update(parts + [str(i)])
        else:
            self._log_update(parts)

    def op_addToSet(self, parts, op, values):
        loc, current = self._existing_array(parts)
        if current is MISSING:
            return self.set_value(op, parts, copy.deepcopy(values), loc)
        if not isinstance(current, list):
            raise bad_value("Cannot apply $addToSet to non-array field. Field named '%s' has "
                            "non-array type %s" % (parts[-1], bson_type_name(current)))
        extra = [v for v in values if not any(values_equal(v, e) for e in current)]
        if extra:
            self._replace_array(op, parts, loc, list(current) + copy.deepcopy(extra))

    def _replace_array(self, op, parts, loc, new):
        self._check_id(op, parts, new, False)
        self._put(loc.container, loc.key, new)
        self._log_update(parts)

    def _check_viable(self, parts, loc):
        """$pull/$pullAll/$pop are no-ops on absent paths, but not on blocked ones."""
        if loc.blocked:
            raise MongoError(28, "PathNotViable", "Cannot use the part (%s) of (%s) to traverse "
                             "the element ({%s})" % (parts[loc.depth], ".".join(parts),
                                                     fmt_element(loc.parent_name, loc.container)))

    def _cull(self, parts, op, should_remove):
        loc, current = self._existing_array(parts)
        self._check_viable(parts, loc)
        if current is MISSING:
            return
        if not isinstance(current, list):
            raise bad_value("Cannot apply $pull to a non-array value")    # also for $pullAll
        kept = [e for e in current if not should_remove(e)]
        if len(kept) != len(current):
            self._replace_array(op, parts, loc, kept)

    def op_pull(self, parts, op, matcher):
        self._cull(parts, op, matcher)

    def op_pullAll(self, parts, op, values):
        self._cull(parts, op, lambda e: any(values_equal(e, v) for v in values))

    def op_pop(self, parts, op, direction):
        loc, current = self._existing_array(parts)
        self._check_viable(parts, loc)
        if current is MISSING:
            return
        if not isinstance(current, list):
            raise type_mismatch("Path '%s' contains an element of non-array type '%s'"
                                % (".".join(parts), bson_type_name(current)))
        if current:
            self._replace_array(op, parts, loc, current[1:] if direction < 0 else current[:-1])

    def op_rename(self, dest_parts, op, source_parts):
        src = self._locate(source_parts)
        if src.blocked or src.depth < len(source_parts) - 1 or src.value is MISSING:
            return
        if src.through_array:
            raise bad_value("The source field cannot be an array element, '%s' in doc with %s "
                            "field found to be an array or array descendant"
                            % (".".join(source_parts), ".".join(source_parts)))
        dst = self._locate(dest_parts)
        if dst.through_array:
            raise bad_value("The destination field cannot be an array element, '%s' in doc "
                            "with %s field found to be an array or array descendant"
                            % (".".join(dest_parts), ".".join(dest_parts)))
        if source_parts[0] == "_id" and self.id_immutable:
            raise MongoError(66, "ImmutableField", "Performing an update on the path '%s' would "
                             "modify the immutable field '_id'" % ".".join(source_parts))
        value = src.value
        del src.container[src.key]
        self.removed.append(".".join(source_parts))
        self.set_value(op, dest_parts, value)

    # -- result ---------------------------------------------------------

    def description(self):
        updated = {}
        for path, parts in self.updated.items():
            v = self.doc
            for p in parts:
                v = v[int(p)] if isinstance(v, list) else v[p]
            updated[path] = v
        return {"updatedFields": updated, "removedFields": list(self.removed),
                "truncatedArrays": []}


def _perform_push(array, values, position, sort, slice_):
    """Apply $push clauses to a copy of the array -> (new array, 'noop'|'append'|'normal').

    'append' mirrors mongod's kArrayAppendUpdate: values went to the end of a
    non-empty array and no $sort/$slice rewrote it.
    """
    size = len(array)
    if not values:
        result = "noop"
    elif size == 0:
        array.extend(values)
        result = "normal"
    elif position is None or position > size:
        array.extend(values)
        result = "append"
    else:
        if position >= 0:
            at = position
        elif -position < size:
            at = size + position
        else:
            at = 0
        array[at:at] = values
        result = "normal"
    if sort is not None:
        result = "normal"
        array = _sort_array(array, sort)
    if slice_ is not None:
        keep = abs(slice_)
        if len(array) > keep:
            result = "normal"
            array = array[:keep] if slice_ >= 0 else array[len(array) - keep:]
    return array, result


def _sort_array(array, sort):
    if isinstance(sort, int):
        return sorted(array, key=cmp_to_key(lambda a, b: compare_values(a, b) * sort))

    def key_of(e):
        if isinstance(e, dict):
            return [sort_key(e, parts, d) for parts, d in sort]
        return [None for _ in sort]

    keyed = [(key_of(e), e) for e in array]

    def cmp(x, y):
        for kx, ky, (_, d) in zip(x[0], y[0], sort):
            c = compare_values(kx, ky)
            if c:
                return c * d
        return 0
    keyed.sort(key=cmp_to_key(cmp))
    return [e for _, e in keyed]


def apply_update(doc, update, *, is_upsert_insert=False, now=None):
    """Apply an operator update -> (new document, updateDescription).

    `now` (a datetime) feeds $currentDate. An empty updateDescription
    (no updated or removed fields) means the update was a no-op.
    """
    ops = parse_update(update)
    updater = _Updater(doc, is_upsert_insert, now)
    for parts, op, arg in ops:
        updater.apply(parts, op, arg)
    new_doc = updater.doc
    if is_upsert_insert and "_id" in new_doc and next(iter(new_doc)) != "_id":
        # An inserted document always starts with _id (mongod moves it there).
        new_doc = dict(_id=new_doc["_id"], **{k: v for k, v in new_doc.items() if k != "_id"})
    if isinstance(new_doc.get("_id"), list):
        raise MongoError(53, "InvalidIdField", "The '_id' value cannot be of type array")
    return new_doc, updater.description()


def apply_replacement(doc, replacement):
    """Replacement update: new contents, original _id kept (code 66 if it would change)."""
    if not isinstance(replacement, dict):
        raise failed_to_parse("Update argument must be either an object or an array")
    for k in replacement:
        if k.startswith("$"):
            raise _dollar_in_replacement(k)
    if "_id" in replacement and "_id" in doc and not values_equal(replacement["_id"], doc["_id"]):
        raise MongoError(66, "ImmutableField", "After applying the update, the (immutable) field "
                         "'_id' was found to have been altered to %s"
                         % fmt_element("_id", replacement["_id"]))
    new_doc = {}
    if "_id" not in replacement and "_id" in doc:
        new_doc["_id"] = doc["_id"]
    for k, v in replacement.items():
        new_doc[k] = copy.deepcopy(v)
    return new_doc


# ------------------------------------------------------------ upserts

def _equalities(filt, out):
    for key, value in filt.items():
        if key == "$and" or (key == "$or" and isinstance(value, list) and len(value) == 1):
            for clause in value:
                if isinstance(clause, dict):
                    _equalities(clause, out)
            continue
        if key.startswith("$"):
            continue
        if isinstance(value, dict) and type(value) is not DBRef and value and \
                next(iter(value)).startswith("$"):
            if "$eq" in value:
                out.append((key, value["$eq"]))
            elif isinstance(value.get("$in"), list) and len(value["$in"]) == 1 \
                    and not _is_regex(value["$in"][0]):
                out.append((key, value["$in"][0]))
            continue
        if _is_regex(value):
            continue
        out.append((key, value))


def _is_regex(v):
    from .query import _REGEX_TYPES
    return isinstance(v, _REGEX_TYPES)


def upsert_seed(filt):
    """Document an upsert starts from: the filter's equality fields, _id first.

    mongod collects them in a map ordered by path, so the other fields come
    out sorted by path; conflicting paths raise NotSingleValueField (54).
    """
    pairs = []
    _equalities(filt, pairs)
    by_path = {}
    for path, value in pairs:
        if path in by_path:
            raise MongoError(54, "NotSingleValueField", "cannot infer query fields to set, path "
                             "'%s' is matched twice" % path)
        by_path[path] = value
    paths = sorted(by_path)
    for a in paths:
        for b in paths:
            if b.startswith(a + "."):
                raise MongoError(54, "NotSingleValueField", "cannot infer query fields to set, "
                                 "both paths '%s' and '%s' are matched" % (b, a))
    seed = {}
    for path in (["_id"] if "_id" in by_path else []) + [p for p in paths if p != "_id"]:
        node = seed
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = copy.deepcopy(by_path[path])
    return seed


# ------------------------------------------------------------ pipeline-style updates

# The stages mongod allows in an update pipeline (isAllowedWithinUpdatePipeline).
_UPDATE_PIPELINE_STAGES = ("$addFields", "$set", "$project", "$unset", "$replaceRoot",
                           "$replaceWith")


def check_pipeline_update(pipeline):
    """Validate an update given as an array -> the compiled pipeline, as mongod refuses it."""
    from .aggregate import compile_pipeline
    for stage in pipeline:
        if not isinstance(stage, dict):
            raise MongoError(14, "TypeMismatch", "Each element of the 'pipeline' array must be "
                             "an object")
        if len(stage) != 1:
            raise MongoError(40323, "Location40323", "A pipeline stage specification object "
                             "must contain exactly one field.")
        name = next(iter(stage))
        if name not in _UPDATE_PIPELINE_STAGES and name.startswith("$"):
            compile_pipeline([stage])  # an unknown stage name is reported as such first
            raise MongoError(72, "InvalidOptions",
                             "%s is not allowed to be used within an update" % name)
    return compile_pipeline(pipeline)


def _diff(old, new, prefix, updated, removed, truncated):
    """The $v:2 delta between two documents, as the change event reports it: changed or new
    fields at their dotted path, sub-documents present on both sides compared field by field,
    arrays on both sides element by element (_array_diff), any other changed value whole."""
    for k, v in new.items():
        path = prefix + k
        if k not in old:
            updated[path] = v
        elif isinstance(v, dict) and isinstance(old[k], dict) and list(v) == list(old[k]):
            _diff(old[k], v, path + ".", updated, removed, truncated)
        elif isinstance(v, list) and isinstance(old[k], list):
            if not identical(old[k], v) and not _array_diff(old[k], v, path, updated, removed,
                                                            truncated):
                updated[path] = v
        elif not identical(old[k], v):
            updated[path] = v
    for k in old:
        if k not in new:
            removed.append(prefix + k)


def _array_diff(old, new, path, updated, removed, truncated):
    """An array's delta as mongod computes it for a pipeline update (computeArrayDiff in
    document_diff_calculator.cpp): changed elements at "path.i", appended ones likewise, a
    shorter array as a resize ({field, newSize} in truncatedArrays, MongoDB 5.0+). Like
    mongod, gives up (returns False: the caller reports the whole array) when the delta would
    be larger than the new array itself. Fills the caller's collections only on success."""
    from . import bsonutil
    sub_updated, sub_removed, sub_truncated = {}, [], []
    for i, (a, b) in enumerate(zip(old, new)):
        if identical(a, b):
            continue
        sub = "%s.%d" % (path, i)
        if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
            _diff(a, b, sub + ".", sub_updated, sub_removed, sub_truncated)
        elif isinstance(a, list) and isinstance(b, list):
            if not _array_diff(a, b, sub, sub_updated, sub_removed, sub_truncated):
                sub_updated[sub] = b
        else:
            sub_updated[sub] = b
    for i in range(len(old), len(new)):
        sub_updated["%s.%d" % (path, i)] = new[i]
    if len(new) < len(old):
        sub_truncated.append({"field": path, "newSize": len(new)})
    # The delta's size as mongod's ArrayNode counts it, near enough: {a: true, l: newSize?,
    # u<i>: value...} (nested deltas are counted by the values they set).
    delta = {"a": True}
    if len(new) < len(old):
        delta["l"] = len(new)
    for k, v in sub_updated.items():
        delta["u" + k[len(path) + 1:]] = v
    size = len(bsonutil.encode(delta)) + 8 * (len(sub_removed) + len(sub_truncated))
    if size >= len(bsonutil.encode({"a": new})) - 5:
        return False
    updated.update(sub_updated)
    removed.extend(sub_removed)
    truncated.extend(sub_truncated)
    return True


def apply_pipeline_update(doc, compiled, *, is_upsert_insert=False):
    """Run a compiled update pipeline over doc -> (new document, updateDescription).

    As mongod's PipelineExecutor: the stages see the document as their only input, a
    document left without _id gets the original back, and the event's description is the
    delta between the two versions ($$NOW: see expressions.operation_now).
    """
    out = compiled([doc])
    new = dict(out[0]) if out else {}
    if "_id" not in new and "_id" in doc:
        new = dict(_id=doc["_id"], **new)
    elif "_id" in new and "_id" in doc and not values_equal(new["_id"], doc["_id"]):
        raise MongoError(66, "ImmutableField", "Performing an update on the path '_id' would "
                         "modify the immutable field '_id'")
    if is_upsert_insert and "_id" in new and next(iter(new)) != "_id":
        new = dict(_id=new["_id"], **{k: v for k, v in new.items() if k != "_id"})
    updated, removed, truncated = {}, [], []
    _diff(doc, new, "", updated, removed, truncated)
    return new, {"updatedFields": updated, "removedFields": removed,
                 "truncatedArrays": truncated}
