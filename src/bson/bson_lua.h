/*
 * bson_lua.h - BSON documents to Lua tables and back, losslessly.
 *
 * Mapping (BSON -> Lua -> BSON):
 *   document      table (keeps its key order, see below)
 *   array         table 1..n marked as an array (an empty array stays one)
 *   int32, int64  integer; the BSON width is kept (see below)
 *   double        float (2.0 stays a double: integers and floats stay apart)
 *   string        string (binary-safe)
 *   bool          boolean
 *   null          the `null` sentinel
 *   other types   typed values, see bson_values.h
 *
 * Key order. A document converted to a table gets a "shape" metatable that
 * lists its keys in BSON order (and which of them were int64). Shapes are
 * cached per lua_State by key sequence (up to 512 shapes of up to 64 keys;
 * other documents get a shape of their own), so the documents of a stream
 * share a handful of them: order costs no per-document allocation, and the
 * cached key strings are reused instead of interned again (which makes
 * conversion faster than without the cache, 3.1 us vs 5.0 us for a 350-byte
 * event). Writing a
 * shaped table emits the listed keys that are still present, in order, then
 * keys added in Lua: `_id` first, then sorted bytewise. A table built in Lua
 * (no shape) is written the same way: `_id` first, then sorted keys. So a
 * document that goes BSON -> Lua -> BSON unchanged comes back byte-identical
 * (a document with duplicate keys keeps one, last value wins, at the first
 * position). getmetatable() on such tables returns "flowwarden.document" or
 * "flowwarden.array"; their metatables are shared and protected.
 *
 * Integer width. An integer is written as int32 if it fits, else int64, except
 * where the table's shape records that the field (or, for arrays, the
 * element) was an int64 when read: it stays int64 while it holds an integer.
 * Arrays pay for this only when they hold int64s: arrays of int64s only share
 * one metatable (elements added later are int64 too), arrays mixing int32 and
 * int64 get one recording each position. `int64(n)` (bson_values.h) forces
 * int64 for values built in Lua. Tables with metatables of other origins are
 * converted by their raw contents.
 *
 * Two BSON details do not survive: libbson writes regex options sorted
 * ("mi" comes back "im"; servers store them sorted anyway), and Code text is
 * written up to its first NUL byte.
 *
 * Tables to BSON. An array-marked table is written as an array of its
 * elements 1..#t (a nil hole or any other key is an error). An unmarked
 * table whose keys are exactly 1..n (n > 0) is an array; one whose keys are
 * all strings is a document; an empty unmarked table is an empty document.
 * Anything else is an error.
 *
 * Errors name the path to the bad value, built from the caller's root_path:
 * keys are joined with '.', array elements shown as [i] with the 1-based Lua
 * index: `fullDocument.items[3].price: cannot convert a function to BSON`.
 * With a NULL or empty root_path the path starts at the first key, and the
 * value itself is called "(root)". Long paths are shortened in the middle.
 */
#ifndef FLOWWARDEN_BSON_LUA_H
#define FLOWWARDEN_BSON_LUA_H

#include <stdbool.h>

#include <bson/bson.h>
#include <lua.h>

#include "flowwarden/error.h"

/*
 * The deepest nesting of documents and arrays converted either way, the
 * outermost document counting as 1. MongoDB stores up to 100 levels; a
 * change event wraps a stored document in one or two more.
 */
#define FW_BSON_LUA_MAX_DEPTH 128

/*
 * Sets the typed-value constructors and `null` (fw_bson_values_open) plus
 * `array([t])` as fields of the table at module_idx. array(t) marks t (a new
 * table if absent) as a BSON array and returns it; it raises if t already
 * has a metatable that is not an array's. Leaves the stack as it found it.
 * Calling it is optional for the conversions below.
 */
void fw_bson_lua_open (lua_State *L, int module_idx);

/*
 * Pushes doc as a new table and returns true. On failure (corrupt BSON,
 * nesting deeper than FW_BSON_LUA_MAX_DEPTH) pushes nothing, fills error and
 * returns false. root_path (may be NULL) names doc in error messages.
 *
 * The table owns copies of everything; doc may be freed afterwards. May raise
 * a Lua error, but only for lack of memory, and holds no C-owned memory when
 * it does: call it inside a protected call, e.g. from a lua_CFunction.
 */
bool fw_bson_lua_push_document (lua_State *L, const bson_t *doc, const char *root_path,
                                fw_error_t *error);

/* As fw_bson_lua_push_document, for an array stored as a bson_t ("0", "1"...
 * keys, which are not checked): pushes an array-marked table. */
bool fw_bson_lua_push_array (lua_State *L, const bson_t *array, const char *root_path,
                             fw_error_t *error);

/* As fw_bson_lua_push_document, for the element iter points at (any type).
 * iter is not advanced. */
bool fw_bson_lua_push_value (lua_State *L, const bson_iter_t *iter, const char *root_path,
                             fw_error_t *error);

/*
 * Appends the fields of the table at idx to out, an initialised bson_t the
 * caller owns (usually empty). A table that is an array is written with keys
 * "0", "1", ... (libbson's form for an array document). Returns false and
 * fills error if the value is not a table or holds something with no BSON
 * form; out is then left exactly as it was.
 *
 * Never raises: it runs its own protected call (a memory error becomes
 * "not enough memory"), so it may be called wherever L may be used, and the
 * Lua stack is left as it was.
 */
bool fw_bson_lua_to_bson (lua_State *L, int idx, const char *root_path, bson_t *out,
                          fw_error_t *error);

/* As fw_bson_lua_to_bson, and sets *is_array (on success) to whether the
 * table was an array (written with keys "0", "1", ...) rather than a
 * document. Writes straight into out (no copy): after a failure out may hold
 * part of the fields (or an unfinished nested document) and is only fit for
 * bson_destroy. */
bool fw_bson_lua_to_document (lua_State *L, int idx, const char *root_path, bson_t *out,
                              bool *is_array, fw_error_t *error);

/*
 * Appends the Lua value at idx (any convertible value, nil excluded) to out
 * as field key (key_len bytes, or -1 for strlen). Errors name root_path (NULL:
 * key) as the value's path. Same ownership and error rules as
 * fw_bson_lua_to_bson.
 */
bool fw_bson_lua_append (lua_State *L, int idx, bson_t *out, const char *key, int key_len,
                         const char *root_path, fw_error_t *error);

#endif
