"""MongoDB 5.0's limit on blocking sorts (only when the stand-in plays a 5.0 server).

MongoDB 5.0 sorts in memory unless an index gives the order; a sort whose data exceeds
internalQueryMaxBlockingSortMemoryUsageBytes (100 MB) fails with
QueryExceededMemoryLimitNoDiskUseAllowed (292) "Sort exceeded memory limit of 104857600 bytes, but
did not opt in to external sorting." (src/mongo/db/sorter/sorter.cpp, src/mongo/db/exec/
sort_executor.cpp at r5.0), unless the command says allowDiskUse: true (accepted by find since
4.4). find adds the context "Executor error during find command" (find_cmd.cpp), aggregate
"PlanExecutor error during aggregation". From 6.0 allowDiskUseByDefault is true and the sort
spills instead, so the 6.0 stand-in never refuses (manual: "allowDiskUseByDefault").

Approximations, documented here because the stand-in has no query planner:
- "served by an index": some index that is neither partial nor sparse has a key pattern that
  starts with the fields the filter pins by equality (a top-level `field: value`, `{$eq: v}`, or
  such a field inside a top-level `$and`), in any order, followed by the sort keys in order with
  the same directions, or all of them reversed. MongoDB's planner can do more (and may pick a
  blocking plan anyway); the DLQ's queries only need this.
- "data to sort": the sum of the BSON sizes of the documents that reach the sort (the planner
  counts a little more per document). With a limit (a top-k sort) only the `limit` documents
  kept count: the first `limit` of the sorted result.
"""

from .bsonutil import encode
from .errors import MongoError

MAX_BLOCKING_SORT_BYTES = 104857600


def _equality_fields(flt):
    out = set()
    if not isinstance(flt, dict):
        return out
    for k, v in flt.items():
        if k == "$and" and isinstance(v, list):
            for part in v:
                out |= _equality_fields(part)
        elif k.startswith("$"):
            continue
        elif isinstance(v, dict) and any(str(op).startswith("$") for op in v):
            if set(v) == {"$eq"}:
                out.add(k)
        else:
            out.add(k)
    return out


def _direction(v):
    try:
        return 1 if float(v) > 0 else -1
    except (TypeError, ValueError):
        return None     # {$meta: ...}: never served by an index here


def served_by_index(coll, flt, sort):
    """True when an index of `coll` gives `sort`'s order for documents matching `flt`."""
    if coll is None:
        return True     # nothing to sort
    wanted = [(k, _direction(v)) for k, v in sort.items()]
    if any(d is None for _, d in wanted):
        return False
    reverse = [(k, -d) for k, d in wanted]
    pinned = _equality_fields(flt)
    for ix in coll.indexes.values():
        if ix.partial is not None or ix.sparse:
            continue
        key = [(k, _direction(v)) for k, v in ix.key]
        i = 0
        while i < len(key) and key[i][0] in pinned:
            i += 1
        if key[i:i + len(wanted)] in (wanted, reverse):
            return True
    return False


def check(server, coll, flt, sort, sorted_docs, limit, allow_disk_use, context, indexable=True):
    """Raise 292 when a 5.0 server would refuse this blocking sort; `sorted_docs` are the
    documents after the sort (only their sizes are read). `indexable` False: a sort no index
    can serve (a $sort after other aggregation stages)."""
    if getattr(server, "version", (6, 0)) >= (6, 0) or allow_disk_use is True or not sort:
        return
    if indexable and served_by_index(coll, flt, sort):
        return
    kept = sorted_docs[:limit] if limit else sorted_docs
    total = 0
    for d in kept:
        total += len(encode(d))
        if total > MAX_BLOCKING_SORT_BYTES:
            raise MongoError(292, "QueryExceededMemoryLimitNoDiskUseAllowed",
                             "%s :: caused by :: Sort exceeded memory limit of %d bytes, but did "
                             "not opt in to external sorting." % (context,
                                                                  MAX_BLOCKING_SORT_BYTES))
