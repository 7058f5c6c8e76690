/*
 * stream_partition.c - a partition's checks before its change stream opens
 * (issue 31): the server knows $toHashedIndexKey, and the stored checkpoints
 * are of the same generation (the same number of partitions). Called by
 * fw_stream_server_supports (stream_server.c) at every open.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/stream/stream_partition-private.h"

#define FW_WIRE_7_0 21 /* maxWireVersion of MongoDB 7.0 (wire_version.h): $toHashedIndexKey */

/* The stream's name: a unit's name without its "#k/N" (an unpartitioned
 * stream's whole name, which may hold a '#'). */
size_t
fw_stream_partition_base_len (const fw_stream_config_t *cfg)
{
   const char *hash = cfg->partitions > 0 ? strrchr (cfg->name, '#') : NULL;
   return hash ? (size_t) (hash - cfg->name) : strlen (cfg->name);
}

static bool
hashes_keys (const fw_stream_config_t *cfg, mongoc_client_t *client, char *what, size_t len)
{
   mongoc_server_description_t *sd;
   const bson_t *hello;
   bson_iter_t it;
   bson_error_t berr;
   int64_t wire = -1;

   if (cfg->partitions < 2 || !(sd = mongoc_client_select_server (client, false, NULL, &berr))) {
      return true; /* one partition has no $match; server unknown: opening will say why */
   }
   hello = mongoc_server_description_hello_response (sd);
   if (hello && bson_iter_init_find (&it, hello, "maxWireVersion") &&
       BSON_ITER_HOLDS_NUMBER (&it)) {
      wire = bson_iter_as_int64 (&it);
   }
   if (wire >= 0 && wire < FW_WIRE_7_0) {
      snprintf (what, len,
                "stream \"%s\": partitions = %d needs $toHashedIndexKey (MongoDB 7.0 or later), "
                "but the server %s has maxWireVersion %lld (older than 7.0): the stream is "
                "stopped; remove partitions (or set partitions = 1) on this server, or upgrade it",
                cfg->name, cfg->partitions, mongoc_server_description_host (sd)->host_and_port,
                (long long) wire);
      mongoc_server_description_destroy (sd);
      return false;
   }
   mongoc_server_description_destroy (sd);
   return true;
}

/* The regex "^<base>(#|$)", ASCII punctuation escaped; NULL on no memory. */
char *
fw_stream_partition_regex (const char *base, size_t n)
{
   char *re = malloc (2 * n + 8), *o = re;
   if (!re) {
      return NULL;
   }
   *o++ = '^';
   for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char) base[i];
      if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                        (c >= 'A' && c <= 'Z') || c == '_')) {
         *o++ = '\\';
      }
      *o++ = (char) c;
   }
   memcpy (o, "(#|$)", 6);
   return re;
}

/* The generation (partitions) a checkpoint's id stands for: 0 for the
 * unpartitioned stream, N for "<base>#k/N", -1 for another stream's. */
int
fw_stream_partition_generation_of (const char *id, const char *base, size_t n)
{
   int k, parts, used = 0;
   if (strncmp (id, base, n) != 0) {
      return -1;
   }
   if (id[n] == '\0') {
      return 0;
   }
   if (sscanf (id + n, "#%d/%d%n", &k, &parts, &used) == 2 && id[n + (size_t) used] == '\0') {
      return parts;
   }
   return -1;
}

static void
refuse (const fw_stream_config_t *cfg, int other, const char *id, char *what, size_t len)
{
   int n = (int) fw_stream_partition_base_len (cfg);
   char was[64], now[64];
   snprintf (was, sizeof was, other ? "partitions = %d" : "no partitions", other);
   snprintf (now, sizeof now, cfg->partitions > 0 ? "partitions = %d" : "no partitions",
             cfg->partitions);
   snprintf (what, len,
             "stream \"%.*s\": %s.%s holds checkpoint \"%s\", of the stream with %s, but the "
             "script says %s: a start switches generations (the new units begin after each old "
             "unit's checkpoint, see docs/operations.md \"Changing N\"); an old checkpoint "
             "without a position stops it. To keep the old units instead, set partitions back "
             "to the stored number",
             n, cfg->name, cfg->database, FW_CHECKPOINT_COLLECTION, id, was, now);
}

bool
fw_stream_partition_same_generation (const fw_stream_config_t *cfg, mongoc_client_t *client,
                                     char *what, size_t len)
{
   size_t n = fw_stream_partition_base_len (cfg);
   char *re = fw_stream_partition_regex (cfg->name, n), id[600];
   mongoc_collection_t *coll = NULL;
   mongoc_cursor_t *cur = NULL;
   bson_t *filter = NULL, *opts = NULL;
   const bson_t *doc;
   bson_iter_t it;
   int other = -1, switched = -1;

   if (!re || !(filter = BCON_NEW ("_id", "{", "$regex", BCON_UTF8 (re), "}")) ||
       !(opts = BCON_NEW ("projection", "{", "_id", BCON_INT32 (1), "n", BCON_INT32 (1), "}")) ||
       !(coll = mongoc_client_get_collection (client, cfg->database, FW_CHECKPOINT_COLLECTION)) ||
       !(cur = mongoc_collection_find_with_opts (coll, filter, opts, NULL))) {
      snprintf (what, len, "stream \"%s\": out of memory reading its checkpoints", cfg->name);
      other = -2;
   }
   while (other != -2 && cur && mongoc_cursor_next (cur, &doc)) {
      int g;
      if (!bson_iter_init_find (&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8 (&it)) {
         continue;
      }
      snprintf (id, sizeof id, "%s", bson_iter_utf8 (&it, NULL));
      if (fw_stream_partition_is_generation_doc (id, cfg->name, n)) {
         switched = bson_iter_init_find (&it, doc, "n") && BSON_ITER_HOLDS_INT32 (&it)
                       ? bson_iter_int32 (&it)
                       : -1;
         continue;
      }
      g = fw_stream_partition_generation_of (id, cfg->name, n);
      if (g >= 0 && g != (cfg->partitions > 0 ? cfg->partitions : 0) && other == -1) {
         other = g;
         refuse (cfg, g, id, what, len);
      }
   }
   /* A read error is not reported here: the checkpoint's own read at the
    * open reports it (and this check runs again at the next open). */
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (opts);
   bson_destroy (filter);
   free (re);
   /* Switched to this N (stream_generation.c): older generations' checkpoints stay, unused. */
   return other == -1 || switched == (cfg->partitions > 0 ? cfg->partitions : 0);
}

bool
fw_stream_partition_check (const fw_stream_config_t *cfg, mongoc_client_t *client, char *what,
                           size_t len)
{
   return hashes_keys (cfg, client, what, len) &&
          fw_stream_partition_same_generation (cfg, client, what, len);
}

bool
fw_stream_partition_is_generation_doc (const char *id, const char *base, size_t n)
{
   return strncmp (id, base, n) == 0 && strcmp (id + n, FW_GENERATION_SUFFIX) == 0;
}
