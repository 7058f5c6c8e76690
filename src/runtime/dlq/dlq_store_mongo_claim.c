/*
 * dlq_store_mongo_claim.c - the MongoDB store's claim methods (dlq_store.h):
 * a replay claims an entry with findAndModify, holds it while its handler
 * runs, and writes what became of it only while it still holds it.
 */
#include <stdio.h>

#include "runtime/collections/sharding.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store-private.h"

static bool
mongo_claim (fw_dlq_store_t *store, const char *stream, const bson_value_t *id, const char *actor,
             int64_t now_ms, int64_t until_ms, bson_t *out, bool *got, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query = BSON_INITIALIZER, reply;
   bson_t *update = BCON_NEW ("$set", "{", "status", BCON_UTF8 ("REPROCESSING"), "claimedBy",
                              BCON_UTF8 (actor), "claimedUntil", BCON_DATE_TIME (until_ms),
                              "lastTouched", BCON_DATE_TIME (now_ms), "}");
   mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new ();
   bson_error_t berr;
   bson_iter_t it;
   bool ok;

   BSON_APPEND_VALUE (&query, "_id", id);
   BSON_APPEND_UTF8 (&query, "streamName", stream);
   BCON_APPEND (&query, "$or", "[", "{", "status", BCON_UTF8 ("PENDING"), "}", "{", "status",
                BCON_UTF8 ("REPROCESSING"), "claimedUntil", "{", "$lt", BCON_DATE_TIME (now_ms),
                "}", "}", "]");
   ok = fam && mongoc_find_and_modify_opts_set_update (fam, update) &&
        mongoc_find_and_modify_opts_set_flags (fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
   if (!ok) {
      bson_init (&reply);
      fw_error_set (error, FW_ERROR_NOMEM, "cannot claim the entry: out of memory");
   } else if (!(ok = mongoc_collection_find_and_modify_with_opts (m->coll, &query, fam, &reply,
                                                                  &berr))) {
      char hint[400];
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot claim the entry: %s%s",
                         berr.message,
                         fw_sharding_hint (&berr, mongoc_collection_get_name (m->coll),
                                           FW_SHARD_KEY_DLQ, hint, sizeof hint));
   }
   *got = false;
   bson_init (out);
   if (ok && bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      uint32_t len;
      const uint8_t *data;
      bson_t view;
      bson_iter_document (&it, &len, &data);
      if (bson_init_static (&view, data, len)) {
         bson_concat (out, &view);
         *got = true;
      }
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   bson_destroy (update);
   mongoc_find_and_modify_opts_destroy (fam);
   return ok;
}

/* Applies update to the entry while actor still holds its claim. */
static bool
update_claimed (fw_mongo_store_t *m, const bson_value_t *id, const char *actor,
                const bson_t *update, bool *held, fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER, reply;
   bson_error_t berr;
   bson_iter_t it;
   bool ok;

   BSON_APPEND_VALUE (&filter, "_id", id);
   BSON_APPEND_UTF8 (&filter, "status", "REPROCESSING");
   BSON_APPEND_UTF8 (&filter, "claimedBy", actor);
   ok = mongoc_collection_update_one (m->coll, &filter, update, NULL, &reply, &berr);
   *held = ok && bson_iter_init_find (&it, &reply, "matchedCount") && bson_iter_as_int64 (&it) > 0;
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot update the entry: %s",
                         berr.message);
   }
   bson_destroy (&reply);
   bson_destroy (&filter);
   return ok;
}

static bool
mongo_extend (fw_dlq_store_t *store, const bson_value_t *id, const char *actor, int64_t until_ms,
              bool *held, fw_error_t *error)
{
   bson_t *update = BCON_NEW ("$set", "{", "claimedUntil", BCON_DATE_TIME (until_ms), "}");
   bool ok = update_claimed ((fw_mongo_store_t *) store, id, actor, update, held, error);
   bson_destroy (update);
   return ok;
}

/* The $set of a settled entry: its status and what goes with it. */
static void
append_settled (bson_t *set, const fw_dlq_outcome_t *o)
{
   bool evict = o->kind == FW_DLQ_EVICT;
   bson_iter_t it;

   if (o->kind == FW_DLQ_RELEASE) {
      BCON_APPEND (set, "status", BCON_UTF8 ("PENDING"), "lastTouched", BCON_DATE_TIME (o->now_ms));
      return;
   }
   if (o->kind == FW_DLQ_RESOLVE) {
      BCON_APPEND (set, "status", BCON_UTF8 ("RESOLVED"), "resolution",
                   BCON_UTF8 (o->skipped ? "SKIPPED" : "REPLAYED"), "resolvedAt",
                   BCON_DATE_TIME (o->now_ms), "lastTouched", BCON_DATE_TIME (o->now_ms));
      return;
   }
   BCON_APPEND (set, "status", BCON_UTF8 (evict ? "DISCARDED" : "PENDING"), "lastTouched",
                BCON_DATE_TIME (o->now_ms), "lastReprocessAt", BCON_DATE_TIME (o->now_ms),
                "lastReprocessError", "{", "type", BCON_UTF8 (o->error_type), "message",
                BCON_UTF8 (o->error_message), "}");
   if (evict) {
      BCON_APPEND (set, "discardedAt", BCON_DATE_TIME (o->now_ms), "discardReason",
                   BCON_UTF8 ("evicted by enqueue policy"));
   } else if (o->diagnostics && bson_iter_init (&it, o->diagnostics)) {
      while (bson_iter_next (&it)) {
         char key[300];
         snprintf (key, sizeof key, "diagnostics.%s", bson_iter_key (&it));
         bson_append_iter (set, key, -1, &it);
      }
   }
}

/* The update of a settled entry (dlq_store-private.h). */
void
fw_dlq__mongo_settle_update (const fw_dlq_outcome_t *o, const char *actor, bson_t *update)
{
   bson_t set;
   char result[1200];

   BSON_APPEND_DOCUMENT_BEGIN (update, "$set", &set);
   append_settled (&set, o);
   bson_append_document_end (update, &set);
   if (o->kind == FW_DLQ_REQUEUE || o->kind == FW_DLQ_EVICT) {
      BCON_APPEND (update, "$inc", "{", "reprocessAttempts", BCON_INT32 (1), "}");
   }
   BCON_APPEND (update, "$unset", "{", "claimedBy", BCON_UTF8 (""), "claimedUntil", BCON_UTF8 (""),
                "}");
   if (o->kind == FW_DLQ_RELEASE) {
      return;
   }
   if (o->kind == FW_DLQ_RESOLVE) {
      snprintf (result, sizeof result, "%s", o->skipped ? "skipped" : "ok");
   } else {
      snprintf (result, sizeof result, "%s: %s", o->error_type, o->error_message);
   }
   BCON_APPEND (update, "$push", "{", "history", "{", "$each", "[", "{", "at",
                BCON_DATE_TIME (o->now_ms), "action",
                BCON_UTF8 (o->kind == FW_DLQ_RESOLVE ? "resolved"
                           : o->kind == FW_DLQ_EVICT ? "discarded"
                                                     : "requeued"),
                "actor", BCON_UTF8 (actor), "result", BCON_UTF8 (result), "}", "]", "$slice",
                BCON_INT32 (-FW_DLQ_HISTORY_MAX), "}", "}");
}

static bool
mongo_settle (fw_dlq_store_t *store, const bson_value_t *id, const char *actor,
              const fw_dlq_outcome_t *outcome, bool *held, fw_error_t *error)
{
   bson_t update = BSON_INITIALIZER;
   bool ok;

   if (outcome->kind == FW_DLQ_RESCHEDULE) {
      fw_dlq__mongo_reschedule_update (outcome, actor, &update);
   } else {
      fw_dlq__mongo_settle_update (outcome, actor, &update);
   }
   ok = update_claimed ((fw_mongo_store_t *) store, id, actor, &update, held, error);
   bson_destroy (&update);
   return ok;
}

static bool
mongo_release_stale (fw_dlq_store_t *store, const bson_value_t *id, int64_t now_ms,
                     fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t filter = BSON_INITIALIZER;
   bson_t *update = BCON_NEW ("$set", "{", "status", BCON_UTF8 ("PENDING"), "}", "$unset", "{",
                              "claimedBy", BCON_UTF8 (""), "claimedUntil", BCON_UTF8 (""), "}");
   bson_error_t berr;
   bool ok;

   BSON_APPEND_VALUE (&filter, "_id", id);
   BCON_APPEND (&filter, "status", BCON_UTF8 ("REPROCESSING"), "claimedUntil", "{", "$lt",
                BCON_DATE_TIME (now_ms), "}");
   ok = mongoc_collection_update_one (m->coll, &filter, update, NULL, NULL, &berr);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot release a stale claim: %s",
                         berr.message);
   }
   bson_destroy (&filter);
   bson_destroy (update);
   return ok;
}

void
fw_dlq__mongo_claim_methods (fw_dlq_store_t *s)
{
   s->claim = mongo_claim;
   s->extend = mongo_extend;
   s->settle = mongo_settle;
   s->release_stale = mongo_release_stale;
}
