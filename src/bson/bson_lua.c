/*
 * bson_lua.c - BSON -> Lua: documents and arrays to tables, eagerly.
 *
 * Building tables is the per-event cost, so each document is walked twice:
 * once to count its keys and hash its key sequence (cheap: libbson only reads
 * headers), then once to fill a table pre-sized with that count. The hash
 * finds a cached shape metatable whose key strings are reused for the new
 * table, which both records the key order and spares interning the keys again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_values.h"
#include "bson_lua-private.h"

/* BSON int64 and Lua integers must be the same thing for widths to survive. */
_Static_assert(sizeof (lua_Integer) == sizeof (int64_t), "lua_Integer must be 64-bit");

const char fw_bson_lua_state_key;
const char fw_bson_lua_kind_key;

/* Shapes kept per state; the cache is dropped and restarted when full. */
#define SHAPE_CACHE_MAX 512
/* Documents with more keys are not cached: likely maps keyed by data. */
#define SHAPE_CACHE_MAX_KEYS 64

typedef struct {
   lua_State *L;
   fw_error_t *error;
   const char *root;
   int state_idx, cache_idx, array_mt_idx, array64_mt_idx, null_idx;
   int depth; /* documents and arrays open, the outermost being 1 */
   int nseg;
   fw_bson_lua_seg_t segs[FW_BSON_LUA_MAX_DEPTH + 2];
} to_lua_t;

static bool push_element (to_lua_t *c, const bson_iter_t *it);

/* ---- shared helpers ---------------------------------------------------- */

static size_t
append_text (char *buf, size_t size, size_t at, const char *s, size_t len)
{
   if (at < size) {
      size_t n = len < size - at ? len : size - at;
      memcpy (buf + at, s, n);
   }
   return at + len;
}

void
fw_bson_lua_format_path (char *buf, size_t size, const char *root, const fw_bson_lua_seg_t *segs,
                         int nseg)
{
   char full[1024], num[32];
   const size_t keep_head = 120, keep_tail = 200;
   size_t at = 0, len;
   int i;

   if (root && *root) {
      at = append_text (full, sizeof full, at, root, strlen (root));
   }
   for (i = 0; i < nseg; i++) {
      if (!segs[i].key) {
         len = (size_t) snprintf (num, sizeof num, "[%" PRId64 "]", segs[i].index);
         at = append_text (full, sizeof full, at, num, len);
         continue;
      }
      if (at > 0) {
         at = append_text (full, sizeof full, at, ".", 1);
      }
      /* One huge key must not hide the rest of the path. */
      if (segs[i].len > 64) {
         at = append_text (full, sizeof full, at, segs[i].key, 60);
         at = append_text (full, sizeof full, at, "...", 3);
      } else {
         at = append_text (full, sizeof full, at, segs[i].key, segs[i].len);
      }
   }
   if (at == 0) {
      snprintf (buf, size, "(root)");
   } else if (at <= keep_head + keep_tail + 3 && at < sizeof full) {
      snprintf (buf, size, "%.*s", (int) at, full);
   } else if (at < sizeof full) {
      snprintf (buf, size, "%.*s...%.*s", (int) keep_head, full, (int) keep_tail,
                full + at - keep_tail);
   } else {
      /* The tail fell off the scratch buffer; say so rather than guess it. */
      snprintf (buf, size, "%.*s...(path too long)", (int) keep_head, full);
   }
}

static void
set_error (to_lua_t *c, const char *what)
{
   char path[FW_ERROR_MESSAGE_MAX];

   fw_bson_lua_format_path (path, sizeof path, c->root, c->segs, c->nseg);
   fw_error_set (c->error, FW_ERROR_INVALID, "%s: %s", path, what);
}

static void
new_array_mt (lua_State *L, int kind)
{
   lua_createtable (L, 0, 3);
   lua_pushinteger (L, kind);
   lua_rawsetp (L, -2, &fw_bson_lua_kind_key);
   lua_pushliteral (L, FW_BSON_LUA_ARRAY_NAME);
   lua_setfield (L, -2, "__name");
   lua_pushliteral (L, FW_BSON_LUA_ARRAY_NAME);
   lua_setfield (L, -2, "__metatable");
}

/* The scope reader bson_values calls for cws.scope: bytes -> table. The
 * scope was validated when read from BSON, so this only fails on nesting
 * deeper than the limit; raise like any bad access. */
static int
read_scope (lua_State *L)
{
   size_t len;
   const char *bytes = luaL_checklstring (L, 1, &len);
   bson_t scope;
   fw_error_t err;

   if (!bson_init_static (&scope, (const uint8_t *) bytes, len)) {
      return luaL_error (L, "code_w_scope: corrupt scope document");
   }
   if (!fw_bson_lua_push_document (L, &scope, "scope", &err)) {
      return luaL_error (L, "code_w_scope: %s", err.message);
   }
   return 1;
}

void
fw_bson_lua_push_state (lua_State *L)
{
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &fw_bson_lua_state_key) != LUA_TNIL) {
      return;
   }
   lua_pop (L, 1);
   lua_createtable (L, 4, 0);
   lua_newtable (L);
   lua_rawseti (L, -2, STATE_CACHE);
   new_array_mt (L, KIND_ARRAY);
   lua_rawseti (L, -2, STATE_ARRAY);
   new_array_mt (L, KIND_ARRAY64);
   lua_rawseti (L, -2, STATE_ARRAY64);
   lua_pushinteger (L, 0);
   lua_rawseti (L, -2, STATE_COUNT);
   lua_pushvalue (L, -1);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &fw_bson_lua_state_key);
   lua_pushcfunction (L, read_scope);
   lua_setfield (L, LUA_REGISTRYINDEX, FW_BSON_VALUES_SCOPE_READER);
}

int
fw_bson_lua_kind (lua_State *L, int idx)
{
   int isnum;
   lua_Integer kind;

   if (!lua_getmetatable (L, idx)) {
      return 0;
   }
   lua_rawgetp (L, -1, &fw_bson_lua_kind_key);
   kind = lua_tointegerx (L, -1, &isnum);
   lua_pop (L, 1);
   if (!isnum || kind < KIND_ARRAY || kind > KIND_DOCUMENT) {
      lua_pop (L, 1);
      return 0;
   }
   return (int) kind;
}

/* ---- BSON -> Lua ------------------------------------------------------- */

static uint64_t
hash_bytes (uint64_t h, const char *p, size_t n)
{
   const uint64_t prime = 0x100000001b3ULL;
   uint64_t w;

   for (; n >= 8; n -= 8, p += 8) {
      memcpy (&w, p, 8);
      h = (h ^ w) * prime;
      h ^= h >> 29;
   }
   for (; n > 0; n--, p++) {
      h = (h ^ (uint8_t) *p) * prime;
   }
   return h;
}

/*
 * Builds the flags string of the document or array at it (one byte per
 * element, 1 where it is int64) into the metatable at mt_idx.
 */
static void
store_flags (lua_State *L, int mt_idx, const bson_iter_t *it, uint32_t n)
{
   bson_iter_t scan = *it;
   luaL_Buffer b;
   char *p = luaL_buffinitsize (L, &b, n);
   uint32_t i = 0;

   while (i < n && bson_iter_next (&scan)) {
      p[i++] = bson_iter_type (&scan) == BSON_TYPE_INT64;
   }
   luaL_pushresultsize (&b, i);
   lua_rawseti (L, mt_idx, SHAPE_FLAGS);
}

/* Replaces the shape at mt_idx by a private copy of its first `done` keys. */
static void
demote_shape (lua_State *L, int mt_idx, uint32_t n, uint32_t done)
{
   uint32_t i;

   lua_createtable (L, (int) n, 6);
   for (i = 1; i <= done; i++) {
      lua_rawgeti (L, mt_idx, i);
      lua_rawseti (L, -2, i);
   }
   lua_replace (L, mt_idx);
}

static void
finish_shape (to_lua_t *c, int mt_idx, const bson_iter_t *start, uint32_t n, uint32_t n64,
              bool dups, bool cacheable, uint64_t hash)
{
   lua_State *L = c->L;
   lua_Integer count;

   lua_pushinteger (L, KIND_DOCUMENT);
   lua_rawsetp (L, mt_idx, &fw_bson_lua_kind_key);
   lua_pushinteger (L, n);
   lua_rawseti (L, mt_idx, SHAPE_N);
   lua_pushliteral (L, FW_BSON_LUA_DOCUMENT_NAME);
   lua_setfield (L, mt_idx, "__name");
   lua_pushliteral (L, FW_BSON_LUA_DOCUMENT_NAME);
   lua_setfield (L, mt_idx, "__metatable");
   if (n64) {
      store_flags (L, mt_idx, start, n);
   }
   if (dups) {
      lua_pushboolean (L, 1);
      lua_rawseti (L, mt_idx, SHAPE_DUPS);
   }
   if (!cacheable || n > SHAPE_CACHE_MAX_KEYS) {
      return;
   }
   lua_rawgeti (L, c->state_idx, STATE_COUNT);
   count = lua_tointeger (L, -1);
   lua_pop (L, 1);
   if (count >= SHAPE_CACHE_MAX) {
      /* Shapes in use stay alive through their tables; only lookups restart. */
      lua_newtable (L);
      lua_pushvalue (L, -1);
      lua_rawseti (L, c->state_idx, STATE_CACHE);
      lua_replace (L, c->cache_idx);
      count = 0;
   }
   lua_pushvalue (L, mt_idx);
   lua_rawseti (L, c->cache_idx, (lua_Integer) hash);
   lua_pushinteger (L, count + 1);
   lua_rawseti (L, c->state_idx, STATE_COUNT);
}

/* Pushes the document whose fields `it` (fresh from bson_iter_recurse or
 * bson_iter_init) iterates, as a shaped table. */
static bool
push_document_body (to_lua_t *c, bson_iter_t *it)
{
   lua_State *L = c->L;
   bson_iter_t scan = *it;
   const bson_iter_t start = *it;
   uint64_t hash = 0xcbf29ce484222325ULL;
   uint32_t n = 0, n64 = 0, i = 0, klen;
   const char *key, *flags = NULL;
   bool hit, dups = false, cacheable = true;
   int t, mt;
   size_t slen;
   STACK_CHECK_BEGIN (L);

   while (bson_iter_next (&scan)) {
      bool is64 = bson_iter_type (&scan) == BSON_TYPE_INT64;
      klen = bson_iter_key_len (&scan);
      hash = hash_bytes (hash, bson_iter_key_unsafe (&scan), klen);
      hash = (hash ^ (is64 ? 0x9e : 0x3c)) * 0x100000001b3ULL;
      n64 += is64;
      n++;
   }
   if (scan.err_off) {
      set_error (c, "corrupt BSON document");
      return false;
   }
   hash ^= n;

   lua_createtable (L, 0, (int) n);
   t = lua_gettop (L);
   lua_rawgeti (L, c->cache_idx, (lua_Integer) hash);
   mt = t + 1;
   hit = lua_istable (L, mt);
   if (hit) {
      lua_rawgeti (L, mt, SHAPE_N);
      hit = lua_tointeger (L, -1) == (lua_Integer) n;
      lua_pop (L, 1);
      lua_rawgeti (L, mt, SHAPE_FLAGS);
      flags = lua_tostring (L, -1); /* anchored by the shape */
      lua_pop (L, 1);
      hit = hit && (flags != NULL) == (n64 > 0);
   }
   if (!hit) {
      lua_pop (L, 1);
      lua_createtable (L, (int) n, 6);
      flags = NULL;
   }

   while (bson_iter_next (it)) {
      i++;
      key = bson_iter_key_unsafe (it);
      klen = bson_iter_key_len (it);
      if (hit) {
         const char *s;
         bool is64 = bson_iter_type (it) == BSON_TYPE_INT64;
         lua_rawgeti (L, mt, i);
         s = lua_tolstring (L, -1, &slen);
         if (s && slen == klen && memcmp (s, key, klen) == 0 &&
             (flags ? flags[i - 1] != 0 : false) == is64) {
            goto have_key;
         }
         /* Hash collision: finish with a private shape, keep the cached one. */
         lua_pop (L, 1);
         demote_shape (L, mt, n, i - 1);
         hit = false;
         cacheable = false;
      }
      lua_pushlstring (L, key, klen);
      lua_pushvalue (L, -1);
      lua_rawseti (L, mt, i);
      lua_pushvalue (L, -1);
      if (lua_rawget (L, t) != LUA_TNIL) {
         dups = true;
      }
      lua_pop (L, 1);
   have_key:
      c->segs[c->nseg].key = key;
      c->segs[c->nseg].len = klen;
      c->nseg++;
      if (!push_element (c, it)) {
         return false;
      }
      c->nseg--;
      lua_rawset (L, t);
   }
   if (it->err_off) {
      set_error (c, "corrupt BSON document");
      return false;
   }
   if (!hit) {
      finish_shape (c, mt, &start, n, n64, dups, cacheable, hash);
   }
   lua_setmetatable (L, t);
   STACK_CHECK_END (L, 1);
   return true;
}

static bool
push_array_body (to_lua_t *c, bson_iter_t *it)
{
   lua_State *L = c->L;
   bson_iter_t scan = *it;
   const bson_iter_t start = *it;
   uint32_t n = 0, n32 = 0, n64 = 0, i = 0;
   int t;
   STACK_CHECK_BEGIN (L);

   while (bson_iter_next (&scan)) {
      bson_type_t type = bson_iter_type (&scan);
      n32 += type == BSON_TYPE_INT32;
      n64 += type == BSON_TYPE_INT64;
      n++;
   }
   if (scan.err_off) {
      set_error (c, "corrupt BSON array");
      return false;
   }
   lua_createtable (L, (int) n, 0);
   t = lua_gettop (L);
   while (bson_iter_next (it)) {
      i++;
      c->segs[c->nseg].key = NULL;
      c->segs[c->nseg].index = i;
      c->nseg++;
      if (!push_element (c, it)) {
         return false;
      }
      c->nseg--;
      lua_rawseti (L, t, i);
   }
   if (it->err_off) {
      set_error (c, "corrupt BSON array");
      return false;
   }
   if (n64 == 0) {
      lua_pushvalue (L, c->array_mt_idx);
   } else if (n32 == 0) {
      lua_pushvalue (L, c->array64_mt_idx);
   } else {
      new_array_mt (L, KIND_ARRAY_FLAGS);
      store_flags (L, t + 1, &start, n);
   }
   lua_setmetatable (L, t);
   STACK_CHECK_END (L, 1);
   return true;
}

static bool
push_container (to_lua_t *c, const bson_iter_t *it)
{
   bson_iter_t child;
   bool ok;

   if (!bson_iter_recurse (it, &child)) {
      set_error (c, "corrupt BSON document");
      return false;
   }
   if (c->depth >= FW_BSON_LUA_MAX_DEPTH) {
      char what[64];
      snprintf (what, sizeof what, "nesting deeper than %d levels", FW_BSON_LUA_MAX_DEPTH);
      set_error (c, what);
      return false;
   }
   /* Room for the table, its shape, a key, a value and a nested level's start. */
   if (!lua_checkstack (c->L, 8)) {
      set_error (c, "Lua stack exhausted");
      return false;
   }
   c->depth++;
   ok = bson_iter_type (it) == BSON_TYPE_ARRAY ? push_array_body (c, &child)
                                               : push_document_body (c, &child);
   c->depth--;
   return ok;
}

static bool
push_element (to_lua_t *c, const bson_iter_t *it)
{
   lua_State *L = c->L;
   size_t len;
   const char *s;
   char what[64];

   switch (bson_iter_type (it)) {
   case BSON_TYPE_DOUBLE:
      lua_pushnumber (L, bson_iter_double_unsafe (it));
      return true;
   case BSON_TYPE_UTF8:
      s = bson_iter_utf8_unsafe (it, &len);
      lua_pushlstring (L, s, len);
      return true;
   case BSON_TYPE_DOCUMENT:
   case BSON_TYPE_ARRAY:
      return push_container (c, it);
   case BSON_TYPE_BOOL:
      lua_pushboolean (L, bson_iter_bool_unsafe (it));
      return true;
   case BSON_TYPE_NULL:
      lua_pushvalue (L, c->null_idx);
      return true;
   case BSON_TYPE_INT32:
      lua_pushinteger (L, bson_iter_int32_unsafe (it));
      return true;
   case BSON_TYPE_INT64:
      lua_pushinteger (L, bson_iter_int64_unsafe (it));
      return true;
   default:
      if (fw_bson_values_push (L, it)) {
         return true;
      }
      if (bson_iter_type (it) == BSON_TYPE_CODEWSCOPE) {
         set_error (c, "corrupt BSON code_w_scope (its scope is not a document)");
         return false;
      }
      snprintf (what, sizeof what, "unsupported BSON type 0x%02x", (int) bson_iter_type (it));
      set_error (c, what);
      return false;
   }
}

/* Runs one conversion: pushes the state it needs, the result, then cleans up. */
static bool
push_top (lua_State *L, const bson_iter_t *it, int what, const char *root, fw_error_t *error)
{
   to_lua_t c;
   int base = lua_gettop (L);
   bson_iter_t child;
   bool ok;

   memset (&c, 0, sizeof c - sizeof c.segs);
   c.L = L;
   c.error = error;
   c.root = root;
   if (!lua_checkstack (L, 16)) {
      fw_error_set (error, FW_ERROR_NOMEM, "%s: Lua stack exhausted", root ? root : "(root)");
      return false;
   }
   fw_bson_lua_push_state (L);
   c.state_idx = base + 1;
   lua_rawgeti (L, c.state_idx, STATE_CACHE);
   c.cache_idx = base + 2;
   lua_rawgeti (L, c.state_idx, STATE_ARRAY);
   c.array_mt_idx = base + 3;
   lua_rawgeti (L, c.state_idx, STATE_ARRAY64);
   c.array64_mt_idx = base + 4;
   fw_bson_values_push_null (L);
   c.null_idx = base + 5;

   if (what == BSON_TYPE_DOCUMENT || what == BSON_TYPE_ARRAY) {
      child = *it;
      c.depth = 1;
      ok = what == BSON_TYPE_ARRAY ? push_array_body (&c, &child) : push_document_body (&c, &child);
   } else {
      ok = push_element (&c, it);
   }
   if (!ok) {
      lua_settop (L, base);
      return false;
   }
   lua_replace (L, base + 1);
   lua_settop (L, base + 1);
   return true;
}

bool
fw_bson_lua_push_document (lua_State *L, const bson_t *doc, const char *root_path,
                           fw_error_t *error)
{
   bson_iter_t it;

   if (!bson_iter_init (&it, doc)) {
      fw_error_set (error, FW_ERROR_INVALID, "%s: corrupt BSON document",
                    root_path && *root_path ? root_path : "(root)");
      return false;
   }
   return push_top (L, &it, BSON_TYPE_DOCUMENT, root_path, error);
}

bool
fw_bson_lua_push_array (lua_State *L, const bson_t *array, const char *root_path, fw_error_t *error)
{
   bson_iter_t it;

   if (!bson_iter_init (&it, array)) {
      fw_error_set (error, FW_ERROR_INVALID, "%s: corrupt BSON array",
                    root_path && *root_path ? root_path : "(root)");
      return false;
   }
   return push_top (L, &it, BSON_TYPE_ARRAY, root_path, error);
}

bool
fw_bson_lua_push_value (lua_State *L, const bson_iter_t *iter, const char *root_path,
                        fw_error_t *error)
{
   return push_top (L, iter, 0, root_path, error);
}

/* ---- the module functions ---------------------------------------------- */

static int
mark_array (lua_State *L)
{
   int kind;

   if (lua_isnoneornil (L, 1)) {
      lua_settop (L, 0);
      lua_newtable (L);
   } else if (!lua_istable (L, 1)) {
      return luaL_error (L, "array: expected a table, got %s", luaL_typename (L, 1));
   }
   lua_settop (L, 1);
   kind = fw_bson_lua_kind (L, 1);
   if (kind == KIND_ARRAY || kind == KIND_ARRAY64 || kind == KIND_ARRAY_FLAGS) {
      lua_settop (L, 1);
      return 1;
   }
   if (kind != 0 || lua_getmetatable (L, 1)) {
      return luaL_error (L, "array: the table already has a metatable");
   }
   fw_bson_lua_push_state (L);
   lua_rawgeti (L, -1, STATE_ARRAY);
   lua_setmetatable (L, 1);
   lua_settop (L, 1);
   return 1;
}

void
fw_bson_lua_open (lua_State *L, int module_idx)
{
   module_idx = lua_absindex (L, module_idx);
   fw_bson_values_open (L, module_idx);
   fw_bson_lua_push_state (L);
   lua_pop (L, 1);
   lua_pushcfunction (L, mark_array);
   lua_setfield (L, module_idx, "array");
}
