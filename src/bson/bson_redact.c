/*
 * bson_redact.c - secrets out of a BSON document (bson_redact.h).
 */
#include <stdlib.h>
#include <string.h>

#include "bson/bson_redact.h"
#include "flowwarden/secrets.h"

/* Whether a secret occurs in s[0..n). */
static bool
has_secret (const char *s, size_t n)
{
   char *owned = NULL;
   const char *r = fw_secrets_redact (s, n, &owned, NULL);
   bool hit = r != s;

   free (owned);
   return hit;
}

/* Whether a secret occurs in a key or a string of the document at it. */
static bool
any_secret (bson_iter_t *it)
{
   bson_iter_t sub;

   while (bson_iter_next (it)) {
      const char *s;
      uint32_t n;

      if (has_secret (bson_iter_key (it), bson_iter_key_len (it))) {
         return true;
      }
      if (BSON_ITER_HOLDS_UTF8 (it)) {
         s = bson_iter_utf8 (it, &n);
         if (has_secret (s, n)) {
            return true;
         }
      } else if ((BSON_ITER_HOLDS_DOCUMENT (it) || BSON_ITER_HOLDS_ARRAY (it)) &&
                 bson_iter_recurse (it, &sub) && any_secret (&sub)) {
         return true;
      }
   }
   return false;
}

/* Appends the elements at it to out, redacted. */
static bool
copy (bson_iter_t *it, bson_t *out)
{
   bson_iter_t sub;
   bool ok = true;

   while (ok && bson_iter_next (it)) {
      char *kown = NULL, *vown = NULL;
      size_t klen, vlen;
      const char *key = fw_secrets_redact (bson_iter_key (it), bson_iter_key_len (it), &kown,
                                           &klen);
      if (key == bson_iter_key (it)) {
         klen = bson_iter_key_len (it);
      } else if (!kown) {
         klen = strlen (key);
      }
      if (BSON_ITER_HOLDS_UTF8 (it)) {
         uint32_t n;
         const char *s = bson_iter_utf8 (it, &n);
         const char *v = fw_secrets_redact (s, n, &vown, &vlen);
         if (v == s) {
            vlen = n;
         } else if (!vown) {
            vlen = strlen (v);
         }
         ok = bson_append_utf8 (out, key, (int) klen, v, (int) vlen);
      } else if ((BSON_ITER_HOLDS_DOCUMENT (it) || BSON_ITER_HOLDS_ARRAY (it)) &&
                 bson_iter_recurse (it, &sub)) {
         bson_t child;
         bool array = BSON_ITER_HOLDS_ARRAY (it);
         ok = (array ? bson_append_array_begin (out, key, (int) klen, &child)
                     : bson_append_document_begin (out, key, (int) klen, &child)) &&
              copy (&sub, &child) &&
              (array ? bson_append_array_end (out, &child)
                     : bson_append_document_end (out, &child));
      } else {
         ok = bson_append_value (out, key, (int) klen, bson_iter_value (it));
      }
      free (kown);
      free (vown);
   }
   return ok;
}

bool
fw_bson_redact (bson_t *doc)
{
   bson_iter_t it;
   bson_t out = BSON_INITIALIZER;

   if (!fw_secrets_any () || !bson_iter_init (&it, doc) || !any_secret (&it)) {
      return true;
   }
   if (!bson_iter_init (&it, doc) || !copy (&it, &out)) {
      bson_destroy (&out);
      return false;
   }
   bson_reinit (doc);
   bson_concat (doc, &out);
   bson_destroy (&out);
   return true;
}
