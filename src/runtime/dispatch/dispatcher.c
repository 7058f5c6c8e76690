/*
 * dispatcher.c - a dispatcher's life: its program read from the script's
 * stream spec (settings, handler refs), its Lua state's fw.state and
 * fw.mongo, what its stream gives it (client, metrics, lease, whether a
 * reload waits), a reload's switch of programs, and its counts. The
 * event's way through it is event_dispatch.c's.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/batch_lua.h"
#include "lua_api/lua_core.h"
#include "lua_api/metrics_lua.h"
#include "lua_api/state_lua.h"
#include "runtime/dispatch/batch-private.h"
#include "runtime/dispatch/dispatcher-private.h"
#include "runtime/dispatch/event_park-private.h"
#include "runtime/dispatch/event_txn.h"
#include "runtime/dispatch/outage-private.h"
#include "runtime/dispatch/replay_hook-private.h"

static const char *const handler_keys[H_COUNT] = {"insert", "update", "replace", "delete",
                                                  "change", "batch",  "snapshot"};

typedef struct {
   fw_program_t *prog;
   int index;
   fw_error_t *error;
   bool ok;
} read_args_t;

/* Protected: copies the spec into C and keeps refs to its functions. */
static int
pread_spec (lua_State *L)
{
   read_args_t *a = lua_touserdata (L, 1);
   fw_program_t *p = a->prog;
   int spec, specs;

   fw_lua_host_push_specs (p->host);
   specs = lua_gettop (L);
   fw_lua_host_push_spec (p->host, a->index);
   spec = lua_gettop (L);
   if (!fw_stream_config_read (L, spec, specs, &p->cfg, a->error)) {
      return 0;
   }
   if (lua_getfield (L, spec, "handlers") == LUA_TTABLE) {
      for (int i = 0; i < H_COUNT; i++) {
         if (lua_getfield (L, -1, handler_keys[i]) == LUA_TFUNCTION) {
            p->handler_ref[i] = luaL_ref (L, LUA_REGISTRYINDEX);
         } else {
            lua_pop (L, 1);
         }
      }
   }
   lua_pop (L, 1);
   lua_pushvalue (L, spec);
   p->spec_ref = luaL_ref (L, LUA_REGISTRYINDEX);

   /* Loaded now, so that the failure path (event_dispatch.c) finds it in
    * package.loaded without a require that could fail mid-event. */
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.dispatch");
   lua_call (L, 1, 1);
   luaL_checktype (L, -1, LUA_TTABLE);
   fw_event_ctx_open (L);
   fw_batch_lua_open (L);
   a->ok = true;
   return 0;
}

/* Reads stream index's spec of p->host into p. */
static bool
program_read (fw_program_t *p, int index, fw_error_t *error)
{
   lua_State *L = fw_lua_host_state (p->host);
   read_args_t a = {p, index, error, false};

   for (int i = 0; i < H_COUNT; i++) {
      p->handler_ref[i] = LUA_NOREF;
   }
   p->spec_ref = LUA_NOREF;
   lua_pushcfunction (L, pread_spec);
   lua_pushlightuserdata (L, &a);
   if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "cannot read stream %d: %s", index, lua_tostring (L, -1));
      lua_pop (L, 1);
   }
   return a.ok;
}

/* fw.mongo asks the dispatcher for the client of a connection. */
static mongoc_client_t *
mongo_client_for (void *ud, const char *name, fw_error_t *error)
{
   fw_dispatcher_t *d = ud;
   return fw_connection_clients_get (d->clients, name, error);
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
   return fw_shutdown_wait_ms (((fw_dispatcher_t *) ud)->shutdown, ms);
}

/* The ctx's settings that follow the program. */
static void
program_changed (fw_dispatcher_t *d)
{
   d->dispatch.cache_ref = LUA_NOREF; /* the cache lived in the old Lua state */
   d->dispatch.cache_slots = 0;
   fw_batch_state_forget (d->batch); /* so did on_batch's */
   d->dispatch.stream_name = d->prog.cfg.name;
   d->dispatch.dlq_enabled = d->prog.cfg.dlq.enabled || d->prog.cfg.dlq_fallback.enabled;
}

fw_dispatcher_t *
fw_dispatcher_new (fw_lua_host_t *host, int index, fw_connections_t *conns, fw_shutdown_t *shutdown,
                   fw_error_t *error)
{
   fw_dispatcher_t *d = calloc (1, sizeof *d);

   if (!d) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      fw_lua_host_destroy (host);
      return NULL;
   }
   d->prog.host = host;
   d->prog.L = fw_lua_host_state (host);
   d->shutdown = shutdown;
   d->clock = (fw_stream_clock_t){real_now_ms, real_wait_ms, d, false};
   d->park.index = -1;
   d->rebuild.index = index;
   if (!program_read (&d->prog, index, error)) {
      fw_dispatcher_destroy (d);
      return NULL;
   }
   program_changed (d);
   fw_lua_core_set_stream (fw_lua_host_state (host), d->prog.cfg.name);
   d->rng = (uint64_t) fw_now_ms () ^ ((uint64_t) (uintptr_t) d << 16) ^ (uint64_t) getpid ();
   fw_lua_host_set_memory_limit (host, d->prog.cfg.memory_limit);
   if (!(d->state.store = fw_state_store_new (d->prog.cfg.state_max_bytes)) ||
       !(d->clients = fw_connection_clients_new (conns)) || !fw_outage_init (d)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory creating a stream");
      fw_dispatcher_destroy (d);
      return NULL;
   }
   d->mongo.client_for = mongo_client_for;
   d->mongo.ud = d;
   fw_dispatcher_attach (d);
   return d;
}

void
fw_dispatcher_destroy (fw_dispatcher_t *d)
{
   if (!d) {
      return;
   }
   fw_stream_config_cleanup (&d->prog.cfg);
   fw_lua_host_destroy (d->prog.host);
   if (!d->state.shared) {
      fw_state_store_destroy (d->state.store);
   }
   fw_txn_release (d);
   fw_connection_clients_destroy (d->clients); /* the DLQ store: closed by fw_dispatcher_release */
   fw_dlq_sequences_destroy (d->park.open_seqs);
   bson_free (d->park.key);
   fw_outage_cleanup (d);
   fw_batch_state_free (d->batch);
   free (d);
}

static bool
same_string (const char *a, const char *b)
{
   return (!a && !b) || (a && b && strcmp (a, b) == 0);
}

static bool
same_dlq (const fw_dlq_config_t *a, const fw_dlq_config_t *b)
{
   return a->enabled == b->enabled && same_string (a->collection, b->collection) &&
          same_string (a->connection, b->connection) && same_string (a->database, b->database) &&
          same_string (a->write_concern_tag, b->write_concern_tag) &&
          a->write_concern_w == b->write_concern_w && a->memory == b->memory;
}

void
fw_dispatcher_take_program (fw_dispatcher_t *d, fw_dispatcher_t *from)
{
   fw_program_t mine = d->prog;

   if (!same_dlq (&d->prog.cfg.dlq, &from->prog.cfg.dlq) ||
       !same_dlq (&d->prog.cfg.dlq_fallback, &from->prog.cfg.dlq_fallback)) {
      fw_dlq_store_destroy (d->dlq); /* reopened on first use with the new settings */
      d->dlq = NULL;
   }
   d->prog = from->prog;
   from->prog = mine;
   d->rebuild.pending = d->rebuild.refilled = d->rebuild.rebuilt = false; /* a new state */
   program_changed (d);
   fw_outage_show_config (d);
   fw_dispatcher_attach (d); /* fw.state survives the reload: the new state gets our store */
   fw_metrics_lua_bind_stream (fw_lua_host_state (d->prog.host), d->metrics);
}

void
fw_dispatcher_share_state (fw_dispatcher_t *d, fw_state_store_t *store)
{
   if (!d->state.shared) {
      fw_state_store_destroy (d->state.store);
   }
   d->state.store = store;
   d->state.shared = true;
   fw_dispatcher_attach (d);
}

void
fw_dispatcher_swap_state (fw_dispatcher_t *d, fw_dispatcher_t *from)
{
   fw_state_store_t *mine = d->state.store;

   d->state.store = from->state.store;
   from->state.store = mine;
   fw_dispatcher_attach (d);
   fw_dispatcher_attach (from);
}

void
fw_dispatcher_attach (fw_dispatcher_t *d)
{
   lua_State *L = fw_lua_host_state (d->prog.host);

   fw_mongo_lua_attach (L, &d->mongo);
   fw_lua_state_attach (L, d->state.store);
   if (!d->state.shared) {
      fw_state_store_set_label (d->state.store, d->prog.cfg.name);
      fw_state_store_set_max_bytes (d->state.store, d->prog.cfg.state_max_bytes);
   }
}

void
fw_dispatcher_bind (fw_dispatcher_t *d, mongoc_client_t *client)
{
   d->client = client;
   if (client) {
      fw_mongo_lua_attach (fw_lua_host_state (d->prog.host), &d->mongo);
   }
}

mongoc_client_t *
fw_dispatcher_client_for (fw_dispatcher_t *d, const char *connection, fw_error_t *error)
{
   mongoc_client_t *client = connection ? fw_connection_clients_get (d->clients, connection, error)
                                        : d->client;

   if (!client && !connection) {
      fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\" has no client", d->prog.cfg.name);
   }
   return client;
}

bool
fw_dispatcher_dlq_pending (fw_dispatcher_t *d, int64_t *pending, int64_t *oldest_ms,
                           fw_error_t *error)
{
   const fw_dlq_config_t *dlq = &d->prog.cfg.dlq;
   fw_dlq_store_t *reader = NULL, *store = d->dlq;
   mongoc_client_t *client;
   bool ok;

   if (!store) {
      /* Closed (before its first use, or after a reload): a reader of its
       * collection. */
      if (!(client = fw_dispatcher_client_for (d, dlq->connection, error)) ||
          !(store = reader = fw_dlq_store_mongo_open (
               client, dlq->database ? dlq->database : d->prog.cfg.database, dlq->collection, NULL,
               error))) {
         return false;
      }
   }
   ok = store->pending (store, d->prog.cfg.name, pending, oldest_ms, error);
   fw_dlq_store_destroy (reader);
   return ok;
}

void
fw_dispatcher_release (fw_dispatcher_t *d)
{
   fw_dlq_store_destroy (d->dlq);
   d->dlq = NULL;
   /* Clients are thread-bound: given back on the thread that used them,
    * after fw.mongo let go of them (the detach closes its cursors). */
   if (!fw_lua_host_panicked (d->prog.host)) {
      fw_mongo_lua_attach (fw_lua_host_state (d->prog.host), NULL);
   }
   fw_txn_release (d); /* its session, before the client it came from */
   fw_connection_clients_release (d->clients);
   d->client = NULL;
}

void
fw_dispatcher_set_metrics (fw_dispatcher_t *d, fw_stream_metrics_t *metrics)
{
   d->metrics = metrics;
   fw_metrics_lua_bind_stream (fw_lua_host_state (d->prog.host), metrics);
   fw_outage_show_config (d);
}

void
fw_dispatcher_set_shutdown (fw_dispatcher_t *d, fw_shutdown_t *shutdown)
{
   d->shutdown = shutdown;
}

void
fw_dispatcher_set_lead (fw_dispatcher_t *d, fw_lease_t *lease, int64_t epoch)
{
   d->lead.lease = lease;
   d->lead.epoch = epoch;
}

void
fw_dispatcher_set_reload_waits (fw_dispatcher_t *d, bool (*fn) (void *ud), void *ud)
{
   d->reload_waits.fn = fn;
   d->reload_waits.ud = ud;
}

void
fw_dispatcher_set_outcome_sink (fw_dispatcher_t *d, fw_outcome_sink_fn fn, void *ud)
{
   d->sink.fn = fn;
   d->sink.ud = ud;
}

void
fw_dispatcher_report (fw_dispatcher_t *d, const fw_event_t *ev, const fw_outcome_t *o)
{
   if (d->sink.fn) {
      d->sink.fn (d->sink.ud, d->prog.cfg.name, ev, o);
   }
}

bool
fw_dispatcher_custom_key (const fw_dispatcher_t *d)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   int top = lua_gettop (L);
   bool custom;

   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   custom = lua_type (L, -1) == LUA_TTABLE && lua_getfield (L, -1, "dlq") == LUA_TTABLE &&
            lua_getfield (L, -1, "sequence_key") == LUA_TFUNCTION;
   lua_settop (L, top);
   return custom;
}

char *
fw_dispatcher_sequence_key (fw_dispatcher_t *d, const fw_event_t *ev)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   int top = lua_gettop (L);
   fw_lua_stop_t stop;
   char *id = NULL;

   fw_event_ctx_begin (L, &d->dispatch, ev);
   if (fw_park_key (d, ev, &stop) == FW_PARK_KEY_OK) {
      id = d->park.key;
      d->park.key = NULL;
   }
   lua_settop (L, top);
   fw_park_end (d);
   return id;
}
