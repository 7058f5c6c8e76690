/*
 * circuit_doc.c - the "<checkpoint id>#circuit" document (circuit_doc.h).
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/circuit_doc.h"

#define SUFFIX "#circuit"

static bool
doc_id (char *out, size_t len, const char *id, const char *database, fw_error_t *error)
{
   if ((size_t) snprintf (out, len, "%s" SUFFIX, id) >= len) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "stream \"%s\": its name is too long for a breaker "
                    "document in %s.%s",
                    id, database, FW_CHECKPOINT_COLLECTION);
      return false;
   }
   return true;
}

/* {_id} or, with epoch > 0, {_id, $or: [{epoch <= epoch}, {no epoch}]};
 * with gen > 0 also writerGen not above it. False when out of memory. */
static bool
selector (bson_t *sel, const char *did, int64_t epoch, int64_t gen)
{
   if (!BSON_APPEND_UTF8 (sel, "_id", did) || !fw_checkpoint_gen_filter (sel, gen)) {
      return false;
   }
   if (epoch > 0) {
      bson_t or, a, b, c, d;
      BSON_APPEND_ARRAY_BEGIN (sel, "$or", & or);
      BSON_APPEND_DOCUMENT_BEGIN (& or, "0", &a);
      BSON_APPEND_DOCUMENT_BEGIN (&a, "epoch", &c);
      BSON_APPEND_INT64 (&c, "$lte", epoch);
      bson_append_document_end (&a, &c);
      bson_append_document_end (& or, &a);
      BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &b);
      BSON_APPEND_DOCUMENT_BEGIN (&b, "epoch", &d);
      BSON_APPEND_BOOL (&d, "$exists", false);
      bson_append_document_end (&b, &d);
      bson_append_document_end (& or, &b);
      return bson_append_array_end (sel, & or);
   }
   return true;
}

bool
fw_circuit_doc_save (mongoc_client_t *client, const char *database, const char *id,
                     const fw_circuit_view_t *v, int64_t epoch, int64_t gen, bool *fenced,
                     fw_error_t *error)
{
   char did[600];
   bson_t sel = BSON_INITIALIZER, update = BSON_INITIALIZER, set, reply;
   bson_t *opts = BCON_NEW ("upsert", BCON_BOOL (true));
   mongoc_collection_t *coll;
   bson_error_t berr;
   bool ok;

   *fenced = false;
   if (!doc_id (did, sizeof did, id, database, error)) {
      bson_destroy (opts);
      return false;
   }
   if (!opts || !selector (&sel, did, epoch, gen) ||
       !BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &set) ||
       !BSON_APPEND_UTF8 (&set, "stream", id) || !BSON_APPEND_UTF8 (&set, "state", "open") ||
       !BSON_APPEND_UTF8 (&set, "errorType", v->error_type) ||
       !BSON_APPEND_DATE_TIME (&set, "openedAt", v->since_ms) ||
       !BSON_APPEND_INT64 (&set, "openForMs", v->open_for_ms) ||
       !BSON_APPEND_DATE_TIME (&set, "nextProbeAt", v->next_probe_ms) ||
       !BSON_APPEND_INT32 (&set, "probes", v->probes) ||
       !BSON_APPEND_INT64 (&set, "epoch", epoch) ||
       (gen > 0 && !BSON_APPEND_INT64 (&set, "writerGen", gen)) ||
       !BSON_APPEND_DATE_TIME (&set, "updatedAt", fw_now_ms ()) ||
       !bson_append_document_end (&update, &set)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory saving the breaker of stream \"%s\"", id);
      bson_destroy (&sel);
      bson_destroy (&update);
      bson_destroy (opts);
      return false;
   }

   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_update_one (coll, &sel, &update, opts, &reply, &berr);
   if (!ok && epoch > 0 && berr.code == 11000) {
      /* the upsert met the _id of a newer leader's document */
      *fenced = true;
      fw_error_set (error, FW_ERROR_MONGO,
                    "breaker of stream \"%s\" NOT saved: a newer "
                    "leader's is stored",
                    id);
   } else if (!ok && gen > 0 && berr.code == 11000 &&
              fw_checkpoint_refused_by_newer_run (client, database, did, id, "the circuit breaker",
                                                  gen, fenced, error)) {
      /* the upsert met the _id of a newer run's document (*fenced), or it
       * cannot be read (error says so, and the breaker goes on in memory) */
   } else if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot save the circuit breaker of stream \"%s\" in %s.%s: %s", id,
                         database, FW_CHECKPOINT_COLLECTION, berr.message);
   }
   bson_destroy (&reply);
   mongoc_collection_destroy (coll);
   bson_destroy (&sel);
   bson_destroy (&update);
   bson_destroy (opts);
   return ok;
}

bool
fw_circuit_doc_delete (mongoc_client_t *client, const char *database, const char *id, int64_t epoch,
                       int64_t gen, fw_error_t *error)
{
   char did[600];
   bson_t sel = BSON_INITIALIZER;
   mongoc_collection_t *coll;
   bson_error_t berr;
   bool ok;

   if (!doc_id (did, sizeof did, id, database, error)) {
      return false;
   }
   if (!selector (&sel, did, epoch, gen)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory deleting the breaker of stream \"%s\"",
                    id);
      bson_destroy (&sel);
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_delete_one (coll, &sel, NULL, NULL, &berr);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot delete the circuit breaker of stream \"%s\" in %s.%s: %s", id,
                         database, FW_CHECKPOINT_COLLECTION, berr.message);
   }
   mongoc_collection_destroy (coll);
   bson_destroy (&sel);
   return ok;
}

static bool
read_fields (const bson_t *doc, fw_circuit_view_t *out, char *bad, size_t bad_len)
{
   bson_iter_t it;
   const char *missing = NULL;

   memset (out, 0, sizeof *out);
   out->state = FW_CIRCUIT_OPEN;
   if (!bson_iter_init_find (&it, doc, "errorType") || !BSON_ITER_HOLDS_UTF8 (&it)) {
      missing = "errorType";
   } else {
      snprintf (out->error_type, sizeof out->error_type, "%s", bson_iter_utf8 (&it, NULL));
   }
   if (!missing && bson_iter_init_find (&it, doc, "openedAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      out->since_ms = bson_iter_date_time (&it);
   } else if (!missing) {
      missing = "openedAt";
   }
   if (!missing && bson_iter_init_find (&it, doc, "nextProbeAt") &&
       BSON_ITER_HOLDS_DATE_TIME (&it)) {
      out->next_probe_ms = bson_iter_date_time (&it);
   } else if (!missing) {
      missing = "nextProbeAt";
   }
   if (!missing && bson_iter_init_find (&it, doc, "openForMs") && BSON_ITER_HOLDS_NUMBER (&it) &&
       bson_iter_as_int64 (&it) > 0) {
      out->open_for_ms = bson_iter_as_int64 (&it);
   } else if (!missing) {
      missing = "openForMs";
   }
   if (!missing && bson_iter_init_find (&it, doc, "probes") && BSON_ITER_HOLDS_NUMBER (&it)) {
      out->probes = (int) bson_iter_as_int64 (&it);
   }
   if (missing) {
      snprintf (bad, bad_len, "field %s is missing or of the wrong type", missing);
      return false;
   }
   return true;
}

bool
fw_circuit_doc_load (mongoc_client_t *client, const char *database, const char *id,
                     fw_circuit_view_t *out, bool *found, char *bad, size_t bad_len,
                     fw_error_t *error)
{
   char did[600];
   bson_t *filter;
   mongoc_collection_t *coll;
   mongoc_cursor_t *cur;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   *found = false;
   if (bad_len) {
      bad[0] = '\0';
   }
   if (!doc_id (did, sizeof did, id, database, error)) {
      return false;
   }
   filter = BCON_NEW ("_id", BCON_UTF8 (did));
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   cur = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   if (mongoc_cursor_next (cur, &doc)) {
      *found = read_fields (doc, out, bad, bad_len);
   }
   if (mongoc_cursor_error (cur, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read the circuit breaker of stream \"%s\" from %s.%s: %s", id,
                         database, FW_CHECKPOINT_COLLECTION, berr.message);
      *found = false;
      ok = false;
   }
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   return ok;
}
