/*
 * bson_values.h - typed Lua values for the BSON types Lua has no type for.
 *
 * ObjectId, Date, Timestamp, Decimal128, Binary, Regex, MinKey, MaxKey, Code,
 * CodeWScope, Symbol, DBPointer, Undefined and an explicit Int64 are each a
 * full userdata sharing one metatable ("flowwarden.bson_value"), so a value
 * read from BSON goes back to BSON as the same type and bytes. Every value
 * offers:
 *
 *   tostring(v)    ObjectId: 24 hex digits; Date: ISO-8601 UTC with
 *                  milliseconds ("2024-05-01T12:00:00.000Z"); Timestamp:
 *                  "Timestamp(t, i)"; Decimal128: its string form; Binary:
 *                  "Binary(subtype, base64)"; Regex: "/pattern/options";
 *                  MinKey/MaxKey/Undefined: "MinKey"/"MaxKey"/"undefined";
 *                  Code/CodeWScope/Symbol: the text; DBPointer:
 *                  "DBPointer(collection, hex)"; Int64: the decimal number.
 *   a == b         same type and same value.
 *   a < b, a <= b  Date, Timestamp, ObjectId and Int64 values of one type.
 *   v.type         "object_id", "date", "timestamp", "decimal128", "binary",
 *                  "regex", "min_key", "max_key", "code", "code_w_scope",
 *                  "symbol", "db_pointer", "undefined", "int64".
 *   fields         oid.hex, oid.time (seconds); date.ms; ts.t, ts.i;
 *                  dec.string; bin.subtype, bin.data; re.pattern, re.options;
 *                  code.code; cws.code, cws.scope (a table, converted on each
 *                  access); sym.symbol; ptr.collection, ptr.id (an ObjectId);
 *                  i64.value. Unknown fields are nil.
 *
 * BSON null is the sentinel `null` (a unique userdata; tostring "null").
 *
 * Constructors (set as fields of the module table by fw_bson_values_open)
 * raise on bad arguments with a message naming the constructor and the
 * problem, e.g. `object_id: expected 24 hexadecimal digits, got 23
 * characters`:
 *   object_id([hex])            no argument: a new ObjectId
 *   date([ms])                  no argument: now
 *   timestamp(t, i)             each 0 .. 4294967295
 *   decimal128(string)
 *   binary(data [, subtype])    subtype 0 .. 255, default 0
 *   regex(pattern [, options])  options from "ilmsux"; no NUL bytes
 *   min_key(), max_key(), undefined()
 *   code(string)                no NUL bytes
 *   symbol(string)
 *   db_pointer(collection, hex)
 *   int64(n)                    an integer always written as BSON int64
 *
 * Every function here must run inside a protected call (it may raise a Lua
 * error on memory exhaustion) unless its comment says otherwise. Per-state
 * data lives in the registry, so any number of states may use this module.
 */
#ifndef FLOWWARDEN_BSON_VALUES_H
#define FLOWWARDEN_BSON_VALUES_H

#include <stdbool.h>

#include <bson/bson.h>
#include <lua.h>

/* What fw_bson_values_append did with a Lua value. */
typedef enum {
   FW_BSON_VALUES_NOT_TYPED = 0, /* not a typed value nor null: nothing appended */
   FW_BSON_VALUES_APPENDED = 1,
   FW_BSON_VALUES_TOO_LARGE = 2 /* libbson refused: the document would exceed its limit */
} fw_bson_values_append_result_t;

/*
 * Registers the typed-value metatable and the null sentinel in L (once; later
 * calls reuse them) and, unless module_idx is 0, sets the constructors above
 * plus `null` as fields of the table at module_idx. Leaves the stack as it
 * found it. Conversions register on first use, so calling it is only needed
 * to expose the constructors.
 */
void fw_bson_values_open (lua_State *L, int module_idx);

/*
 * Registry field holding the function that turns a CodeWScope scope (BSON
 * bytes as a string) into a table: fn(bytes) -> table. The BSON<->Lua
 * converter, which sits above this module, installs it; reading cws.scope in
 * a state without it raises.
 */
#define FW_BSON_VALUES_SCOPE_READER "flowwarden.bson_values.scope_reader"

/* Pushes the null sentinel. */
void fw_bson_values_push_null (lua_State *L);

/*
 * Pushes a typed value for the element at iter if its type is one of those
 * above (everything but double, string, document, array, bool, null, int32,
 * int64) and returns true; otherwise (or for a CodeWScope whose scope is not
 * a document) pushes nothing and returns false. The value copies what it
 * needs: iter's document may be freed afterwards.
 */
bool fw_bson_values_push (lua_State *L, const bson_iter_t *iter);

/*
 * If the value at idx is a typed value or the null sentinel, appends it to
 * out under key (key_len bytes, or -1 for strlen). Raises no Lua error and
 * allocates nothing in Lua, so it may run outside a protected call.
 */
fw_bson_values_append_result_t fw_bson_values_append (lua_State *L, int idx, bson_t *out,
                                                      const char *key, int key_len);

/* True if the value at idx is the null sentinel. Raises no Lua error. */
bool fw_bson_values_is_null (lua_State *L, int idx);

#endif
