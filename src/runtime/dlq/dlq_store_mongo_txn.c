/*
 * dlq_store_mongo_txn.c - the MongoDB store's writes inside a caller's
 * transaction (exactly_once, issue 39; dlq_store.h's FW_DLQ_CAN_JOIN).
 *
 * Inside a transaction a failed statement aborts the whole transaction
 * (MongoDB's manual, "Transactions": an error on a write ends it; the server
 * answers 251 NoSuchTransaction to the next statement), so save's "insert,
 * and on a duplicate key update" cannot be used: the entry of the event is
 * looked up first, in the transaction's snapshot, then inserted or updated.
 * No statement carries a write concern (a transaction's statements may not:
 * 72 InvalidOptions); the commit's applies to all of them.
 */
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store-private.h"

/* opts (initialised here, the caller's) with session appended. */
static bool
session_opts (mongoc_client_session_t *session, bson_t *opts, bson_error_t *berr)
{
   bson_init (opts);
   return mongoc_client_session_append (session, opts, berr);
}

/* Whether the entry keyed key is stored (as the transaction sees it). */
static bool
stored (fw_mongo_store_t *m, const bson_t *key, const bson_t *opts, bool *found, bson_error_t *berr)
{
   bson_t find_opts;
   const bson_t *doc;
   mongoc_cursor_t *cursor;
   bool ok;

   bson_init (&find_opts);
   bson_concat (&find_opts, opts);
   BCON_APPEND (&find_opts, "projection", "{", "_id", BCON_INT32 (1), "}", "limit", BCON_INT64 (1));
   cursor = mongoc_collection_find_with_opts (m->coll, key, &find_opts, NULL);
   bson_destroy (&find_opts);
   *found = mongoc_cursor_next (cursor, &doc);
   ok = !mongoc_cursor_error (cursor, berr);
   mongoc_cursor_destroy (cursor);
   return ok;
}

static bool
mongo_save_in (fw_dlq_store_t *store, mongoc_client_session_t *session, const bson_t *entry,
               fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t opts, key = BSON_INITIALIZER;
   bson_iter_t stream, event;
   bson_error_t berr;
   bool found = false, ok;

   ok = session_opts (session, &opts, &berr);
   if (ok && bson_iter_init_find (&stream, entry, "streamName") &&
       bson_iter_init_find (&event, entry, "eventId") && BSON_ITER_HOLDS_UTF8 (&event)) {
      bson_append_iter (&key, "streamName", -1, &stream);
      bson_append_iter (&key, "eventId", -1, &event);
      ok = stored (m, &key, &opts, &found, &berr);
   }
   if (ok && found) {
      ok = fw_dlq__mongo_upsert (m, entry, &key, &opts, &berr);
   } else if (ok) {
      /* A plain insert keeps seed 002's field order. */
      ok = mongoc_collection_insert_one (m->coll, entry, &opts, NULL, &berr);
   }
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "DLQ write to %s in the checkpoint's transaction failed: %s", m->name,
                         berr.message);
   }
   bson_destroy (&key);
   bson_destroy (&opts);
   return ok;
}

/* As settle (dlq_store_mongo_claim.c): the update applies only while actor
 * holds the claim; a deferred retry's outcome (FW_DLQ_RESCHEDULE) is not
 * settled here. */
static bool
mongo_settle_in (fw_dlq_store_t *store, mongoc_client_session_t *session, const bson_value_t *id,
                 const char *actor, const fw_dlq_outcome_t *outcome, bool *held, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t opts, filter = BSON_INITIALIZER, update = BSON_INITIALIZER, reply = BSON_INITIALIZER;
   bson_error_t berr;
   bson_iter_t it;
   bool ok;

   *held = false;
   if (outcome->kind == FW_DLQ_RESCHEDULE) {
      fw_error_set (error, FW_ERROR_INVALID, "a deferred retry is not settled in a transaction");
      return false;
   }
   fw_dlq__mongo_settle_update (outcome, actor, &update);
   BSON_APPEND_VALUE (&filter, "_id", id);
   BSON_APPEND_UTF8 (&filter, "status", "REPROCESSING");
   BSON_APPEND_UTF8 (&filter, "claimedBy", actor);
   ok = session_opts (session, &opts, &berr);
   if (ok) {
      bson_destroy (&reply); /* update_one initialises it again */
      ok = mongoc_collection_update_one (m->coll, &filter, &update, &opts, &reply, &berr);
   }
   *held = ok && bson_iter_init_find (&it, &reply, "matchedCount") && bson_iter_as_int64 (&it) > 0;
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot update the entry in the transaction: %s", berr.message);
   }
   bson_destroy (&reply);
   bson_destroy (&opts);
   bson_destroy (&update);
   bson_destroy (&filter);
   return ok;
}

void
fw_dlq__mongo_txn_methods (fw_dlq_store_t *s)
{
   s->capabilities |= FW_DLQ_CAN_JOIN;
   s->save_in = mongo_save_in;
   s->settle_in = mongo_settle_in;
}
