/*
 * bson_check.c - keys and strings of a document to write (bson_check.h).
 */
#include <string.h>

#include "bson/bson_check.h"
#include "bson/bson_lua-private.h"

/* Deeper than this, the path stops growing (the check goes on). */
#define CHECK_PATH_MAX 128

typedef struct {
   fw_bson_lua_seg_t segs[CHECK_PATH_MAX];
   int nseg, depth;
} check_t;

static fw_bson_text_t check_level (check_t *c, bson_iter_t *it, bool is_array);

/* bson_utf8_validate, with ASCII (most keys and strings) answered without
 * its per-character decoding. */
static bool
utf8_ok (const char *s, size_t n, bool allow_nul)
{
   for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char) s[i];
      if (ch >= 0x80 || (ch == 0 && !allow_nul)) {
         return bson_utf8_validate (s, n, allow_nul);
      }
   }
   return true;
}

static void
push_seg (check_t *c, const bson_iter_t *it, bool is_array, int64_t i)
{
   if (c->depth++ >= CHECK_PATH_MAX) {
      return;
   }
   if (is_array) {
      c->segs[c->nseg].key = NULL;
      c->segs[c->nseg].index = i;
   } else {
      c->segs[c->nseg].key = bson_iter_key (it);
      c->segs[c->nseg].len = bson_iter_key_len (it);
   }
   c->nseg++;
}

static void
pop_seg (check_t *c)
{
   if (--c->depth < CHECK_PATH_MAX) {
      c->nseg--;
   }
}

/* A code-with-scope's scope, walked as a document of its own. */
static fw_bson_text_t
check_scope (check_t *c, const bson_iter_t *it)
{
   const uint8_t *data;
   uint32_t len, code_len;
   bson_t scope;
   bson_iter_t sub;

   bson_iter_codewscope (it, &code_len, &len, &data);
   if (!bson_init_static (&scope, data, len) || !bson_iter_init (&sub, &scope)) {
      return FW_BSON_TEXT_CORRUPT;
   }
   return check_level (c, &sub, false);
}

/* One element: its key was checked; its value, recursing into containers. */
static fw_bson_text_t
check_value (check_t *c, bson_iter_t *it, bool is_array, int64_t i)
{
   fw_bson_text_t t = FW_BSON_TEXT_OK;
   bson_iter_t sub;
   const char *s;
   uint32_t n;

   switch (bson_iter_type (it)) {
   case BSON_TYPE_UTF8:
      s = bson_iter_utf8 (it, &n);
      if (utf8_ok (s, n, true)) {
         return FW_BSON_TEXT_OK;
      }
      push_seg (c, it, is_array, i); /* the path names the string */
      return FW_BSON_TEXT_BAD_STRING;
   case BSON_TYPE_DOCUMENT:
   case BSON_TYPE_ARRAY:
   case BSON_TYPE_CODEWSCOPE:
      push_seg (c, it, is_array, i);
      if (BSON_ITER_HOLDS_CODEWSCOPE (it)) {
         t = check_scope (c, it);
      } else if (!bson_iter_recurse (it, &sub)) {
         t = FW_BSON_TEXT_CORRUPT;
      } else {
         t = check_level (c, &sub, BSON_ITER_HOLDS_ARRAY (it));
      }
      if (t == FW_BSON_TEXT_OK) {
         pop_seg (c);
      }
      return t;
   default:
      return FW_BSON_TEXT_OK;
   }
}

/* The elements of one document or array; on a problem, the path is left
 * naming the bad string or the document holding the bad key. */
static fw_bson_text_t
check_level (check_t *c, bson_iter_t *it, bool is_array)
{
   fw_bson_text_t t;
   int64_t i = 0;

   while (bson_iter_next (it)) {
      i++;
      if (!is_array) {
         uint32_t klen = bson_iter_key_len (it);
         if (klen == 0) {
            return FW_BSON_TEXT_EMPTY_KEY;
         }
         if (!utf8_ok (bson_iter_key (it), klen, false)) {
            return FW_BSON_TEXT_BAD_KEY;
         }
      }
      t = check_value (c, it, is_array, i);
      if (t != FW_BSON_TEXT_OK) {
         return t;
      }
   }
   return it->err_off ? FW_BSON_TEXT_CORRUPT : FW_BSON_TEXT_OK;
}

fw_bson_text_t
fw_bson_check_text (const bson_t *doc, const char *root, char *where, size_t size)
{
   check_t c;
   bson_iter_t it;
   fw_bson_text_t t;

   c.nseg = c.depth = 0;
   t = bson_iter_init (&it, doc) ? check_level (&c, &it, false) : FW_BSON_TEXT_CORRUPT;
   if (t != FW_BSON_TEXT_OK && where && size) {
      fw_bson_lua_format_path (where, size, root, c.segs, c.nseg);
   }
   return t;
}

const char *
fw_bson_text_problem (fw_bson_text_t t)
{
   switch (t) {
   case FW_BSON_TEXT_EMPTY_KEY:
      return "has an empty key";
   case FW_BSON_TEXT_BAD_KEY:
      return "has a key that is not valid UTF-8";
   case FW_BSON_TEXT_BAD_STRING:
      return "is not valid UTF-8";
   case FW_BSON_TEXT_CORRUPT:
      return "is not valid BSON";
   default:
      return "is valid";
   }
}
