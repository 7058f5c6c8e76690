/*
 * stream_config.c - copies a validated stream spec out of Lua into C.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "runtime/collections/owned_collections.h"
#include "runtime/config/outage_config.h"
#include "runtime/config/stream_config.h"
#include "runtime/snapshot/snapshot.h"

/* Each getter leaves the stack as it found it. */
static char *
dup_field (lua_State *L, int t, const char *key)
{
   char *out = NULL;
   if (lua_getfield (L, t, key) == LUA_TSTRING) {
      out = strdup (lua_tostring (L, -1));
   }
   lua_pop (L, 1);
   return out;
}

static int64_t
int_field (lua_State *L, int t, const char *key, int64_t dflt)
{
   int64_t v = dflt;
   if (lua_getfield (L, t, key) == LUA_TNUMBER) {
      v = lua_isinteger (L, -1) ? (int64_t) lua_tointeger (L, -1) : (int64_t) lua_tonumber (L, -1);
   }
   lua_pop (L, 1);
   return v;
}

static double
num_field (lua_State *L, int t, const char *key, double dflt)
{
   double v = dflt;
   if (lua_getfield (L, t, key) == LUA_TNUMBER) {
      v = (double) lua_tonumber (L, -1);
   }
   lua_pop (L, 1);
   return v;
}

static bool
bool_field (lua_State *L, int t, const char *key, bool dflt)
{
   bool v = dflt;
   if (lua_getfield (L, t, key) == LUA_TBOOLEAN) {
      v = lua_toboolean (L, -1);
   }
   lua_pop (L, 1);
   return v;
}

static void
read_backoff (lua_State *L, int t, const char *key, fw_backoff_t *b)
{
   if (lua_getfield (L, t, key) == LUA_TTABLE) {
      int s = lua_gettop (L);
      b->max_attempts = (int) int_field (L, s, "max_attempts", b->max_attempts);
      b->initial_delay_ms = int_field (L, s, "initial_delay_ms", b->initial_delay_ms);
      b->max_delay_ms = int_field (L, s, "max_delay_ms", b->max_delay_ms);
      b->multiplier = num_field (L, s, "multiplier", b->multiplier);
      b->jitter = bool_field (L, s, "jitter", b->jitter);
   }
   lua_pop (L, 1);
}

/* The $nin list of a database-wide stream, as fw_owned_collections_each
 * gives the collections: those in the stream's database, each once. */
typedef struct {
   const char *database;
   bson_t names;
   uint32_t n;
   bool oom;
} exclusions_t;

static bool
exclude (void *ud, const char *database, const char *collection)
{
   exclusions_t *x = ud;
   char key[16];
   const char *k;
   bson_iter_t it;

   if (strcmp (database, x->database) != 0) {
      return true;
   }
   if (bson_iter_init (&it, &x->names)) {
      while (bson_iter_next (&it)) {
         if (strcmp (bson_iter_utf8 (&it, NULL), collection) == 0) {
            return true;
         }
      }
   }
   bson_uint32_to_string (x->n++, &k, key, sizeof key);
   x->oom = !BSON_APPEND_UTF8 (&x->names, k, collection);
   return !x->oom;
}

static void read_dlq (lua_State *L, int t, const char *field, fw_dlq_config_t *dlq);
static void read_owned (lua_State *L, int t, fw_stream_config_t *cfg);

/* Adds (as key k) the $match keeping out every collection flowwarden writes
 * in the stream's database: its own, and those of each spec of the array at
 * stack index specs (0: none), where other streams keep their DLQs. */
static bool
append_exclusions (lua_State *L, int t, int specs, fw_stream_config_t *cfg, const char *k,
                   fw_error_t *error)
{
   exclusions_t x = {cfg->database, BSON_INITIALIZER, 0, false};
   bool ok = fw_owned_collections_each (cfg, exclude, &x);

   for (lua_Integer i = 1; ok && specs && i <= (lua_Integer) lua_rawlen (L, specs); i++) {
      fw_stream_config_t other;
      memset (&other, 0, sizeof other);
      if (lua_rawgeti (L, specs, i) == LUA_TTABLE && !lua_rawequal (L, -1, t)) {
         other.database = dup_field (L, lua_gettop (L), "database");
         read_owned (L, lua_gettop (L), &other);
         ok = !other.database || fw_owned_collections_each (&other, exclude, &x);
      }
      lua_pop (L, 1);
      fw_stream_config_cleanup (&other);
   }
   if (ok) {
      bson_t stage, match, coll;
      BSON_APPEND_DOCUMENT_BEGIN (cfg->pipeline, k, &stage);
      BSON_APPEND_DOCUMENT_BEGIN (&stage, "$match", &match);
      BSON_APPEND_DOCUMENT_BEGIN (&match, "ns.coll", &coll);
      BSON_APPEND_ARRAY (&coll, "$nin", &x.names);
      bson_append_document_end (&match, &coll);
      bson_append_document_end (&stage, &match);
      ok = bson_append_document_end (cfg->pipeline, &stage);
   }
   bson_destroy (&x.names);
   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory building the pipeline",
                    cfg->name);
   }
   return ok;
}

/* Builds the stages that follow $changeStream: the operation_types filter,
 * flowwarden's own collections kept out of database-wide streams (their
 * writes would otherwise feed back into the stream), then the user's. */
static bool
build_pipeline (lua_State *L, int t, int specs, fw_stream_config_t *cfg, fw_error_t *error)
{
   bson_t stage, match, in, arr;
   uint32_t n = 0;
   char key[16];
   const char *k;

   cfg->pipeline = bson_new ();
   if (lua_getfield (L, t, "operation_types") == LUA_TTABLE && lua_rawlen (L, -1) > 0) {
      bson_uint32_to_string (n++, &k, key, sizeof key);
      BSON_APPEND_DOCUMENT_BEGIN (cfg->pipeline, k, &stage);
      BSON_APPEND_DOCUMENT_BEGIN (&stage, "$match", &match);
      BSON_APPEND_DOCUMENT_BEGIN (&match, "operationType", &in);
      BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
      for (lua_Integer i = 1; i <= (lua_Integer) lua_rawlen (L, -1); i++) {
         char ik[16];
         const char *ikp;
         lua_rawgeti (L, -1, i);
         bson_uint32_to_string ((uint32_t) (i - 1), &ikp, ik, sizeof ik);
         BSON_APPEND_UTF8 (&arr, ikp, lua_tostring (L, -1));
         lua_pop (L, 1);
      }
      bson_append_array_end (&in, &arr);
      bson_append_document_end (&match, &in);
      bson_append_document_end (&stage, &match);
      bson_append_document_end (cfg->pipeline, &stage);
   }
   lua_pop (L, 1);

   if (!cfg->collection) {
      bson_uint32_to_string (n++, &k, key, sizeof key);
      if (!append_exclusions (L, t, specs, cfg, k, error)) {
         return false;
      }
   }

   if (lua_getfield (L, t, "pipeline") == LUA_TTABLE) {
      for (lua_Integer i = 1; i <= (lua_Integer) lua_rawlen (L, -1); i++) {
         bson_t user;
         char path[32];
         bool ok;
         bson_init (&user);
         lua_rawgeti (L, -1, i);
         snprintf (path, sizeof path, "pipeline[%d]", (int) i);
         ok = fw_bson_lua_to_bson (L, lua_gettop (L), path, &user, error);
         lua_pop (L, 1);
         if (!ok) {
            char why[FW_ERROR_MESSAGE_MAX];
            snprintf (why, sizeof why, "%s", error ? error->message : "");
            fw_error_set (error, FW_ERROR_INVALID, "%s: stream \"%s\": %s",
                          cfg->declared_at ? cfg->declared_at : "?", cfg->name, why);
            bson_destroy (&user);
            lua_pop (L, 1);
            return false;
         }
         bson_uint32_to_string (n++, &k, key, sizeof key);
         BSON_APPEND_DOCUMENT (cfg->pipeline, k, &user);
         bson_destroy (&user);
      }
   }
   lua_pop (L, 1);
   return true;
}

static void
read_dlq (lua_State *L, int t, const char *field, fw_dlq_config_t *dlq)
{
   if (lua_getfield (L, t, field) == LUA_TTABLE) {
      int s = lua_gettop (L);
      dlq->enabled = bool_field (L, s, "enabled", true);
      dlq->collection = dup_field (L, s, "collection");
      dlq->connection = dup_field (L, s, "connection");
      dlq->database = dup_field (L, s, "database");
      dlq->ttl_days = (int) int_field (L, s, "ttl_days", 30);
      dlq->include_original_document = bool_field (L, s, "include_original_document", true);
      dlq->include_stack_trace = bool_field (L, s, "include_stack_trace", true);
      dlq->sequenced = bool_field (L, s, "sequenced", false);
      dlq->max_sequences = int_field (L, s, "max_sequences", 1024);
      dlq->max_sequence_size = int_field (L, s, "max_sequence_size", 1024);
      lua_getfield (L, s, "store");
      dlq->memory = lua_type (L, -1) == LUA_TSTRING && strcmp (lua_tostring (L, -1), "memory") == 0;
      lua_pop (L, 1);
      if (lua_getfield (L, s, "write_concern") == LUA_TNUMBER) {
         dlq->write_concern_w = (int) lua_tointeger (L, -1);
      } else if (lua_isstring (L, -1)) {
         dlq->write_concern_tag = strdup (lua_tostring (L, -1));
      } else {
         dlq->write_concern_tag = strdup ("majority");
      }
      lua_pop (L, 1);
      if (!dlq->collection) {
         dlq->collection = strdup ("_fw_dlq");
      }
   }
   lua_pop (L, 1);
}

/* What decides the collections flowwarden writes for a stream
 * (owned_collections.h) besides its database: its DLQs. */
static void
read_owned (lua_State *L, int t, fw_stream_config_t *cfg)
{
   read_dlq (L, t, "dlq", &cfg->dlq);
   read_dlq (L, t, "dlq_fallback", &cfg->dlq_fallback);
}

/* How the stream's work is held and cut: ha (leader, shared), partitions
 * (issue 31) and on_batch's batches (issue 30), from spec table t. */
static void
read_units (lua_State *L, int t, fw_stream_config_t *cfg)
{
   cfg->ha_lease_ms = 10000;
   if (lua_getfield (L, t, "ha") == LUA_TTABLE) {
      int s = lua_gettop (L);
      char *mode = dup_field (L, s, "mode");
      cfg->ha_shared = mode && strcmp (mode, "shared") == 0;
      cfg->ha_leader = (mode && strcmp (mode, "leader") == 0) || cfg->ha_shared;
      cfg->ha_lease_ms = int_field (L, s, "lease_ms", 10000);
      free (mode);
   }
   lua_pop (L, 1);
   cfg->partitions = (int) int_field (L, t, "partitions", 0);
   cfg->partition = (int) int_field (L, t, "partition", 0);
   if (lua_getfield (L, t, "batch") == LUA_TTABLE) {
      cfg->batch_max_events = (int) int_field (L, lua_gettop (L), "max_events", 500);
      cfg->batch_max_wait_ms = int_field (L, lua_gettop (L), "max_wait_ms", 20);
   }
   lua_pop (L, 1);
}

/* The checkpoint table (its defaults without one). */
static void
read_checkpoint (lua_State *L, int t, fw_stream_config_t *cfg)
{
   cfg->save_every = 1;
   cfg->save_interval_ms = 5000;
   cfg->idle_heartbeat_ms = 300000;
   cfg->max_unsaved_ms = 100;
   if (lua_getfield (L, t, "checkpoint") == LUA_TTABLE) {
      int s = lua_gettop (L);
      char *start = dup_field (L, s, "start_position");
      char *lost = dup_field (L, s, "on_history_lost");
      char *mode = dup_field (L, s, "mode");
      cfg->save_every = (int) int_field (L, s, "save_every", 1);
      cfg->save_interval_ms = int_field (L, s, "save_interval_ms", 5000);
      cfg->idle_heartbeat_ms = int_field (L, s, "idle_heartbeat_ms", 300000);
      cfg->max_unsaved_ms = int_field (L, s, "max_unsaved_ms", 100);
      cfg->start_latest = start && strcmp (start, "latest") == 0;
      cfg->snapshot.at_start = start && strcmp (start, "snapshot") == 0;
      cfg->resume_from_now = lost && strcmp (lost, "resume_from_now") == 0;
      cfg->start_at = (uint64_t) int_field (L, s, "start_at", 0);
      cfg->checkpoint_sync = mode && strcmp (mode, "sync") == 0;
      free (start);
      free (lost);
      free (mode);
   }
   lua_pop (L, 1);
}

bool
fw_stream_config_read (lua_State *L, int idx, int specs, fw_stream_config_t *cfg, fw_error_t *error)
{
   int t = lua_absindex (L, idx);
   int top = lua_gettop (L);

   specs = specs ? lua_absindex (L, specs) : 0;
   memset (cfg, 0, sizeof *cfg);
   cfg->name = dup_field (L, t, "name");
   cfg->declared_at = dup_field (L, t, "declared_at");
   cfg->database = dup_field (L, t, "database");
   cfg->collection = dup_field (L, t, "collection");
   cfg->full_document = dup_field (L, t, "full_document");
   cfg->full_document_before_change = dup_field (L, t, "full_document_before_change");
   if (!cfg->name || !cfg->database) {
      fw_error_set (error, FW_ERROR_INVALID, "stream spec lacks a name or a database");
      return false;
   }

   cfg->split_large_events = bool_field (L, t, "split_large_events", true);
   {
      char *oversize = dup_field (L, t, "oversize");
      cfg->oversize_skip = oversize && strcmp (oversize, "skip") == 0;
      free (oversize);
   }
   cfg->oversize_threshold = int_field (L, t, "oversize_threshold_bytes",
                                        16 * 1024 * 1024 - 64 * 1024);

   cfg->exactly_once = bool_field (L, t, "exactly_once", false);
   cfg->exactly_once_pg = dup_field (L, t, "exactly_once_pg");
   if (cfg->exactly_once_pg) {
      cfg->exactly_once = false; /* the PostgreSQL sink's, not MongoDB's transactions */
   }
   cfg->exactly_once_connection = cfg->exactly_once ? dup_field (L, t, "exactly_once_connection")
                                                    : NULL;
   read_checkpoint (L, t, cfg);

   fw_stream_config_read_snapshot (L, t, cfg);

   cfg->restart = (fw_backoff_t){0, 1000, 60000, 2.0, false};
   read_backoff (L, t, "restart", &cfg->restart);
   cfg->retry = (fw_backoff_t){1, 500, 30000, 2.0, true};
   read_backoff (L, t, "retry", &cfg->retry);
   cfg->retry_deferred = false;
   if (lua_getfield (L, t, "retry") == LUA_TTABLE) {
      char *mode = dup_field (L, lua_gettop (L), "mode");
      cfg->retry_deferred = mode && strcmp (mode, "deferred") == 0;
      free (mode);
   }
   lua_pop (L, 1);
   read_owned (L, t, cfg);
   cfg->lanes = (int) int_field (L, t, "lanes", 1);
   if (cfg->lanes < 1 || cfg->lanes > 64) {
      cfg->lanes = 1;
   }
   cfg->timeout_ms = int_field (L, t, "timeout_ms", 30000);
   cfg->memory_limit = (size_t) int_field (L, t, "memory_limit_bytes", 256 * 1024 * 1024);
   cfg->state_max_bytes = 64 * 1024 * 1024;
   if (lua_getfield (L, t, "state") == LUA_TTABLE) {
      cfg->state_max_bytes = (size_t) int_field (L, lua_gettop (L), "max_bytes", 64 * 1024 * 1024);
   }
   lua_pop (L, 1);

   read_units (L, t, cfg);
   if (!fw_outage_config_read (L, t, cfg, error)) {
      return false;
   }
   if (!build_pipeline (L, t, specs, cfg, error)) {
      return false;
   }
   BSON_ASSERT (lua_gettop (L) == top);
   return true;
}

void
fw_stream_config_cleanup (fw_stream_config_t *cfg)
{
   if (!cfg) {
      return;
   }
   free (cfg->name);
   free (cfg->declared_at);
   free (cfg->database);
   free (cfg->collection);
   free (cfg->full_document);
   free (cfg->full_document_before_change);
   free (cfg->exactly_once_pg);
   free (cfg->exactly_once_connection);
   free (cfg->dlq.collection);
   free (cfg->dlq.write_concern_tag);
   free (cfg->dlq.connection);
   free (cfg->dlq.database);
   free (cfg->dlq_fallback.collection);
   free (cfg->dlq_fallback.write_concern_tag);
   free (cfg->dlq_fallback.connection);
   free (cfg->dlq_fallback.database);
   bson_destroy (cfg->pipeline);
   fw_circuit_config_cleanup (&cfg->circuit);
   memset (cfg, 0, sizeof *cfg);
}
