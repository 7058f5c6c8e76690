/*
 * stream_reload.c - a reload's side of a stream worker: whether a new
 * program reads the same change stream, handing it over (pending), and the
 * swap at an attempt boundary (handlers, policies, Lua state, lane
 * programs); and fw.state's store, which outlives every swap.
 *
 * Called on the stream's thread (fw_stream_reload_apply, the attach) except
 * replace_program, same_source and is_named (the reload's thread, under
 * pending_mu) and take_state (the reload's thread, the worker not started).
 */
#include <string.h>

#include <lua.h>
#include <lauxlib.h>
#include "flowwarden/log.h"
#include "flowwarden/state_lua.h"
#include "runtime/stream/stream_worker-private.h"

void
fw_stream_worker_take_state (fw_stream_worker_t *w, fw_stream_worker_t *from)
{
   fw_state_store_t *mine = w->state;

   w->state = from->state;
   from->state = mine;
   fw_lua_state_attach (fw_lua_host_state (from->host), from->state);
   for (int i = 0; i < from->n_lane_w; i++) {
      from->lane_w[i]->state = from->state;
      fw_lua_state_attach (fw_lua_host_state (from->lane_w[i]->host), from->state);
   }
   fw_stream_state_attach (w);
}

static bool
same_string (const char *a, const char *b)
{
   return (!a && !b) || (a && b && strcmp (a, b) == 0);
}

/* Both read w->cfg on the reload's thread while w's thread may swap it in
 * fw_stream_reload_apply (a previous reload's program): under pending_mu. */
bool
fw_stream_worker_same_source (fw_stream_worker_t *w, const fw_stream_worker_t *next)
{
   bool same;

   pthread_mutex_lock (&w->pending_mu);
   same = same_string (w->cfg.database, next->cfg.database) &&
          same_string (w->cfg.collection, next->cfg.collection) &&
          same_string (w->cfg.full_document, next->cfg.full_document) &&
          same_string (w->cfg.full_document_before_change,
                       next->cfg.full_document_before_change) &&
          bson_equal (w->cfg.pipeline, next->cfg.pipeline);
   pthread_mutex_unlock (&w->pending_mu);
   return same;
}

bool
fw_stream_worker_is_named (fw_stream_worker_t *w, const char *name)
{
   bool same;

   pthread_mutex_lock (&w->pending_mu);
   same = strcmp (w->cfg.name, name) == 0;
   pthread_mutex_unlock (&w->pending_mu);
   return same;
}

void
fw_stream_worker_replace_program (fw_stream_worker_t *w, fw_stream_worker_t *next)
{
   fw_stream_worker_t *dropped;

   pthread_mutex_lock (&w->pending_mu);
   dropped = w->pending;
   w->pending = next;
   __atomic_store_n (&w->has_pending, 1, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&w->pending_mu);
   fw_stream_worker_destroy (dropped);
}

#define SWAP(a, b)                 \
   do {                            \
      __typeof__ (a) swap_tmp = a; \
      a = b;                       \
      b = swap_tmp;                \
   } while (0)

static bool
same_dlq (const fw_dlq_config_t *a, const fw_dlq_config_t *b)
{
   return a->enabled == b->enabled && same_string (a->collection, b->collection) &&
          same_string (a->connection, b->connection) && same_string (a->database, b->database) &&
          same_string (a->write_concern_tag, b->write_concern_tag) &&
          a->write_concern_w == b->write_concern_w && a->memory == b->memory;
}

bool
fw_stream_reload_apply (fw_stream_worker_t *w)
{
   fw_stream_worker_t *next;

   /* With lanes running, the lanes' boundary (stream_lanes.c) applies it
    * after the lanes drained, for all of them at once. */
   if (!__atomic_load_n (&w->has_pending, __ATOMIC_ACQUIRE) || w->lanes) {
      return false;
   }
   pthread_mutex_lock (&w->pending_mu);
   next = w->pending;
   w->pending = NULL;
   __atomic_store_n (&w->has_pending, 0, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&w->pending_mu);
   if (!next) {
      return false;
   }
   if (!same_dlq (&w->cfg.dlq, &next->cfg.dlq) ||
       !same_dlq (&w->cfg.dlq_fallback, &next->cfg.dlq_fallback)) {
      fw_dlq_store_destroy (w->dlq); /* reopened on first use with the new settings */
      w->dlq = NULL;
   }
   SWAP (w->host, next->host);
   pthread_mutex_lock (&w->pending_mu); /* see fw_stream_worker_same_source */
   SWAP (w->cfg, next->cfg);
   pthread_mutex_unlock (&w->pending_mu);
   for (int i = 0; i < H_COUNT; i++) {
      SWAP (w->handler_ref[i], next->handler_ref[i]);
   }
   SWAP (w->spec_ref, next->spec_ref);
   /* The lanes are stopped: their programs go with the rest (the old ones,
    * folded into w's counts, are destroyed with next). */
   fw_stream_fold_lane_stats (w);
   SWAP (w->lane_w, next->lane_w);
   SWAP (w->n_lane_w, next->n_lane_w);
   /* The event cache lived in the old state, which goes away with next. */
   w->dispatch.cache_ref = LUA_NOREF;
   w->dispatch.cache_slots = 0;
   w->dispatch.stream_name = w->cfg.name;
   w->dispatch.dlq_enabled = w->cfg.dlq.enabled || w->cfg.dlq_fallback.enabled;
   w->reprocess_at_ms = 0; /* dlq.reprocess as the new script says */
   fw_stream_state_attach (w); /* fw.state survives the reload: the new state gets our store */
   fw_stream_worker_destroy (next);
   if (w->metrics) {
      fw_stream_metrics_set_script_version (w->metrics, fw_lua_host_version (w->host));
   }
   fw_log (FW_LOG_INFO, w->cfg.name, "now running script version %s",
           fw_lua_host_version (w->host));
   return true;
}

