/*
 * bson_lua_encode.c - Lua -> BSON: tables and values to a caller's bson_t.
 *
 * The walk runs inside its own lua_pcall, so the only Lua error it can meet
 * (lack of memory while anchoring keys for sorting) cannot skip the free of
 * its C scratch buffer, and callers get a plain bool + fw_error_t.
 */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_values.h"
#include "bson/bson_view.h"
#include "bson_lua-private.h"

/* A key waiting to be sorted; s stays valid while keys[pos] anchors it. */
typedef struct {
   const char *s;
   size_t len;
   lua_Integer pos;
} key_ref_t;

typedef struct {
   lua_State *L;
   fw_error_t *error;
   const char *root;
   int level; /* tables open, the outermost being 1 */
   int nseg;
   bool root_array;    /* the root table (key NULL) was written as an array */
   key_ref_t *scratch; /* a stack of key lists, one region per open table */
   size_t scratch_cap, scratch_used;
   const void *tables[FW_BSON_LUA_MAX_DEPTH + 1];
   fw_bson_lua_seg_t segs[FW_BSON_LUA_MAX_DEPTH + 2];
} to_bson_t;

typedef struct {
   to_bson_t *c;
   bson_t *out;
   const char *key; /* NULL: write the table's fields into out */
   int key_len;
   bool ok;
} job_t;

static bool append_value (to_bson_t *c, int idx, bson_t *out, const char *key, int key_len,
                          bool as_int64);

static bool fail (to_bson_t *c, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static bool
fail (to_bson_t *c, const char *fmt, ...)
{
   char path[FW_ERROR_MESSAGE_MAX], what[FW_ERROR_MESSAGE_MAX];
   va_list ap;

   va_start (ap, fmt);
   vsnprintf (what, sizeof what, fmt, ap);
   va_end (ap);
   fw_bson_lua_format_path (path, sizeof path, c->root, c->segs, c->nseg);
   fw_error_set (c->error, FW_ERROR_INVALID, "%s: %s", path, what);
   return false;
}

static void
push_key_seg (to_bson_t *c, const char *key, size_t len)
{
   c->segs[c->nseg].key = key;
   c->segs[c->nseg].len = len;
   c->nseg++;
}

static void
push_index_seg (to_bson_t *c, lua_Integer i)
{
   c->segs[c->nseg].key = NULL;
   c->segs[c->nseg].index = i;
   c->nseg++;
}

/* Describes the key at idx for messages about keys BSON cannot hold. */
static bool
bad_key (to_bson_t *c, int idx)
{
   lua_State *L = c->L;

   if (lua_type (L, idx) == LUA_TNUMBER && !lua_isinteger (L, idx)) {
      return fail (c,
                   "table has a float key (%.14g); BSON keys must be strings, "
                   "or 1..n for an array",
                   lua_tonumber (L, idx));
   }
   return fail (c, "table has a %s key; BSON keys must be strings, or 1..n for an array",
                luaL_typename (L, idx));
}

static bool
reserve (to_bson_t *c, size_t n)
{
   key_ref_t *p;
   size_t cap;

   if (c->scratch_used + n <= c->scratch_cap) {
      return true;
   }
   cap = c->scratch_cap ? c->scratch_cap : 32;
   while (cap < c->scratch_used + n) {
      cap *= 2;
   }
   if (!(p = realloc (c->scratch, cap * sizeof *p))) {
      return fail (c, "not enough memory");
   }
   c->scratch = p;
   c->scratch_cap = cap;
   return true;
}

/* `_id` first, then bytewise, a prefix before its extensions. */
static int
compare_keys (const void *pa, const void *pb)
{
   const key_ref_t *a = pa, *b = pb;
   bool a_id = a->len == 3 && memcmp (a->s, "_id", 3) == 0;
   bool b_id = b->len == 3 && memcmp (b->s, "_id", 3) == 0;
   int r;

   if (a_id || b_id) {
      return b_id - a_id;
   }
   r = memcmp (a->s, b->s, a->len < b->len ? a->len : b->len);
   return r ? r : (a->len > b->len) - (a->len < b->len);
}

/* Tables with at most this many keys to sort anchor them on the Lua stack
 * and sort them in a C array: no Lua table and no scratch per table. */
#define SMALL_KEYS 8

/*
 * Walks the table at idx and records its string keys (with index_idx != 0,
 * those missing from that key -> position map) in refs, or in c->scratch from
 * base when refs is NULL, at most n_keys of them. Each key is anchored, and
 * its ref's pos says where: in the table at keys (1..n) or, with keys == 0, at
 * that index of the stack (the keys are left there, one slot each). Sets *n.
 */
static bool
collect_keys (to_bson_t *c, int idx, size_t n_keys, int index_idx, key_ref_t *refs, size_t base,
              int keys, size_t *n)
{
   lua_State *L = c->L;
   key_ref_t *r;

   *n = 0;
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      lua_pop (L, 1);
      if (lua_type (L, -1) != LUA_TSTRING) {
         if (lua_isinteger (L, -1)) {
            return fail (c, "table mixes string keys and integer keys");
         }
         return bad_key (c, lua_gettop (L));
      }
      if (index_idx) {
         lua_pushvalue (L, -1);
         if (lua_rawget (L, index_idx) != LUA_TNIL) {
            lua_pop (L, 1);
            continue;
         }
         lua_pop (L, 1);
      }
      if (*n == n_keys) {
         return fail (c, "table changed while being converted");
      }
      r = refs ? &refs[*n] : &c->scratch[base + *n];
      lua_pushvalue (L, -1); /* on the stack: the copy below the walk's key stays */
      if (keys) {
         lua_rawseti (L, keys, (lua_Integer) *n + 1);
         r->pos = (lua_Integer) *n + 1;
      } else {
         r->pos = lua_gettop (L) - 1;
      }
      r->s = lua_tolstring (L, -1, &r->len);
      (*n)++;
   }
   if (*n != n_keys) {
      return fail (c, "table changed while being converted");
   }
   return true;
}

/* Sorts the n refs collect_keys recorded (in refs, or c->scratch from base,
 * which may move while values are written) and appends their fields. */
static bool
append_refs (to_bson_t *c, int idx, bson_t *out, key_ref_t *refs, size_t base, size_t n, int keys)
{
   lua_State *L = c->L;
   size_t i;

   /* An empty table may come first, before anything allocated the scratch:
    * qsort must not see its NULL (UBSan: null passed as nonnull). */
   if (n > 1) {
      qsort (refs ? refs : c->scratch + base, n, sizeof (key_ref_t), compare_keys);
   }
   for (i = 0; i < n; i++) {
      key_ref_t ref = refs ? refs[i] : c->scratch[base + i];

      if (memchr (ref.s, '\0', ref.len) || ref.len > INT_MAX) {
         return fail (c, "a key contains a NUL byte, which BSON keys cannot hold");
      }
      if (keys) {
         lua_rawgeti (L, keys, ref.pos);
      } else {
         lua_pushvalue (L, (int) ref.pos);
      }
      lua_rawget (L, idx);
      push_key_seg (c, ref.s, ref.len);
      if (!append_value (c, lua_gettop (L), out, ref.s, (int) ref.len, false)) {
         return false;
      }
      c->nseg--;
      lua_pop (L, 1);
   }
   return true;
}

/*
 * Appends the string-keyed fields of the table at idx in sorted order:
 * all of them, or with index_idx != 0 those missing from that key -> position
 * map (fields added to a shaped table). n_keys is how many there are.
 * Raises a key error for keys that are neither strings nor (ignored) shape keys.
 */
static bool
append_sorted (to_bson_t *c, int idx, bson_t *out, size_t n_keys, int index_idx)
{
   lua_State *L = c->L;
   key_ref_t small[SMALL_KEYS];
   size_t base = c->scratch_used, n;
   int keys;

   if (n_keys <= SMALL_KEYS) {
      if (!lua_checkstack (L, (int) n_keys + 3)) {
         return fail (c, "Lua stack exhausted");
      }
      if (!collect_keys (c, idx, n_keys, index_idx, small, 0, 0, &n) ||
          !append_refs (c, idx, out, small, 0, n, 0)) {
         return false;
      }
      lua_pop (L, (int) n);
      return true;
   }
   if (!reserve (c, n_keys)) {
      return false;
   }
   c->scratch_used += n_keys;
   lua_createtable (L, (int) n_keys, 0);
   keys = lua_gettop (L);
   if (!collect_keys (c, idx, n_keys, index_idx, NULL, base, keys, &n) ||
       !append_refs (c, idx, out, NULL, base, n, keys)) {
      return false;
   }
   c->scratch_used = base;
   lua_pop (L, 1);
   return true;
}

static size_t
count_entries (lua_State *L, int idx)
{
   size_t n = 0;

   lua_pushnil (L);
   while (lua_next (L, idx)) {
      lua_pop (L, 1);
      n++;
   }
   return n;
}

/* Pushes mt's key -> first position map, building it on first use. */
static void
push_shape_index (lua_State *L, int mt, lua_Integer n)
{
   lua_Integer i;

   if (lua_rawgeti (L, mt, SHAPE_INDEX) == LUA_TTABLE) {
      return;
   }
   lua_pop (L, 1);
   lua_createtable (L, 0, (int) n);
   for (i = n; i >= 1; i--) { /* descending: the first position wins */
      lua_rawgeti (L, mt, i);
      lua_pushinteger (L, i);
      lua_rawset (L, -3);
   }
   lua_pushvalue (L, -1);
   lua_rawseti (L, mt, SHAPE_INDEX);
}

/* Writes a table read from BSON: its known keys in order, then added ones. */
static bool
write_shaped (to_bson_t *c, int idx, int mt, bson_t *out)
{
   lua_State *L = c->L;
   lua_Integer n, i;
   const char *flags, *key;
   size_t present = 0, total, klen;
   int index_idx = 0;

   lua_rawgeti (L, mt, SHAPE_N);
   n = lua_tointeger (L, -1);
   lua_rawgeti (L, mt, SHAPE_FLAGS);
   flags = lua_tostring (L, -1); /* anchored by the shape */
   lua_pop (L, 2);
   if (lua_rawgeti (L, mt, SHAPE_DUPS) != LUA_TNIL) {
      push_shape_index (L, mt, n);
      lua_remove (L, -2);
      index_idx = lua_gettop (L);
   } else {
      lua_pop (L, 1);
   }
   for (i = 1; i <= n; i++) {
      lua_rawgeti (L, mt, i);
      if (index_idx) {
         lua_pushvalue (L, -1);
         lua_rawget (L, index_idx);
         if (lua_tointeger (L, -1) != i) {
            lua_pop (L, 2);
            continue;
         }
         lua_pop (L, 1);
      }
      lua_pushvalue (L, -1);
      if (lua_rawget (L, idx) == LUA_TNIL) {
         lua_pop (L, 2);
         continue;
      }
      present++;
      key = lua_tolstring (L, -2, &klen);
      push_key_seg (c, key, klen);
      if (!append_value (c, lua_gettop (L), out, key, (int) klen, flags && flags[i - 1])) {
         return false;
      }
      c->nseg--;
      lua_pop (L, 2);
   }
   total = count_entries (L, idx);
   if (total != present) {
      if (!index_idx) {
         push_shape_index (L, mt, n);
         index_idx = lua_gettop (L);
      }
      if (!append_sorted (c, idx, out, total - present, index_idx)) {
         return false;
      }
   }
   if (index_idx) {
      lua_remove (L, index_idx);
   }
   return true;
}

/* Writes elements 1..n of the table at idx; mt/kind describe int64 widths. */
static bool
write_array (to_bson_t *c, int idx, lua_Integer n, int mt, int kind, bson_t *out)
{
   lua_State *L = c->L;
   const char *flags = NULL, *key;
   size_t flen = 0, total;
   char buf[16];
   lua_Integer i;
   bool as_int64;

   if (kind == KIND_ARRAY_FLAGS) {
      lua_rawgeti (L, mt, SHAPE_FLAGS);
      flags = lua_tolstring (L, -1, &flen); /* anchored by mt */
      lua_pop (L, 1);
   }
   for (i = 1; i <= n; i++) {
      int klen = (int) bson_uint32_to_string ((uint32_t) (i - 1), &key, buf, sizeof buf);

      push_index_seg (c, i);
      if (lua_rawgeti (L, idx, i) == LUA_TNIL) {
         return fail (c,
                      "array element is nil; arrays cannot have holes (use null for a "
                      "BSON null)");
      }
      as_int64 = kind == KIND_ARRAY64 || (flags && (size_t) i <= flen && flags[i - 1]);
      if (!append_value (c, lua_gettop (L), out, key, klen, as_int64)) {
         return false;
      }
      c->nseg--;
      lua_pop (L, 1);
   }
   total = count_entries (L, idx);
   if (total != (size_t) n) {
      lua_pushnil (L);
      while (lua_next (L, idx)) {
         lua_pop (L, 1);
         if (!lua_isinteger (L, -1) || lua_tointeger (L, -1) < 1 || lua_tointeger (L, -1) > n) {
            if (lua_type (L, -1) == LUA_TSTRING) {
               return fail (c, "array has a key outside 1..%lld: \"%s\"", (long long) n,
                            lua_tostring (L, -1));
            }
            if (lua_isinteger (L, -1)) {
               return fail (c, "array has a key outside 1..%lld: %lld", (long long) n,
                            (long long) lua_tointeger (L, -1));
            }
            return bad_key (c, lua_gettop (L));
         }
      }
      return fail (c, "table changed while being converted");
   }
   return true;
}

/*
 * Sorts out what an unmarked table is: returns 1 for an array (*n elements),
 * 0 for a document (*n string keys), -1 after filling the error.
 * The same walk records up to SMALL_KEYS string keys in refs and anchors them
 * on the stack as collect_keys does (*anchored of them, left there): a
 * document of at most SMALL_KEYS keys is then written without a second walk.
 */
static int
classify_plain (to_bson_t *c, int idx, lua_Integer *n, key_ref_t *refs, int *anchored)
{
   lua_State *L = c->L;
   lua_Integer n_str = 0, n_int = 0, max = 0, k;
   bool out_of_range = false;

   *anchored = 0;
   if (!lua_checkstack (L, SMALL_KEYS + 3)) {
      fail (c, "Lua stack exhausted");
      return -1;
   }
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      lua_pop (L, 1);
      if (lua_type (L, -1) == LUA_TSTRING) {
         if (n_str++ < SMALL_KEYS) {
            key_ref_t *r = &refs[(*anchored)++];
            lua_pushvalue (L, -1); /* the walk's key below stays as the anchor */
            r->pos = lua_gettop (L) - 1;
            r->s = lua_tolstring (L, -1, &r->len);
         }
      } else if (lua_isinteger (L, -1)) {
         k = lua_tointeger (L, -1);
         if (k >= 1) {
            n_int++;
            max = k > max ? k : max;
         } else {
            out_of_range = true;
         }
      } else {
         bad_key (c, lua_gettop (L));
         return -1;
      }
   }
   if (n_str && (n_int || out_of_range)) {
      fail (c, "table mixes string keys and integer keys");
      return -1;
   }
   if (n_str || (!n_int && !out_of_range)) {
      *n = n_str;
      return 0;
   }
   if (out_of_range || max != n_int) {
      fail (c,
            "table keys are integers but not a sequence 1..n; arrays cannot have holes "
            "(use null for a BSON null)");
      return -1;
   }
   *n = n_int;
   return 1;
}

/* classify_plain's result for the table at idx, with the anchored keys
 * dropped unless the table is a document whose keys are all anchored. */
static int
classify_anchored (to_bson_t *c, int idx, lua_Integer *n, key_ref_t *refs, int *anchored)
{
   int r = classify_plain (c, idx, n, refs, anchored);

   if (r != 0 || *n != *anchored) {
      lua_pop (c->L, *anchored);
      *anchored = 0;
   }
   return r;
}

static bool
enter_table (to_bson_t *c, int idx)
{
   const void *p = lua_topointer (c->L, idx);
   int i;

   if (c->level >= FW_BSON_LUA_MAX_DEPTH) {
      return fail (c, "nesting deeper than %d levels", FW_BSON_LUA_MAX_DEPTH);
   }
   for (i = 0; i < c->level; i++) {
      if (c->tables[i] == p) {
         return fail (c, "table contains itself (a cycle)");
      }
   }
   /* Room for the metatable, keys table, index map, key, value and a bit more. */
   if (!lua_checkstack (c->L, 10)) {
      return fail (c, "Lua stack exhausted");
   }
   c->tables[c->level++] = p;
   return true;
}

/*
 * Writes the table at idx: into out itself when key is NULL (the root), else
 * as a nested document or array under key.
 */
static bool
write_table (to_bson_t *c, int idx, bson_t *out, const char *key, int key_len)
{
   lua_State *L = c->L;
   bson_t child, *dst = out;
   lua_Integer n = 0;
   int kind, is_array, mt = 0, anchored = 0;
   key_ref_t refs[SMALL_KEYS];
   bool ok;
   STACK_CHECK_BEGIN (L);

   if (!enter_table (c, idx)) {
      return false;
   }
   kind = fw_bson_lua_kind (L, idx);
   if (kind) {
      mt = lua_gettop (L);
      is_array = kind != KIND_DOCUMENT;
      n = is_array ? (lua_Integer) lua_rawlen (L, idx) : 0;
   } else if ((is_array = classify_anchored (c, idx, &n, refs, &anchored)) < 0) {
      return false;
   }
   if (!key) {
      c->root_array = is_array;
   } else {
      dst = &child;
      ok = is_array ? bson_append_array_begin (out, key, key_len, &child)
                    : bson_append_document_begin (out, key, key_len, &child);
      if (!ok) {
         return fail (c, "the BSON document would exceed its maximum size");
      }
   }
   if (is_array) {
      ok = write_array (c, idx, n, mt, kind, dst);
   } else if (kind == KIND_DOCUMENT) {
      ok = write_shaped (c, idx, mt, dst);
   } else if (anchored) {
      ok = append_refs (c, idx, dst, refs, 0, (size_t) anchored, 0);
      lua_pop (L, anchored);
   } else {
      ok = append_sorted (c, idx, dst, (size_t) n, 0);
   }
   if (!ok) {
      return false;
   }
   if (key &&
       !(is_array ? bson_append_array_end (out, &child) : bson_append_document_end (out, &child))) {
      return fail (c, "the BSON document would exceed its maximum size");
   }
   if (mt) {
      lua_remove (L, mt);
   }
   c->level--;
   STACK_CHECK_END (L, 0);
   return true;
}

static bool
append_value (to_bson_t *c, int idx, bson_t *out, const char *key, int key_len, bool as_int64)
{
   lua_State *L = c->L;
   lua_Integer i;
   const char *s;
   size_t len;
   bool ok;

   switch (lua_type (L, idx)) {
   case LUA_TBOOLEAN:
      ok = bson_append_bool (out, key, key_len, lua_toboolean (L, idx));
      break;
   case LUA_TNUMBER:
      if (!lua_isinteger (L, idx)) {
         ok = bson_append_double (out, key, key_len, lua_tonumber (L, idx));
      } else if (i = lua_tointeger (L, idx), !as_int64 && i >= INT32_MIN && i <= INT32_MAX) {
         ok = bson_append_int32 (out, key, key_len, (int32_t) i);
      } else {
         ok = bson_append_int64 (out, key, key_len, i);
      }
      break;
   case LUA_TSTRING:
      s = lua_tolstring (L, idx, &len);
      ok = len < INT_MAX && bson_append_utf8 (out, key, key_len, s, (int) len);
      break;
   case LUA_TTABLE:
      return write_table (c, idx, out, key, key_len);
   case LUA_TUSERDATA:
   case LUA_TLIGHTUSERDATA: {
      /* A document view goes back as the bytes it was read from. */
      fw_bson_values_append_result_t r = fw_bson_view_append (L, idx, out, key, key_len);
      if (r == FW_BSON_VALUES_NOT_TYPED) {
         r = fw_bson_values_append (L, idx, out, key, key_len);
      }
      switch (r) {
      case FW_BSON_VALUES_APPENDED:
         return true;
      case FW_BSON_VALUES_TOO_LARGE:
         ok = false;
         break;
      default:
         return fail (c, "cannot convert a userdata to BSON");
      }
      break;
   }
   case LUA_TNIL:
      return fail (c, "cannot convert nil to BSON (use null for a BSON null)");
   default:
      return fail (c, "cannot convert a %s to BSON", luaL_typename (L, idx));
   }
   if (!ok) {
      return fail (c, "the BSON document would exceed its maximum size");
   }
   return true;
}

/* The protected body: the value is argument 1, the job argument 2. */
static int
encode_protected (lua_State *L)
{
   job_t *job = lua_touserdata (L, 2);
   to_bson_t *c = job->c;

   if (job->key) {
      job->ok = append_value (c, 1, job->out, job->key, job->key_len, false);
   } else if (!lua_istable (L, 1)) {
      job->ok = fail (c, "expected a table to convert to a BSON document, got %s",
                      luaL_typename (L, 1));
   } else {
      job->ok = write_table (c, 1, job->out, NULL, 0);
   }
   return 0;
}

/* Converts the value at idx into out: written aside and appended at the end,
 * so that a failure leaves out as it was, or with in_place straight into out
 * (no copy; a failure leaves part of the fields there). */
static bool
run (lua_State *L, int idx, const char *root_path, bson_t *out, const char *key, int key_len,
     bool *root_array, bool in_place, fw_error_t *error)
{
   to_bson_t c;
   job_t job;
   bson_t tmp;
   int top = lua_gettop (L), status;

   memset (&c, 0, offsetof (to_bson_t, tables));
   c.L = L;
   c.error = error;
   c.root = root_path;
   bson_init (&tmp);
   job.c = &c;
   job.out = in_place ? out : &tmp;
   job.key = key;
   job.key_len = key_len;
   job.ok = false;
   idx = lua_absindex (L, idx);
   if (key && !root_path) {
      push_key_seg (&c, key, (size_t) key_len);
   }
   if (!lua_checkstack (L, 3)) {
      fail (&c, "Lua stack exhausted");
      goto done;
   }
   lua_pushcfunction (L, encode_protected);
   lua_pushvalue (L, idx);
   lua_pushlightuserdata (L, &job);
   status = lua_pcall (L, 2, 0, 0);
   if (status != LUA_OK) {
      if (status == LUA_ERRMEM) {
         fail (&c, "not enough memory");
         if (error) {
            error->domain = FW_ERROR_NOMEM;
         }
      } else {
         fail (&c, "%s", lua_tostring (L, -1) ? lua_tostring (L, -1) : "Lua error");
      }
      job.ok = false;
   }
   if (job.ok && !in_place && !bson_concat (out, &tmp)) {
      job.ok = fail (&c, "the BSON document would exceed its maximum size");
   }

   if (root_array) {
      *root_array = c.root_array;
   }

done:
   lua_settop (L, top);
   bson_destroy (&tmp);
   free (c.scratch);
   return job.ok;
}

bool
fw_bson_lua_to_bson (lua_State *L, int idx, const char *root_path, bson_t *out, fw_error_t *error)
{
   return run (L, idx, root_path, out, NULL, 0, NULL, false, error);
}

bool
fw_bson_lua_to_document (lua_State *L, int idx, const char *root_path, bson_t *out, bool *is_array,
                         fw_error_t *error)
{
   return run (L, idx, root_path, out, NULL, 0, is_array, true, error);
}

bool
fw_bson_lua_append (lua_State *L, int idx, bson_t *out, const char *key, int key_len,
                    const char *root_path, fw_error_t *error)
{
   size_t len = key_len < 0 ? strlen (key) : (size_t) key_len;

   if (memchr (key, '\0', len) || len > INT_MAX) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s: a key contains a NUL byte, which BSON keys "
                    "cannot hold",
                    root_path && *root_path ? root_path : "(root)");
      return false;
   }
   return run (L, idx, root_path, out, key, (int) len, NULL, false, error);
}
