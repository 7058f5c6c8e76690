/*
 * dlq_store_mongo_deferred.c - the MongoDB store's side of deferred retries
 * (retry.mode = "deferred", issue 29; dlq_store.h's claim_due, scheduled and
 * settle's FW_DLQ_RESCHEDULE).
 *
 * A scheduled retry is a DLQ entry with status SCHEDULED and nextAttemptAt.
 * The stream's thread claims a due one with one findAndModify (REPROCESSING,
 * claimedBy, claimedUntil, as a replay's claim), so two instances never run
 * one retry twice, and a claim a killed process left is taken again once it
 * expires.
 */
#include <stdio.h>

#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store-private.h"

/* { streamName, $or: [due SCHEDULED, a stale claim on a deferred retry] } */
static bool
due_query (const char *stream, int64_t now_ms, bson_t *query)
{
   bson_init (query);
   BSON_APPEND_UTF8 (query, "streamName", stream);
   return BCON_APPEND (query, "$or", "[", "{", "status", BCON_UTF8 ("SCHEDULED"), "nextAttemptAt",
                       "{", "$lte", BCON_DATE_TIME (now_ms), "}", "}", "{", "status",
                       BCON_UTF8 ("REPROCESSING"), "nextAttemptAt", "{", "$exists",
                       BCON_BOOL (true), "}", "claimedUntil", "{", "$lt", BCON_DATE_TIME (now_ms),
                       "}", "}", "]"),
          true;
}

/* Copies reply's "value" document into out (initialised by the caller). */
static bool
take_value (const bson_t *reply, bson_t *out)
{
   bson_iter_t it;
   uint32_t len;
   const uint8_t *data;
   bson_t view;

   if (!bson_iter_init_find (&it, reply, "value") || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   return bson_init_static (&view, data, len) && bson_concat (out, &view);
}

static bool
mongo_claim_due (fw_dlq_store_t *store, const char *stream, const char *actor, int64_t now_ms,
                 int64_t until_ms, bson_t *out, bool *got, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query, reply;
   bson_t *update = BCON_NEW ("$set", "{", "status", BCON_UTF8 ("REPROCESSING"), "claimedBy",
                              BCON_UTF8 (actor), "claimedUntil", BCON_DATE_TIME (until_ms),
                              "lastTouched", BCON_DATE_TIME (now_ms), "}");
   bson_t *sort = BCON_NEW ("nextAttemptAt", BCON_INT32 (1));
   mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new ();
   bson_error_t berr;
   bool ok;

   due_query (stream, now_ms, &query);
   bson_init (&reply);
   *got = false;
   bson_init (out);
   ok = update && sort && fam && mongoc_find_and_modify_opts_set_update (fam, update) &&
        mongoc_find_and_modify_opts_set_sort (fam, sort) &&
        mongoc_find_and_modify_opts_set_flags (fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "cannot claim a scheduled retry: out of memory");
   } else {
      bson_destroy (&reply);
      ok = mongoc_collection_find_and_modify_with_opts (m->coll, &query, fam, &reply, &berr);
      if (!ok) {
         fw_dlq__mongo_error (error, "claiming a scheduled retry", m->name, &berr);
      } else {
         *got = take_value (&reply, out);
      }
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   bson_destroy (update);
   bson_destroy (sort);
   mongoc_find_and_modify_opts_destroy (fam);
   return ok;
}

/* The date at key of doc, or 0. */
static int64_t
date_at (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_DATE_TIME (&it)
             ? bson_iter_date_time (&it)
             : 0;
}

static bool
mongo_scheduled (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
                 int64_t *next_ms, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t *pipeline = BCON_NEW (
      "pipeline", "[", "{", "$match", "{", "streamName", BCON_UTF8 (stream), "status",
      BCON_UTF8 ("SCHEDULED"), "}", "}", "{", "$group", "{", "_id", BCON_NULL, "n", "{", "$sum",
      BCON_INT32 (1), "}", "oldest", "{", "$min", BCON_UTF8 ("$createdAt"), "}", "next", "{",
      "$min", BCON_UTF8 ("$nextAttemptAt"), "}", "}", "}", "]");
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok;

   *count = *oldest_ms = *next_ms = 0;
   if (!pipeline) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   }
   cursor = mongoc_collection_aggregate (m->coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   if (cursor && mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      *count = bson_iter_init_find (&it, doc, "n") ? bson_iter_as_int64 (&it) : 0;
      *oldest_ms = date_at (doc, "oldest");
      *next_ms = date_at (doc, "next");
   }
   ok = cursor && !mongoc_cursor_error (cursor, &berr);
   if (!ok) {
      if (!cursor) {
         bson_set_error (&berr, 0, 0, "out of memory");
      }
      fw_dlq__mongo_error (error, "counting the scheduled retries", m->name, &berr);
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   return ok;
}

void
fw_dlq__mongo_reschedule_update (const fw_dlq_outcome_t *o, const char *actor, bson_t *update)
{
   bool again = o->next_attempt_ms > 0;
   const char *type = o->error_type ? o->error_type : "?";
   const char *message = o->error_message ? o->error_message : "";
   char result[1200];
   bson_t set, unset;

   BSON_APPEND_DOCUMENT_BEGIN (update, "$set", &set);
   BSON_APPEND_UTF8 (&set, "status", again ? "SCHEDULED" : "PENDING");
   BSON_APPEND_DATE_TIME (&set, "lastTouched", o->now_ms);
   if (again) {
      BSON_APPEND_DATE_TIME (&set, "nextAttemptAt", o->next_attempt_ms);
   }
   if (o->attempts_added > 0) {
      BSON_APPEND_DATE_TIME (&set, "lastAttemptAt", o->now_ms);
      BSON_APPEND_UTF8 (&set, "error.type", type);
      BSON_APPEND_UTF8 (&set, "error.message", message);
   }
   bson_append_document_end (update, &set);
   BSON_APPEND_DOCUMENT_BEGIN (update, "$unset", &unset);
   BSON_APPEND_UTF8 (&unset, "claimedBy", "");
   BSON_APPEND_UTF8 (&unset, "claimedUntil", "");
   if (!again) {
      BSON_APPEND_UTF8 (&unset, "nextAttemptAt", "");
   }
   bson_append_document_end (update, &unset);
   if (o->attempts_added > 0) {
      BCON_APPEND (update, "$inc", "{", "attempts", BCON_INT32 (o->attempts_added), "}");
      snprintf (result, sizeof result, "%s: %s", type, message);
      BCON_APPEND (update, "$push", "{", "history", "{", "$each", "[", "{", "at",
                   BCON_DATE_TIME (o->now_ms), "action",
                   BCON_UTF8 (again ? "rescheduled" : "requeued"), "actor", BCON_UTF8 (actor),
                   "result", BCON_UTF8 (result), "}", "]", "$slice",
                   BCON_INT32 (-FW_DLQ_HISTORY_MAX), "}", "}");
   }
}

void
fw_dlq__mongo_deferred_methods (fw_dlq_store_t *s)
{
   s->capabilities |= FW_DLQ_CAN_DEFER;
   s->claim_due = mongo_claim_due;
   s->scheduled = mongo_scheduled;
}
