/*
 * stream_program.c - a stream worker's program: the script's stream spec read
 * into C (settings, handler refs), its Lua state, fw.state store and
 * clients; making, attaching and destroying it. The lowest of the stream
 * files: stream_reload.c swaps programs, stream_lanes.c runs several,
 * stream_worker.c runs the thread; none of them is called from here.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "flowwarden/dlq_sequence.h"
#include "flowwarden/lua_core.h"
#include "flowwarden/mongo_lua.h"
#include "flowwarden/state_lua.h"
#include "runtime/stream/stream_worker-private.h"

static const char *const handler_keys[H_COUNT] = {"insert", "update", "replace", "delete",
                                                  "change"};

typedef struct {
   lua_State *L;
   fw_stream_worker_t *w;
   int index;
   fw_error_t *error;
   bool ok;
} read_args_t;

/* Protected: copies the spec into C and keeps refs to its functions. */
static int
pread_spec (lua_State *L)
{
   read_args_t *a = lua_touserdata (L, 1);
   int spec, specs;

   fw_lua_host_push_specs (a->w->host);
   specs = lua_gettop (L);
   fw_lua_host_push_spec (a->w->host, a->index);
   spec = lua_gettop (L);
   if (!fw_stream_config_read (L, spec, specs, &a->w->cfg, a->error)) {
      return 0;
   }
   if (lua_getfield (L, spec, "handlers") == LUA_TTABLE) {
      for (int i = 0; i < H_COUNT; i++) {
         if (lua_getfield (L, -1, handler_keys[i]) == LUA_TFUNCTION) {
            a->w->handler_ref[i] = luaL_ref (L, LUA_REGISTRYINDEX);
         } else {
            lua_pop (L, 1);
         }
      }
   }
   lua_pop (L, 1);
   lua_pushvalue (L, spec);
   a->w->spec_ref = luaL_ref (L, LUA_REGISTRYINDEX);

   /* Loaded now, so that the failure path (event_dispatch.c) finds it in
    * package.loaded without a require that could fail mid-event. */
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.dispatch");
   lua_call (L, 1, 1);
   luaL_checktype (L, -1, LUA_TTABLE);
   fw_event_ctx_open (L);
   a->ok = true;
   return 0;
}

/* fw.mongo asks the worker for the client of a connection. */
static mongoc_client_t *
mongo_client_for (void *ud, const char *name, fw_error_t *error)
{
   fw_stream_worker_t *w = ud;
   return fw_connection_clients_get (w->clients, name, error);
}

/* The real clock: the wall clock, and waits a shutdown ends early. */
static int64_t
real_now_ms (void *ud)
{
   (void) ud;
   return fw_now_ms ();
}

static bool
real_wait_ms (void *ud, int64_t ms)
{
   return fw_shutdown_wait_ms (((fw_stream_worker_t *) ud)->shutdown, ms);
}

fw_stream_worker_t *
fw_stream_worker_new (fw_lua_host_t *host, int index, mongoc_client_pool_t *pool,
                      fw_connections_t *conns, fw_error_t *error)
{
   fw_stream_worker_t *w = calloc (1, sizeof *w);
   lua_State *L = fw_lua_host_state (host);
   read_args_t a = {L, w, index, error, false};

   if (!w) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      fw_lua_host_destroy (host);
      return NULL;
   }
   w->host = host;
   w->pool = pool;
   w->index = index;
   w->conns = conns;
   fw_shutdown_init (&w->own_shutdown);
   pthread_mutex_init (&w->pending_mu, NULL);
   w->shutdown = &w->own_shutdown;
   w->clock = (fw_stream_clock_t){real_now_ms, real_wait_ms, w, false};
   for (int i = 0; i < H_COUNT; i++) {
      w->handler_ref[i] = LUA_NOREF;
   }
   w->spec_ref = LUA_NOREF;
   w->seq_index = -1;
   w->dispatch.cache_ref = LUA_NOREF;
   lua_pushcfunction (L, pread_spec);
   lua_pushlightuserdata (L, &a);
   if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "cannot read stream %d: %s", index,
                    lua_tostring (L, -1));
      lua_pop (L, 1);
   }
   if (!a.ok) {
      fw_stream_worker_destroy (w);
      return NULL;
   }
   w->dispatch.stream_name = w->cfg.name;
   fw_lua_core_set_stream (L, w->cfg.name);
   w->dispatch.dlq_enabled = w->cfg.dlq.enabled || w->cfg.dlq_fallback.enabled;
   w->rng = (uint64_t) fw_now_ms () ^ ((uint64_t) (uintptr_t) w << 16) ^ (uint64_t) getpid ();
   fw_lua_host_set_memory_limit (host, w->cfg.memory_limit);
   if (!(w->state = fw_state_store_new (w->cfg.state_max_bytes)) ||
       !(w->clients = fw_connection_clients_new (conns))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory creating a stream");
      fw_stream_worker_destroy (w);
      return NULL;
   }
   w->mongo.client_for = mongo_client_for;
   w->mongo.ud = w;
   fw_stream_state_attach (w);
   return w;
}

/* Points w's Lua state at w's store (bound applied) and w's clients; and
 * each lane program's state at the same store (fw.state is the stream's). */
void
fw_stream_state_attach (fw_stream_worker_t *w)
{
   fw_mongo_lua_attach (fw_lua_host_state (w->host), &w->mongo);
   fw_lua_state_attach (fw_lua_host_state (w->host), w->state);
   fw_state_store_set_label (w->state, w->cfg.name);
   fw_state_store_set_max_bytes (w->state, w->cfg.state_max_bytes);
   for (int i = 0; i < w->n_lane_w; i++) {
      w->lane_w[i]->state = w->state;
      w->lane_w[i]->coord = w;
      fw_lua_state_attach (fw_lua_host_state (w->lane_w[i]->host), w->state);
   }
}

void
fw_stream_fold_lane_stats (fw_stream_worker_t *w)
{
   for (int i = 0; i < w->n_lane_w; i++) {
      fw_stream_stats_t *s = &w->lane_w[i]->stats;
      w->stats.handled += s->handled;
      w->stats.handler_errors += s->handler_errors;
      w->stats.retries += s->retries;
      w->stats.dead_lettered += s->dead_lettered;
      w->stats.skipped += s->skipped;
      w->stats.lost += s->lost;
      w->stats.parked += s->parked;
      memset (s, 0, sizeof *s);
   }
}

void
fw_stream_worker_join (fw_stream_worker_t *w)
{
   if (w->started && !w->joined) {
      pthread_join (w->thread, NULL);
      w->joined = true;
   }
}

void
fw_stream_worker_stats (const fw_stream_worker_t *w, fw_stream_stats_t *out)
{
   *out = w->stats;
}

void
fw_stream_worker_destroy (fw_stream_worker_t *w)
{
   if (!w) {
      return;
   }
   fw_stream_worker_join (w);
   fw_stream_worker_destroy (w->pending);
   fw_stream_config_cleanup (&w->cfg);
   fw_lua_host_destroy (w->host);
   for (int i = 0; i < w->n_lane_w; i++) {
      fw_stream_worker_destroy (w->lane_w[i]);
   }
   free (w->lane_w);
   if (!w->coord) {
      fw_state_store_destroy (w->state); /* a lane's is the stream's */
   }
   fw_connection_clients_destroy (w->clients);
   fw_dlq_sequences_destroy (w->open_seqs);
   bson_free (w->seq_key);
   pthread_mutex_destroy (&w->pending_mu);
   fw_shutdown_cleanup (&w->own_shutdown);
   free (w);
}
