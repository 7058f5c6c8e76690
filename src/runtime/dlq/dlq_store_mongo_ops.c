/*
 * dlq_store_mongo_ops.c - the MongoDB store's reading, changing and
 * sequence methods (dlq_store.h): what `flowwarden dlq`, the metrics and
 * the sequenced DLQ ask of the collection, as the queries of seed 002's
 * schema. Saving and the indexes are in dlq_store.c.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/dlq/dlq_admin.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_sequence-private.h"
#include "runtime/dlq/dlq_store-private.h"

/* The string at path in doc, or "?" when it is missing or not a string. */
static const char *
string_at (const bson_t *doc, const char *path)
{
   bson_iter_t it, f;
   if (bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, path, &f) &&
       BSON_ITER_HOLDS_UTF8 (&f)) {
      return bson_iter_utf8 (&f, NULL);
   }
   return "?";
}

/* q as a MongoDB query into out (initialised here, the caller's):
 * { $and: [ filter's query, { _id: { $in: ids } } ] } with ids, else the
 * filter's query alone. */
static bool
query_of (const fw_dlq_query_t *q, bson_t *out, fw_error_t *error)
{
   static const fw_dlq_filter_t none;
   bson_t base = BSON_INITIALIZER, and, clause, in;
   bool ok = fw_dlq_filter_to_query (q->filter ? q->filter : &none, q->default_status, &base,
                                     error);

   bson_init (out);
   if (ok && !q->ids) {
      bson_concat (out, &base);
   } else if (ok) {
      BSON_APPEND_ARRAY_BEGIN (out, "$and", &and);
      BSON_APPEND_DOCUMENT (&and, "0", &base);
      BSON_APPEND_DOCUMENT_BEGIN (&and, "1", &clause);
      BSON_APPEND_DOCUMENT_BEGIN (&clause, "_id", &in);
      BSON_APPEND_ARRAY (&in, "$in", q->ids);
      bson_append_document_end (&clause, &in);
      bson_append_document_end (&and, &clause);
      bson_append_array_end (out, &and);
   }
   bson_destroy (&base);
   return ok;
}

static bool oldest_pending (fw_mongo_store_t *m, const bson_t *query, int64_t *oldest_ms,
                            fw_error_t *error);

static bool
mongo_pending (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
               fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t *query = BCON_NEW ("streamName", BCON_UTF8 (stream));
   bson_t *filter = BCON_NEW ("streamName", BCON_UTF8 (stream), "status", BCON_UTF8 ("PENDING"));
   int64_t oldest = INT64_MAX;
   bson_error_t berr;
   bool ok = true;

   *count = mongoc_collection_count_documents (m->coll, filter, NULL, NULL, NULL, &berr);
   if (*count < 0) {
      fw_dlq__mongo_error (error, "counting the PENDING entries", m->name, &berr);
      ok = false;
   } else if (*count > 0) {
      ok = oldest_pending (m, query, &oldest, error);
   }
   *oldest_ms = oldest == INT64_MAX ? 0 : oldest;
   bson_destroy (filter);
   bson_destroy (query);
   return ok;
}

/* Oldest first. With a stream the DLQ's streamName_createdAt__id index
 * serves the sort; without it (or on a DLQ a runtime never indexed) the sort
 * blocks, and MongoDB 5.0 refuses one over 100 MB unless it may use disk. */
static void
append_find_opts (const fw_dlq_query_t *q, bson_t *opts)
{
   bson_t sort, proj;
   BSON_APPEND_DOCUMENT_BEGIN (opts, "sort", &sort);
   BSON_APPEND_INT32 (&sort, "createdAt", 1);
   BSON_APPEND_INT32 (&sort, "_id", 1);
   bson_append_document_end (opts, &sort);
   BSON_APPEND_BOOL (opts, "allowDiskUse", true);
   if (!q->with_documents) {
      BSON_APPEND_DOCUMENT_BEGIN (opts, "projection", &proj);
      BSON_APPEND_INT32 (&proj, "fullDocument", 0);
      BSON_APPEND_INT32 (&proj, "fullDocumentBeforeChange", 0);
      BSON_APPEND_INT32 (&proj, "updateDescription", 0);
      bson_append_document_end (opts, &proj);
   }
   if (q->limit > 0) {
      BSON_APPEND_INT64 (opts, "limit", q->limit);
   }
}

/* Hands every document of cursor to visit (which may stop it, filling
 * error) and destroys the cursor. False also when the cursor failed: then
 * *failed is set and berr says why, for the caller to name its query. */
static bool
visit_all (mongoc_cursor_t *cursor, fw_dlq_entry_fn visit, void *ud, bson_error_t *berr,
           bool *failed, fw_error_t *error)
{
   const bson_t *doc;
   bool ok = true;

   *failed = false;
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      ok = visit (doc, ud, error);
   }
   if (ok && mongoc_cursor_error (cursor, berr)) {
      *failed = true;
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   return ok;
}

static bool
mongo_query (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_entry_fn visit, void *ud,
             fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query, opts = BSON_INITIALIZER;
   bson_error_t berr;
   bool failed, ok = query_of (q, &query, error);

   if (ok) {
      append_find_opts (q, &opts);
      ok = visit_all (mongoc_collection_find_with_opts (m->coll, &query, &opts, NULL), visit, ud,
                      &berr, &failed, error);
      if (failed) {
         fw_dlq__mongo_error (error, "the query", m->name, &berr);
      }
   }
   bson_destroy (&opts);
   bson_destroy (&query);
   return ok;
}

/* { $and: [ q's query, c's sequence and attempts, no live claim ] }: a
 * REPROCESSING entry only when its claim expired. */
static void
append_claimable (bson_t *out, const bson_t *query, const fw_dlq_claimable_t *c)
{
   bson_t and, part;

   BSON_APPEND_ARRAY_BEGIN (out, "$and", &and);
   BSON_APPEND_DOCUMENT (&and, "0", query);
   BSON_APPEND_DOCUMENT_BEGIN (&and, "1", &part);
   if (c->sequence) {
      BSON_APPEND_UTF8 (&part, "sequenceId", c->sequence);
   } else if (c->in_sequence) {
      BCON_APPEND (&part, "sequenceId", "{", "$exists", BCON_BOOL (true), "}");
   }
   if (c->max_attempts > 0) {
      BCON_APPEND (&part, "$or", "[", "{", "reprocessAttempts", "{", "$lt",
                   BCON_INT64 (c->max_attempts), "}", "}", "{", "reprocessAttempts", "{", "$exists",
                   BCON_BOOL (false), "}", "}", "]");
   }
   bson_append_document_end (&and, &part);
   BSON_APPEND_DOCUMENT_BEGIN (&and, "2", &part);
   BCON_APPEND (&part, "$or", "[", "{", "status", "{", "$ne", BCON_UTF8 ("REPROCESSING"), "}", "}",
                "{", "claimedUntil", "{", "$lt", BCON_DATE_TIME (c->now_ms), "}", "}", "]");
   bson_append_document_end (&and, &part);
   bson_append_array_end (out, &and);
}

/* Oldest clusterTime first; only the fields a selection keeps unless the
 * whole entries are asked for. */
static bson_t *
claimable_opts (const fw_dlq_query_t *q)
{
   /* streamName_clusterTime_createdAt__id serves the sort; where it is
    * missing, MongoDB 5.0 fails a blocking sort over 100 MB without
    * allowDiskUse. */
   bson_t *opts = BCON_NEW ("sort", "{", "clusterTime", BCON_INT32 (1), "createdAt", BCON_INT32 (1),
                            "_id", BCON_INT32 (1), "}", "allowDiskUse", BCON_BOOL (true));
   if (!q->with_documents) {
      BCON_APPEND (opts, "projection", "{", "clusterTime", BCON_INT32 (1), "createdAt",
                   BCON_INT32 (1), "sequenceId", BCON_INT32 (1), "}");
   }
   if (q->limit > 0) {
      BSON_APPEND_INT64 (opts, "limit", q->limit);
   }
   return opts;
}

static bool
mongo_claimable (fw_dlq_store_t *store, const fw_dlq_query_t *q, const fw_dlq_claimable_t *c,
                 fw_dlq_entry_fn visit, void *ud, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query, filter = BSON_INITIALIZER;
   bson_t *opts = claimable_opts (q);
   bson_error_t berr;
   bool failed, ok = query_of (q, &query, error);

   if (ok) {
      append_claimable (&filter, &query, c);
      ok = visit_all (mongoc_collection_find_with_opts (m->coll, &filter, opts, NULL), visit, ud,
                      &berr, &failed, error);
      if (failed) {
         fw_dlq__mongo_error (error, "the replay's query", m->name, &berr);
      }
   }
   bson_destroy (&filter);
   bson_destroy (&query);
   bson_destroy (opts);
   return ok;
}

/* The oldest PENDING entry among those query selects, with a real date. */
static bool
oldest_pending (fw_mongo_store_t *m, const bson_t *query, int64_t *oldest_ms, fw_error_t *error)
{
   bson_t *filter = BCON_NEW ("$and", "[", BCON_DOCUMENT (query), "{", "status",
                              BCON_UTF8 ("PENDING"), "createdAt", "{", "$type", BCON_UTF8 ("date"),
                              "}", "}", "]");
   bson_t *opts = BCON_NEW ("sort", "{", "createdAt", BCON_INT32 (1), "}", "projection", "{",
                            "createdAt", BCON_INT32 (1), "}", "limit", BCON_INT64 (1));
   mongoc_cursor_t *cursor = mongoc_collection_find_with_opts (m->coll, filter, opts, NULL);
   const bson_t *doc;
   bson_error_t berr;
   bson_iter_t it;
   bool ok = true;

   if (mongoc_cursor_next (cursor, &doc) && bson_iter_init_find (&it, doc, "createdAt") &&
       BSON_ITER_HOLDS_DATE_TIME (&it) && bson_iter_date_time (&it) < *oldest_ms) {
      *oldest_ms = bson_iter_date_time (&it);
   }
   if (mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__mongo_error (error, "the oldest PENDING query", m->name, &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (filter);
   bson_destroy (opts);
   return ok;
}

/* Counts by (stream, status, error type), grouped by the server (and by
 * sequence and the error's type, to tell parked entries apart). */
static bool
mongo_tally (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_group_fn visit, void *ud,
             int64_t *oldest_pending_ms, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bson_t query, *pipeline;
   bool ok = query_of (q, &query, error);

   if (!ok) {
      bson_destroy (&query);
      return false;
   }
   pipeline = BCON_NEW ("pipeline", "[", "{", "$match", BCON_DOCUMENT (&query), "}", "{", "$group",
                        "{", "_id", "{", "s", BCON_UTF8 ("$streamName"), "st",
                        BCON_UTF8 ("$status"), "t", BCON_UTF8 ("$error.type"), "q",
                        BCON_UTF8 ("$sequenceId"), "e", "{", "$type", BCON_UTF8 ("$error"), "}",
                        "}", "n", "{", "$sum", BCON_INT32 (1), "}", "}", "}", "]");
   cursor = mongoc_collection_aggregate (m->coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      fw_dlq_group_t g;
      g.n = bson_iter_init_find (&it, doc, "n") ? bson_iter_as_int64 (&it) : 0;
      g.stream = string_at (doc, "_id.s");
      g.status = string_at (doc, "_id.st");
      g.error_type = string_at (doc, "_id.t");
      g.parked = strcmp (string_at (doc, "_id.e"), "missing") == 0 &&
                 strcmp (string_at (doc, "_id.q"), "?") != 0;
      ok = visit (&g, ud, error);
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__mongo_error (error, "counting", m->name, &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   ok = ok && oldest_pending (m, &query, oldest_pending_ms, error);
   bson_destroy (&query);
   return ok;
}

static int64_t
reply_count (const bson_t *reply, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, reply, key) ? bson_iter_as_int64 (&it) : 0;
}

static bool
mongo_discard (fw_dlq_store_t *store, const fw_dlq_query_t *q, const char *reason,
               const char *actor, int64_t now_ms, int64_t *touched, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t *update = BCON_NEW (
      "$set", "{", "status", BCON_UTF8 ("DISCARDED"), "discardedAt", BCON_DATE_TIME (now_ms),
      "discardReason", BCON_UTF8 (reason), "lastTouched", BCON_DATE_TIME (now_ms), "}", "$push",
      "{", "history", "{", "$each", "[", "{", "at", BCON_DATE_TIME (now_ms), "action",
      BCON_UTF8 ("discarded"), "actor", BCON_UTF8 (actor), "result", BCON_UTF8 (reason), "}", "]",
      "$slice", BCON_INT32 (-FW_DLQ_HISTORY_MAX), "}", "}");
   bson_t query, reply = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok = query_of (q, &query, error);

   *touched = 0;
   if (ok) {
      bson_destroy (&reply);
      ok = mongoc_collection_update_many (m->coll, &query, update, NULL, &reply, &berr);
      *touched = reply_count (&reply, "modifiedCount");
      if (!ok) {
         fw_dlq__mongo_error (error, "discard", m->name, &berr);
      }
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   bson_destroy (update);
   return ok;
}

static bool
mongo_purge (fw_dlq_store_t *store, const fw_dlq_query_t *q, int64_t *touched, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query, reply = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok = query_of (q, &query, error);

   *touched = 0;
   if (ok) {
      bson_destroy (&reply);
      ok = mongoc_collection_delete_many (m->coll, &query, NULL, &reply, &berr);
      *touched = reply_count (&reply, "deletedCount");
      if (!ok) {
         fw_dlq__mongo_error (error, "purge", m->name, &berr);
      }
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   return ok;
}

static bool
mongo_put (fw_dlq_store_t *store, const bson_t *entry, bool *inserted, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t filter = BSON_INITIALIZER, reply;
   bson_t *opts;
   bson_error_t berr;
   bson_iter_t id;
   bool ok;

   if (!bson_iter_init_find (&id, entry, "_id")) {
      bson_destroy (&filter);
      fw_error_set (error, FW_ERROR_INVALID, "the entry has no _id");
      return false;
   }
   bson_append_iter (&filter, "_id", 3, &id);
   /* validate: false: the entry is stored exactly as given, field names
    * with dots or dollars included (the server still checks it). */
   opts = BCON_NEW ("upsert", BCON_BOOL (true), "validate", BCON_BOOL (false));
   ok = mongoc_collection_replace_one (m->coll, &filter, entry, opts, &reply, &berr);
   if (ok) {
      *inserted = reply_count (&reply, "upsertedCount") > 0;
   } else {
      fw_dlq__mongo_error (error, "the upsert", m->name, &berr);
   }
   bson_destroy (&reply);
   bson_destroy (opts);
   bson_destroy (&filter);
   return ok;
}

/* --- the sequences: dlq_sequence.c's functions on this store's collections - */

static bool
mongo_seq_load (fw_dlq_store_t *store, const char *stream, fw_dlq_sequences_t *into,
                fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;

   if (!fw_dlq_sequence_load (m->seqs, stream, into, error)) {
      return false;
   }
   /* The stream starts: the DLQ's sequence index, once per store. */
   if (!m->seq_indexed) {
      m->seq_indexed = fw_dlq_sequence_indexes (m->coll, error);
   }
   return m->seq_indexed;
}

static bool
mongo_seq_take (fw_dlq_store_t *store, const char *stream, const char *id, bool open,
                int64_t *index, fw_seq_take_t *result, fw_error_t *error)
{
   return fw_dlq_sequence_take (((fw_mongo_store_t *) store)->seqs, stream, id, open, index, result,
                                error);
}

static bool
mongo_seq_settle (fw_dlq_store_t *store, const char *stream, const char *id, fw_error_t *error)
{
   return fw_dlq_sequence_settle (((fw_mongo_store_t *) store)->seqs, stream, id, error);
}

static bool
mongo_seq_read (fw_dlq_store_t *store, const char *stream, const char *id, fw_seq_state_t *out,
                fw_error_t *error)
{
   return fw_dlq_sequence_read (((fw_mongo_store_t *) store)->seqs, stream, id, out, error);
}

static bool
mongo_seq_close (fw_dlq_store_t *store, const char *stream, const char *id, int64_t expected_next,
                 bool *closed, fw_error_t *error)
{
   return fw_dlq_sequence_close (((fw_mongo_store_t *) store)->seqs, stream, id, expected_next,
                                 closed, error);
}

static bool
mongo_seq_size (fw_dlq_store_t *store, const char *stream, const char *id, int64_t *out,
                fw_error_t *error)
{
   return fw_dlq_sequence_size (((fw_mongo_store_t *) store)->coll, stream, id, out, error);
}

/* The string at key, else at _id.key (the document's key), else "?". */
static const char *
key_string (const bson_t *doc, const char *key)
{
   const char *s = string_at (doc, key);
   char path[64];
   if (strcmp (s, "?") != 0) {
      return s;
   }
   snprintf (path, sizeof path, "_id.%s", key);
   return string_at (doc, path);
}

static int64_t
number_at (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_NUMBER (&it)
             ? bson_iter_as_int64 (&it)
             : 0;
}

static bool
visit_record (const bson_t *doc, fw_dlq_seq_fn visit, void *ud, fw_error_t *error)
{
   fw_dlq_seq_t seq;
   bson_iter_t it;
   seq.stream = key_string (doc, "streamName");
   seq.id = key_string (doc, "sequenceId");
   seq.open = bson_iter_init_find (&it, doc, "open") && BSON_ITER_HOLDS_BOOL (&it)
                 ? bson_iter_bool (&it)
                 : -1;
   seq.next = number_at (doc, "next");
   seq.inflight = number_at (doc, "inflight");
   return visit (&seq, ud, error);
}

static bool
mongo_seq_list (fw_dlq_store_t *store, const char *stream, const bson_t *ids, fw_dlq_seq_fn visit,
                void *ud, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t query = BSON_INITIALIZER, or, alt, ne, in;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   if (stream) {
      BSON_APPEND_UTF8 (&query, "streamName", stream);
   }
   BSON_APPEND_ARRAY_BEGIN (&query, "$or", & or);
   BSON_APPEND_DOCUMENT_BEGIN (& or, "0", &alt);
   BSON_APPEND_DOCUMENT_BEGIN (&alt, "open", &ne);
   BSON_APPEND_BOOL (&ne, "$ne", false);
   bson_append_document_end (&alt, &ne);
   bson_append_document_end (& or, &alt);
   if (ids && !bson_empty (ids)) {
      BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &alt);
      BSON_APPEND_DOCUMENT_BEGIN (&alt, "sequenceId", &in);
      BSON_APPEND_ARRAY (&in, "$in", ids);
      bson_append_document_end (&alt, &in);
      bson_append_document_end (& or, &alt);
   }
   bson_append_array_end (&query, & or);
   cursor = mongoc_collection_find_with_opts (m->seqs, &query, NULL, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      ok = visit_record (doc, visit, ud, error);
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__mongo_error (error, "reading the sequence documents", m->seqs_name, &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (&query);
   return ok;
}

/* { streamName, sequenceId, status: waiting } (a SCHEDULED head is a
 * deferred retry still to run: it waits too) */
static bson_t *
waiting_of (const char *stream, const char *id)
{
   return BCON_NEW ("streamName", BCON_UTF8 (stream), "sequenceId", BCON_UTF8 (id), "status", "{",
                    "$in", "[", BCON_UTF8 ("PENDING"), BCON_UTF8 ("REPROCESSING"),
                    BCON_UTF8 ("SCHEDULED"), "]", "}");
}

static bool
mongo_seq_entries (fw_dlq_store_t *store, const char *stream, const char *id, fw_dlq_entry_fn visit,
                   void *ud, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t *filter = waiting_of (stream, id);
   bson_t *opts = BCON_NEW ("sort", "{", "sequenceIndex", BCON_INT32 (1), "}");
   bson_error_t berr;
   bool failed;
   bool ok = visit_all (mongoc_collection_find_with_opts (m->coll, filter, opts, NULL), visit, ud,
                        &berr, &failed, error);

   if (failed) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read DLQ sequence %.200s: %s", id, berr.message);
   }
   bson_destroy (filter);
   bson_destroy (opts);
   return ok;
}

static bool
mongo_seq_before (fw_dlq_store_t *store, const char *stream, const char *id, int64_t index,
                  int64_t *out, fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t *filter = waiting_of (stream, id);
   bson_error_t berr;

   BCON_APPEND (filter, "sequenceIndex", "{", "$lt", BCON_INT64 (index), "}");
   *out = mongoc_collection_count_documents (m->coll, filter, NULL, NULL, NULL, &berr);
   bson_destroy (filter);
   if (*out < 0) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read DLQ sequence %.200s: %s", id, berr.message);
      return false;
   }
   return true;
}

/* The sort follows the DLQ's (streamName, sequenceId, sequenceIndex) index,
 * so the server needs no in-memory sort. */
static bool
mongo_seq_waiting (fw_dlq_store_t *store, const char *stream, fw_dlq_entry_fn visit, void *ud,
                   fw_error_t *error)
{
   fw_mongo_store_t *m = (fw_mongo_store_t *) store;
   bson_t match = BSON_INITIALIZER, *pipeline;
   bson_error_t berr;
   bool failed, ok;

   if (stream) {
      BSON_APPEND_UTF8 (&match, "streamName", stream);
   }
   BCON_APPEND (&match, "sequenceId", "{", "$type", BCON_UTF8 ("string"), "}", "status", "{", "$in",
                "[", BCON_UTF8 ("PENDING"), BCON_UTF8 ("REPROCESSING"), BCON_UTF8 ("SCHEDULED"),
                "]", "}");
   pipeline = BCON_NEW (
      "pipeline", "[", "{", "$match", BCON_DOCUMENT (&match), "}", "{", "$sort", "{", "streamName",
      BCON_INT32 (1), "sequenceId", BCON_INT32 (1), "sequenceIndex", BCON_INT32 (1), "}", "}", "{",
      "$group", "{", "_id", "{", "s", BCON_UTF8 ("$streamName"), "q", BCON_UTF8 ("$sequenceId"),
      "}", "n", "{", "$sum", BCON_INT32 (1), "}", "head", "{", "$first", BCON_UTF8 ("$_id"), "}",
      "sequenceIndex", "{", "$first", BCON_UTF8 ("$sequenceIndex"), "}", "status", "{", "$first",
      BCON_UTF8 ("$status"), "}", "error", "{", "$first", BCON_UTF8 ("$error"), "}", "createdAt",
      "{", "$first", BCON_UTF8 ("$createdAt"), "}", "}", "}", "]");
   bson_destroy (&match);
   ok = visit_all (mongoc_collection_aggregate (m->coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL),
                   visit, ud, &berr, &failed, error);
   if (failed) {
      fw_dlq__mongo_error (error, "reading the sequences", m->name, &berr);
   }
   bson_destroy (pipeline);
   return ok;
}

void
fw_dlq__mongo_methods (fw_dlq_store_t *s)
{
   s->pending = mongo_pending;
   s->query = mongo_query;
   s->claimable = mongo_claimable;
   s->tally = mongo_tally;
   s->discard = mongo_discard;
   s->purge = mongo_purge;
   s->put = mongo_put;
   s->seq_load = mongo_seq_load;
   s->seq_take = mongo_seq_take;
   s->seq_settle = mongo_seq_settle;
   s->seq_read = mongo_seq_read;
   s->seq_close = mongo_seq_close;
   s->seq_size = mongo_seq_size;
   s->seq_list = mongo_seq_list;
   s->seq_waiting = mongo_seq_waiting;
   s->seq_entries = mongo_seq_entries;
   s->seq_before = mongo_seq_before;
}
