/*
 * bson_view.h - read-only Lua views over BSON documents and arrays.
 *
 * A view decodes a field only when Lua reads it, so a handler that reads
 * three fields of a large document pays for three fields, not for a table of
 * the whole thing. Views index like tables (doc.a, doc.a.b, arr[1]), iterate
 * with pairs and ipairs, answer # for arrays, compare equal when their bytes
 * are equal, and convert back to BSON as the bytes they were made from.
 * fw.table(view) gives a plain mutable table (key order and int64 width kept).
 *
 * A view keeps its bytes alive through an anchor (any Lua value owning
 * them), so a view kept after its event was handled still reads correctly.
 */
#ifndef FLOWWARDEN_BSON_VIEW_H
#define FLOWWARDEN_BSON_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <lua.h>

#include "bson/bson_values.h"

/* Registers the view metatable and sets `table` (fw.table) in the table at
 * module_idx (0: register only). */
void fw_bson_view_open (lua_State *L, int module_idx);

/* Pushes a view of the BSON document (or array) in data[0..len), which must
 * stay valid as long as the value at anchor_idx lives. May raise (memory). */
void fw_bson_view_push (lua_State *L, int anchor_idx, const uint8_t *data, uint32_t len,
                        bool is_array);

/* Pushes a view that owns a copy of data[0..len): nothing else needs to stay
 * alive for it. May raise (memory). */
void fw_bson_view_push_copy (lua_State *L, const uint8_t *data, uint32_t len, bool is_array);

/* Pushes the view metatable (fw_bson_view_open must have run), for a caller
 * that keeps it (as an upvalue) to make views with fw_bson_view_push_copy_mt
 * without looking it up in the registry each time. */
void fw_bson_view_push_metatable (lua_State *L);

/* fw_bson_view_push_copy, with the view metatable (fw_bson_view_push_metatable's,
 * nothing else) at mt_idx, which may be an upvalue's pseudo-index. May raise
 * (memory). */
void fw_bson_view_push_copy_mt (lua_State *L, const uint8_t *data, uint32_t len, bool is_array,
                                int mt_idx);

/* Pushes the element at iter: scalars as Lua values (typed values for BSON
 * types Lua lacks), documents and arrays as views anchored at anchor_idx.
 * iter must point into memory the anchor keeps alive. May raise (memory). */
void fw_bson_view_push_element (lua_State *L, int anchor_idx, const bson_iter_t *iter);

/* If the value at idx is a view, appends its bytes to out under key as a
 * document or array. Raises nothing, allocates nothing in Lua. */
fw_bson_values_append_result_t fw_bson_view_append (lua_State *L, int idx, bson_t *out,
                                                    const char *key, int key_len);

#endif
