/*
 * checkpoint_snapshot.c - an incremental snapshot's progress (snapshot.h)
 * kept in the stream's checkpoint document, field "snapshot":
 *
 *   { state: "running" | "done", after: { _id: <boundary> } (absent: from
 *     the start), until: { _id: <the largest _id when it began> }, filter: <an
 *     on-demand snapshot's filter>, documents: n }
 */
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/snapshot/snapshot.h"

/* dst (initialized) = the sub-document at it. */
static bool
copy_doc (bson_iter_t *it, bson_t *dst)
{
   uint32_t len;
   const uint8_t *data;
   bson_t view;

   if (!BSON_ITER_HOLDS_DOCUMENT (it)) {
      return false;
   }
   bson_iter_document (it, &len, &data);
   if (!bson_init_static (&view, data, len)) {
      return false;
   }
   bson_destroy (dst);
   bson_copy_to (&view, dst);
   return true;
}

static void
read_progress (const bson_t *doc, fw_snapshot_progress_t *out)
{
   bson_iter_t it, f;

   if (!bson_iter_init_find (&it, doc, "snapshot") || !BSON_ITER_HOLDS_DOCUMENT (&it) ||
       !bson_iter_recurse (&it, &f)) {
      return;
   }
   out->present = true;
   while (bson_iter_next (&f)) {
      const char *k = bson_iter_key (&f);
      if (strcmp (k, "state") == 0 && BSON_ITER_HOLDS_UTF8 (&f)) {
         out->done = strcmp (bson_iter_utf8 (&f, NULL), "done") == 0;
      } else if (strcmp (k, "after") == 0) {
         out->has_after = copy_doc (&f, &out->after);
      } else if (strcmp (k, "filter") == 0) {
         out->has_filter = copy_doc (&f, &out->filter);
      } else if (strcmp (k, "until") == 0) {
         out->has_until = copy_doc (&f, &out->until);
      } else if (strcmp (k, "documents") == 0 && BSON_ITER_HOLDS_NUMBER (&f)) {
         out->documents = bson_iter_as_int64 (&f);
      }
   }
}

bool
fw_checkpoint_snapshot_load (mongoc_client_t *client, const char *database, const char *stream,
                             fw_snapshot_progress_t *out, fw_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, database,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (stream));
   mongoc_cursor_t *cur;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   fw_snapshot_progress_cleanup (out);
   fw_snapshot_progress_init (out);
   if (!filter) {
      mongoc_collection_destroy (coll);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading a snapshot's progress");
      return false;
   }
   cur = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   if (mongoc_cursor_next (cur, &doc)) {
      read_progress (doc, out);
   }
   if (mongoc_cursor_error (cur, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read the snapshot's progress of stream \"%s\" from %s.%s: %s",
                         stream, database, FW_CHECKPOINT_COLLECTION, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   return ok;
}

bool
fw_checkpoint_snapshot_fields (const fw_snapshot_progress_t *p, bson_t *out)
{
   bson_t snap;

   return BSON_APPEND_DOCUMENT_BEGIN (out, "snapshot", &snap) &&
          BSON_APPEND_UTF8 (&snap, "state", p->done ? "done" : "running") &&
          (!p->has_after || BSON_APPEND_DOCUMENT (&snap, "after", &p->after)) &&
          (!p->has_filter || BSON_APPEND_DOCUMENT (&snap, "filter", &p->filter)) &&
          (!p->has_until || BSON_APPEND_DOCUMENT (&snap, "until", &p->until)) &&
          BSON_APPEND_INT64 (&snap, "documents", p->documents) &&
          BSON_APPEND_DATE_TIME (&snap, "updatedAt", fw_now_ms ()) &&
          bson_append_document_end (out, &snap);
}

/* The snapshot field's update (upsert when not fenced), ordered by gen (0:
 * none) as the checkpoint's saves are, on session (NULL: none). *reply is
 * initialised here on every path (the caller destroys it); *fenced: a
 * newer leader, or a later run, holds the checkpoint. */
static bool
save_progress (mongoc_client_t *client, mongoc_client_session_t *session, const char *database,
               const char *stream, const fw_snapshot_progress_t *p, int64_t epoch, int64_t gen,
               bool *fenced, bson_t *reply, fw_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, database,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t sel = BSON_INITIALIZER, upd = BSON_INITIALIZER, opts = BSON_INITIALIZER;
   bson_t set;
   bson_error_t berr;
   bool ok = BSON_APPEND_UTF8 (&sel, "_id", stream) &&
             (epoch <= 0 || BSON_APPEND_INT64 (&sel, "epoch", epoch)) &&
             fw_checkpoint_gen_filter (&sel, gen) &&
             BSON_APPEND_DOCUMENT_BEGIN (&upd, "$set", &set) &&
             fw_checkpoint_snapshot_fields (p, &set) &&
             (gen <= 0 || BSON_APPEND_INT64 (&set, "writerGen", gen)) &&
             bson_append_document_end (&upd, &set) &&
             BSON_APPEND_BOOL (&opts, "upsert", epoch <= 0) &&
             (!session || mongoc_client_session_append (session, &opts, &berr));

   *fenced = false;
   if (!ok) {
      bson_init (reply);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory saving a snapshot's progress");
   } else if (!mongoc_collection_update_one (coll, &sel, &upd, &opts, reply, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot save the snapshot's progress of stream \"%s\": %s", stream,
                         berr.message);
      ok = false;
      /* With gen: the upsert met the document of a later run (a duplicate
       * key; in a transaction the server aborted it): *fenced, error naming
       * both; or it cannot be read (error says so). */
      if (gen > 0 && berr.code == 11000) {
         (void) fw_checkpoint_refused_by_newer_run (client, database, stream, stream,
                                                    "the snapshot's progress", gen, fenced, error);
      }
   } else if (epoch > 0) {
      bson_iter_t it;
      if (!bson_iter_init_find (&it, reply, "matchedCount") || bson_iter_as_int64 (&it) < 1) {
         fw_error_set (error, FW_ERROR_MONGO,
                       "the snapshot's progress of stream \"%s\" NOT "
                       "saved: a newer leader fenced the checkpoint",
                       stream);
         *fenced = true;
         ok = false;
      }
   }
   bson_destroy (&sel);
   bson_destroy (&upd);
   bson_destroy (&opts);
   mongoc_collection_destroy (coll);
   return ok;
}

bool
fw_checkpoint_snapshot_save (mongoc_client_t *client, const char *database, const char *stream,
                             const fw_snapshot_progress_t *p, int64_t epoch, int64_t gen,
                             fw_error_t *error)
{
   bson_t reply;
   bool fenced;
   bool ok = save_progress (client, NULL, database, stream, p, epoch, gen, &fenced, &reply, error);

   bson_destroy (&reply);
   return ok;
}

bool
fw_checkpoint_snapshot_save_in (mongoc_client_t *client, mongoc_client_session_t *session,
                                const char *database, const char *stream,
                                const fw_snapshot_progress_t *p, int64_t epoch, int64_t gen,
                                bool *fenced, bson_t *reply, fw_error_t *error)
{
   return save_progress (client, session, database, stream, p, epoch, gen, fenced, reply, error);
}
