/*
 * lease_store.c - the lease document in _fw_leases as the server keeps it:
 * reading it (with the server's clock), taking it, renewing and releasing
 * it, and the epoch floor in the checkpoint (see lease.h, lease-private.h).
 */
#include <string.h>

#include "bson/write_reply.h"
#include "flowwarden/collection_names.h"
#include "runtime/ha/lease-private.h"

#define ERR_DUPLICATE_KEY 11000

/* A BSON int32/int64/double as an int64, else false. */
static bool
iter_int64 (const bson_iter_t *it, int64_t *out)
{
   if (BSON_ITER_HOLDS_INT32 (it) || BSON_ITER_HOLDS_INT64 (it)) {
      *out = bson_iter_as_int64 (it);
      return true;
   }
   if (BSON_ITER_HOLDS_DOUBLE (it)) {
      double d = bson_iter_double (it);
      if (d >= 0 && d < 9.0e18) {
         *out = (int64_t) d;
         return true;
      }
   }
   return false;
}

static void
parse_lease (const bson_t *doc, fw_lease_doc_t *out)
{
   bson_iter_t it;
   memset (out, 0, sizeof *out);
   out->exists = true;
   if (bson_iter_init_find (&it, doc, "owner") && BSON_ITER_HOLDS_UTF8 (&it)) {
      out->owner_is_string = true;
      snprintf (out->owner, sizeof out->owner, "%s", bson_iter_utf8 (&it, NULL));
   }
   if (bson_iter_init_find (&it, doc, "epoch")) {
      out->has_epoch = iter_int64 (&it, &out->epoch);
   }
   if (bson_iter_init_find (&it, doc, "expiresAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      out->has_expires = true;
      out->expires_ms = bson_iter_date_time (&it);
   }
   /* The server's $$NOW: added by read_lease, or renewedAt in what an
    * acquisition returns. */
   if ((bson_iter_init_find (&it, doc, "fwServerNow") ||
        bson_iter_init_find (&it, doc, "renewedAt")) &&
       BSON_ITER_HOLDS_DATE_TIME (&it)) {
      out->has_now = true;
      out->server_now_ms = bson_iter_date_time (&it);
   }
}

/* Reads the lease with the server's $$NOW beside it. */
bool
fw_lease__read (fw_lease_t *l, mongoc_client_t *client, fw_lease_doc_t *out, bson_error_t *berr)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, l->database,
                                                             FW_LEASE_COLLECTION);
   bson_t *pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "_id", BCON_UTF8 (l->stream),
                                "}", "}", "{", "$addFields", "{", "fwServerNow",
                                BCON_UTF8 ("$$NOW"), "}", "}", "]");
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bool ok;

   memset (out, 0, sizeof *out);
   if (!pipeline) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      mongoc_collection_destroy (coll);
      return false;
   }
   cursor = mongoc_collection_aggregate (coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   if (mongoc_cursor_next (cursor, &doc)) {
      parse_lease (doc, out);
   }
   ok = !mongoc_cursor_error (cursor, berr);
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   mongoc_collection_destroy (coll);
   return ok;
}

/* The highest epoch a leader has fenced the checkpoint with: a lease
 * document deleted (by hand, by a TTL index) must not restart epochs below
 * it. 0 when none. */
bool
fw_lease__read_fence_floor (fw_lease_t *l, mongoc_client_t *client, int64_t *floor,
                            bson_error_t *berr)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, l->database,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (l->stream));
   bson_t *opts = BCON_NEW ("projection", "{", "epoch", BCON_INT32 (1), "}");
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_iter_t it;
   bool ok;

   *floor = 0;
   if (!filter || !opts) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      bson_destroy (filter);
      bson_destroy (opts);
      mongoc_collection_destroy (coll);
      return false;
   }
   cursor = mongoc_collection_find_with_opts (coll, filter, opts, NULL);
   if (mongoc_cursor_next (cursor, &doc) && bson_iter_init_find (&it, doc, "epoch") &&
       !iter_int64 (&it, floor)) {
      *floor = 0;
   }
   ok = !mongoc_cursor_error (cursor, berr);
   mongoc_cursor_destroy (cursor);
   bson_destroy (filter);
   bson_destroy (opts);
   mongoc_collection_destroy (coll);
   return ok;
}

static void
append_majority (bson_t *opts)
{
   bson_t wc;
   BSON_APPEND_DOCUMENT_BEGIN (opts, "writeConcern", &wc);
   BSON_APPEND_UTF8 (&wc, "w", "majority");
   bson_append_document_end (opts, &wc);
}

/* The take: one findAndModify upserting by _id alone, the decision inside
 * the update pipeline. MongoDB refuses $expr (hence $$NOW) in the query of
 * any upsert (224 QueryFeatureNotAllowed, parsed_update.cpp,
 * parsed_update_base.cpp, canonical_update.cpp), so the query names only
 * _id and $replaceWith keeps the document as it is unless the lease is free
 * (no or null owner), ours, or expired by the server's clock (a non-date
 * expiresAt counts as expired; a non-integer epoch counts as 0). A missing
 * lease is inserted from {_id}, which is free. The post-image says who won:
 * ours with our owner id, else the holder's lease, unchanged. Two racing
 * inserts: the loser gets the holder's lease (the server retries the
 * upsert) or a duplicate key; both mean held. Owner ids go through $literal
 * so that none is ever read as a field path. */
static bson_t *
take_command (fw_lease_t *l, int64_t floor)
{
   const char *me = l->owner;
   return BCON_NEW (
      "findAndModify", BCON_UTF8 (FW_LEASE_COLLECTION), "query", "{", "_id", BCON_UTF8 (l->stream),
      "}", "update", "[", "{", "$replaceWith", "{", "$cond", "[", "{", "$or", "[", "{", "$in", "[",
      "{", "$type", BCON_UTF8 ("$owner"), "}", "[", BCON_UTF8 ("missing"), BCON_UTF8 ("null"), "]",
      "]", "}", "{", "$eq", "[", BCON_UTF8 ("$owner"), "{", "$literal", BCON_UTF8 (me), "}", "]",
      "}", "{", "$ne", "[", "{", "$type", BCON_UTF8 ("$expiresAt"), "}", BCON_UTF8 ("date"), "]",
      "}", "{", "$lte", "[", BCON_UTF8 ("$expiresAt"), BCON_UTF8 ("$$NOW"), "]", "}", "]", "}", "{",
      "$mergeObjects", "[", BCON_UTF8 ("$$ROOT"), "{", "owner", "{", "$literal", BCON_UTF8 (me),
      "}", "epoch", "{", "$add", "[", "{", "$max", "[", "{", "$cond", "[", "{", "$in", "[", "{",
      "$type", BCON_UTF8 ("$epoch"), "}", "[", BCON_UTF8 ("int"), BCON_UTF8 ("long"), "]", "]", "}",
      BCON_UTF8 ("$epoch"), BCON_INT64 (0), "]", "}", BCON_INT64 (floor), "]", "}", BCON_INT64 (1),
      "]", "}", "renewedAt", BCON_UTF8 ("$$NOW"), "expiresAt", "{", "$add", "[",
      BCON_UTF8 ("$$NOW"), BCON_INT64 (l->lease_ms), "]", "}", "}", "]", "}", BCON_UTF8 ("$$ROOT"),
      "]", "}", "}", "]", "upsert", BCON_BOOL (true), "new", BCON_BOOL (true));
}

/* Takes the lease (see take_command). got: the lease as the server left it,
 * ours or the holder's (got->exists false when none came back). */
fw_lease_take_t
fw_lease__take (fw_lease_t *l, mongoc_client_t *client, int64_t floor, fw_lease_doc_t *got,
                bson_error_t *berr)
{
   bson_t *cmd = take_command (l, floor);
   bson_t opts = BSON_INITIALIZER;
   bson_t reply;
   bson_iter_t it;
   fw_lease_take_t result = FW_LEASE_TAKE_ERROR;

   memset (got, 0, sizeof *got);
   if (!cmd) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      bson_destroy (&opts);
      return FW_LEASE_TAKE_ERROR;
   }
   append_majority (&opts);
   if (!fw_write_reply_ok (
          mongoc_client_write_command_with_opts (client, l->database, cmd, &opts, &reply, berr),
          &reply, berr)) {
      result = berr->code == ERR_DUPLICATE_KEY ? FW_LEASE_TAKE_HELD : FW_LEASE_TAKE_ERROR;
   } else if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      uint32_t len;
      const uint8_t *data;
      bson_t value;
      bson_iter_document (&it, &len, &data);
      if (bson_init_static (&value, data, len)) {
         parse_lease (&value, got);
         result = got->owner_is_string && strcmp (got->owner, l->owner) == 0 && got->has_epoch
                     ? FW_LEASE_TAKE_OK
                     : FW_LEASE_TAKE_HELD;
      }
   } else {
      result = FW_LEASE_TAKE_HELD; /* no document came back: not ours */
   }
   bson_destroy (&reply);
   bson_destroy (&opts);
   bson_destroy (cmd);
   return result;
}

/* One conditional update on owner and epoch. *matched: whether the lease was
 * still ours (no other acquisition since ours). release: give it up instead
 * of renewing it. */
bool
fw_lease__update_held (fw_lease_t *l, mongoc_client_t *client, int64_t epoch, bool release,
                       bool *matched, bson_error_t *berr)
{
   bson_t *cmd;
   bson_t opts = BSON_INITIALIZER;
   bson_t reply;
   bson_iter_t it;
   int64_t n = 0;
   bool ok;

   if (release) {
      cmd = BCON_NEW ("update", BCON_UTF8 (FW_LEASE_COLLECTION), "updates", "[", "{", "q", "{",
                      "_id", BCON_UTF8 (l->stream), "owner", BCON_UTF8 (l->owner), "epoch",
                      BCON_INT64 (epoch), "}", "u", "[", "{", "$set", "{", "owner", BCON_NULL,
                      "expiresAt", BCON_UTF8 ("$$NOW"), "}", "}", "]", "}", "]");
   } else {
      cmd = BCON_NEW ("update", BCON_UTF8 (FW_LEASE_COLLECTION), "updates", "[", "{", "q", "{",
                      "_id", BCON_UTF8 (l->stream), "owner", BCON_UTF8 (l->owner), "epoch",
                      BCON_INT64 (epoch), "}", "u", "[", "{", "$set", "{", "renewedAt",
                      BCON_UTF8 ("$$NOW"), "expiresAt", "{", "$add", "[", BCON_UTF8 ("$$NOW"),
                      BCON_INT64 (l->lease_ms), "]", "}", "}", "}", "]", "}", "]");
   }
   *matched = false;
   if (!cmd) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      bson_destroy (&opts);
      return false;
   }
   append_majority (&opts);
   ok = fw_write_reply_ok (
      mongoc_client_write_command_with_opts (client, l->database, cmd, &opts, &reply, berr), &reply,
      berr);
   if (ok && bson_iter_init_find (&it, &reply, "n")) {
      iter_int64 (&it, &n);
   }
   *matched = ok && n > 0;
   bson_destroy (&reply);
   bson_destroy (&opts);
   bson_destroy (cmd);
   return ok;
}
