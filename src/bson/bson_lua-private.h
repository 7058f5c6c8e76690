/*
 * bson_lua-private.h - what bson_lua.c (BSON -> Lua) and bson_lua_encode.c
 * (Lua -> BSON) share: the per-state registry layout, the shape metatables
 * and error paths.
 */
#ifndef FLOWWARDEN_BSON_LUA_PRIVATE_H
#define FLOWWARDEN_BSON_LUA_PRIVATE_H

#include <assert.h>
#include <stdint.h>

#include "bson/bson_lua.h"

/*
 * Registry[&fw_bson_lua_state_key] is a table:
 *   [STATE_CACHE]    shape cache: integer hash of a key sequence -> shape
 *   [STATE_ARRAY]    metatable of plain arrays
 *   [STATE_ARRAY64]  metatable of arrays whose integers were all int64
 *   [STATE_COUNT]    number of shapes in the cache
 */
extern const char fw_bson_lua_state_key;
enum { STATE_CACHE = 1, STATE_ARRAY = 2, STATE_ARRAY64 = 3, STATE_COUNT = 4 };

/*
 * Every metatable this module sets has mt[&fw_bson_lua_kind_key] = a kind.
 * A document shape also holds:
 *   mt[1..n]          its keys in BSON order (strings)
 *   mt[SHAPE_N]       n
 *   mt[SHAPE_FLAGS]   string of n bytes, 1 where the field was int64 (absent: none)
 *   mt[SHAPE_DUPS]    true if a key repeats
 *   mt[SHAPE_INDEX]   key -> first position, built when a writer needs it
 * A KIND_ARRAY_FLAGS array metatable holds mt[SHAPE_FLAGS] for its elements.
 * Integer keys cannot collide with metamethod names, so a document may have
 * any keys, "__index" included.
 */
extern const char fw_bson_lua_kind_key;
enum { KIND_ARRAY = 1, KIND_ARRAY64 = 2, KIND_ARRAY_FLAGS = 3, KIND_DOCUMENT = 4 };
enum { SHAPE_N = 0, SHAPE_FLAGS = -1, SHAPE_DUPS = -2, SHAPE_INDEX = -3 };

#define FW_BSON_LUA_ARRAY_NAME "flowwarden.array"
#define FW_BSON_LUA_DOCUMENT_NAME "flowwarden.document"

/* One step of a path: a key, or a 1-based array index when key is NULL. */
typedef struct {
   const char *key;
   size_t len;
   int64_t index;
} fw_bson_lua_seg_t;

/* Writes root + segs as "root.key[3].key" into buf, shortened if long. */
void fw_bson_lua_format_path (char *buf, size_t size, const char *root,
                              const fw_bson_lua_seg_t *segs, int nseg);

/* Pushes the state table, creating it on first use. May raise (memory). */
void fw_bson_lua_push_state (lua_State *L);

/* If the table at idx has one of our metatables, pushes it and returns its
 * kind; otherwise pushes nothing and returns 0. Allocates nothing. */
int fw_bson_lua_kind (lua_State *L, int idx);

#ifndef NDEBUG
#define STACK_CHECK_BEGIN(L) int stack_check_top_ = lua_gettop (L)
#define STACK_CHECK_END(L, n) assert (lua_gettop (L) == stack_check_top_ + (n))
#else
#define STACK_CHECK_BEGIN(L) ((void) 0)
#define STACK_CHECK_END(L, n) ((void) 0)
#endif

#endif
