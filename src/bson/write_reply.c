/*
 * write_reply.c - the check of a write command's reply (write_reply.h).
 */
#include <string.h>

#include "bson/write_reply.h"

/* Sets error from doc's code and errmsg, with prefix. */
static void
set_from (const bson_t *doc, uint32_t domain, const char *prefix, bson_error_t *error)
{
   bson_iter_t it;
   uint32_t code = 0;
   const char *msg = "(no errmsg)";

   if (bson_iter_init (&it, doc)) {
      while (bson_iter_next (&it)) {
         if (strcmp (bson_iter_key (&it), "code") == 0 && BSON_ITER_HOLDS_NUMBER (&it)) {
            code = (uint32_t) bson_iter_as_int64 (&it);
         } else if (strcmp (bson_iter_key (&it), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8 (&it)) {
            msg = bson_iter_utf8 (&it, NULL);
         }
      }
   }
   bson_set_error (error, domain, code, "%s: %s", prefix, msg);
}

/* Sets error from the document at it (a writeErrors entry, the
 * writeConcernError); false when it holds none. */
static bool
set_from_iter (const bson_iter_t *it, uint32_t domain, const char *prefix, bson_error_t *error)
{
   const uint8_t *data;
   uint32_t len;
   bson_t doc;

   if (!BSON_ITER_HOLDS_DOCUMENT (it)) {
      return false;
   }
   bson_iter_document (it, &len, &data);
   if (!bson_init_static (&doc, data, len)) {
      return false;
   }
   set_from (&doc, domain, prefix, error);
   return true;
}

bool
fw_write_reply_ok (bool sent, const bson_t *reply, bson_error_t *error)
{
   bson_iter_t it, arr;

   if (!sent) {
      return false;
   }
   if (!reply) {
      return true;
   }
   if (bson_iter_init_find (&it, reply, "ok") && BSON_ITER_HOLDS_NUMBER (&it) &&
       bson_iter_as_double (&it) == 0.0) {
      set_from (reply, MONGOC_ERROR_SERVER, "command failed", error);
      return false;
   }
   if (bson_iter_init_find (&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY (&it) &&
       bson_iter_recurse (&it, &arr) && bson_iter_next (&arr)) {
      if (!set_from_iter (&arr, MONGOC_ERROR_SERVER, "write error", error)) {
         bson_set_error (error, MONGOC_ERROR_SERVER, 0, "write error: (unreadable entry)");
      }
      return false;
   }
   if (bson_iter_init_find (&it, reply, "writeConcernError")) {
      if (!set_from_iter (&it, MONGOC_ERROR_WRITE_CONCERN, "write concern error", error)) {
         bson_set_error (error, MONGOC_ERROR_WRITE_CONCERN, 0,
                         "write concern error: (unreadable entry)");
      }
      return false;
   }
   return true;
}
