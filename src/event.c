/*
 * event.c - parses a change event's top level once.
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/event.h"

static fw_op_t
op_of (const char *s)
{
   switch (s[0]) {
   case 'i':
      return strcmp (s, "insert") == 0 ? FW_OP_INSERT : FW_OP_OTHER;
   case 'u':
      return strcmp (s, "update") == 0 ? FW_OP_UPDATE : FW_OP_OTHER;
   case 'r':
      return strcmp (s, "replace") == 0 ? FW_OP_REPLACE : FW_OP_OTHER;
   case 'd':
      return strcmp (s, "delete") == 0 ? FW_OP_DELETE : FW_OP_OTHER;
   default:
      return FW_OP_OTHER;
   }
}

bool
fw_event_parse (const bson_t *doc, fw_event_t *ev, fw_error_t *error)
{
   bson_iter_t it;

   memset (ev, 0, sizeof *ev);
   ev->doc = doc;
   if (!bson_iter_init (&it, doc)) {
      fw_error_set (error, FW_ERROR_INVALID, "change event is not valid BSON");
      return false;
   }
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      uint32_t klen = bson_iter_key_len (&it);
#define KEY_IS(lit) (klen == sizeof (lit) - 1 && memcmp (key, lit, sizeof (lit) - 1) == 0)
      switch (key[0]) {
      case '_':
         if (KEY_IS ("_id") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
            ev->id = it;
            ev->has_id = true;
         }
         break;
      case 'o':
         if (KEY_IS ("operationType") && BSON_ITER_HOLDS_UTF8 (&it)) {
            ev->operation_type = bson_iter_utf8 (&it, NULL);
            ev->op = op_of (ev->operation_type);
         }
         break;
      case 'c':
         if (KEY_IS ("clusterTime")) {
            ev->cluster_time = it;
            ev->has_cluster_time = true;
         }
         break;
      case 'w':
         if (KEY_IS ("wallTime")) {
            ev->wall_time = it;
            ev->has_wall_time = true;
         }
         break;
      case 'n':
         if (KEY_IS ("ns") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
            bson_iter_t child;
            if (bson_iter_recurse (&it, &child)) {
               while (bson_iter_next (&child)) {
                  if (strcmp (bson_iter_key (&child), "db") == 0) {
                     ev->ns_db = child;
                     ev->has_ns_db = BSON_ITER_HOLDS_UTF8 (&child);
                  } else if (strcmp (bson_iter_key (&child), "coll") == 0) {
                     ev->ns_coll = child;
                     ev->has_ns_coll = BSON_ITER_HOLDS_UTF8 (&child);
                  }
               }
            }
         }
         break;
      case 'd':
         if (KEY_IS ("documentKey")) {
            ev->document_key = it;
            ev->has_document_key = true;
         }
         break;
      case 'f':
         if (KEY_IS ("fullDocument")) {
            ev->full_document = it;
            ev->has_full_document = true;
         } else if (KEY_IS ("fullDocumentBeforeChange")) {
            ev->before = it;
            ev->has_before = true;
         }
         break;
      case 'u':
         if (KEY_IS ("updateDescription")) {
            ev->update_description = it;
            ev->has_update_description = true;
         }
         break;
      case 'l':
         if (KEY_IS ("lsid")) {
            ev->lsid = it;
            ev->has_lsid = true;
         }
         break;
      case 't':
         if (KEY_IS ("txnNumber")) {
            ev->txn_number = it;
            ev->has_txn = true;
         }
         break;
      default:
         break;
      }
#undef KEY_IS
   }
   if (!ev->has_id) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "change event has no _id (resume token): a pipeline stage must not "
                    "remove or change _id");
      return false;
   }
   if (!ev->operation_type) {
      fw_error_set (error, FW_ERROR_INVALID, "change event has no operationType");
      return false;
   }
   return true;
}

bool
fw_event_id (const fw_event_t *ev, char *buf, size_t len)
{
   bson_iter_t child;
   const uint8_t *data;
   uint32_t dlen;

   if (bson_iter_recurse (&ev->id, &child) && bson_iter_find (&child, "_data") &&
       BSON_ITER_HOLDS_UTF8 (&child)) {
      uint32_t slen;
      const char *s = bson_iter_utf8 (&child, &slen);
      if ((size_t) slen + 1 > len) {
         return false;
      }
      memcpy (buf, s, (size_t) slen + 1);
      return true;
   }
   /* Not a server-shaped token: use its bytes, which are just as stable. */
   bson_iter_document (&ev->id, &dlen, &data);
   if ((size_t) dlen * 2 + 1 > len) {
      return false;
   }
   for (uint32_t i = 0; i < dlen; i++) {
      snprintf (buf + 2 * i, 3, "%02x", data[i]);
   }
   buf[2 * dlen] = '\0';
   return true;
}

void
fw_event_summary (const fw_event_t *ev, char *buf, size_t len)
{
   char id[160];
   const char *db = ev->has_ns_db ? bson_iter_utf8 (&ev->ns_db, NULL) : "";
   const char *coll = ev->has_ns_coll ? bson_iter_utf8 (&ev->ns_coll, NULL) : "";

   if (!fw_event_id (ev, id, sizeof id)) {
      snprintf (id, sizeof id, "(long)");
   }
   /* An invalidate has no namespace: no empty field (and double space) then. */
   snprintf (buf, len, "%s %s%s%s%sevent=%s", ev->operation_type, db, *coll ? "." : "", coll,
             *db || *coll ? " " : "", id);
}
