"""Tests for the stand-in's document engine (compare/query/update/aggregate).

Run: cd tests/standin && /usr/bin/python3 -m unittest test_engine -v
Expected values are MongoDB's documented (or observed 6.0) behaviour.
"""

import copy
import datetime
import re
import unittest
import uuid

from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from fwstandin.aggregate import (CHANGE_STREAM_ALLOWED_STAGES, change_stream_id_modified_error,
                                 check_change_stream_stages, compile_event_stages,
                                 event_id_unchanged, run_pipeline)
from fwstandin.compare import (bson_type_name, bson_type_number, compare_values, identical,
                               sort_documents)
from fwstandin.errors import MongoError
from fwstandin.query import compile_filter, get_values, matches, project, validate_filter
from fwstandin.update import apply_replacement, apply_update, is_replacement, upsert_seed

OID1 = ObjectId("000000000000000000000001")
OID2 = ObjectId("000000000000000000000002")
D1 = datetime.datetime(2020, 1, 1)
D2 = datetime.datetime(2021, 1, 1)


class MongoErrorAssertions(unittest.TestCase):
    def assertMongoError(self, code, fn, *args, code_name=None, msg=None, **kwargs):
        with self.assertRaises(MongoError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code, code, ctx.exception.errmsg)
        if code_name is not None:
            self.assertEqual(ctx.exception.code_name, code_name)
        if msg is not None:
            self.assertEqual(ctx.exception.errmsg, msg)
        return ctx.exception


# ====================================================================== compare

class CompareValuesTest(MongoErrorAssertions):
    def test_cross_type_order_follows_bson_canonical_ranks(self):
        ordered = [MinKey(), None, 1, "a", {"a": 1}, [1], b"\x00", OID1, False, D1,
                   Timestamp(1, 1), Regex("a", ""), MaxKey()]
        for i, lower in enumerate(ordered):
            for higher in ordered[i + 1:]:
                self.assertEqual(compare_values(lower, higher), -1, (lower, higher))
                self.assertEqual(compare_values(higher, lower), 1, (higher, lower))

    def test_numbers_of_all_types_compare_numerically(self):
        self.assertEqual(compare_values(1, 1.0), 0)
        self.assertEqual(compare_values(Int64(2), Decimal128("2.0")), 0)
        self.assertEqual(compare_values(Int64(3), 2.5), 1)
        self.assertEqual(compare_values(Decimal128("0.1"), 0.2), -1)
        self.assertEqual(compare_values(2 ** 62, float(2 ** 62) + 2048), -1)

    def test_nan_sorts_below_every_number_and_equals_itself(self):
        self.assertEqual(compare_values(float("nan"), float("-inf")), -1)
        self.assertEqual(compare_values(float("nan"), Decimal128("NaN")), 0)

    def test_bool_is_not_a_number(self):
        self.assertEqual(compare_values(True, 100), 1)
        self.assertNotEqual(compare_values(True, 1), 0)

    def test_documents_compare_field_type_before_field_name(self):
        self.assertEqual(compare_values({"b": 1}, {"a": "x"}), -1)
        self.assertEqual(compare_values({"a": 1}, {"b": 1}), -1)
        self.assertEqual(compare_values({"a": 1}, {"a": 1, "b": 0}), -1)
        self.assertEqual(compare_values({"a": 1, "b": 2}, {"b": 2, "a": 1}), -1)

    def test_arrays_compare_element_wise_then_by_length(self):
        self.assertEqual(compare_values([1, 2], [1, 3]), -1)
        self.assertEqual(compare_values([1, 2], [1]), 1)
        self.assertEqual(compare_values([1, "a"], [1, 5]), 1)

    def test_bindata_compares_length_then_subtype_then_bytes(self):
        self.assertEqual(compare_values(b"\xff", b"\x00\x00"), -1)
        self.assertEqual(compare_values(Binary(b"a", 0), Binary(b"a", 5)), -1)
        self.assertEqual(compare_values(b"a", b"b"), -1)

    def test_dates_timestamps_strings_objectids_order_within_type(self):
        self.assertEqual(compare_values(D1, D2), -1)
        self.assertEqual(compare_values(Timestamp(1, 5), Timestamp(2, 0)), -1)
        self.assertEqual(compare_values("B", "a"), -1)
        self.assertEqual(compare_values(OID1, OID2), -1)

    def test_type_names_and_numbers(self):
        cases = [(1.5, "double", 1), ("s", "string", 2), ({}, "object", 3), ([], "array", 4),
                 (b"x", "binData", 5), (uuid.UUID(int=1), "binData", 5), (OID1, "objectId", 7),
                 (True, "bool", 8), (D1, "date", 9), (None, "null", 10),
                 (Regex("a", "i"), "regex", 11), (re.compile("a"), "regex", 11),
                 (Code("f()"), "javascript", 13), (Code("f()", {"x": 1}), "javascriptWithScope", 15),
                 (5, "int", 16), (2 ** 40, "long", 18), (Int64(5), "long", 18),
                 (Timestamp(1, 1), "timestamp", 17), (Decimal128("1"), "decimal", 19),
                 (MinKey(), "minKey", -1), (MaxKey(), "maxKey", 127)]
        for value, name, number in cases:
            self.assertEqual(bson_type_name(value), name, value)
            self.assertEqual(bson_type_number(value), number, value)

    def test_identical_distinguishes_numeric_types_that_compare_equal(self):
        self.assertFalse(identical(1, 1.0))
        self.assertFalse(identical(1, Int64(1)))
        self.assertFalse(identical({"a": 1, "b": 2}, {"b": 2, "a": 1}))
        self.assertTrue(identical({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}))


class SortDocumentsTest(MongoErrorAssertions):
    def ids(self, docs, spec):
        return [d["_id"] for d in sort_documents(docs, spec)]

    def test_mixed_types_sort_in_bracket_order_missing_as_null(self):
        docs = [{"_id": 1, "a": "x"}, {"_id": 2, "a": 5}, {"_id": 3}, {"_id": 4, "a": None},
                {"_id": 5, "a": MinKey()}, {"_id": 6, "a": True}]
        self.assertEqual(self.ids(docs, {"a": 1}), [5, 3, 4, 2, 1, 6])
        self.assertEqual(self.ids(docs, {"a": -1}), [6, 1, 2, 3, 4, 5])

    def test_arrays_sort_by_min_ascending_and_max_descending(self):
        docs = [{"_id": 1, "a": [1, 10]}, {"_id": 2, "a": 5}, {"_id": 3, "a": [3, 4]}]
        self.assertEqual(self.ids(docs, {"a": 1}), [1, 3, 2])
        self.assertEqual(self.ids(docs, {"a": -1}), [1, 2, 3])

    def test_empty_array_sorts_before_null(self):
        docs = [{"_id": 1, "a": None}, {"_id": 2, "a": []}, {"_id": 3, "a": 0}]
        self.assertEqual(self.ids(docs, {"a": 1}), [2, 1, 3])

    def test_dotted_path_through_array_of_documents(self):
        docs = [{"_id": 1, "a": [{"b": 5}, {"b": 1}]}, {"_id": 2, "a": {"b": 3}}]
        self.assertEqual(self.ids(docs, {"a.b": 1}), [1, 2])
        self.assertEqual(self.ids(docs, {"a.b": -1}), [1, 2])
        self.assertEqual(self.ids(docs, {"a.b": 1, "_id": -1}), [1, 2])

    def test_sort_is_stable_and_multi_key(self):
        docs = [{"_id": i, "g": i % 2, "v": -i} for i in range(6)]
        self.assertEqual(self.ids(docs, {"g": 1}), [0, 2, 4, 1, 3, 5])
        self.assertEqual(self.ids(docs, {"g": -1, "v": 1}), [5, 3, 1, 4, 2, 0])

    def test_invalid_sort_specs(self):
        self.assertMongoError(15975, sort_documents, [], {"a": 2}, code_name="Location15975")
        self.assertMongoError(15976, sort_documents, [], {})


# ======================================================================== query

class QueryComparisonTest(MongoErrorAssertions):
    def test_implicit_equality_and_eq(self):
        self.assertTrue(matches({"a": 1}, {"a": 1}))
        self.assertTrue(matches({"a": 1.0}, {"a": Int64(1)}))
        self.assertTrue(matches({"a": Decimal128("1")}, {"a": {"$eq": 1}}))
        self.assertFalse(matches({"a": "1"}, {"a": 1}))
        self.assertFalse(matches({"a": True}, {"a": 1}))

    def test_embedded_document_equality_is_exact_and_ordered(self):
        self.assertTrue(matches({"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "y": 2}}))
        self.assertFalse(matches({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}))
        self.assertFalse(matches({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}))

    def test_null_matches_missing_and_null_but_not_other_values(self):
        self.assertTrue(matches({}, {"a": None}))
        self.assertTrue(matches({"a": None}, {"a": None}))
        self.assertFalse(matches({"a": 0}, {"a": None}))
        self.assertTrue(matches({"a": [1, None]}, {"a": None}))
        self.assertTrue(matches({"a": {"c": 1}}, {"a.b": None}))
        self.assertTrue(matches({"a": [{"b": 1}, {"c": 1}]}, {"a.b": None}))
        self.assertTrue(matches({}, {"a": {"$gte": None}}))
        self.assertFalse(matches({}, {"a": {"$gt": None}}))

    def test_ordering_operators_stay_within_type_bracket(self):
        doc = {"n": 5, "s": "m", "d": D1}
        self.assertTrue(matches(doc, {"n": {"$gt": 4, "$lte": 5}}))
        self.assertFalse(matches(doc, {"n": {"$gt": "a"}}))
        self.assertFalse(matches(doc, {"s": {"$gt": 1}}))
        self.assertTrue(matches(doc, {"s": {"$lt": "z", "$gte": "m"}}))
        self.assertTrue(matches(doc, {"d": {"$lt": D2}}))
        self.assertFalse(matches(doc, {"d": {"$lt": 10 ** 15}}))
        self.assertTrue(matches({"n": Decimal128("5.5")}, {"n": {"$gt": 5, "$lt": 6.0}}))

    def test_minkey_and_maxkey_bound_every_type(self):
        self.assertTrue(matches({"a": "x"}, {"a": {"$gt": MinKey()}}))
        self.assertTrue(matches({"a": OID1}, {"a": {"$lt": MaxKey()}}))
        self.assertFalse(matches({"a": 1}, {"a": {"$lt": MinKey()}}))

    def test_nan_only_equals_nan(self):
        self.assertTrue(matches({"a": float("nan")}, {"a": float("nan")}))
        self.assertFalse(matches({"a": float("nan")}, {"a": {"$lt": 0}}))
        self.assertTrue(matches({"a": float("nan")}, {"a": {"$gte": float("nan")}}))

    def test_ne_and_nin_negate_the_whole_array(self):
        self.assertFalse(matches({"a": [1, 2]}, {"a": {"$ne": 1}}))
        self.assertTrue(matches({"a": [1, 2]}, {"a": {"$ne": 3}}))
        self.assertTrue(matches({}, {"a": {"$ne": 1}}))
        self.assertFalse(matches({}, {"a": {"$ne": None}}))
        self.assertFalse(matches({"a": [1, 5]}, {"a": {"$nin": [5, 6]}}))
        self.assertTrue(matches({"a": 7}, {"a": {"$nin": [5, 6]}}))

    def test_in_with_values_null_arrays_and_regexes(self):
        self.assertTrue(matches({"a": 2.0}, {"a": {"$in": [1, 2]}}))
        self.assertTrue(matches({}, {"a": {"$in": [None]}}))
        self.assertTrue(matches({"a": ["x", "y"]}, {"a": {"$in": ["y"]}}))
        self.assertTrue(matches({"a": [1, 2]}, {"a": {"$in": [[1, 2]]}}))
        self.assertTrue(matches({"a": "Hello"}, {"a": {"$in": [re.compile("^h", re.I)]}}))
        self.assertFalse(matches({"a": "x"}, {"a": {"$in": []}}))

    def test_in_errors(self):
        self.assertMongoError(2, matches, {}, {"a": {"$in": 1}}, code_name="BadValue",
                              msg="$in needs an array")
        self.assertMongoError(2, matches, {}, {"a": {"$nin": {"x": 1}}}, msg="$nin needs an array")
        self.assertMongoError(2, matches, {}, {"a": {"$in": [{"$gt": 1}]}},
                              msg="cannot nest $ under $in")


class QueryArrayAndPathTest(MongoErrorAssertions):
    def test_array_field_matches_any_element_or_whole_array(self):
        doc = {"tags": ["a", "b"], "m": [[1, 2], 3]}
        self.assertTrue(matches(doc, {"tags": "b"}))
        self.assertTrue(matches(doc, {"tags": ["a", "b"]}))
        self.assertFalse(matches(doc, {"tags": ["b", "a"]}))
        self.assertTrue(matches(doc, {"m": [1, 2]}))
        self.assertFalse(matches(doc, {"m": 1}))

    def test_dotted_path_traverses_arrays_of_documents(self):
        doc = {"a": [{"b": 1}, {"b": [2, 3]}, 7, [{"b": 9}]]}
        self.assertTrue(matches(doc, {"a.b": 1}))
        self.assertTrue(matches(doc, {"a.b": 3}))
        self.assertFalse(matches(doc, {"a.b": 9}))

    def test_numeric_path_component_indexes_arrays(self):
        doc = {"a": [10, 20], "b": [{"x": 1}, {"x": 2}], "c": {"0": "zero"}}
        self.assertTrue(matches(doc, {"a.1": 20}))
        self.assertFalse(matches(doc, {"a.1": 10}))
        self.assertTrue(matches(doc, {"b.1.x": 2}))
        self.assertTrue(matches(doc, {"c.0": "zero"}))
        self.assertTrue(matches({"a": [{"0": "f"}]}, {"a.0": {"0": "f"}}))

    def test_offset_component_on_documents_and_scalars_follows_mongod(self):
        self.assertTrue(matches({"a": [{"0": 7}]}, {"a.0": 7}))
        self.assertTrue(matches({"a": [[{"b": 1}]]}, {"a.0.b": 1}))
        self.assertFalse(matches({"a": [5]}, {"a.0.b": None}))
        self.assertFalse(matches({"a": [[1, 2]]}, {"a.0": 1}))
        self.assertTrue(matches({"a": [[1, 2]]}, {"a.0": [1, 2]}))
        self.assertTrue(matches({"k": [{"k1": "s"}]}, {"k.k1.k2": {"$in": [None, 1]}}))

    def test_comparison_on_array_matches_if_any_element_does(self):
        self.assertTrue(matches({"a": [0, 10]}, {"a": {"$gt": 5, "$lt": 5}}))
        self.assertFalse(matches({"a": [0, 10]}, {"a": {"$elemMatch": {"$gt": 5, "$lt": 5}}}))

    def test_get_values_follows_query_traversal(self):
        doc = {"a": [{"b": 1}, {"c": 2}, {"b": [3]}], "x": {"y": 5}}
        self.assertEqual(get_values(doc, "a.b"), [1, [3]])
        self.assertEqual(get_values(doc, "x.y"), [5])
        self.assertEqual(get_values(doc, "x.z"), [])


class QueryOperatorTest(MongoErrorAssertions):
    def test_exists(self):
        doc = {"a": None, "b": {"c": 1}, "d": [{"e": 1}, {}]}
        self.assertTrue(matches(doc, {"a": {"$exists": True}}))
        self.assertTrue(matches(doc, {"z": {"$exists": False}}))
        self.assertTrue(matches(doc, {"b.c": {"$exists": 1}}))
        self.assertFalse(matches(doc, {"b.c": {"$exists": False}}))
        self.assertTrue(matches(doc, {"d.e": {"$exists": True}}))
        self.assertFalse(matches(doc, {"d.e": {"$exists": False}}))

    def test_type_by_alias_number_list_and_number_keyword(self):
        doc = {"i": 1, "l": Int64(1), "d": 1.5, "s": "x", "arr": ["x"], "n": None}
        self.assertTrue(matches(doc, {"i": {"$type": "int"}}))
        self.assertTrue(matches(doc, {"i": {"$type": 16}}))
        self.assertTrue(matches(doc, {"l": {"$type": "long"}}))
        self.assertFalse(matches(doc, {"l": {"$type": "int"}}))
        self.assertTrue(matches(doc, {"d": {"$type": "number"}}))
        self.assertTrue(matches(doc, {"s": {"$type": ["int", "string"]}}))
        self.assertTrue(matches(doc, {"arr": {"$type": "array"}}))
        self.assertTrue(matches(doc, {"arr": {"$type": "string"}}))
        self.assertTrue(matches(doc, {"n": {"$type": "null"}}))
        self.assertFalse(matches(doc, {"missing": {"$type": "null"}}))

    def test_type_errors(self):
        self.assertMongoError(2, matches, {}, {"a": {"$type": "nope"}},
                              msg="Unknown type name alias: nope")
        self.assertMongoError(2, matches, {}, {"a": {"$type": 99}})
        self.assertMongoError(14, matches, {}, {"a": {"$type": {}}}, code_name="TypeMismatch")

    def test_regex_operator_options_and_values(self):
        doc = {"s": "Hello\nWorld", "arr": ["abc", "XYZ"], "r": Regex("^a", "i"), "n": 5}
        self.assertTrue(matches(doc, {"s": {"$regex": "^world", "$options": "im"}}))
        self.assertFalse(matches(doc, {"s": {"$regex": "^world", "$options": "i"}}))
        self.assertTrue(matches(doc, {"s": {"$regex": "hello.world", "$options": "is"}}))
        self.assertTrue(matches(doc, {"s": re.compile("WORLD", re.I)}))
        self.assertTrue(matches(doc, {"s": Regex("^Hel", "")}))
        self.assertTrue(matches(doc, {"arr": {"$regex": "^x", "$options": "i"}}))
        self.assertTrue(matches(doc, {"r": Regex("^a", "i")}))
        self.assertFalse(matches(doc, {"n": {"$regex": "5"}}))
        self.assertFalse(matches({"s": "a\n"}, {"s": {"$regex": r"a\z"}}))
        self.assertTrue(matches({"s": "a\n"}, {"s": {"$regex": r"a\Z"}}))
        self.assertTrue(matches({"s": "ab"}, {"s": {"$regex": r"(?<x>a)\k<x>?b"}}))

    def test_regex_errors(self):
        self.assertMongoError(51108, matches, {}, {"a": {"$regex": "x", "$options": "q"}},
                              code_name="Location51108", msg="invalid flag in regex options: q")
        self.assertMongoError(2, matches, {}, {"a": {"$options": "i"}},
                              msg="$options needs a $regex")
        self.assertMongoError(2, matches, {}, {"a": {"$regex": 5}},
                              msg="$regex has to be a string")
        self.assertMongoError(51091, matches, {}, {"a": {"$regex": "("}})

    def test_elem_match_value_and_document_forms(self):
        doc = {"scores": [3, 8], "items": [{"k": "a", "v": 1}, {"k": "b", "v": 5}]}
        self.assertTrue(matches(doc, {"scores": {"$elemMatch": {"$gt": 5, "$lt": 9}}}))
        self.assertFalse(matches(doc, {"scores": {"$elemMatch": {"$gt": 8}}}))
        self.assertTrue(matches(doc, {"items": {"$elemMatch": {"k": "b", "v": {"$gte": 5}}}}))
        self.assertFalse(matches(doc, {"items": {"$elemMatch": {"k": "a", "v": 5}}}))
        self.assertFalse(matches({"scores": 7}, {"scores": {"$elemMatch": {"$gt": 5}}}))
        self.assertMongoError(2, matches, {}, {"a": {"$elemMatch": 1}},
                              msg="$elemMatch needs an Object")

    def test_size(self):
        self.assertTrue(matches({"a": [1, 2]}, {"a": {"$size": 2}}))
        self.assertFalse(matches({"a": [[1, 2]]}, {"a": {"$size": 2}}))
        self.assertFalse(matches({"a": "xy"}, {"a": {"$size": 2}}))
        self.assertTrue(matches({"a": [{"b": [1]}]}, {"a.b": {"$size": 1}}))
        self.assertMongoError(2, matches, {}, {"a": {"$size": -1}}, msg="$size may not be negative")
        self.assertMongoError(2, matches, {}, {"a": {"$size": 1.5}}, msg="$size must be a whole number")
        self.assertMongoError(2, matches, {}, {"a": {"$size": "1"}}, msg="$size needs a number")

    def test_all(self):
        doc = {"t": ["a", "b", "c"], "o": [{"x": 1}, {"x": 2}]}
        self.assertTrue(matches(doc, {"t": {"$all": ["c", "a"]}}))
        self.assertFalse(matches(doc, {"t": {"$all": ["a", "z"]}}))
        self.assertFalse(matches(doc, {"t": {"$all": []}}))
        self.assertTrue(matches(doc, {"o": {"$all": [{"$elemMatch": {"x": 1}},
                                                     {"$elemMatch": {"x": 2}}]}}))
        self.assertMongoError(2, matches, {}, {"a": {"$all": 1}}, msg="$all needs an array")

    def test_not(self):
        self.assertTrue(matches({"a": 1}, {"a": {"$not": {"$gt": 5}}}))
        self.assertFalse(matches({"a": [1, 9]}, {"a": {"$not": {"$gt": 5}}}))
        self.assertTrue(matches({}, {"a": {"$not": {"$gt": 5}}}))
        self.assertTrue(matches({"a": "xyz"}, {"a": {"$not": re.compile("^a")}}))
        self.assertMongoError(2, matches, {}, {"a": {"$not": 5}},
                              msg="$not needs a regex or a document")
        self.assertMongoError(2, matches, {}, {"a": {"$not": {}}}, msg="$not cannot be empty")

    def test_logical_operators(self):
        doc = {"a": 1, "b": 2}
        self.assertTrue(matches(doc, {"$and": [{"a": 1}, {"b": 2}]}))
        self.assertTrue(matches(doc, {"$or": [{"a": 5}, {"b": 2}]}))
        self.assertFalse(matches(doc, {"$nor": [{"a": 5}, {"b": 2}]}))
        self.assertTrue(matches(doc, {"$nor": [{"a": 5}]}))
        self.assertMongoError(2, matches, {}, {"$and": []},
                              msg="$and/$or/$nor must be a nonempty array")
        self.assertMongoError(2, matches, {}, {"$or": [1]},
                              msg="$or/$and/$nor entries need to be full objects")

    def test_mod_and_expr(self):
        self.assertTrue(matches({"a": 10}, {"a": {"$mod": [4, 2]}}))
        self.assertTrue(matches({"a": -10}, {"a": {"$mod": [4, -2]}}))
        self.assertFalse(matches({"a": "10"}, {"a": {"$mod": [4, 2]}}))
        self.assertMongoError(2, matches, {}, {"a": {"$mod": [0, 1]}}, msg="divisor cannot be 0")
        self.assertMongoError(2, matches, {}, {"a": {"$mod": [float("nan"), 1]}})
        self.assertTrue(matches({"a": 3, "b": 2}, {"$expr": {"$gt": ["$a", "$b"]}}))
        self.assertFalse(matches({"a": 1, "b": 2}, {"$expr": {"$gt": ["$a", "$b"]}}))

    def test_unknown_and_unsupported_operators(self):
        self.assertMongoError(2, matches, {}, {"a": {"$foo": 1}}, code_name="BadValue",
                              msg="unknown operator: $foo")
        err = self.assertMongoError(2, validate_filter, {"$foo": 1})
        self.assertTrue(err.errmsg.startswith("unknown top level operator: $foo."))
        self.assertMongoError(2, validate_filter, {"a": {"$gt": 1, "b": 1}},
                              msg="unknown operator: b")
        self.assertMongoError(238, validate_filter, {"$where": "true"}, code_name="NotImplemented")
        self.assertMongoError(238, validate_filter, {"a": {"$bitsAllSet": 1}})
        self.assertMongoError(2, validate_filter, {"a": {"$ne": re.compile("x")}},
                              msg="Can't have regex as arg to $ne.")
        self.assertMongoError(2, validate_filter, {"a.b": {"$gt": Regex("x", "")}},
                              msg="Can't have RegEx as arg to predicate over field 'a.b'.")
        self.assertMongoError(2, validate_filter, {"a": {"$where": "1"}},
                              msg="$where cannot be applied to a field")

    def test_compiled_filter_and_cache_give_same_answers(self):
        f = {"a": {"$in": [1, 2]}, "b.c": {"$regex": "^x"}}
        fn = compile_filter(f)
        docs = [{"a": 1, "b": {"c": "xa"}}, {"a": 3, "b": {"c": "xa"}}, {"a": 2, "b": [{"c": "y"}]}]
        self.assertEqual([fn(d) for d in docs], [True, False, False])
        self.assertEqual([matches(d, f) for d in docs], [True, False, False])
        f["a"]["$in"].append(3)     # a mutated filter must not hit a stale cache entry
        self.assertTrue(matches(docs[1], f))


class ProjectionTest(MongoErrorAssertions):
    DOC = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "arr": [{"x": 1, "y": 2}, 5, {"y": 3}]}

    def test_inclusion_keeps_document_order_and_id(self):
        self.assertEqual(list(project(self.DOC, {"b": 1, "a": 1})), ["_id", "a", "b"])
        self.assertEqual(project(self.DOC, {"b.c": 1, "_id": 0}), {"b": {"c": 2}})
        self.assertEqual(project(self.DOC, {"arr.y": 1}), {"_id": 1, "arr": [{"y": 2}, {"y": 3}]})
        self.assertEqual(project(self.DOC, {"_id": 1}), {"_id": 1})

    def test_exclusion(self):
        self.assertEqual(project(self.DOC, {"b": 0, "arr": 0}), {"_id": 1, "a": 1})
        self.assertEqual(project(self.DOC, {"b.c": 0, "arr.x": 0, "_id": 0}),
                         {"a": 1, "b": {"d": 3}, "arr": [{"y": 2}, 5, {"y": 3}]})
        self.assertEqual(project(self.DOC, {"_id": 0, "arr": 0, "b": 0}), {"a": 1})

    def test_mixing_inclusion_and_exclusion_is_rejected(self):
        self.assertMongoError(31254, project, self.DOC, {"a": 1, "b": 0},
                              code_name="Location31254",
                              msg="Cannot do exclusion on field b in inclusion projection")
        self.assertMongoError(31253, project, self.DOC, {"a": 0, "b.c": 1},
                              msg="Cannot do inclusion on field b.c in exclusion projection")
        self.assertEqual(project(self.DOC, {"_id": 0, "a": 1}), {"a": 1})

    def test_expressions_slice_and_elem_match_in_find(self):
        self.assertEqual(project(self.DOC, {"a": 1, "z": {"$add": ["$a", "$b.c"]}}),
                         {"_id": 1, "a": 1, "z": 3})
        self.assertEqual(project({"_id": 1, "a": [1, 2, 3], "k": 1}, {"a": {"$slice": -2}}),
                         {"_id": 1, "a": [2, 3], "k": 1})
        self.assertEqual(project({"_id": 1, "a": [1, 2, 3]}, {"a": {"$slice": [1, 1]}}),
                         {"_id": 1, "a": [2]})
        self.assertEqual(project(self.DOC, {"arr": {"$elemMatch": {"y": 3}}}),
                         {"_id": 1, "arr": [{"y": 3}]})
        self.assertMongoError(31252, project, self.DOC, {"a": 0, "z": {"$add": [1, 2]}})
        self.assertMongoError(238, project, self.DOC, {"arr.$": 1})

    def test_path_collisions(self):
        self.assertMongoError(31249, project, self.DOC, {"a": 1, "a.b": 1},
                              msg="Path collision at a.b remaining portion b")
        self.assertMongoError(31250, project, self.DOC, {"a.b": 1, "a": 1},
                              msg="Path collision at a")


# ======================================================================= update

class UpdateOperatorTest(MongoErrorAssertions):
    BASE = {"_id": 1, "a": 1, "tags": ["x", "y"], "n": {"m": 1}}

    def upd(self, update, doc=None, **kw):
        doc = copy.deepcopy(self.BASE) if doc is None else doc
        before = copy.deepcopy(doc)
        new, desc = apply_update(doc, update, **kw)
        self.assertEqual(doc, before, "input document was mutated")
        return new, desc

    def test_set_existing_keeps_position_new_fields_append_in_path_order(self):
        new, desc = self.upd({"$set": {"z": 1, "b": 2, "a": 5}})
        self.assertEqual(list(new), ["_id", "a", "tags", "n", "b", "z"])
        self.assertEqual(desc, {"updatedFields": {"a": 5, "b": 2, "z": 1}, "removedFields": [],
                                "truncatedArrays": []})

    def test_set_dotted_creates_parents_and_reports_first_new_component(self):
        new, desc = self.upd({"$set": {"p.q.r": 1, "n.k": 2, "n.m": 1}})
        self.assertEqual(new["p"], {"q": {"r": 1}})
        self.assertEqual(new["n"], {"m": 1, "k": 2})
        self.assertEqual(desc["updatedFields"], {"n.k": 2, "p": {"q": {"r": 1}}})

    def test_set_values_are_copies_of_the_update_s(self):
        # The same $set applied to two documents (a multi update) leaves each its own value.
        spec = {"$set": {"v": {"k": [1, {"d": 2}]}, "o": OID1, "i": Int64(7), "t": D1}}
        first, _ = self.upd(spec)
        second, _ = self.upd(spec)
        first["v"]["k"][1]["d"] = 3
        first["v"]["k"].append(4)
        self.assertEqual(second["v"], {"k": [1, {"d": 2}]})
        self.assertEqual(spec["$set"]["v"], {"k": [1, {"d": 2}]})
        self.assertEqual((second["o"], second["i"], second["t"]), (OID1, Int64(7), D1))
        self.assertIs(type(second["i"]), Int64)

    def test_set_array_index_and_padding(self):
        new, desc = self.upd({"$set": {"tags.1": "Y", "tags.4": "E"}})
        self.assertEqual(new["tags"], ["x", "Y", None, None, "E"])
        self.assertEqual(desc["updatedFields"], {"tags.1": "Y", "tags.4": "E"})

    def test_set_same_value_is_a_noop_but_other_numeric_type_is_not(self):
        new, desc = self.upd({"$set": {"a": 1}})
        self.assertEqual(desc["updatedFields"], {})
        new, desc = self.upd({"$set": {"a": 1.0}})
        self.assertEqual(desc["updatedFields"], {"a": 1.0})

    def test_unset(self):
        new, desc = self.upd({"$unset": {"a": "", "n.m": 1, "nope": 1, "tags.0": 1}})
        self.assertEqual(new, {"_id": 1, "tags": [None, "y"], "n": {}})
        self.assertEqual(desc["removedFields"], ["a", "n.m"])
        self.assertEqual(desc["updatedFields"], {"tags.0": None})

    def test_inc_and_mul_numeric_types(self):
        doc = {"_id": 1, "i": 2147483647, "l": Int64(1), "d": 1.5, "dec": Decimal128("1.1")}
        new, _ = self.upd({"$inc": {"i": 1, "l": 1, "d": 1, "dec": 1, "new": Int64(3)}}, doc)
        self.assertEqual(new["i"], 2147483648)
        self.assertIsInstance(new["i"], Int64)
        self.assertIsInstance(new["l"], Int64)
        self.assertEqual(new["d"], 2.5)
        self.assertEqual(new["dec"], Decimal128("2.1"))
        self.assertIsInstance(new["new"], Int64)
        new, desc = self.upd({"$mul": {"a": 3, "none": 2.0}})
        self.assertEqual((new["a"], new["none"]), (3, 0.0))
        self.assertIsInstance(new["none"], float)

    def test_inc_errors(self):
        self.assertMongoError(14, apply_update, {"_id": 1, "s": "x"}, {"$inc": {"s": 1}},
                              code_name="TypeMismatch",
                              msg="Cannot apply $inc to a value of non-numeric type. {_id: 1} has "
                                  "the field 's' of non-numeric type string")
        self.assertMongoError(14, apply_update, {}, {"$inc": {"s": "1"}},
                              msg='Cannot increment with non-numeric argument: {s: "1"}')
        self.assertMongoError(2, apply_update, {"_id": 1, "l": Int64(2 ** 63 - 1)},
                              {"$inc": {"l": 1}}, code_name="BadValue")

    def test_min_max_use_bson_order(self):
        new, desc = self.upd({"$min": {"a": 0, "x": 5}, "$max": {"n.m": "str"}})
        self.assertEqual((new["a"], new["x"], new["n"]["m"]), (0, 5, "str"))
        _, desc = self.upd({"$min": {"a": 2}, "$max": {"n.m": 0}})
        self.assertEqual(desc["updatedFields"], {})

    def test_push_appends_report_element_paths(self):
        new, desc = self.upd({"$push": {"tags": "z"}})
        self.assertEqual(new["tags"], ["x", "y", "z"])
        self.assertEqual(desc["updatedFields"], {"tags.2": "z"})
        new, desc = self.upd({"$push": {"tags": {"$each": ["p", "q"]}}})
        self.assertEqual(desc["updatedFields"], {"tags.2": "p", "tags.3": "q"})

    def test_push_modifiers_report_whole_array(self):
        new, desc = self.upd({"$push": {"tags": {"$each": ["a"], "$position": 0}}})
        self.assertEqual(new["tags"], ["a", "x", "y"])
        self.assertEqual(desc["updatedFields"], {"tags": ["a", "x", "y"]})
        new, desc = self.upd({"$push": {"tags": {"$each": ["a", "z"], "$sort": -1, "$slice": 3}}})
        self.assertEqual(new["tags"], ["z", "y", "x"])
        doc = {"_id": 1, "o": [{"k": 2}, {"k": 1}]}
        new, _ = self.upd({"$push": {"o": {"$each": [{"k": 0}], "$sort": {"k": 1}, "$slice": -2}}},
                          doc)
        self.assertEqual(new["o"], [{"k": 1}, {"k": 2}])
        new, desc = self.upd({"$push": {"fresh": 1, "empty": {"$each": []}}})
        self.assertEqual(desc["updatedFields"], {"empty": [], "fresh": [1]})
        _, desc = self.upd({"$push": {"tags": {"$each": []}}})
        self.assertEqual(desc["updatedFields"], {})

    def test_push_errors(self):
        self.assertMongoError(2, apply_update, {"_id": 1, "a": 1}, {"$push": {"a": 2}},
                              msg="The field 'a' must be an array but is of type int in document "
                                  "{_id: 1}")
        self.assertMongoError(2, apply_update, {}, {"$push": {"a": {"$each": 1}}})
        self.assertMongoError(2, apply_update, {}, {"$push": {"a": {"$each": [], "$bad": 1}}},
                              msg="Unrecognized clause in $push: $bad")

    def test_add_to_set(self):
        new, desc = self.upd({"$addToSet": {"tags": {"$each": ["y", "z", "z"]}}})
        self.assertEqual(new["tags"], ["x", "y", "z"])
        self.assertEqual(desc["updatedFields"], {"tags": ["x", "y", "z"]})
        _, desc = self.upd({"$addToSet": {"tags": "x"}})
        self.assertEqual(desc["updatedFields"], {})
        self.assertMongoError(2, apply_update, {"a": 1}, {"$addToSet": {"a": 1}},
                              msg="Cannot apply $addToSet to non-array field. Field named 'a' has "
                                  "non-array type int")

    def test_pull_pull_all_and_pop(self):
        doc = {"_id": 1, "n": [1, 5, 8, 5], "o": [{"k": 1, "v": 2}, {"k": 2}]}
        new, desc = self.upd({"$pull": {"n": {"$gte": 6}, "o": {"k": 1}}}, doc)
        self.assertEqual(new["n"], [1, 5, 5])
        self.assertEqual(new["o"], [{"k": 2}])
        self.assertEqual(desc["updatedFields"], {"n": [1, 5, 5], "o": [{"k": 2}]})
        new, _ = self.upd({"$pull": {"n": 5}}, doc)
        self.assertEqual(new["n"], [1, 8])
        new, _ = self.upd({"$pullAll": {"n": [1, 8]}, "$pop": {"o": -1}}, doc)
        self.assertEqual((new["n"], new["o"]), ([5, 5], [{"k": 2}]))
        _, desc = self.upd({"$pull": {"n": 99}, "$pop": {"missing": 1}}, doc)
        self.assertEqual(desc["updatedFields"], {})
        self.assertMongoError(9, apply_update, doc, {"$pop": {"n": 2}}, code_name="FailedToParse")
        self.assertMongoError(28, apply_update, {"a": 1}, {"$pull": {"a.b": 1}},
                              msg="Cannot use the part (b) of (a.b) to traverse the element "
                                  "({a: 1})")
        self.assertMongoError(2, apply_update, {"a": 1}, {"$pull": {"a": 1}},
                              msg="Cannot apply $pull to a non-array value")
        self.assertMongoError(14, apply_update, {"a": 1}, {"$pop": {"a": 1}},
                              msg="Path 'a' contains an element of non-array type 'int'")
        _, desc = self.upd({"$unset": {"a.b": 1}})
        self.assertEqual(desc, {"updatedFields": {}, "removedFields": [], "truncatedArrays": []})

    def test_rename(self):
        new, desc = self.upd({"$rename": {"a": "z", "n.m": "n.k"}})
        self.assertEqual(new, {"_id": 1, "tags": ["x", "y"], "n": {"k": 1}, "z": 1})
        self.assertEqual(desc["removedFields"], ["n.m", "a"])
        self.assertEqual(desc["updatedFields"], {"n.k": 1, "z": 1})
        self.assertMongoError(2, apply_update, self.BASE, {"$rename": {"a": "a"}})
        self.assertMongoError(2, apply_update, self.BASE, {"$rename": {"tags.0": "q"}})

    def test_current_date_and_set_on_insert(self):
        now = datetime.datetime(2022, 5, 6, 7, 8, 9, 123456)
        new, _ = self.upd({"$currentDate": {"d": True, "t": {"$type": "timestamp"}}}, now=now)
        self.assertEqual(new["d"], datetime.datetime(2022, 5, 6, 7, 8, 9, 123000))
        self.assertEqual(new["t"], Timestamp(1651820889, 1))
        new, _ = self.upd({"$setOnInsert": {"s": 1}})
        self.assertNotIn("s", new)
        new, _ = self.upd({"$setOnInsert": {"s": 1}}, is_upsert_insert=True)
        self.assertEqual(new["s"], 1)
        self.assertMongoError(2, apply_update, {}, {"$currentDate": {"d": {"$type": "x"}}})


class UpdateErrorTest(MongoErrorAssertions):
    DOC = {"_id": 1, "a": 1, "arr": [1]}

    def test_modifying_id_is_immutable_field_error(self):
        self.assertMongoError(66, apply_update, self.DOC, {"$set": {"_id": 2}},
                              code_name="ImmutableField",
                              msg="Updating the path '_id' to _id: 2 would modify the immutable "
                                  "field '_id'")
        self.assertMongoError(66, apply_update, self.DOC, {"$inc": {"_id": 1}},
                              msg="Performing an update on the path '_id' would modify the "
                                  "immutable field '_id'")
        self.assertMongoError(66, apply_update, self.DOC, {"$unset": {"_id": 1}})
        new, desc = apply_update(self.DOC, {"$set": {"_id": 1}})
        self.assertEqual(desc["updatedFields"], {})

    def test_conflicting_paths(self):
        self.assertMongoError(40, apply_update, self.DOC, {"$set": {"a": 1}, "$inc": {"a": 1}},
                              code_name="ConflictingUpdateOperators",
                              msg="Updating the path 'a' would create a conflict at 'a'")
        self.assertMongoError(40, apply_update, self.DOC, {"$set": {"a": 1, "a.b": 1}},
                              msg="Updating the path 'a.b' would create a conflict at 'a'")
        self.assertMongoError(40, apply_update, self.DOC, {"$set": {"x.y": 1}, "$unset": {"x": 1}},
                              msg="Updating the path 'x' would create a conflict at 'x'")

    def test_path_not_viable_and_bad_operands(self):
        self.assertMongoError(28, apply_update, self.DOC, {"$set": {"a.b": 1}},
                              code_name="PathNotViable",
                              msg="Cannot create field 'b' in element {a: 1}")
        self.assertMongoError(28, apply_update, self.DOC, {"$set": {"arr.x": 1}})
        self.assertMongoError(9, apply_update, self.DOC, {"$foo": {"a": 1}},
                              code_name="FailedToParse",
                              msg="Unknown modifier: $foo. Expected a valid update modifier or "
                                  "pipeline-style update specified as an array")
        self.assertMongoError(9, apply_update, self.DOC, {"$set": 5})
        self.assertMongoError(56, apply_update, self.DOC, {"$set": {"": 5}},
                              code_name="EmptyFieldName")
        self.assertMongoError(238, apply_update, self.DOC, {"$set": {"arr.$": 5}})

    def test_is_replacement(self):
        self.assertTrue(is_replacement({"a": 1}))
        self.assertTrue(is_replacement({}))
        self.assertFalse(is_replacement({"$set": {"a": 1}}))
        self.assertMongoError(9, is_replacement, {"$set": {"a": 1}, "b": 1},
                              msg="Unknown modifier: b. Expected a valid update modifier or "
                                  "pipeline-style update specified as an array")
        self.assertMongoError(52, is_replacement, {"b": 1, "$set": {"a": 1}},
                              code_name="DollarPrefixedFieldName")

    def test_apply_replacement_keeps_id(self):
        self.assertEqual(apply_replacement(self.DOC, {"b": 2}), {"_id": 1, "b": 2})
        self.assertEqual(apply_replacement(self.DOC, {"_id": 1, "b": 2}), {"_id": 1, "b": 2})
        self.assertMongoError(66, apply_replacement, self.DOC, {"_id": 2},
                              msg="After applying the update, the (immutable) field '_id' was "
                                  "found to have been altered to _id: 2")

    def test_upsert_seed(self):
        seed = upsert_seed({"b": 1, "_id": 5, "a.c": {"$eq": 2}, "x": {"$gt": 1},
                            "$and": [{"d": "q"}], "r": re.compile("x"), "i": {"$in": [7]}})
        self.assertEqual(list(seed), ["_id", "a", "b", "d", "i"])
        self.assertEqual(seed, {"_id": 5, "a": {"c": 2}, "b": 1, "d": "q", "i": 7})
        new, _ = apply_update(seed, {"$set": {"z": 1}, "$setOnInsert": {"c": 0}},
                              is_upsert_insert=True)
        self.assertEqual(list(new), ["_id", "a", "b", "d", "i", "c", "z"])
        new, _ = apply_update({"k": 1}, {"$setOnInsert": {"_id": 9}}, is_upsert_insert=True)
        self.assertEqual(list(new), ["_id", "k"])
        self.assertMongoError(54, upsert_seed, {"a": 1, "$and": [{"a": 2}]},
                              code_name="NotSingleValueField")
        self.assertMongoError(54, upsert_seed, {"a": 1, "a.b": 2})


# ==================================================================== aggregate

DOCS = [{"_id": 1, "g": "x", "v": 1, "t": ["a", "b"]},
        {"_id": 2, "g": "y", "v": 2.5, "t": []},
        {"_id": 3, "g": "x", "v": Int64(3)},
        {"_id": 4, "v": "str", "t": None}]


class PipelineStageTest(MongoErrorAssertions):
    def test_match_sort_skip_limit(self):
        out = run_pipeline(DOCS, [{"$match": {"v": {"$type": "number"}}}, {"$sort": {"v": -1}},
                                  {"$skip": 1}, {"$limit": 1}])
        self.assertEqual([d["_id"] for d in out], [2])
        self.assertMongoError(15958, run_pipeline, DOCS, [{"$limit": 0}])
        self.assertMongoError(15956, run_pipeline, DOCS, [{"$skip": -1}])

    def test_project_add_fields_set_unset(self):
        out = run_pipeline(DOCS[:1], [{"$project": {"g": 1, "dbl": {"$multiply": ["$v", 2]}}}])
        self.assertEqual(out, [{"_id": 1, "g": "x", "dbl": 2}])
        out = run_pipeline(DOCS[:1], [{"$addFields": {"v": 9, "n.m": "$g", "t": "$$REMOVE"}},
                                      {"$set": {"w": {"$literal": "$v"}}}, {"$unset": ["g"]}])
        self.assertEqual(out, [{"_id": 1, "v": 9, "n": {"m": "x"}, "w": "$v"}])
        e = self.assertMongoError(31254, run_pipeline, DOCS, [{"$project": {"a": 1, "b": 0}}])
        self.assertEqual(e.errmsg, "Invalid $project :: caused by :: Cannot do exclusion on field "
                                   "b in inclusion projection")
        self.assertMongoError(51272, run_pipeline, DOCS, [{"$project": {}}])
        self.assertMongoError(40177, run_pipeline, DOCS, [{"$addFields": {}}])

    def test_add_fields_into_arrays_of_documents(self):
        out = run_pipeline([{"a": [{"b": 1}, 2]}], [{"$addFields": {"a.c": 5}}])
        self.assertEqual(out, [{"a": [{"b": 1, "c": 5}, {"c": 5}]}])

    def test_group_accumulators(self):
        out = run_pipeline(DOCS, [{"$group": {
            "_id": "$g", "sum": {"$sum": "$v"}, "avg": {"$avg": "$v"}, "min": {"$min": "$v"},
            "max": {"$max": "$v"}, "first": {"$first": "$t"}, "last": {"$last": "$t"},
            "push": {"$push": "$v"}, "set": {"$addToSet": "$g"}, "n": {"$sum": 1},
            "c": {"$count": {}}}}])
        by_id = {d["_id"]: d for d in out}
        self.assertEqual([d["_id"] for d in out], ["x", "y", None])
        self.assertEqual(by_id["x"]["sum"], 4)
        self.assertIsInstance(by_id["x"]["sum"], Int64)
        self.assertEqual(by_id["x"]["avg"], 2.0)
        self.assertEqual((by_id["x"]["min"], by_id["x"]["max"]), (1, 3))
        self.assertEqual((by_id["x"]["first"], by_id["x"]["last"]), (["a", "b"], None))
        self.assertEqual(by_id["x"]["push"], [1, 3])
        self.assertEqual(by_id[None]["set"], [])
        self.assertEqual(by_id[None]["sum"], 0)
        self.assertIsNone(by_id[None]["avg"])
        self.assertEqual(by_id[None]["max"], "str")
        self.assertEqual((by_id["x"]["n"], by_id["x"]["c"]), (2, 2))

    def test_group_keys_null_documents_and_numeric_equality(self):
        out = run_pipeline([{"k": 1}, {"k": 1.0}, {"k": None}, {}],
                           [{"$group": {"_id": "$k", "n": {"$sum": 1}}}])
        self.assertEqual(out, [{"_id": 1, "n": 2}, {"_id": None, "n": 2}])
        out = run_pipeline(DOCS, [{"$group": {"_id": {"g": "$g"}, "n": {"$sum": 1}}}])
        self.assertEqual(out[0], {"_id": {"g": "x"}, "n": 2})
        self.assertEqual(out[-1], {"_id": {}, "n": 1})

    def test_group_errors(self):
        self.assertMongoError(15955, run_pipeline, DOCS, [{"$group": {"n": {"$sum": 1}}}])
        self.assertMongoError(15952, run_pipeline, DOCS,
                              [{"$group": {"_id": 1, "n": {"$foo": 1}}}],
                              msg="unknown group operator '$foo'")
        self.assertMongoError(40234, run_pipeline, DOCS, [{"$group": {"_id": 1, "n": 1}}])
        self.assertMongoError(40235, run_pipeline, DOCS,
                              [{"$group": {"_id": 1, "a.b": {"$sum": 1}}}])

    def test_count(self):
        self.assertEqual(run_pipeline(DOCS, [{"$count": "total"}]), [{"total": 4}])
        self.assertEqual(run_pipeline([], [{"$count": "total"}]), [])
        self.assertMongoError(40158, run_pipeline, DOCS, [{"$count": "$x"}])
        self.assertMongoError(40160, run_pipeline, DOCS, [{"$count": "a.b"}])

    def test_unwind_string_and_document_forms(self):
        out = run_pipeline(DOCS, [{"$unwind": "$t"}])
        self.assertEqual([(d["_id"], d["t"]) for d in out], [(1, "a"), (1, "b")])
        self.assertEqual(list(out[0]), ["_id", "g", "v", "t"])
        out = run_pipeline(DOCS, [{"$unwind": {"path": "$t", "includeArrayIndex": "i",
                                               "preserveNullAndEmptyArrays": True}}])
        self.assertEqual([(d["_id"], d.get("t", "-"), d["i"]) for d in out],
                         [(1, "a", 0), (1, "b", 1), (2, "-", None), (3, "-", None),
                          (4, None, None)])
        self.assertIsInstance(out[1]["i"], Int64)
        out = run_pipeline([{"t": 5}], [{"$unwind": "$t"}])
        self.assertEqual(out, [{"t": 5}])

    def test_unwind_errors(self):
        self.assertMongoError(28818, run_pipeline, DOCS, [{"$unwind": "t"}])
        self.assertMongoError(28811, run_pipeline, DOCS, [{"$unwind": {"path": "$t", "x": 1}}])
        self.assertMongoError(28812, run_pipeline, DOCS, [{"$unwind": {}}])
        self.assertMongoError(15981, run_pipeline, DOCS, [{"$unwind": 1}])

    def test_replace_root_and_replace_with(self):
        docs = [{"_id": 1, "in": {"a": 1}}]
        self.assertEqual(run_pipeline(docs, [{"$replaceRoot": {"newRoot": "$in"}}]), [{"a": 1}])
        self.assertEqual(run_pipeline(docs, [{"$replaceWith": {"x": "$_id"}}]), [{"x": 1}])
        self.assertMongoError(40228, run_pipeline, docs, [{"$replaceRoot": {"newRoot": "$_id"}}])
        self.assertMongoError(40415, run_pipeline, docs, [{"$replaceRoot": {"x": 1}}])

    def test_redact(self):
        doc = {"_id": 1, "lvl": 1, "sub": {"lvl": 5, "s": 1}, "arr": [{"lvl": 0}, {"lvl": 9}]}
        expr = {"$cond": [{"$gt": ["$lvl", 3]}, "$$PRUNE", "$$DESCEND"]}
        out = run_pipeline([doc], [{"$redact": expr}])
        self.assertEqual(out, [{"_id": 1, "lvl": 1, "arr": [{"lvl": 0}]}])

    def test_stage_errors(self):
        self.assertMongoError(40324, run_pipeline, DOCS, [{"$foo": {}}],
                              code_name="Location40324",
                              msg="Unrecognized pipeline stage name: '$foo'")
        self.assertMongoError(40323, run_pipeline, DOCS, [{"$match": {}, "$limit": 1}])
        self.assertMongoError(238, run_pipeline, DOCS, [{"$lookup": {}}])
        self.assertMongoError(40602, run_pipeline, DOCS, [{"$changeStream": {}}])


class ExpressionTest(MongoErrorAssertions):
    DOC = {"_id": 1, "a": 5, "b": 2, "s": "Hi", "arr": [1, 2, 3], "o": [{"x": 1}, {"y": 2}, {"x": 3}],
           "nul": None, "d": D1}

    def ev(self, expr):
        return run_pipeline([self.DOC], [{"$addFields": {"r": expr}}])[0].get("r", "MISSING")

    def test_field_paths_literals_and_variables(self):
        self.assertEqual(self.ev("$a"), 5)
        self.assertEqual(self.ev("$o.x"), [1, 3])
        self.assertEqual(self.ev("$nope"), "MISSING")
        self.assertEqual(self.ev({"$literal": "$a"}), "$a")
        self.assertEqual(self.ev("$$ROOT.s"), "Hi")
        self.assertEqual(self.ev({"k": "$b", "gone": "$nope"}), {"k": 2})
        self.assertEqual(self.ev([1, "$a", "$nope"]), [1, 5, None])
        self.assertMongoError(17276, self.ev, "$$nope")

    def test_arithmetic(self):
        self.assertEqual(self.ev({"$add": ["$a", "$b", 1.5]}), 8.5)
        self.assertIsNone(self.ev({"$add": ["$a", "$nope"]}))
        self.assertEqual(self.ev({"$add": ["$d", 1000]}), D1 + datetime.timedelta(seconds=1))
        self.assertEqual(self.ev({"$subtract": ["$a", "$b"]}), 3)
        self.assertEqual(self.ev({"$subtract": [D2, "$d"]}), Int64(31622400000))
        self.assertEqual(self.ev({"$multiply": ["$a", Decimal128("1.5")]}), Decimal128("7.5"))
        self.assertEqual(self.ev({"$divide": ["$a", "$b"]}), 2.5)
        self.assertEqual(self.ev({"$mod": ["$a", "$b"]}), 1)
        self.assertEqual(self.ev({"$add": [2147483647, 1]}), Int64(2147483648))
        self.assertMongoError(2, self.ev, {"$divide": ["$a", 0]}, msg="can't $divide by zero")
        self.assertMongoError(14, self.ev, {"$add": ["$s", 1]},
                              msg="$add only supports numeric or date types, not string")
        self.assertMongoError(14, self.ev, {"$multiply": ["$s", 1]})

    def test_strings(self):
        self.assertEqual(self.ev({"$concat": ["$s", "-", "x"]}), "Hi-x")
        self.assertIsNone(self.ev({"$concat": ["$s", "$nul"]}))
        self.assertEqual(self.ev({"$toUpper": "$s"}), "HI")
        self.assertEqual(self.ev({"$toLower": "$s"}), "hi")
        self.assertEqual(self.ev({"$toUpper": "$nope"}), "")
        self.assertMongoError(16702, self.ev, {"$concat": ["$s", 1]},
                              msg="$concat only supports strings, not int")
        # $substrBytes (expression_string): bytes, a start past the end or null give "", a
        # negative length the rest, a cut inside a character is refused.
        self.assertEqual(self.ev({"$substrBytes": ["$s", 1, 5]}), "i")
        self.assertEqual(self.ev({"$substrBytes": ["$s", 0, -1]}), "Hi")
        self.assertEqual(self.ev({"$substrBytes": ["$s", 7, 1]}), "")
        self.assertEqual(self.ev({"$substrBytes": ["$nul", 0, 1]}), "")
        self.assertEqual(self.ev({"$substrBytes": ["h\u00e9", 1, 2]}), "\u00e9")
        self.assertMongoError(28656, self.ev, {"$substrBytes": ["h\u00e9", 2, 1]})
        self.assertMongoError(28657, self.ev, {"$substrBytes": ["h\u00e9", 0, 2]})
        self.assertMongoError(16034, self.ev, {"$substrBytes": ["$s", "1", 1]})

    def test_comparison_and_boolean(self):
        self.assertTrue(self.ev({"$eq": ["$a", 5.0]}))
        self.assertTrue(self.ev({"$ne": ["$a", "5"]}))
        self.assertTrue(self.ev({"$gt": ["$s", 100]}))
        self.assertFalse(self.ev({"$eq": ["$nope", None]}))
        self.assertTrue(self.ev({"$lt": ["$nope", None]}))
        self.assertTrue(self.ev({"$gte": ["$a", 5]}))
        self.assertTrue(self.ev({"$lte": ["$b", 2]}))
        self.assertTrue(self.ev({"$and": [1, "x", []]}))
        self.assertFalse(self.ev({"$and": [1, 0]}))
        self.assertTrue(self.ev({"$or": [None, "$a"]}))
        self.assertTrue(self.ev({"$not": ["$nope"]}))
        self.assertMongoError(16020, self.ev, {"$eq": [1]},
                              msg="Expression $eq takes exactly 2 arguments. 1 were passed in.")

    def test_cond_and_if_null(self):
        self.assertEqual(self.ev({"$cond": [{"$gt": ["$a", 3]}, "big", "small"]}), "big")
        self.assertEqual(self.ev({"$cond": {"if": "$nul", "then": 1, "else": 2}}), 2)
        self.assertEqual(self.ev({"$ifNull": ["$nul", "$nope", "dflt"]}), "dflt")
        self.assertEqual(self.ev({"$ifNull": ["$a", "dflt"]}), 5)
        self.assertMongoError(17080, self.ev, {"$cond": {"then": 1, "else": 2}})
        self.assertMongoError(17083, self.ev, {"$cond": {"if": 1, "then": 1, "else": 2, "x": 1}})

    def test_arrays_and_types(self):
        self.assertEqual(self.ev({"$size": "$arr"}), 3)
        self.assertEqual(self.ev({"$arrayElemAt": ["$arr", -1]}), 3)
        self.assertEqual(self.ev({"$arrayElemAt": ["$arr", 9]}), "MISSING")
        self.assertTrue(self.ev({"$in": [2.0, "$arr"]}))
        self.assertEqual(self.ev({"$type": "$a"}), "int")
        self.assertEqual(self.ev({"$type": "$nope"}), "missing")
        self.assertEqual(self.ev({"$map": {"input": "$arr", "as": "e", "in": {"$add": ["$$e", 1]}}}),
                         [2, 3, 4])
        self.assertEqual(self.ev({"$filter": {"input": "$arr", "cond": {"$gt": ["$$this", 1]}}}),
                         [2, 3])
        self.assertMongoError(17124, self.ev, {"$size": "$s"},
                              msg="The argument to $size must be an array, but was of type: string")
        self.assertMongoError(28689, self.ev, {"$arrayElemAt": ["$s", 0]})
        self.assertMongoError(40081, self.ev, {"$in": [1, "$s"]})

    def test_unknown_expression(self):
        self.assertMongoError(168, self.ev, {"$foo": 1}, code_name="InvalidPipelineOperator",
                              msg="Unrecognized expression '$foo'")
        self.assertMongoError(238, self.ev, {"$dateToString": {}})
        self.assertMongoError(31325, run_pipeline, [self.DOC], [{"$project": {"r": {"$foo": 1}}}],
                              msg="Invalid $project :: caused by :: Unknown expression $foo")
        self.assertMongoError(15983, self.ev, {"$add": [1], "x": 1})


class ChangeStreamStageTest(MongoErrorAssertions):
    EVENT = {"_id": {"_data": "8263"}, "operationType": "insert",
             "fullDocument": {"_id": 1, "x": 2}, "ns": {"db": "d", "coll": "c"}}

    def test_allowed_stage_set(self):
        self.assertEqual(CHANGE_STREAM_ALLOWED_STAGES,
                         {"$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot",
                          "$replaceWith", "$redact"})
        check_change_stream_stages([{"$match": {}}, {"$project": {"x": 1}}])

    def test_disallowed_stage_is_illegal_operation(self):
        self.assertMongoError(20, check_change_stream_stages, [{"$group": {"_id": 1}}],
                              code_name="IllegalOperation",
                              msg="$group is not permitted in a $changeStream pipeline")

    def test_event_stages_filter_and_transform(self):
        run = compile_event_stages([{"$match": {"operationType": "insert"}},
                                    {"$addFields": {"fullDocument.y": 1}}])
        out = run(self.EVENT)
        self.assertEqual(out["fullDocument"], {"_id": 1, "x": 2, "y": 1})
        self.assertIsNone(run(dict(self.EVENT, operationType="delete")))
        self.assertEqual(self.EVENT["fullDocument"], {"_id": 1, "x": 2})

    def test_event_id_unchanged_detects_resume_token_edits(self):
        self.assertTrue(event_id_unchanged(self.EVENT, {"_id": {"_data": "8263"}}))
        self.assertFalse(event_id_unchanged(self.EVENT, {"_id": 1}))
        self.assertFalse(event_id_unchanged(self.EVENT, {"x": 1}))
        err = change_stream_id_modified_error(self.EVENT, {"x": 1})
        self.assertEqual((err.code, err.code_name), (280, "ChangeStreamFatalError"))
        self.assertTrue(err.errmsg.startswith("Encountered an event whose _id field, which "
                                              "contains the resume token, was modified"))


if __name__ == "__main__":
    unittest.main()
