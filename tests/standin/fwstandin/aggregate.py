"""Aggregation pipelines over in-memory documents, plus change-stream stage rules.

Each stage is compiled once into a function over a list of documents, so
bad stages fail before any document is read (as mongod parses the whole
pipeline first). compile_event_stages() returns a per-document function for
the stages a change stream allows, for the server to run on each event.
"""

from .compare import (MISSING, bson_type_name, fmt_doc, fmt_value, hash_key, identical,
                      is_number, num_value, sort_documents, parse_sort_spec)
from .errors import MongoError
from .expressions import (avg_values, compile_expression, extreme_value, located, root_vars,
                          sum_values)
from .projection import AddFields, Projection, unset_projection
from .query import compile_filter
from . import numbers as num

CHANGE_STREAM_ALLOWED_STAGES = frozenset({
    "$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith",
    "$redact",
})

# Real stages this stand-in does not implement (NotImplemented, not "unrecognized").
_UNSUPPORTED_STAGES = frozenset({
    "$lookup", "$facet", "$bucket", "$bucketAuto", "$sortByCount", "$sample", "$out",
    "$merge", "$geoNear", "$graphLookup", "$indexStats", "$collStats", "$currentOp",
    "$listSessions", "$listLocalSessions", "$unionWith", "$densify", "$fill",
    "$setWindowFields", "$documents", "$search", "$searchMeta", "$planCacheStats",
    "$changeStreamSplitLargeEvent", "$listSearchIndexes", "$shardedDataDistribution",
})


def _stage_name(stage):
    if not isinstance(stage, dict):
        raise MongoError(14, "TypeMismatch", "Each element of the 'pipeline' array must be an "
                                             "object")
    if len(stage) != 1:
        raise located(40323, "A pipeline stage specification object must contain exactly one "
                             "field.")
    return next(iter(stage))


# ------------------------------------------------------------ per-document stages

def _match(spec):
    if not isinstance(spec, dict):
        raise located(15959, "the match filter must be an expression in an object")
    pred = compile_filter(spec)
    return lambda doc: doc if pred(doc) else None


def _project(spec):
    if not isinstance(spec, dict):
        raise located(15969, "$project specification must be an object")
    return Projection(spec).apply


def _add_fields(stage):
    def build(spec):
        return AddFields(spec, stage).apply
    return build


def _unset(spec):
    return unset_projection(spec).apply


def _new_root_error(value, doc):
    return located(40228, "'newRoot' expression  must evaluate to an object, but resulting "
                          "value was: %s. Type of resulting value: '%s'. Input document: %s"
                   % (fmt_value(value) if value is not MISSING else "MISSING",
                      bson_type_name(value), fmt_doc(doc)))


def _replace_with_fn(expr_spec):
    fn = compile_expression(expr_spec)

    def replace(doc):
        v = fn(root_vars(doc))
        if not isinstance(v, dict):
            raise _new_root_error(v, doc)
        return v
    return replace


def _replace_root(spec):
    if not isinstance(spec, dict):
        raise located(40229, "expected an object as specification for $replaceRoot stage, got %s"
                      % bson_type_name(spec))
    for k in spec:
        if k != "newRoot":
            raise MongoError(40415, "Location40415",
                             "BSON field '$replaceRoot.%s' is an unknown field." % k)
    if "newRoot" not in spec:
        raise MongoError(40414, "Location40414",
                         "BSON field '$replaceRoot.newRoot' is missing but a required field")
    return _replace_with_fn(spec["newRoot"])


class _RedactMarker:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "$$" + self.name


KEEP, PRUNE, DESCEND = _RedactMarker("KEEP"), _RedactMarker("PRUNE"), _RedactMarker("DESCEND")


def _redact(spec):
    fn = compile_expression(spec)

    def visit(obj, root):
        r = fn({"CURRENT": obj, "ROOT": root, "KEEP": KEEP, "PRUNE": PRUNE,
                "DESCEND": DESCEND})
        if r is KEEP:
            return obj
        if r is PRUNE:
            return None
        if r is not DESCEND:
            raise located(17053, "$redact's expression should not return anything aside from "
                                 "the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned %s"
                          % fmt_value(r))
        out = {}
        for k, v in obj.items():
            if isinstance(v, dict):
                sub = visit(v, root)
                if sub is not None:
                    out[k] = sub
            elif isinstance(v, list):
                out[k] = visit_array(v, root)
            else:
                out[k] = v
        return out

    def visit_array(arr, root):
        out = []
        for e in arr:
            if isinstance(e, dict):
                sub = visit(e, root)
                if sub is not None:
                    out.append(sub)
            elif isinstance(e, list):
                out.append(visit_array(e, root))
            else:
                out.append(e)
        return out

    return lambda doc: visit(doc, doc)


_PER_DOCUMENT = {
    "$match": _match, "$project": _project, "$addFields": _add_fields("$addFields"),
    "$set": _add_fields("$set"), "$unset": _unset, "$replaceRoot": _replace_root,
    "$replaceWith": _replace_with_fn, "$redact": _redact,
}


# ------------------------------------------------------------ whole-list stages

def _sort(spec):
    parse_sort_spec(spec)
    return lambda docs: sort_documents(docs, spec)


def _non_negative_int(spec, stage, not_number, negative):
    if not is_number(spec):
        raise located(not_number[0], not_number[1])
    n = num_value(spec)
    if n != int(n):
        raise located(not_number[0], "invalid argument to %s stage: Expected an integer: %s: %s"
                      % (stage, stage, fmt_value(spec)))
    if int(n) < 0 or (stage == "$limit" and int(n) == 0):
        raise located(negative[0], negative[1])
    return int(n)


def _skip(spec):
    n = _non_negative_int(spec, "$skip", (15972, "Argument to $skip must be a number"),
                          (15956, "Argument to $skip cannot be negative"))
    return lambda docs: docs[n:]


def _limit(spec):
    n = _non_negative_int(spec, "$limit", (15957, "the limit must be specified as a number"),
                          (15958, "the limit must be positive"))
    return lambda docs: docs[:n]


def _count(spec):
    if not isinstance(spec, str):
        raise located(40156, "the count field must be a non-empty string")
    if not spec:
        raise located(40157, "the count field must be a non-empty string")
    if spec.startswith("$"):
        raise located(40158, "the count field cannot be a $-prefixed path")
    if "." in spec:
        raise located(40160, "the count field cannot contain '.'")
    return lambda docs: [{spec: num.integral_result(num.INT, len(docs), "double")}] if docs \
        else []


def _unwind(spec):
    include_index = None
    preserve = False
    if isinstance(spec, str):
        path = spec
    elif isinstance(spec, dict):
        path = None
        for k, v in spec.items():
            if k == "path":
                if not isinstance(v, str):
                    raise located(28808, "expected a string as the path for $unwind stage, got %s"
                                  % bson_type_name(v))
                path = v
            elif k == "includeArrayIndex":
                if not isinstance(v, str):
                    raise located(28810, "expected a non-empty string for the includeArrayIndex "
                                         " option to $unwind stage, got %s" % bson_type_name(v))
                if v.startswith("$"):
                    raise located(28822, "includeArrayIndex option to $unwind stage should not "
                                         "be prefixed with a '$': %s" % v)
                include_index = v
            elif k == "preserveNullAndEmptyArrays":
                if not isinstance(v, bool):
                    raise located(28809, "expected a boolean for the preserveNullAndEmptyArrays "
                                         "option to $unwind stage, got %s" % bson_type_name(v))
                preserve = v
            else:
                raise located(28811, "unrecognized option to $unwind stage: %s" % k)
        if path is None:
            raise located(28812, "no path specified to $unwind stage")
    else:
        raise located(15981, "expected either a string or an object as specification for "
                             "$unwind stage, got %s" % bson_type_name(spec))
    if not path.startswith("$"):
        raise located(28818, "path option to $unwind stage should be prefixed with a '$': %s"
                      % path)
    parts = path[1:].split(".")
    if "" in parts:
        raise located(15998, "FieldPath field names may not be empty strings.")
    index_parts = include_index.split(".") if include_index else None

    def unwind(docs):
        out = []
        for doc in docs:
            value = _get_path(doc, parts)
            if isinstance(value, list) and value:
                for i, e in enumerate(value):
                    d = _set_path(doc, parts, e)
                    if index_parts:
                        d = _set_path(d, index_parts, num.make(num.LONG, i))
                    out.append(d)
            elif isinstance(value, list) or value is None or value is MISSING:
                if preserve:
                    d = doc
                    if isinstance(value, list):
                        d = _remove_path(doc, parts)
                    if index_parts:
                        d = _set_path(d, index_parts, None)
                    out.append(d)
            else:
                d = doc
                if index_parts:
                    d = _set_path(d, index_parts, None)
                out.append(d)
        return out
    return unwind


def _get_path(doc, parts):
    v = doc
    for p in parts:
        if not isinstance(v, dict):
            return MISSING
        v = v.get(p, MISSING)
    return v


def _set_path(doc, parts, value):
    """Copy of doc with the (document-only) path set; parents are copied, not mutated."""
    out = dict(doc)
    if len(parts) == 1:
        out[parts[0]] = value
        return out
    child = out.get(parts[0])
    out[parts[0]] = _set_path(child if isinstance(child, dict) else {}, parts[1:], value)
    return out


def _remove_path(doc, parts):
    out = dict(doc)
    if len(parts) == 1:
        out.pop(parts[0], None)
    elif isinstance(out.get(parts[0]), dict):
        out[parts[0]] = _remove_path(out[parts[0]], parts[1:])
    return out


# ------------------------------------------------------------ $group

class _Accumulator:
    """State for one accumulator in one group."""

    __slots__ = ("op", "values", "seen")

    def __init__(self, op):
        self.op = op
        self.values = []
        self.seen = set() if op == "$addToSet" else None

    def add(self, v):
        op = self.op
        if op in ("$first", "$last"):
            if op == "$last" or not self.values:
                self.values[:] = [None if v is MISSING else v]
        elif op == "$addToSet":
            if v is not MISSING:
                k = hash_key(v)
                if k not in self.seen:
                    self.seen.add(k)
                    self.values.append(v)
        elif op == "$mergeObjects":
            if v is None or v is MISSING:
                return
            if not isinstance(v, dict):
                raise located(40400, "$mergeObjects requires object inputs, but input %s is of "
                                     "type %s" % (fmt_value(v), bson_type_name(v)))
            self.values.append(v)
        elif v is not MISSING:
            self.values.append(v)

    def result(self):
        op, vs = self.op, self.values
        if op in ("$sum", "$count"):
            return sum_values(vs)
        if op == "$avg":
            return avg_values(vs)
        if op == "$min":
            return extreme_value(vs, -1)
        if op == "$max":
            return extreme_value(vs, 1)
        if op in ("$first", "$last"):
            return vs[0] if vs else None
        if op == "$mergeObjects":
            out = {}
            for v in vs:
                out.update(v)
            return out
        return list(vs)


_ACCUMULATORS = {"$sum", "$avg", "$min", "$max", "$first", "$last", "$push", "$addToSet",
                 "$count", "$mergeObjects"}
_UNSUPPORTED_ACCUMULATORS = {"$stdDevPop", "$stdDevSamp", "$accumulator", "$top", "$topN",
                             "$bottom", "$bottomN", "$firstN", "$lastN", "$maxN", "$minN",
                             "$median", "$percentile"}


def _group(spec):
    if not isinstance(spec, dict):
        raise located(15947, "a group's fields must be specified in an object")
    if "_id" not in spec:
        raise located(15955, "a group specification must include an _id")
    key_fn = compile_expression(spec["_id"])
    fields = []
    for name, acc in spec.items():
        if name == "_id":
            continue
        if name.startswith("$"):
            raise located(40236, "The field name '%s' cannot be an operator name" % name)
        if "." in name:
            raise located(40235, "The field name '%s' cannot contain '.'" % name)
        if not isinstance(acc, dict) or not acc or not next(iter(acc)).startswith("$"):
            raise located(40234, "The field '%s' must be an accumulator object" % name)
        if len(acc) != 1:
            raise located(40238, "The field '%s' must specify one accumulator" % name)
        op, arg = next(iter(acc.items()))
        if op in _UNSUPPORTED_ACCUMULATORS:
            raise MongoError(238, "NotImplemented",
                             "accumulator %s is not supported by the flowwarden stand-in" % op)
        if op not in _ACCUMULATORS:
            raise located(15952, "unknown group operator '%s'" % op)
        if op == "$count":
            if arg != {}:
                raise MongoError(40181, "Location40181", "$count takes no arguments, i.e. $count:{}")
            fields.append((name, op, lambda vars_: 1))
        else:
            fields.append((name, op, compile_expression(arg)))

    def group(docs):
        groups = {}
        for doc in docs:
            vars_ = root_vars(doc)
            key = key_fn(vars_)
            if key is MISSING:
                key = None
            hk = hash_key(key)
            entry = groups.get(hk)
            if entry is None:
                entry = groups[hk] = (key, [_Accumulator(op) for _, op, _ in fields])
            for (_, _, fn), acc in zip(fields, entry[1]):
                acc.add(fn(vars_))
        out = []
        for key, accs in groups.values():
            d = {"_id": key}
            for (name, _, _), acc in zip(fields, accs):
                d[name] = acc.result()
            out.append(d)
        return out
    return group


_WHOLE_LIST = {
    "$sort": _sort, "$skip": _skip, "$limit": _limit, "$group": _group, "$count": _count,
    "$unwind": _unwind,
}


# ------------------------------------------------------------ public API

def _compile_stage(stage):
    name = _stage_name(stage)
    spec = stage[name]
    if name in _PER_DOCUMENT:
        fn = _PER_DOCUMENT[name](spec)
        return lambda docs: [r for r in map(fn, docs) if r is not None]
    if name in _WHOLE_LIST:
        return _WHOLE_LIST[name](spec)
    if name == "$changeStream":
        raise located(40602, "$changeStream is only valid as the first stage in a pipeline.")
    if name in _UNSUPPORTED_STAGES:
        raise MongoError(238, "NotImplemented",
                         "%s is not supported by the flowwarden stand-in" % name)
    raise located(40324, "Unrecognized pipeline stage name: '%s'" % name)


def compile_pipeline(stages):
    """Validate and compile a pipeline into fn(iterable of docs) -> list of docs."""
    if not isinstance(stages, list):
        raise MongoError(14, "TypeMismatch", "'pipeline' option must be specified as an array")
    compiled = [_compile_stage(s) for s in stages]

    def run(docs):
        docs = list(docs)
        for fn in compiled:
            docs = fn(docs)
        return docs
    return run


def run_pipeline(docs, stages):
    """Run an aggregation pipeline over an iterable of documents."""
    return compile_pipeline(stages)(docs)


def check_change_stream_stages(stages):
    """Reject stages a change stream does not allow (IllegalOperation, as mongod says)."""
    for stage in stages:
        name = _stage_name(stage)
        if name == "$changeStream":
            raise located(40602, "$changeStream is only valid as the first stage in a pipeline.")
        if name not in CHANGE_STREAM_ALLOWED_STAGES:
            # A name no stage has is refused as in any pipeline, before the change-stream
            # check (mongod parses the stage first: 40324, the spec test change-streams-errors
            # "Change Stream should error when an invalid aggregation stage is passed in").
            if (name not in _PER_DOCUMENT and name not in _WHOLE_LIST
                    and name not in _UNSUPPORTED_STAGES):
                raise located(40324, "Unrecognized pipeline stage name: '%s'" % name)
            raise MongoError(20, "IllegalOperation",
                             "%s is not permitted in a $changeStream pipeline" % name)


def compile_event_stages(stages):
    """Per-event function for the stages after $changeStream: event -> event or None.

    Raises like check_change_stream_stages for a disallowed stage, and like
    mongod for a malformed one; None means the event was filtered out.
    """
    check_change_stream_stages(stages)
    fns = [_PER_DOCUMENT[_stage_name(s)](s[_stage_name(s)]) for s in stages]

    def run(event):
        for fn in fns:
            event = fn(event)
            if event is None:
                return None
        return event
    return run


def event_id_unchanged(original_event, transformed_event):
    """Did the user pipeline keep the event's _id (the resume token) byte-for-byte?"""
    return "_id" in transformed_event and identical(original_event["_id"],
                                                    transformed_event["_id"])


def change_stream_id_modified_error(original_event, transformed_event):
    """The ChangeStreamFatalError (280) mongod raises when the resume token was altered."""
    found = {"_id": transformed_event["_id"]} if "_id" in transformed_event else {}
    return MongoError(280, "ChangeStreamFatalError",
                      "Encountered an event whose _id field, which contains the resume token, "
                      "was modified by the pipeline. Modifying the _id field of an event makes "
                      "it impossible to resume the stream from that point. Only transformations "
                      "that retain the unmodified _id field are allowed. Expected: %s but "
                      "found: %s" % (fmt_value({"_id": original_event["_id"]}),
                                     fmt_value(found)))
