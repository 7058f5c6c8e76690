"""Projections shared by find(), $project, $addFields/$set and $unset.

Parsing follows mongod's projection AST rules (4.4+): inclusion vs exclusion
is decided by the first non-_id field, expressions make it an inclusion,
find()'s $slice is neutral, and path collisions are rejected. Applying is two
passes, as in mongod: first included/excluded/sliced fields in the
document's own order, then computed fields in specification order (so they
land at the end, or in place when the field already exists in the output).
"""

from bson.dbref import DBRef

from .compare import MISSING, fmt_element, is_number, num_value
from .errors import MongoError
from .expressions import (_KNOWN_UNSUPPORTED, _OPERATORS, compile_expression, located,
                          root_vars, truthy)

INCLUSION, EXCLUSION = "inclusion", "exclusion"


class _Node:
    """One level of the projection tree; children keep specification order."""

    __slots__ = ("children", "computed")

    def __init__(self):
        self.children = {}
        self.computed = False    # does this subtree hold expressions?


class _Expr:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class _Slice:
    __slots__ = ("skip", "limit")

    def __init__(self, skip, limit):
        self.skip, self.limit = skip, limit


class _ElemMatch:
    __slots__ = ("pred",)

    def __init__(self, pred):
        self.pred = pred


def _is_bool_like(v):
    return isinstance(v, bool) or is_number(v)


def _is_expression_name(name):
    return name in _OPERATORS or name in _KNOWN_UNSUPPORTED or name == "$meta"


def add_at_path(parent, key, leaf, error):
    """Insert a leaf at a dotted key, rejecting collisions as mongod does (31249/31250)."""
    parts = key.split(".")
    for p in parts:
        if p == "":
            raise error(15998, None, "FieldPath field names may not be empty strings.")
        if p.startswith("$"):
            raise error(16410, None, "FieldPath field names may not start with '$'. "
                                     "Consider using $getField or $setField.")
    node = parent
    chain = [node]
    for p in parts[:-1]:
        child = node.children.get(p)
        if child is None:
            child = node.children[p] = _Node()
        elif not isinstance(child, _Node):
            raise error(31249, None, "Path collision at %s remaining portion %s"
                        % (key, ".".join(parts[1:])))
        node = child
        chain.append(node)
    if parts[-1] in node.children:
        raise error(31250, None, "Path collision at %s" % key)
    node.children[parts[-1]] = leaf
    if isinstance(leaf, (_Expr, _ElemMatch)) or (isinstance(leaf, _Node) and leaf.computed):
        for n in chain:
            n.computed = True
    return node


class Projection:
    """A parsed find()/$project projection; apply(doc) returns a new document."""

    def __init__(self, spec, *, find=False):
        self.find = find
        self.root = _Node()
        self.type = None
        self.has_slice = self.has_elem_match = False
        self.id_included = self.id_excluded = self.id_specified = False
        if not isinstance(spec, dict):
            raise self._error(2, "BadValue", "projection must be an object")
        if not spec and not find:
            raise self._error(51272, None,
                              "projection specification must have at least one field")
        for key, value in spec.items():
            self.id_specified |= key == "_id" or key.startswith("_id.")
            self._parse_element(key, value, self.root, True)
        if self.type is None:
            if self.has_slice:
                self.type = INCLUSION if self.id_included else EXCLUSION
            elif self.has_elem_match or (self.id_included and not self.id_excluded):
                self.type = INCLUSION
            else:
                self.type = EXCLUSION
        if not self.id_specified and self.type == INCLUSION:
            self.root.children["_id"] = True
        if self.type == EXCLUSION and self.id_included:
            self.root.children.pop("_id", None)

    # -------------------------------------------------------------- parsing

    def _error(self, code, code_name, msg):
        if not self.find:
            msg = "Invalid $project :: caused by :: " + msg
        return MongoError(code, code_name or "Location%d" % code, msg)

    def _add(self, parent, key, leaf):
        return add_at_path(parent, key, leaf, self._error)

    def _set_type(self, wanted, key):
        if self.type is None:
            self.type = wanted
        elif self.type != wanted:
            if wanted == INCLUSION:
                raise self._error(31253, None, "Cannot do inclusion on field %s in exclusion "
                                               "projection" % key)
            raise self._error(31254, None, "Cannot do exclusion on field %s in inclusion "
                                           "projection" % key)

    def _parse_element(self, key, value, parent, at_root):
        if key == "$" or key.endswith(".$") or ".$." in key:
            if not self.find:
                raise self._error(31324, None,
                                  "Cannot use positional projection in aggregation projection")
            raise MongoError(238, "NotImplemented",
                             "positional projection is not supported by the flowwarden stand-in")
        is_top_id = at_root and key == "_id"
        if isinstance(value, dict) and type(value) is not DBRef:
            self._parse_object(key, value, parent, at_root)
        elif _is_bool_like(value):
            if truthy(value):
                self._add(parent, key, True)
                if is_top_id:
                    self.id_included = True
                else:
                    self._set_type(INCLUSION, key)
            else:
                self._add(parent, key, False)
                if is_top_id:
                    self.id_excluded = True
                else:
                    self._set_type(EXCLUSION, key)
        else:
            if self.type == EXCLUSION:
                raise self._error(31310, None, "Cannot use an expression %s in an exclusion "
                                               "projection" % fmt_element(key, value))
            self.type = INCLUSION
            self._add(parent, key, _Expr(compile_expression(value)))

    def _parse_object(self, key, value, parent, at_root):
        first = next(iter(value), None)
        if len(value) == 1 and first.startswith("$"):
            arg = value[first]
            if self.find and first == "$slice":
                self._add(parent, key, self._parse_slice(arg))
                self.has_slice = True
                return
            if first == "$elemMatch":
                self._add(parent, key, self._parse_elem_match(key, arg, at_root))
                return
            if not _is_expression_name(first):
                raise self._error(31325, None, "Unknown expression %s" % first)
            if first == "$meta":
                raise MongoError(238, "NotImplemented",
                                 "$meta is not supported by the flowwarden stand-in")
            if self.type == EXCLUSION:
                raise self._error(31252, None,
                                  "Cannot use expression other than $meta in exclusion projection")
            self.type = INCLUSION
            self._add(parent, key, _Expr(compile_expression(value)))
            return
        if not value:
            raise self._error(51270, None, "An empty sub-projection is not a valid value. "
                                           "Found empty object at path %s" % key)
        node = _Node()
        for sub_key, sub_value in value.items():
            self._parse_element(sub_key, sub_value, node, False)
        self._add(parent, key, node)

    def _parse_slice(self, arg):
        if is_number(arg):
            return _Slice(None, int(num_value(arg)))
        if isinstance(arg, list):
            if len(arg) != 2:
                raise self._error(31272, None, "$slice array argument should be of form "
                                               "[skip, limit]")
            skip, limit = arg
            if not is_number(skip):
                raise self._error(31257, None, "$slice expects the skip argument to be a number")
            if not is_number(limit):
                raise self._error(31258, None, "$slice expects the limit argument to be a number")
            if int(num_value(limit)) <= 0:
                raise self._error(31259, None, "$slice limit must be positive, got %d"
                                  % int(num_value(limit)))
            return _Slice(int(num_value(skip)), int(num_value(limit)))
        raise self._error(31273, None, "$slice only supports numbers and [skip, limit] arrays")

    def _parse_elem_match(self, key, arg, at_root):
        if not self.find:
            raise MongoError(168, "InvalidPipelineOperator",
                             "Cannot use $elemMatch in this context")
        if not isinstance(arg, dict):
            raise self._error(31274, None, "elemMatch: Invalid argument, object required")
        if not at_root or "." in key:
            raise self._error(31275, None, "Cannot use $elemMatch projection on a nested field.")
        from .query import compile_filter
        sub = compile_filter({key: {"$elemMatch": arg}})
        self.has_elem_match = True
        return _ElemMatch(lambda arr: next((e for e in arr if sub({key: [e]})), MISSING))

    # -------------------------------------------------------------- applying

    def apply(self, doc):
        if self.type == INCLUSION:
            out = _include(self.root, doc)
        else:
            out = _exclude(self.root, doc)
        if self.root.computed:
            _add_computed(self.root, out, root_vars(doc))
        return out


def _slice(spec, v):
    if not isinstance(v, list):
        return v
    if spec.skip is None:
        n = spec.limit
        return v[:n] if n >= 0 else v[len(v) + n:] if -n < len(v) else list(v)
    skip = spec.skip
    if skip < 0:
        skip = max(0, len(v) + skip)
    return v[skip:skip + spec.limit]


def _include(node, doc):
    out = {}
    for k, v in doc.items():
        c = node.children.get(k)
        if c is True:
            out[k] = v
        elif isinstance(c, _Node):
            r = _include_value(c, v)
            if r is not MISSING:
                out[k] = r
        elif isinstance(c, _Slice):
            out[k] = _slice(c, v)
    return out


def _include_value(node, v):
    if isinstance(v, dict) and type(v) is not DBRef:
        return _include(node, v)
    if isinstance(v, list):
        return [_include_value(node, e) for e in v if isinstance(e, (dict, list))]
    return MISSING


def _exclude(node, doc):
    out = {}
    for k, v in doc.items():
        c = node.children.get(k)
        if c is None or c is True:
            out[k] = v
        elif isinstance(c, _Node):
            out[k] = _exclude_value(c, v)
        elif isinstance(c, _Slice):
            out[k] = _slice(c, v)
    return out


def _exclude_value(node, v):
    if isinstance(v, dict) and type(v) is not DBRef:
        return _exclude(node, v)
    if isinstance(v, list):
        return [_exclude_value(node, e) for e in v]
    return v


def _add_computed(node, out, vars_):
    """Second pass: set expression results (in spec order) into `out` in place."""
    for k, c in node.children.items():
        if isinstance(c, _Expr):
            v = c.fn(vars_)
            if v is MISSING:
                out.pop(k, None)
            else:
                out[k] = v
        elif isinstance(c, _ElemMatch):
            arr = vars_["ROOT"].get(k, MISSING)
            if isinstance(arr, list):
                found = c.pred(arr)
                if found is not MISSING:
                    out.pop(k, None)
                    out[k] = [found]
        elif isinstance(c, _Node) and c.computed:
            out[k] = _computed_value(c, out.get(k, MISSING), vars_)


def _computed_value(node, v, vars_):
    if isinstance(v, list):
        return [_computed_value(node, e, vars_) for e in v]
    sub = dict(v) if isinstance(v, dict) and type(v) is not DBRef else {}
    _add_computed(node, sub, vars_)
    return sub


class AddFields:
    """$addFields/$set: every leaf is an expression; nested objects merge into subdocuments."""

    def __init__(self, spec, stage="$addFields"):
        if not isinstance(spec, dict):
            raise located(40272, "%s specification stage must be an object, got %s"
                          % (stage, type(spec).__name__))
        if not spec:
            raise located(40177, "Invalid %s :: caused by :: specification must have at least "
                                 "one field" % stage)
        self.stage = stage
        self.root = _Node()
        for key, value in spec.items():
            self._parse(key, value, self.root)

    def _error(self, code, code_name, msg):
        return MongoError(code, code_name or "Location%d" % code,
                          "Invalid %s :: caused by :: %s" % (self.stage, msg))

    def _parse(self, key, value, parent):
        if isinstance(value, dict) and type(value) is not DBRef and value and \
                not next(iter(value)).startswith("$"):
            node = _Node()
            for k, v in value.items():
                self._parse(k, v, node)
            add_at_path(parent, key, node, self._error)
        else:
            add_at_path(parent, key, _Expr(compile_expression(value)), self._error)

    def apply(self, doc):
        out = dict(doc)
        _add_computed(self.root, out, root_vars(doc))
        return out


def unset_projection(spec):
    """$unset: a field name or list of names, applied as an exclusion projection."""
    if isinstance(spec, str):
        fields = [spec]
    elif isinstance(spec, list):
        if not spec:
            raise located(31119, "$unset specification must be a string or an array with at "
                                 "least one field")
        if not all(isinstance(f, str) for f in spec):
            raise located(31120, "$unset specification must be a string or an array "
                                 "containing only string values")
        fields = spec
    else:
        raise located(31002, "$unset specification must be a string or an array")
    return Projection({f: 0 for f in fields})
