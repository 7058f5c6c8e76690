/*
 * bson_view.c - lazy, read-only views over BSON for handlers.
 *
 * Nothing is decoded until Lua asks for a field; the only allocation per
 * access is the value itself (a string, or a small userdata for a nested
 * view). See bson_view.h for the semantics.
 */
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "bson_scan.h"

#define VIEW_MT "flowwarden.view"
#define ANCHOR 1 /* the view's user value: what keeps its bytes alive */

/* The metatable is also kept under this address in the registry: a lookup
 * by pointer, not by name (which Lua would intern again every time). */
static const char view_mt_key = 0;

static void
set_view_mt (lua_State *L)
{
   lua_rawgetp (L, LUA_REGISTRYINDEX, &view_mt_key);
   lua_setmetatable (L, -2);
}

typedef struct {
   const uint8_t *data;
   uint32_t len;
   bool is_array;
   /* Arrays: where the last lookup ended (the element after the one found)
    * and that element's 1-based index, so a[i] read front to back in a loop
    * continues from there instead of rescanning from the first element. */
   uint32_t hint_pos;
   lua_Integer hint_index;
} view_t;

/* Pushes a new view's userdata (extra bytes after the header, nuv user
 * values) of data[0..len), before any look-up; no metatable yet. */
static view_t *
new_view (lua_State *L, size_t extra, int nuv, const uint8_t *data, uint32_t len, bool is_array)
{
   view_t *v = lua_newuserdatauv (L, sizeof *v + extra, nuv);
   v->data = data;
   v->len = len;
   v->is_array = is_array;
   v->hint_pos = 4;
   v->hint_index = 0;
   return v;
}

static view_t *
to_view (lua_State *L, int idx)
{
   view_t *v = lua_touserdata (L, idx);
   bool ok = false;
   if (v && lua_getmetatable (L, idx)) {
      lua_rawgetp (L, LUA_REGISTRYINDEX, &view_mt_key);
      ok = lua_rawequal (L, -1, -2);
      lua_pop (L, 2);
   }
   return ok ? v : NULL;
}

/* Metamethods carry the metatable as upvalue 1: comparing it directly is
 * much cheaper than luaL_checkudata's registry lookup by name, and a view is
 * still told apart from any other value (debug.getmetatable can hand these
 * functions anything). */
static view_t *
check_view (lua_State *L, int idx)
{
   view_t *v = lua_touserdata (L, idx);
   if (v && lua_getmetatable (L, idx)) {
      bool ok = lua_rawequal (L, -1, lua_upvalueindex (1));
      lua_pop (L, 1);
      if (ok) {
         return v;
      }
   }
   luaL_typeerror (L, idx, "document view");
   return NULL;
}

/* check_view for __index, the one called for every field a handler reads:
 * the metatable it compares is left on the stack (a slot above the
 * arguments, which __index reads by absolute index, and below the value it
 * returns), saving a lua_pop per look-up. */
static view_t *
check_view_keep_mt (lua_State *L)
{
   view_t *v = lua_touserdata (L, 1);
   if (v && lua_getmetatable (L, 1) && lua_rawequal (L, -1, lua_upvalueindex (1))) {
      return v;
   }
   luaL_typeerror (L, 1, "document view");
   return NULL;
}

void
fw_bson_view_push (lua_State *L, int anchor_idx, const uint8_t *data, uint32_t len, bool is_array)
{
   anchor_idx = lua_absindex (L, anchor_idx);
   new_view (L, 0, 1, data, len, is_array);
   lua_pushvalue (L, anchor_idx);
   lua_setiuservalue (L, -2, ANCHOR);
   set_view_mt (L);
}

/* Pushes a view owning a copy of data[0..len), without its metatable. */
static void
push_copy_bare (lua_State *L, const uint8_t *data, uint32_t len, bool is_array)
{
   /* The bytes live right after the header in the same userdata: one
    * allocation, and the view is its own anchor (no user value). */
   view_t *v = new_view (L, len, 0, NULL, len, is_array);
   uint8_t *copy = (uint8_t *) (v + 1);
   memcpy (copy, data, len);
   v->data = copy;
}

void
fw_bson_view_push_copy (lua_State *L, const uint8_t *data, uint32_t len, bool is_array)
{
   push_copy_bare (L, data, len, is_array);
   set_view_mt (L);
}

void
fw_bson_view_push_metatable (lua_State *L)
{
   lua_rawgetp (L, LUA_REGISTRYINDEX, &view_mt_key);
}

void
fw_bson_view_push_copy_mt (lua_State *L, const uint8_t *data, uint32_t len, bool is_array,
                           int mt_idx)
{
   mt_idx = lua_absindex (L, mt_idx);
   push_copy_bare (L, data, len, is_array);
   lua_pushvalue (L, mt_idx);
   lua_setmetatable (L, -2);
}

/* Pushes what keeps the view at idx alive: its anchor, or itself when it
 * owns its bytes. */
static void
push_anchor (lua_State *L, int idx)
{
   /* A view that owns its bytes has no user value: LUA_TNONE. */
   if (lua_getiuservalue (L, idx, ANCHOR) <= LUA_TNIL) {
      lua_pop (L, 1);
      lua_pushvalue (L, idx);
   }
}

/* Pushes a view of a document or array nested in the view at view_idx
 * (absolute or an upvalue), sharing its anchor; mt_idx is the view
 * metatable's index (absolute or an upvalue), 0 to look it up. The same
 * view as fw_bson_view_push, built without a registry look-up or a stack
 * shuffle: it runs for every nested document read. */
static void
push_nested (lua_State *L, int view_idx, int mt_idx, const uint8_t *data, uint32_t len,
             bool is_array)
{
   new_view (L, 0, 1, data, len, is_array);
   push_anchor (L, view_idx);
   lua_setiuservalue (L, -2, ANCHOR);
   if (mt_idx) {
      lua_pushvalue (L, mt_idx);
      lua_setmetatable (L, -2);
   } else {
      set_view_mt (L);
   }
}

void
fw_bson_view_push_element (lua_State *L, int anchor_idx, const bson_iter_t *iter)
{
   uint32_t len;
   const uint8_t *data;

   switch (bson_iter_type (iter)) {
   case BSON_TYPE_UTF8: {
      const char *s = bson_iter_utf8 (iter, &len);
      lua_pushlstring (L, s, len);
      break;
   }
   case BSON_TYPE_INT32:
      lua_pushinteger (L, bson_iter_int32 (iter));
      break;
   case BSON_TYPE_INT64:
      lua_pushinteger (L, (lua_Integer) bson_iter_int64 (iter));
      break;
   case BSON_TYPE_DOUBLE:
      lua_pushnumber (L, bson_iter_double (iter));
      break;
   case BSON_TYPE_BOOL:
      lua_pushboolean (L, bson_iter_bool (iter));
      break;
   case BSON_TYPE_NULL:
      fw_bson_values_push_null (L);
      break;
   case BSON_TYPE_DOCUMENT:
      bson_iter_document (iter, &len, &data);
      fw_bson_view_push (L, anchor_idx, data, len, false);
      break;
   case BSON_TYPE_ARRAY:
      bson_iter_array (iter, &len, &data);
      fw_bson_view_push (L, anchor_idx, data, len, true);
      break;
   default:
      if (!fw_bson_values_push (L, iter)) {
         lua_pushnil (L);
      }
      break;
   }
}

/* Pushes an element's value: the common scalars straight from the bytes,
 * documents and arrays as views sharing this view's anchor, the rest through
 * libbson. view_idx is the view the element belongs to, mt_idx the view
 * metatable's index or 0 (see push_nested). */
static void
push_elem (lua_State *L, int view_idx, int mt_idx, const view_t *v, const fw_bson_elem_t *e)
{
   switch (e->type) {
   case BSON_TYPE_UTF8: {
      uint32_t n = fw_bson_read_u32 (e->value);
      if (n >= 1 && n <= e->vsize - 4 && e->value[4 + n - 1] == '\0') {
         lua_pushlstring (L, (const char *) e->value + 4, n - 1);
         return;
      }
      break;
   }
   case BSON_TYPE_INT32:
      lua_pushinteger (L, (int32_t) fw_bson_read_u32 (e->value));
      return;
   case BSON_TYPE_INT64:
      lua_pushinteger (L, (lua_Integer) (int64_t) fw_bson_read_u64 (e->value));
      return;
   case BSON_TYPE_DOUBLE: {
      uint64_t bits = fw_bson_read_u64 (e->value);
      double d;
      memcpy (&d, &bits, sizeof d);
      lua_pushnumber (L, d);
      return;
   }
   case BSON_TYPE_BOOL:
      lua_pushboolean (L, e->value[0] != 0);
      return;
   case BSON_TYPE_NULL:
      fw_bson_values_push_null (L);
      return;
   case BSON_TYPE_DOCUMENT:
   case BSON_TYPE_ARRAY:
      if (e->vsize >= 5 && e->value[e->vsize - 1] == '\0') {
         push_nested (L, view_idx, mt_idx, e->value, (uint32_t) e->vsize,
                      e->type == BSON_TYPE_ARRAY);
         return;
      }
      break;
   default:
      break;
   }
   {
      bson_iter_t it;
      if (bson_iter_init_from_data_at_offset (&it, v->data, v->len, e->offset,
                                              (uint32_t) e->nlen)) {
         push_anchor (L, view_idx);
         fw_bson_view_push_element (L, -1, &it);
         lua_remove (L, -2);
         return;
      }
   }
   lua_pushnil (L);
}

/* Whether the key's bytes after the first are the same (the first compared
 * already). Keys are short: a loop here costs less than memcmp's call. */
static inline bool
same_key_rest (const uint8_t *name, const char *key, size_t klen)
{
   if (klen > 16) {
      return memcmp (name, key, klen) == 0;
   }
   for (size_t i = 1; i < klen; i++) {
      if (name[i] != (uint8_t) key[i]) {
         return false;
      }
   }
   return true;
}

/* Scans from the element at offset `from` for the element named key
 * (document) or the want-th one counting from there (array). */
static bool
find_elem (const view_t *v, uint32_t from, const char *key, size_t klen, lua_Integer want,
           fw_bson_elem_t *e, uint32_t *after)
{
   uint32_t pos = from;

   while (fw_bson_scan_next (v->data, v->len, &pos, e)) {
      /* The first byte before the rest: most keys of a length differ there
       * (a Lua string ends with a NUL, so an empty key compares too). */
      if (v->is_array ? --want == 0
                      : (e->nlen == klen && e->name[0] == (uint8_t) key[0] &&
                         same_key_rest (e->name, key, klen))) {
         *after = pos;
         return true;
      }
   }
   return false;
}

/* __index: a string key on a document, a 1-based integer on an array. */
static int
view_index (lua_State *L)
{
   view_t *v = check_view_keep_mt (L);
   const char *key = NULL;
   size_t klen = 0;
   lua_Integer want = 0;
   uint32_t after;
   fw_bson_elem_t e;
   bool found;

   if (v->is_array) {
      int isnum;
      want = lua_tointegerx (L, 2, &isnum);
      if (!isnum || want < 1) {
         lua_pushnil (L);
         return 1;
      }
      /* Past the last element read: go on from there. */
      found = want > v->hint_index
                 ? find_elem (v, v->hint_pos, NULL, 0, want - v->hint_index, &e, &after)
                 : find_elem (v, 4, NULL, 0, want, &e, &after);
      if (found) {
         v->hint_pos = after;
         v->hint_index = want;
      }
   } else if (lua_type (L, 2) == LUA_TSTRING) {
      /* Always from the start: with a key twice in a document (valid
       * BSON) the first one wins, whatever was read before. */
      key = lua_tolstring (L, 2, &klen);
      found = find_elem (v, 4, key, klen, 0, &e, &after);
   } else {
      lua_pushnil (L);
      return 1;
   }
   if (found) {
      push_elem (L, 1, lua_upvalueindex (1), v, &e);
   } else {
      lua_pushnil (L);
   }
   return 1;
}

static int
view_newindex (lua_State *L)
{
   (void) check_view (L, 1);
   return luaL_error (L,
                      "documents from ctx are read-only; use fw.table(doc) for a mutable "
                      "copy");
}

static int
view_len (lua_State *L)
{
   view_t *v = check_view (L, 1);
   lua_Integer n = 0;
   uint32_t pos = 4;
   fw_bson_elem_t e;

   /* Like a table: # counts the sequence part, which only arrays have. */
   if (v->is_array) {
      while (fw_bson_scan_next (v->data, v->len, &pos, &e)) {
         n++;
      }
   }
   lua_pushinteger (L, n);
   return 1;
}

typedef struct {
   uint32_t pos;
   lua_Integer index;
} pairs_state_t;

/* pairs: upvalue 1 holds the position, upvalue 2 the view (kept alive). */
static int
pairs_next (lua_State *L)
{
   pairs_state_t *st = lua_touserdata (L, lua_upvalueindex (1));
   const view_t *v = lua_touserdata (L, lua_upvalueindex (2));
   fw_bson_elem_t e;

   if (!fw_bson_scan_next (v->data, v->len, &st->pos, &e)) {
      lua_pushnil (L);
      return 1;
   }
   if (v->is_array) {
      lua_pushinteger (L, ++st->index);
   } else {
      lua_pushlstring (L, (const char *) e.name, e.nlen);
   }
   push_elem (L, lua_upvalueindex (2), 0, v, &e);
   return 2;
}

static int
view_pairs (lua_State *L)
{
   (void) check_view (L, 1);
   pairs_state_t *st = lua_newuserdatauv (L, sizeof *st, 0);

   st->pos = 4;
   st->index = 0;
   lua_pushvalue (L, 1);
   lua_pushcclosure (L, pairs_next, 2);
   lua_pushvalue (L, 1);
   lua_pushnil (L);
   return 3;
}

static int
view_eq (lua_State *L)
{
   view_t *a = to_view (L, 1), *b = to_view (L, 2);
   lua_pushboolean (L, a && b && a->is_array == b->is_array && a->len == b->len &&
                          memcmp (a->data, b->data, a->len) == 0);
   return 1;
}

static int
view_tostring (lua_State *L)
{
   view_t *v = check_view (L, 1);
   bson_t doc;
   char *json;

   if (!bson_init_static (&doc, v->data, v->len) ||
       !(json = v->is_array ? bson_array_as_json (&doc, NULL)
                            : bson_as_relaxed_extended_json (&doc, NULL))) {
      lua_pushstring (L, v->is_array ? "[?]" : "{?}");
      return 1;
   }
   lua_pushstring (L, json);
   bson_free (json);
   return 1;
}

/* fw.table(v): a plain, mutable table for a view; other values unchanged. */
static int
view_to_table (lua_State *L)
{
   view_t *v = to_view (L, 1);
   bson_t doc;
   fw_error_t err;
   bool ok;

   if (!v) {
      luaL_checkany (L, 1);
      lua_settop (L, 1);
      return 1;
   }
   if (!bson_init_static (&doc, v->data, v->len)) {
      return luaL_error (L, "corrupt BSON in a document view");
   }
   ok = v->is_array ? fw_bson_lua_push_array (L, &doc, NULL, &err)
                    : fw_bson_lua_push_document (L, &doc, NULL, &err);
   if (!ok) {
      return luaL_error (L, "%s", err.message);
   }
   return 1;
}

fw_bson_values_append_result_t
fw_bson_view_append (lua_State *L, int idx, bson_t *out, const char *key, int key_len)
{
   view_t *v = to_view (L, idx);
   bson_t doc;
   bool ok;

   if (!v) {
      return FW_BSON_VALUES_NOT_TYPED;
   }
   if (!bson_init_static (&doc, v->data, v->len)) {
      return FW_BSON_VALUES_TOO_LARGE;
   }
   ok = v->is_array ? bson_append_array (out, key, key_len, &doc)
                    : bson_append_document (out, key, key_len, &doc);
   return ok ? FW_BSON_VALUES_APPENDED : FW_BSON_VALUES_TOO_LARGE;
}

static const luaL_Reg view_meta[] = {{"__index", view_index},
                                     {"__newindex", view_newindex},
                                     {"__len", view_len},
                                     {"__pairs", view_pairs},
                                     {"__eq", view_eq},
                                     {"__tostring", view_tostring},
                                     {NULL, NULL}};

void
fw_bson_view_open (lua_State *L, int module_idx)
{
   module_idx = module_idx ? lua_absindex (L, module_idx) : 0;
   if (luaL_newmetatable (L, VIEW_MT)) {
      lua_pushvalue (L, -1);
      luaL_setfuncs (L, view_meta, 1);
      lua_pushliteral (L, "flowwarden.view");
      lua_setfield (L, -2, "__metatable");
      lua_pushliteral (L, "document");
      lua_setfield (L, -2, "__name");
      lua_pushvalue (L, -1);
      lua_rawsetp (L, LUA_REGISTRYINDEX, &view_mt_key);
   }
   lua_pop (L, 1);
   if (module_idx) {
      lua_pushcfunction (L, view_to_table);
      lua_setfield (L, module_idx, "table");
   }
}
