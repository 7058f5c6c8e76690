/*
 * checkpoint_store.c - loads and saves resume tokens in _fw_checkpoints.
 */
#include <time.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/collections/sharding.h"

/* Copies the sub-document field of doc into out (already initialised). */
static bool
copy_token (const bson_t *doc, const char *field, bson_t *out)
{
   bson_iter_t it;
   uint32_t len;
   const uint8_t *data;
   bson_t view;

   if (!bson_iter_init_find (&it, doc, field) || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   if (!bson_init_static (&view, data, len)) {
      return false;
   }
   bson_destroy (out);
   bson_copy_to (&view, out);
   return true;
}

/* Reads the stream's checkpoint document into *out (bson_destroy it; empty
 * when there is none), *found saying whether there was one. False (error set)
 * when it cannot be read. */
static bool
read_stored (mongoc_client_t *client, const char *database, const char *stream, bson_t *out,
             bool *found, fw_error_t *error)
{
   mongoc_collection_t *coll;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (stream));
   bson_error_t berr;
   bool ok = true;

   bson_init (out);
   *found = false;
   if (!filter) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading the checkpoint of stream \"%s\"",
                    stream);
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   cursor = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   if (mongoc_cursor_next (cursor, &doc)) {
      bson_destroy (out);
      bson_copy_to (doc, out);
      *found = true;
   }
   if (mongoc_cursor_error (cursor, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read checkpoint of stream \"%s\" from %s.%s: %s", stream, database,
                         FW_CHECKPOINT_COLLECTION, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   return ok;
}

bool
fw_checkpoint_load (mongoc_client_t *client, const char *database, const char *stream,
                    fw_checkpoint_t *cp, fw_error_t *error)
{
   bson_t doc;
   bool found;
   bool ok = read_stored (client, database, stream, &doc, &found, error);

   cp->has_processed = cp->has_seen = false;
   bson_init (&cp->processed);
   bson_init (&cp->seen);
   if (ok && found) {
      cp->has_processed = copy_token (&doc, "lastProcessedToken", &cp->processed);
      cp->has_seen = copy_token (&doc, "lastSeenToken", &cp->seen);
   }
   bson_destroy (&doc);
   return ok;
}

/* The server's code for a duplicate key. */
#define ERR_DUPLICATE_KEY 11000

/* An ordered save's stamp (fw_checkpoint_save_ordered); NULL: none. */
typedef struct {
   int64_t gen;              /* the run's writer generation; 0: none */
   const bson_oid_t *writer; /* NULL: not ordered within the run */
   int64_t seq;
} order_t;

bool
fw_checkpoint_gen_filter (bson_t *selector, int64_t gen)
{
   bson_t cmp, not ;
   return gen <= 0 ||
          (BSON_APPEND_DOCUMENT_BEGIN (selector, "writerGen", &cmp) &&
           BSON_APPEND_DOCUMENT_BEGIN (&cmp, "$not", &not ) &&
           BSON_APPEND_INT64 (&not, "$gt", gen) && bson_append_document_end (&cmp, &not ) &&
           bson_append_document_end (selector, &cmp));
}

/* Appends to selector what lets an ordered write through: the stored
 * generation is not a later run's ($not $gt matches a missing field), and
 * the stored stamp is another writer's (or missing: $ne matches a missing
 * field) or lower. */
static bool
append_order (bson_t *selector, const order_t *order)
{
   bson_t or, clause, cmp;
   if (!fw_checkpoint_gen_filter (selector, order->gen)) {
      return false;
   }
   if (!order->writer) {
      return true;
   }
   return BSON_APPEND_ARRAY_BEGIN (selector, "$or", & or) &&
          BSON_APPEND_DOCUMENT_BEGIN (& or, "0", &clause) &&
          BSON_APPEND_DOCUMENT_BEGIN (&clause, "writerId", &cmp) &&
          BSON_APPEND_OID (&cmp, "$ne", order->writer) &&
          bson_append_document_end (&clause, &cmp) && bson_append_document_end (& or, &clause) &&
          BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &clause) &&
          BSON_APPEND_DOCUMENT_BEGIN (&clause, "writerSeq", &cmp) &&
          BSON_APPEND_INT64 (&cmp, "$lt", order->seq) && bson_append_document_end (&clause, &cmp) &&
          bson_append_document_end (& or, &clause) && bson_append_array_end (selector, & or);
}

/* The checkpoint's $set: the tokens given, the script version, the time and
 * also's fields, and order's stamp (NULL: none). False when out of memory. */
static bool
append_set (bson_t *update, const bson_t *processed, const bson_t *seen, const char *script_version,
            const bson_t *also, const order_t *order)
{
   bson_t set;
   bool ok;

   BSON_APPEND_DOCUMENT_BEGIN (update, "$set", &set);
   if (processed) {
      BSON_APPEND_DOCUMENT (&set, "lastProcessedToken", processed);
   }
   if (seen) {
      BSON_APPEND_DOCUMENT (&set, "lastSeenToken", seen);
   }
   if (script_version) {
      BSON_APPEND_UTF8 (&set, "scriptVersion", script_version);
   }
   BSON_APPEND_DATE_TIME (&set, "updatedAt", fw_now_ms ());
   if (order && order->gen > 0) {
      BSON_APPEND_INT64 (&set, "writerGen", order->gen);
   }
   if (order && order->writer) {
      BSON_APPEND_OID (&set, "writerId", order->writer);
      BSON_APPEND_INT64 (&set, "writerSeq", order->seq);
   }
   ok = !also || bson_concat (&set, also);
   bson_append_document_end (update, &set);
   return ok;
}

/* epoch 0: the unconditional upsert of ha.mode = "none". Else the update
 * matches only a checkpoint fenced with epoch (fw_checkpoint_fence), and
 * *fenced says when it did not. order (may be NULL): the write is ordered
 * (fw_checkpoint_save_ordered). */
static bool
save_checkpoint (mongoc_client_t *client, mongoc_client_session_t *session, const char *database,
                 const char *stream, const bson_t *processed, const bson_t *seen,
                 const char *script_version, const bson_t *also, int64_t epoch,
                 const order_t *order, bool *fenced, bson_t *reply_out, fw_error_t *error)
{
   mongoc_collection_t *coll;
   bson_t selector = BSON_INITIALIZER;
   bson_t update = BSON_INITIALIZER;
   bson_t opts = BSON_INITIALIZER;
   bson_t reply;
   bson_error_t berr;
   bool ok;

   if (fenced) {
      *fenced = false;
   }
   BSON_APPEND_UTF8 (&selector, "_id", stream);
   if (epoch > 0) {
      BSON_APPEND_INT64 (&selector, "epoch", epoch);
   }
   if (!append_set (&update, processed, seen, script_version, also, order)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory saving checkpoint of stream \"%s\"",
                    stream);
      bson_destroy (&selector);
      bson_destroy (&update);
      bson_destroy (&opts);
      return false;
   }
   BSON_APPEND_BOOL (&opts, "upsert", epoch <= 0);
   if (order && !append_order (&selector, order)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory saving the checkpoint of stream \"%s\"",
                    stream);
      bson_destroy (&selector);
      bson_destroy (&update);
      bson_destroy (&opts);
      return false;
   }
   if (session && !mongoc_client_session_append (session, &opts, &berr)) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "cannot save checkpoint of stream \"%s\" in its "
                    "transaction: %s",
                    stream, berr.message);
      bson_destroy (&selector);
      bson_destroy (&update);
      bson_destroy (&opts);
      return false;
   }

   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_update_one (coll, &selector, &update, &opts, &reply, &berr);
   if (!ok) {
      char hint[300];
      fw_error_set_code (
         error, FW_ERROR_MONGO, (int) berr.code, "cannot save checkpoint of stream \"%s\": %s%s",
         stream, berr.message,
         fw_sharding_hint (&berr, FW_CHECKPOINT_COLLECTION, FW_SHARD_KEY_BY_ID, hint, sizeof hint));
   } else if (epoch > 0) {
      bson_iter_t it;
      if (!bson_iter_init_find (&it, &reply, "matchedCount") || bson_iter_as_int64 (&it) < 1) {
         fw_error_set (error, FW_ERROR_MONGO,
                       "checkpoint of stream \"%s\" NOT saved: this instance's lease (epoch "
                       "%lld) was taken over by a newer leader (or a run of the stream without "
                       "ha), which fenced the checkpoint; the stored position stays the newer "
                       "one's",
                       stream, (long long) epoch);
         if (fenced) {
            *fenced = true;
         }
         ok = false;
      }
   }
   if (reply_out) {
      bson_copy_to (&reply, reply_out);
   }
   bson_destroy (&reply);
   mongoc_collection_destroy (coll);
   bson_destroy (&selector);
   bson_destroy (&update);
   bson_destroy (&opts);
   return ok;
}

bool
fw_checkpoint_save (mongoc_client_t *client, const char *database, const char *stream,
                    const bson_t *processed, const bson_t *seen, const char *script_version,
                    fw_error_t *error)
{
   return save_checkpoint (client, NULL, database, stream, processed, seen, script_version, NULL, 0,
                           NULL, NULL, NULL, error);
}

bool
fw_checkpoint_save_fenced (mongoc_client_t *client, const char *database, const char *stream,
                           const bson_t *processed, const bson_t *seen, const char *script_version,
                           int64_t epoch, bool *fenced, fw_error_t *error)
{
   if (epoch <= 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "fenced checkpoint of stream \"%s\" without an "
                    "epoch",
                    stream);
      if (fenced) {
         *fenced = false;
      }
      return false;
   }
   return save_checkpoint (client, NULL, database, stream, processed, seen, script_version, NULL,
                           epoch, NULL, fenced, NULL, error);
}

bool
fw_checkpoint_save_with (mongoc_client_t *client, const char *database, const char *stream,
                         const bson_t *processed, const bson_t *seen, const char *script_version,
                         const bson_t *also, int64_t epoch, fw_error_t *error)
{
   return save_checkpoint (client, NULL, database, stream, processed, seen, script_version, also,
                           epoch, NULL, NULL, NULL, error);
}

/* A fenced ordered write matched nothing: *later true when the stored
 * checkpoint still holds epoch and order's writer stored a seq at least
 * order's (a later write of it came first), false when a newer leader fenced
 * it. False (error set) when it cannot be read. */
static bool
stored_later (mongoc_client_t *client, const char *database, const char *stream, int64_t epoch,
              const order_t *order, bool *later, fw_error_t *error)
{
   bson_t doc;
   bson_iter_t it;
   bool found;
   bool ok = read_stored (client, database, stream, &doc, &found, error);

   *later = ok && found && bson_iter_init_find (&it, &doc, "epoch") &&
            BSON_ITER_HOLDS_NUMBER (&it) && bson_iter_as_int64 (&it) == epoch &&
            bson_iter_init_find (&it, &doc, "writerId") && BSON_ITER_HOLDS_OID (&it) &&
            order->writer && bson_oid_equal (bson_iter_oid (&it), order->writer) &&
            bson_iter_init_find (&it, &doc, "writerSeq") && BSON_ITER_HOLDS_NUMBER (&it) &&
            bson_iter_as_int64 (&it) >= order->seq;
   bson_destroy (&doc);
   return ok;
}

/* The number in field of doc, 0 when it has none. */
static int64_t
number_of (const bson_t *doc, const char *field)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, field) && BSON_ITER_HOLDS_NUMBER (&it)
             ? bson_iter_as_int64 (&it)
             : 0;
}

/* The writerGen (*gen) and the fencing epoch (*epoch, may be NULL) stored in
 * document id, 0 when none. False (error set) when it cannot be read. */
static bool
stored_fences (mongoc_client_t *client, const char *database, const char *id, int64_t *gen,
               int64_t *epoch, fw_error_t *error)
{
   bson_t doc;
   bool found;
   bool ok = read_stored (client, database, id, &doc, &found, error);

   *gen = ok && found ? number_of (&doc, "writerGen") : 0;
   if (epoch) {
      *epoch = ok && found ? number_of (&doc, "epoch") : 0;
   }
   bson_destroy (&doc);
   return ok;
}

bool
fw_checkpoint_stored_gen (mongoc_client_t *client, const char *database, const char *stream,
                          int64_t *gen, fw_error_t *error)
{
   return stored_fences (client, database, stream, gen, NULL, error);
}

bool
fw_checkpoint_refused_by_newer_run (mongoc_client_t *client, const char *database, const char *id,
                                    const char *stream, const char *what, int64_t gen, bool *newer,
                                    fw_error_t *err)
{
   int64_t stored;
   fw_error_t read_err;

   if (newer) {
      *newer = false;
   }
   if (gen <= 0) {
      return false;
   }
   if (!fw_checkpoint_stored_gen (client, database, id, &stored, &read_err)) {
      fw_error_set_code (err, read_err.domain, read_err.code,
                         "%s (after a write of %s matched nothing)", read_err.message, what);
      return true;
   }
   if (stored <= gen) {
      return false;
   }
   if (newer) {
      *newer = true;
   }
   fw_error_set (err, FW_ERROR_MONGO,
                 "%s of stream \"%s\" NOT saved: a newer run of the stream (writer "
                 "generation %lld, this run's %lld) has written it since this run started; the "
                 "stored one stays the newer run's (a second instance running the stream "
                 "without ha, or writerGen raised by hand to reset the checkpoint)",
                 what, stream, (long long) stored, (long long) gen);
   return true;
}

/* An unfenced ordered write with a generation whose upsert met the document
 * twice: true (err set) when a later run's generation is stored (*newer
 * true) or it cannot be read, false when the write was only superseded
 * within its own run. */
static bool
refused_by_newer_run (mongoc_client_t *client, const char *database, const char *stream,
                      const order_t *order, bool *newer, fw_error_t *err)
{
   return fw_checkpoint_refused_by_newer_run (client, database, stream, stream, "checkpoint",
                                              order->gen, newer, err);
}

bool
fw_checkpoint_claim_generation (mongoc_client_t *client, const char *database, const char *stream,
                                int64_t *gen, fw_error_t *error)
{
   mongoc_collection_t *coll;
   bson_t *query, *update, opts = BSON_INITIALIZER, inc;
   bson_error_t berr;
   int64_t stored, epoch, next, now;
   bool ok;

   if (!stored_fences (client, database, stream, &stored, &epoch, error)) {
      return false;
   }
   next = stored + 1;
   /* No generation stored (a first start, a checkpoint of a version before
    * writerGen, or one deleted by hand): the current time in milliseconds,
    * past every generation an earlier run can hold (each is a start's time
    * plus one per later start), so that a late write of a run from before
    * the delete is refused too. */
   if (stored <= 0 && (now = fw_now_ms ()) > next) {
      next = now;
   }
   /* $max, not $inc: a claim of an earlier run that the server applies late
    * (its run got no answer, so wrote nothing) never raises the generation
    * past this one's (it read a generation no later than this run did, or
    * none at an earlier time). */
   query = BCON_NEW ("_id", BCON_UTF8 (stream));
   update = BCON_NEW ("$max", "{", "writerGen", BCON_INT64 (next), "}");
   /* A leader fenced the checkpoint (ha was on): this run fences every
    * earlier leader too, whose writes need the epoch they stored. The next
    * leader takes an epoch past it (lease.h: the checkpoint's is its floor). */
   if (update && epoch > 0 &&
       !(BSON_APPEND_DOCUMENT_BEGIN (update, "$inc", &inc) &&
         BSON_APPEND_INT64 (&inc, "epoch", 1) && bson_append_document_end (update, &inc))) {
      bson_destroy (update);
      update = NULL;
   }
   if (!query || !update || !BSON_APPEND_BOOL (&opts, "upsert", true)) {
      fw_error_set (error, FW_ERROR_NOMEM,
                    "out of memory starting the checkpoint writes of stream \"%s\"", stream);
      bson_destroy (query);
      bson_destroy (update);
      bson_destroy (&opts);
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_update_one (coll, query, update, &opts, NULL, &berr);
   if (!ok) {
      char hint[300];
      fw_error_set_code (
         error, FW_ERROR_MONGO, (int) berr.code,
         "cannot start the checkpoint writes of stream \"%s\" (writer generation %lld): %s%s",
         stream, (long long) next, berr.message,
         fw_sharding_hint (&berr, FW_CHECKPOINT_COLLECTION, FW_SHARD_KEY_BY_ID, hint, sizeof hint));
   } else {
      *gen = next;
   }
   mongoc_collection_destroy (coll);
   bson_destroy (query);
   bson_destroy (update);
   bson_destroy (&opts);
   return ok;
}

/* fw_checkpoint_save_ordered_with's outcome, with err (set when not saved). */
static fw_checkpoint_saved_t
save_ordered (mongoc_client_t *client, const char *database, const char *stream,
              const bson_t *processed, const bson_t *seen, const char *script_version,
              const bson_t *also, int64_t epoch, const order_t *order, fw_error_t *err)
{
   fw_error_t read_err;
   bool fenced, later, newer;

   if (save_checkpoint (client, NULL, database, stream, processed, seen, script_version, also,
                        epoch, order, &fenced, NULL, err)) {
      return FW_CHECKPOINT_SAVED;
   }
   if (epoch > 0) {
      /* Matched nothing: fenced by a newer leader, or a later write of this
       * writer came first. Rare (writes reach the server out of order only
       * when the connections race), so it costs a read only then. */
      if (!fenced) {
         return FW_CHECKPOINT_NOT_SAVED;
      }
      if (!stored_later (client, database, stream, epoch, order, &later, &read_err)) {
         fw_error_set_code (err, read_err.domain, read_err.code,
                            "%s (after a fenced checkpoint write matched nothing)",
                            read_err.message);
         return FW_CHECKPOINT_NOT_SAVED;
      }
      return later ? FW_CHECKPOINT_SUPERSEDED : FW_CHECKPOINT_NOT_SAVED;
   }
   if (err->code != ERR_DUPLICATE_KEY) {
      return FW_CHECKPOINT_NOT_SAVED;
   }
   /* The upsert found no document to update and could not insert one: the
    * document is there and holds a later seq of this writer, or it was not
    * there and another write inserted it meanwhile. The server does not retry
    * such an upsert itself (only when its query is equalities on the unique
    * index's fields: mongod's shouldRetryDuplicateKeyException, in
    * update_stage.cpp / write_ops_exec.cpp), so try once more: the document
    * is there now, and matches unless it holds a later seq. */
   if (save_checkpoint (client, NULL, database, stream, processed, seen, script_version, also, 0,
                        order, NULL, NULL, err)) {
      return FW_CHECKPOINT_SAVED;
   }
   if (err->code != ERR_DUPLICATE_KEY) {
      return FW_CHECKPOINT_NOT_SAVED;
   }
   if (refused_by_newer_run (client, database, stream, order, &newer, err)) {
      return newer ? FW_CHECKPOINT_REFUSED : FW_CHECKPOINT_NOT_SAVED;
   }
   /* Without a writer only a later run's generation refuses it. */
   return order->writer ? FW_CHECKPOINT_SUPERSEDED : FW_CHECKPOINT_NOT_SAVED;
}

fw_checkpoint_saved_t
fw_checkpoint_save_ordered (mongoc_client_t *client, const char *database, const char *stream,
                            const bson_t *processed, const bson_t *seen, const char *script_version,
                            int64_t epoch, int64_t gen, const bson_oid_t *writer, int64_t seq,
                            fw_error_t *error)
{
   return fw_checkpoint_save_ordered_with (client, database, stream, processed, seen,
                                           script_version, NULL, epoch, gen, writer, seq, error);
}

fw_checkpoint_saved_t
fw_checkpoint_save_ordered_with (mongoc_client_t *client, const char *database, const char *stream,
                                 const bson_t *processed, const bson_t *seen,
                                 const char *script_version, const bson_t *also, int64_t epoch,
                                 int64_t gen, const bson_oid_t *writer, int64_t seq,
                                 fw_error_t *error)
{
   order_t order = {gen, writer, seq};
   fw_error_t err = {0};
   fw_checkpoint_saved_t saved = save_ordered (client, database, stream, processed, seen,
                                               script_version, also, epoch, &order, &err);
   if ((saved == FW_CHECKPOINT_NOT_SAVED || saved == FW_CHECKPOINT_REFUSED) && error) {
      *error = err;
   }
   return saved;
}

bool
fw_checkpoint_save_in (mongoc_client_t *client, mongoc_client_session_t *session,
                       const char *database, const char *stream, const bson_t *token,
                       const char *script_version, int64_t epoch, int64_t gen, bool *fenced,
                       bson_t *reply, fw_error_t *error)
{
   order_t order = {gen, NULL, 0};
   fw_error_t err = {0};
   bool ok, newer;

   bson_init (reply);
   ok = save_checkpoint (client, session, database, stream, token, token, script_version, NULL,
                         epoch, gen > 0 ? &order : NULL, fenced, reply, &err);
   /* Refused by a later run's generation: the upsert met the document and
    * could not insert it (a duplicate key, in the reply's writeErrors; the
    * server aborts the transaction on it: SERVER-34059, and the drivers'
    * transactions spec tests, abort.yml, check that it did). Read outside
    * the transaction, which the server has ended. */
   if (!ok && gen > 0 && err.code == ERR_DUPLICATE_KEY &&
       fw_checkpoint_refused_by_newer_run (client, database, stream, stream, "checkpoint", gen,
                                           &newer, &err) &&
       newer && fenced) {
      *fenced = true;
   }
   if (!ok && error) {
      *error = err;
   }
   return ok;
}

/* Raises field of stream's checkpoint document to at least value ($max,
 * upserted) and sets *stored to the field's value after it (unchanged when the
 * document holds no number there), and *other to the number in field other
 * after it (0: none). what names the step in an error, as in
 * "cannot <what> of stream ...: <why>". */
static bool
raise_field (mongoc_client_t *client, const char *database, const char *stream, const char *field,
             int64_t value, int64_t *stored, const char *other, int64_t *other_value,
             const char *what, fw_error_t *error)
{
   mongoc_collection_t *coll;
   bson_t *query = BCON_NEW ("_id", BCON_UTF8 (stream));
   bson_t *update = BCON_NEW ("$max", "{", field, BCON_INT64 (value), "}");
   mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new ();
   bson_t reply, post;
   bson_iter_t it, v;
   bson_error_t berr;
   bool ok = query && update && opts && mongoc_find_and_modify_opts_set_update (opts, update) &&
             mongoc_find_and_modify_opts_set_flags (opts, MONGOC_FIND_AND_MODIFY_UPSERT |
                                                             MONGOC_FIND_AND_MODIFY_RETURN_NEW);

   *other_value = 0;
   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory: cannot %s of stream \"%s\"", what,
                    stream);
      bson_destroy (query);
      bson_destroy (update);
      mongoc_find_and_modify_opts_destroy (opts);
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_find_and_modify_with_opts (coll, query, opts, &reply, &berr);
   if (!ok) {
      char hint[300];
      fw_error_set_code (
         error, FW_ERROR_MONGO, (int) berr.code, "cannot %s of stream \"%s\" (%s %lld): %s%s", what,
         stream, field, (long long) value, berr.message,
         fw_sharding_hint (&berr, FW_CHECKPOINT_COLLECTION, FW_SHARD_KEY_BY_ID, hint, sizeof hint));
   } else if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      uint32_t len;
      const uint8_t *data;
      bson_iter_document (&it, &len, &data);
      if (bson_init_static (&post, data, len)) {
         if (bson_iter_init_find (&v, &post, field) && BSON_ITER_HOLDS_NUMBER (&v)) {
            *stored = bson_iter_as_int64 (&v);
         }
         *other_value = number_of (&post, other);
      }
   }
   bson_destroy (&reply);
   mongoc_collection_destroy (coll);
   mongoc_find_and_modify_opts_destroy (opts);
   bson_destroy (query);
   bson_destroy (update);
   return ok;
}

/* One update of stream's checkpoint document (not upserted: the caller's
 * write made it), what naming it in an error as for raise_field. */
static bool
update_doc (mongoc_client_t *client, const char *database, const char *stream, bson_t *update,
            const char *what, fw_error_t *error)
{
   bson_t *query = BCON_NEW ("_id", BCON_UTF8 (stream));
   mongoc_collection_t *coll;
   bson_error_t berr;
   bool ok;

   if (!query || !update) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory: cannot %s of stream \"%s\"", what,
                    stream);
      bson_destroy (query);
      bson_destroy (update);
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_update_one (coll, query, update, NULL, NULL, &berr);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot %s of stream \"%s\": %s",
                         what, stream, berr.message);
   }
   mongoc_collection_destroy (coll);
   bson_destroy (query);
   bson_destroy (update);
   return ok;
}

bool
fw_checkpoint_raise_generation (mongoc_client_t *client, const char *database, const char *stream,
                                int64_t gen, int64_t *stored, fw_error_t *error)
{
   int64_t epoch;

   *stored = 0;
   if (!raise_field (client, database, stream, "writerGen", gen, stored, "epoch", &epoch,
                     "raise the writer generation", error)) {
      return false;
   }
   /* A leader fenced it (ha was on): this run fences every earlier leader
    * too, as its claim does on the stream's own checkpoint. */
   return *stored > gen || epoch <= 0 ||
          update_doc (client, database, stream,
                      BCON_NEW ("$inc", "{", "epoch", BCON_INT64 (1), "}"),
                      "fence the earlier leaders", error);
}

bool
fw_checkpoint_fence (mongoc_client_t *client, const char *database, const char *stream,
                     int64_t epoch, int64_t *stored, fw_error_t *error)
{
   int64_t gen, next;

   *stored = -1;
   if (!raise_field (client, database, stream, "epoch", epoch, stored, "writerGen", &gen,
                     "fence the checkpoint", error)) {
      return false;
   }
   /* Runs without ha (ha was off) are fenced too: the writer generation is
    * raised past theirs, as a run's claim does (the time when none is
    * stored: fw_checkpoint_claim_generation). A leader's own writes do not
    * carry one. */
   if (*stored != epoch) {
      return true; /* a newer leader fenced it: this one does not lead */
   }
   next = gen > 0 ? gen + 1 : fw_now_ms ();
   return update_doc (client, database, stream,
                      BCON_NEW ("$max", "{", "writerGen", BCON_INT64 (next > 0 ? next : 1), "}"),
                      "fence the runs without ha", error);
}

void
fw_checkpoint_cleanup (fw_checkpoint_t *cp)
{
   if (!cp) {
      return;
   }
   bson_destroy (&cp->processed);
   bson_destroy (&cp->seen);
   cp->has_processed = cp->has_seen = false;
}
