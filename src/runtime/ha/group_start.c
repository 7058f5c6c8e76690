/*
 * group_start.c - ha.mode = "shared": the stream's start in its group, one
 * record in _fw_checkpoints (group_start.h).
 */
#include <stdio.h>
#include <string.h>

#include "bson/write_reply.h"
#include "flowwarden/clock.h"
#include "flowwarden/collection_names.h"
#include "runtime/ha/group_start.h"
#include "runtime/ha/lease.h"

bool
fw_group_start_id (const char *stream, size_t stream_len, char *out, size_t len)
{
   int n = snprintf (out, len, "%.*s#start", (int) stream_len, stream);
   return n > 0 && (size_t) n < len;
}

/* The operationTime of a read of the record: with read concern "local",
 * the newest entry of the oplog when it ran (MongoDB's runCommand
 * reference, "operationTime"; jstests/replsets/
 * operation_time_read_and_write_concern.js), so every write after it is
 * later, and startAtOperationTime at it delivers them all. */
static bool
read_time (mongoc_client_t *client, const char *database, const char *id, uint64_t *at,
           fw_error_t *error)
{
   bson_t *cmd = BCON_NEW ("find", BCON_UTF8 (FW_CHECKPOINT_COLLECTION), "filter", "{", "_id",
                           BCON_UTF8 (id), "}", "limit", BCON_INT32 (1), "singleBatch",
                           BCON_BOOL (true));
   bson_t reply;
   bson_error_t berr;
   bson_iter_t it;
   uint32_t t = 0, i = 0;
   bool ok;

   if (!cmd) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading %s", id);
      return false;
   }
   ok = mongoc_client_read_command_with_opts (client, database, cmd, NULL, NULL, &reply, &berr);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot read %s.%s %s: %s",
                         database, FW_CHECKPOINT_COLLECTION, id, berr.message);
   } else if (bson_iter_init_find (&it, &reply, "operationTime") &&
              BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &t, &i);
   }
   if (ok && !(*at = (uint64_t) t << 32 | i)) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "the server's reply to a read of %s.%s has no operationTime (a replica set "
                    "or sharded cluster is needed)",
                    database, FW_CHECKPOINT_COLLECTION);
      ok = false;
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
   return ok;
}

/* One findAndModify upserting by _id: $replaceWith keeps the record (its
 * aliveUntil pushed to $$NOW + lease at least) while it is alive (a date
 * after $$NOW and a Timestamp startAt), else writes a new one starting at
 * at, marked with run. $$NOW is refused in an upsert's query
 * (lease_store.c), hence the decision inside the pipeline. */
static bson_t *
take_command (const char *id, uint64_t at, int64_t run, int64_t lease_ms)
{
   return BCON_NEW (
      "findAndModify", BCON_UTF8 (FW_CHECKPOINT_COLLECTION), "query", "{", "_id", BCON_UTF8 (id),
      "}", "update", "[", "{", "$replaceWith", "{", "$cond", "[", "{", "$and", "[", "{", "$eq", "[",
      "{", "$type", BCON_UTF8 ("$aliveUntil"), "}", BCON_UTF8 ("date"), "]", "}", "{", "$gt", "[",
      BCON_UTF8 ("$aliveUntil"), BCON_UTF8 ("$$NOW"), "]", "}", "{", "$eq", "[", "{", "$type",
      BCON_UTF8 ("$startAt"), "}", BCON_UTF8 ("timestamp"), "]", "}", "]", "}",
      /* alive: kept, aliveUntil pushed */
      "{", "$mergeObjects", "[", BCON_UTF8 ("$$ROOT"), "{", "aliveUntil", "{", "$max", "[",
      BCON_UTF8 ("$aliveUntil"), "{", "$add", "[", BCON_UTF8 ("$$NOW"), BCON_INT64 (lease_ms), "]",
      "}", "]", "}", "}", "]", "}",
      /* else a new start */
      "{", "_id", BCON_UTF8 ("$_id"), "startAt", "{", "$literal",
      BCON_TIMESTAMP ((uint32_t) (at >> 32), (uint32_t) at), "}", "startedAt", BCON_UTF8 ("$$NOW"),
      "by", "{", "$literal", BCON_UTF8 (fw_lease_owner_id ()), "}", "run", BCON_INT64 (run),
      "aliveUntil", "{", "$add", "[", BCON_UTF8 ("$$NOW"), BCON_INT64 (lease_ms), "]", "}", "}",
      "]", "}", "}", "]", "upsert", BCON_BOOL (true), "new", BCON_BOOL (true));
}

/* The record the server returned into out; false when it is not one. */
static bool
parse_record (const bson_t *reply, int64_t run, fw_group_start_t *out)
{
   bson_iter_t it, f;
   uint32_t len, t = 0, i = 0;
   const uint8_t *data;
   bson_t value;

   if (!bson_iter_init_find (&it, reply, "value") || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   if (!bson_init_static (&value, data, len)) {
      return false;
   }
   if (bson_iter_init_find (&f, &value, "startAt") && BSON_ITER_HOLDS_TIMESTAMP (&f)) {
      bson_iter_timestamp (&f, &t, &i);
   }
   out->at = (uint64_t) t << 32 | i;
   out->started_ms = bson_iter_init_find (&f, &value, "startedAt") && BSON_ITER_HOLDS_DATE_TIME (&f)
                        ? bson_iter_date_time (&f)
                        : 0;
   out->began = bson_iter_init_find (&f, &value, "run") && BSON_ITER_HOLDS_INT64 (&f) &&
                bson_iter_int64 (&f) == run;
   return out->at != 0;
}

#define ERR_DUPLICATE_KEY 11000

bool
fw_group_start_take (mongoc_client_t *client, const char *database, const char *id,
                     int64_t lease_ms, fw_group_start_t *out, fw_error_t *error)
{
   static int64_t runs;
   int64_t run = fw_now_ms () * 1000 + __atomic_add_fetch (&runs, 1, __ATOMIC_RELAXED) % 1000;
   bson_t *cmd;
   bson_t reply;
   bson_t *opts = BCON_NEW ("writeConcern", "{", "w", BCON_UTF8 ("majority"), "}");
   bson_error_t berr;
   uint64_t at;
   bool ok = false;

   memset (out, 0, sizeof *out);
   if (!read_time (client, database, id, &at, error)) {
      return false;
   }
   if (!opts || !(cmd = take_command (id, at, run, lease_ms))) {
      bson_destroy (opts);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory recording %s", id);
      return false;
   }
   /* Two members inserting it at once: the loser gets the winner's record
    * (the server retries the upsert) or a duplicate key; then once more. */
   for (int tries = 0; tries < 2 && !ok; tries++) {
      ok = fw_write_reply_ok (
         mongoc_client_write_command_with_opts (client, database, cmd, opts, &reply, &berr), &reply,
         &berr);
      if (ok && !parse_record (&reply, run, out)) {
         bson_set_error (&berr, MONGOC_ERROR_BSON, 0, "the server returned no record");
         ok = false;
      }
      bson_destroy (&reply);
      if (!ok && berr.code != ERR_DUPLICATE_KEY) {
         break;
      }
   }
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "cannot record %s in %s.%s: %s",
                         id, database, FW_CHECKPOINT_COLLECTION, berr.message);
   }
   bson_destroy (opts);
   bson_destroy (cmd);
   return ok;
}

bool
fw_group_start_renew (mongoc_client_t *client, const char *database, const char *const *ids,
                      const uint64_t *ats, int n, int64_t lease_ms, bson_error_t *berr)
{
   bson_t *cmd = BCON_NEW ("update", BCON_UTF8 (FW_CHECKPOINT_COLLECTION));
   bson_t updates, *one;
   bson_t reply;
   char key[16];
   const char *k;
   bool ok = cmd && BSON_APPEND_ARRAY_BEGIN (cmd, "updates", &updates);

   for (int j = 0; ok && j < n; j++) {
      bson_uint32_to_string ((uint32_t) j, &k, key, sizeof key);
      one = BCON_NEW ("q", "{", "_id", BCON_UTF8 (ids[j]), "startAt",
                      BCON_TIMESTAMP ((uint32_t) (ats[j] >> 32), (uint32_t) ats[j]), "}", "u", "[",
                      "{", "$set", "{", "aliveUntil", "{", "$add", "[", BCON_UTF8 ("$$NOW"),
                      BCON_INT64 (lease_ms), "]", "}", "}", "}", "]");
      ok = one && bson_append_document (&updates, k, -1, one);
      bson_destroy (one);
   }
   ok = ok && bson_append_array_end (cmd, &updates);
   if (!ok) {
      bson_destroy (cmd);
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      return false;
   }
   ok = fw_write_reply_ok (
      mongoc_client_write_command_with_opts (client, database, cmd, NULL, &reply, berr), &reply,
      berr);
   bson_destroy (&reply);
   bson_destroy (cmd);
   return ok;
}
