/*
 * change_stream.c - the reader's side of a change stream that is not the
 * read-ahead: opening it with the stream's settings (options, pipeline,
 * where to start) and the one classification of its errors. Knows nothing
 * of the stream worker; what each error means for the stream (re-open,
 * stop, fall back) is stream_worker.c's.
 */
#include <string.h>

#include "runtime/stream/event_oversize-private.h"
#include "runtime/stream/stream_read-private.h"

#define FW_MAX_AWAIT_MS 1000
/* While a snapshot runs its chunks wait for the stream to pass their high
 * watermark: on an idle collection only a getMore's post-batch resume token
 * does, once per maxAwaitTimeMS (a change stream's getMore blocks that long
 * for a change of its own: writes elsewhere, the watermarks' among them, do
 * not end it; jstests/change_streams/only_wake_getmore_for_relevant_changes.js).
 * So the last chunks wait for the getMore in flight, half a maxAwaitTimeMS on
 * average, and are handed out together. The wait is only a bound: a shorter
 * one costs an idle stream more getMores (each a round trip, the server
 * reading the oplog written since the last), not more work per change. It
 * cannot be shortened for the last chunk alone (libmongoc fixes it for a
 * cursor's life). 5 ms (200 idle getMores a second, only while the snapshot
 * runs: the stream re-opens with FW_MAX_AWAIT_MS once it finished): 20 ms
 * left 13-22 ms between a 20,000-document snapshot's last read and its end. */
#define FW_SNAPSHOT_AWAIT_MS 5
#define FW_ERR_HISTORY_LOST 286 /* ChangeStreamHistoryLost */
/* OplogQueryMinTsMissing: the oplog scan's own "fallen off the oplog"; the
 * change stream turns it into 286 (change_stream_check_resumability), but
 * taken as history lost wherever it shows. */
#define FW_ERR_OPLOG_MIN_TS_MISSING 326
#define FW_ERR_CHANGE_STREAM_FATAL 280 /* ChangeStreamFatalError: re-opening fails the same way */
/* Before 6.0, a fullDocument other than "default" or "updateLookup"
 * (document_source_change_stream.cpp): every open fails the same way. */
#define FW_ERR_FULL_DOCUMENT_REFUSED 40575
#define FW_ERR_INVALID_RESUME_TOKEN 260 /* InvalidResumeToken: resumeAfter an invalidate */
/* A "required" image the server does not have for an event: NoMatchingDocument
 * (the image was not found: never recorded, or expired) and 51770 (no pre-image
 * was recorded for the event: before 6.0, or pre-images not enabled at the
 * time), document_source_change_stream_add_pre_image.cpp and
 * ..._add_post_image.cpp. The event stays without it: re-opening fails on it
 * again, for ever. */
#define FW_ERR_NO_MATCHING_DOCUMENT 47
#define FW_ERR_NO_PRE_IMAGE_RECORDED 51770

/* pipeline with stage before its stages (renumbered). */
static void
prepend_stage (const bson_t *stage, bson_t *pipeline)
{
   bson_t out = BSON_INITIALIZER;
   bson_iter_t it;
   uint32_t i = 1;
   char key[16];
   const char *k;

   BSON_APPEND_DOCUMENT (&out, "0", stage);
   if (bson_iter_init (&it, pipeline)) {
      while (bson_iter_next (&it)) {
         bson_uint32_to_string (i++, &k, key, sizeof key);
         bson_append_iter (&out, k, -1, &it);
      }
   }
   bson_destroy (pipeline);
   bson_init (pipeline);
   bson_concat (pipeline, &out);
   bson_destroy (&out);
}

mongoc_change_stream_t *
fw_change_stream_open (const fw_stream_config_t *cfg, mongoc_client_t *client,
                       const bson_t *start_after, uint64_t start_at, bool split, bool snapshot,
                       const bson_t *first_stage)
{
   bson_t opts = BSON_INITIALIZER;
   bson_t pipeline;
   mongoc_change_stream_t *cs;

   if (cfg->full_document && strcmp (cfg->full_document, "default") != 0) {
      BSON_APPEND_UTF8 (&opts, "fullDocument", cfg->full_document);
   }
   if (cfg->full_document_before_change && strcmp (cfg->full_document_before_change, "off") != 0) {
      BSON_APPEND_UTF8 (&opts, "fullDocumentBeforeChange", cfg->full_document_before_change);
   }
   BSON_APPEND_INT32 (&opts, "maxAwaitTimeMS", snapshot ? FW_SNAPSHOT_AWAIT_MS : FW_MAX_AWAIT_MS);
   /* A batch: FW_CHANGE_BATCH_SIZE events, 16 MiB at most (stream_read-private.h). */
   if (FW_CHANGE_BATCH_SIZE > 0) {
      BSON_APPEND_INT32 (&opts, "batchSize", FW_CHANGE_BATCH_SIZE);
   }
   if (start_after) {
      /* startAfter, unlike resumeAfter, also accepts an invalidate token. */
      BSON_APPEND_DOCUMENT (&opts, "startAfter", start_after);
   } else if (start_at) {
      /* checkpoint.start_at: the server's history from that Timestamp on. */
      BSON_APPEND_TIMESTAMP (&opts, "startAtOperationTime", (uint32_t) (start_at >> 32),
                             (uint32_t) start_at);
   }
   fw_oversize_pipeline (cfg, split, &pipeline);
   if (first_stage) {
      prepend_stage (first_stage, &pipeline);
   }
   if (cfg->collection) {
      mongoc_collection_t *coll = mongoc_client_get_collection (client, cfg->database,
                                                                cfg->collection);
      cs = mongoc_collection_watch (coll, &pipeline, &opts);
      mongoc_collection_destroy (coll);
   } else {
      mongoc_database_t *db = mongoc_client_get_database (client, cfg->database);
      cs = mongoc_database_watch (db, &pipeline, &opts);
      mongoc_database_destroy (db);
   }
   bson_destroy (&opts);
   bson_destroy (&pipeline);
   return cs;
}

/* The server closed the change stream without an error: it does so at an
 * invalidate (drop, rename, dropDatabase) even when the stream's pipeline
 * (operation_types without "invalidate") filtered the event out, with the
 * invalidate's token as postBatchResumeToken. libmongoc then returns nothing
 * (no event, no error) once, and on the next call takes the closed cursor for
 * a resumable error and resumes with resumeAfter that token, which the server
 * refuses (1.23: InvalidResumeToken 260); later versions say "Cannot advance
 * a closed change stream" (INVALID_CURSOR). Either way the change stream is
 * over and only startAfter its token goes on (issue 23). */
static bool
closed_without_error (const bson_error_t *berr)
{
   if (berr->code == FW_ERR_INVALID_RESUME_TOKEN &&
       (berr->domain == MONGOC_ERROR_QUERY || berr->domain == MONGOC_ERROR_SERVER)) {
      return true;
   }
   return berr->domain == MONGOC_ERROR_CURSOR && berr->code == MONGOC_ERROR_CURSOR_INVALID_CURSOR;
}

fw_change_error_t
fw_change_error_kind (const bson_error_t *berr)
{
   if (berr->code == FW_ERR_HISTORY_LOST || berr->code == FW_ERR_OPLOG_MIN_TS_MISSING) {
      return FW_CHANGE_HISTORY_LOST;
   }
   if (berr->code == FW_ERR_CHANGE_STREAM_FATAL) {
      return FW_CHANGE_FATAL;
   }
   if (fw_oversize_error (berr)) {
      return FW_CHANGE_OVERSIZE;
   }
   if (berr->code == FW_ERR_FULL_DOCUMENT_REFUSED) {
      return FW_CHANGE_FULL_DOCUMENT_REFUSED;
   }
   if ((berr->code == FW_ERR_NO_MATCHING_DOCUMENT || berr->code == FW_ERR_NO_PRE_IMAGE_RECORDED) &&
       strstr (berr->message, "Change stream was configured to require a ")) {
      return FW_CHANGE_IMAGE_MISSING;
   }
   if (closed_without_error (berr)) {
      return FW_CHANGE_CLOSED;
   }
   if (berr->domain == MONGOC_ERROR_CURSOR &&
       berr->code == MONGOC_ERROR_CHANGE_STREAM_NO_RESUME_TOKEN) {
      return FW_CHANGE_NO_RESUME_TOKEN;
   }
   return FW_CHANGE_OTHER;
}
