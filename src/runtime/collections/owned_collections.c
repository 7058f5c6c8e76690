/*
 * owned_collections.c - the collections flowwarden writes (see
 * owned_collections.h).
 */
#include "runtime/collections/owned_collections.h"
#include "flowwarden/collection_names.h"

char *
fw_dlq_sequences_name (const char *dlq_collection)
{
   return bson_strdup_printf ("%s_sequences", dlq_collection);
}

static bool
each_of_dlq (const fw_stream_config_t *cfg, const fw_dlq_config_t *dlq, fw_owned_collection_fn fn,
             void *ud)
{
   const char *database = dlq->database ? dlq->database : cfg->database;
   char *sequences;
   bool go_on;

   if (!dlq->enabled || dlq->memory || !dlq->collection) {
      return true;
   }
   if (!fn (ud, database, dlq->collection)) {
      return false;
   }
   /* Listed for every DLQ, sequenced or not: a DLQ sequenced in an earlier
    * run keeps its sequences collection, and the name is flowwarden's. */
   if (!(sequences = fw_dlq_sequences_name (dlq->collection))) {
      return false;
   }
   go_on = fn (ud, database, sequences);
   bson_free (sequences);
   return go_on;
}

bool
fw_owned_collections_each (const fw_stream_config_t *cfg, fw_owned_collection_fn fn, void *ud)
{
   /* The lease is listed whatever the stream's ha.mode: another instance or
    * script may lead a stream in this database. */
   return fn (ud, cfg->database, FW_CHECKPOINT_COLLECTION) &&
          fn (ud, cfg->database, FW_LEASE_COLLECTION) &&
          fn (ud, cfg->database, FW_MEMBERS_COLLECTION) && /* ha.mode = "shared" (issue 31) */
          fn (ud, cfg->database, FW_SNAPSHOT_MARKS_COLLECTION) && /* issue 28 */
          each_of_dlq (cfg, &cfg->dlq, fn, ud) && each_of_dlq (cfg, &cfg->dlq_fallback, fn, ud);
}
