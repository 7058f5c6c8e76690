/*
 * event_park.c - the live side of a sequenced DLQ (issue 14; the protocol
 * is in dlq_sequence.h): an event's sequence key, the stream's open
 * sequences in memory, and the index requests that open a sequence or park
 * an event behind it, made through the sequence methods of the
 * dispatcher's DLQ store (dlq_store.h: MongoDB or in memory).
 * fw_event_dispatch drives it; it calls nothing above.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/dispatcher-private.h"
#include "runtime/dispatch/event_park-private.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/dlq/dlq_store.h"

/* How often a stream with open sequences reads them again, so sequences a
 * separate `flowwarden dlq replay` closed leave its set (and its status). */
#define REFRESH_MS 2000

void
fw_park_end (fw_dispatcher_t *d)
{
   bson_free (d->park.key);
   d->park.key = NULL;
   d->park.key_done = false;
   d->park.index = -1;
}

/* The stream's DLQ store, where its sequences live beside its entries;
 * opened if the stream has not opened it yet or a reload closed it. NULL
 * with error filled when it cannot be opened (a stop came first, or memory
 * ran out): the caller retries. */
static fw_dlq_store_t *
park_store (fw_dispatcher_t *d, fw_error_t *error)
{
   if (!d->dlq && !fw_dispatcher_open_dlq (d)) {
      fw_error_set (error, FW_ERROR_MONGO, "the DLQ of stream \"%s\" cannot be opened",
                    d->prog.cfg.name);
      return NULL;
   }
   return d->dlq;
}

/* Reads the open sequences; false with error filled when the backend fails. */
static bool
load_once (fw_dispatcher_t *d, fw_error_t *error)
{
   fw_dlq_store_t *store;
   bool ok;

   if (!d->park.open_seqs && !(d->park.open_seqs = fw_dlq_sequences_new ())) {
      fw_error_set (error, FW_ERROR_NOMEM, "not enough memory for the open sequences");
      return false;
   }
   ok = (store = park_store (d, error)) &&
        store->seq_load (store, d->prog.cfg.name, d->park.open_seqs, error);
   d->park.loaded_ms = fw_mono_ms ();
   return ok;
}

bool
fw_dispatcher_load_sequences (fw_dispatcher_t *d)
{
   fw_error_t err;

   if (!fw_park_enabled (d)) {
      return true;
   }
   for (int tries = 1; !load_once (d, &err); tries++) {
      int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.restart, tries,
                                           fw_backoff_random (&d->rng));
      fw_log (FW_LOG_ERROR, d->prog.cfg.name, "%s; retrying in %lld ms", err.message,
              (long long) delay);
      if (d->clock.wait_ms (d->clock.ud, delay)) {
         return false;
      }
   }
   if (fw_dlq_sequences_count (d->park.open_seqs)) {
      fw_log (FW_LOG_INFO, d->prog.cfg.name,
              "%zu open DLQ sequence(s): later events of their keys are parked behind them",
              fw_dlq_sequences_count (d->park.open_seqs));
   }
   return true;
}

bool
fw_park_check_needed (fw_dispatcher_t *d, const fw_event_t *ev)
{
   if (!fw_park_enabled (d)) {
      return false;
   }
   if (!d->park.open_seqs) {
      /* Turned on by a reload: read them once now. */
      fw_error_t err;
      if (!load_once (d, &err)) {
         fw_log (FW_LOG_WARN, d->prog.cfg.name, "%s (reading them again in %d ms)", err.message,
                 REFRESH_MS);
      }
   }
   if (fw_dlq_sequences_count (d->park.open_seqs) == 0) {
      return false;
   }
   /* Events with no key (drop, rename, ...) are never sequenced. */
   if (ev->op == FW_OP_OTHER) {
      return false;
   }
   if (fw_mono_ms () - d->park.loaded_ms >= REFRESH_MS) {
      fw_error_t err;
      if (!load_once (d, &err)) {
         fw_log (FW_LOG_WARN, d->prog.cfg.name, "%s (keeping the open sequences known)",
                 err.message);
      }
   }
   return fw_dlq_sequences_count (d->park.open_seqs) > 0;
}

/* The sequence_key function's result (on top of the stack) as an id. */
static char *
id_of_lua (lua_State *L, fw_error_t *error)
{
   bson_t doc = BSON_INITIALIZER;
   bson_iter_t it;
   char *id = NULL;

   if (fw_bson_lua_append (L, -1, &doc, "k", 1, "dlq.sequence_key's result", error) &&
       bson_iter_init_find (&it, &doc, "k")) {
      if (!(id = fw_dlq_sequence_id (bson_iter_value (&it)))) {
         fw_error_set (error, FW_ERROR_INVALID, "dlq.sequence_key's result has no JSON form");
      }
   }
   bson_destroy (&doc);
   return id;
}

/* The default sequence id: { _id: documentKey._id } (fw_event_order_key),
 * which is the documentKey itself on an unsharded collection, so sequences
 * opened before shard keys were left out keep their ids. NULL: none. */
static char *
default_key (const fw_event_t *ev)
{
   bson_t key;
   bson_value_t v;
   char *id;

   if (!fw_event_order_key (ev, &key)) {
      return NULL;
   }
   v.value_type = BSON_TYPE_DOCUMENT;
   v.value.v_doc.data = (uint8_t *) bson_get_data (&key);
   v.value.v_doc.data_len = key.len;
   id = fw_dlq_sequence_id (&v);
   bson_destroy (&key);
   return id;
}

fw_park_key_t
fw_park_key (fw_dispatcher_t *d, const fw_event_t *ev, fw_lua_stop_t *stop)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   fw_error_t err;
   bool custom;
   int top;

   if (d->park.key_done) {
      return d->park.key ? FW_PARK_KEY_OK : FW_PARK_KEY_NONE;
   }
   if (ev->op == FW_OP_OTHER) {
      d->park.key_done = true;
      return FW_PARK_KEY_NONE;
   }
   /* Back to the top it had: a dlq table without a sequence_key function
    * pushed three values, not two, and each event behind an open sequence
    * left one behind until parked events ran past the stack's end. */
   top = lua_gettop (L);
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   custom = lua_getfield (L, -1, "dlq") == LUA_TTABLE &&
            lua_getfield (L, -1, "sequence_key") == LUA_TFUNCTION;
   lua_settop (L, top);
   if (!custom) {
      d->park.key_done = true;
      d->park.key = default_key (ev);
      return d->park.key ? FW_PARK_KEY_OK : FW_PARK_KEY_NONE;
   }

   /* flowwarden.dispatch.sequence_key(spec, ctx), with the handler's budget. */
   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   lua_getfield (L, -1, "flowwarden.dispatch");
   lua_getfield (L, -1, "sequence_key");
   lua_replace (L, -3);
   lua_pop (L, 1);
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   if (!fw_lua_host_call_with (d->prog.host, 1, fw_event_ctx_push, &d->dispatch, 1,
                               d->prog.cfg.timeout_ms, stop)) {
      return FW_PARK_KEY_FAILED; /* the failure table is on the stack */
   }
   d->park.key = id_of_lua (L, &err);
   lua_pop (L, 1);
   if (!d->park.key) {
      /* A failure the policy classifies, as if the function had raised it. */
      lua_createtable (L, 0, 2);
      lua_pushfstring (L, "dlq.sequence_key returned a value that cannot be a key: %s",
                       err.message);
      lua_setfield (L, -2, "value");
      lua_pushliteral (L, "");
      lua_setfield (L, -2, "traceback");
      *stop = FW_LUA_STOP_NONE;
      return FW_PARK_KEY_FAILED;
   }
   d->park.key_done = true;
   return FW_PARK_KEY_OK;
}

bool
fw_park_is_open (const fw_dispatcher_t *d)
{
   return d->park.key && fw_dlq_sequences_has (d->park.open_seqs, d->park.key);
}

/* One index request; the verdict in *out. False when the backend fails. */
static bool
take_once (fw_dispatcher_t *d, bool open, fw_park_take_t *out, fw_error_t *error)
{
   fw_dlq_store_t *store = park_store (d, error);
   fw_seq_take_t taken = FW_SEQ_CLOSED;
   int64_t size;

   if (!store) {
      return false;
   }
   if (!open) {
      /* seed 004's max_sequence_size: counted, not kept, so it is exact. */
      if (!store->seq_size (store, d->prog.cfg.name, d->park.key, &size, error)) {
         return false;
      }
      if (size >= d->prog.cfg.dlq.max_sequence_size) {
         snprintf (d->out.failure, sizeof d->out.failure,
                   "dlq overflow: sequence %.300s holds %lld entries (max_sequence_size %lld); "
                   "the event is not checkpointed: replay or discard the sequence's entries "
                   "(flowwarden dlq replay --sequence ...), then restart",
                   d->park.key, (long long) size, (long long) d->prog.cfg.dlq.max_sequence_size);
         *out = FW_PARK_OVERFLOW;
         return true;
      }
   }
   if (!store->seq_take (store, d->prog.cfg.name, d->park.key, open, &d->park.index, &taken,
                         error)) {
      return false;
   }
   *out = taken == FW_SEQ_TAKEN ? FW_PARK_TAKEN : FW_PARK_CLOSED;
   return true;
}

fw_park_take_t
fw_park_take (fw_dispatcher_t *d, bool open)
{
   fw_park_take_t out = FW_PARK_CLOSED;
   fw_error_t err;

   d->park.index = -1;
   if (!d->park.open_seqs && !(d->park.open_seqs = fw_dlq_sequences_new ())) {
      snprintf (d->out.failure, sizeof d->out.failure,
                "not enough memory for the open DLQ sequences");
      return FW_PARK_OVERFLOW;
   }
   if (open && !fw_dlq_sequences_has (d->park.open_seqs, d->park.key) &&
       fw_dlq_sequences_count (d->park.open_seqs) >= (size_t) d->prog.cfg.dlq.max_sequences) {
      /* Sequences a separate replay closed may still be in the set. */
      if (!load_once (d, &err) ||
          fw_dlq_sequences_count (d->park.open_seqs) >= (size_t) d->prog.cfg.dlq.max_sequences) {
         snprintf (d->out.failure, sizeof d->out.failure,
                   "dlq overflow: %zu open sequences (max_sequences %lld): the event opening "
                   "sequence %.300s is not checkpointed: replay or discard open sequences "
                   "(flowwarden dlq replay), then restart",
                   fw_dlq_sequences_count (d->park.open_seqs),
                   (long long) d->prog.cfg.dlq.max_sequences, d->park.key);
         return FW_PARK_OVERFLOW;
      }
   }
   for (int tries = 1; !take_once (d, open, &out, &err); tries++) {
      int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.restart, tries,
                                           fw_backoff_random (&d->rng));
      fw_log (FW_LOG_ERROR, d->prog.cfg.name,
              "%s (try %d); the stream holds this event and tries "
              "again in %lld ms",
              err.message, tries, (long long) delay);
      if (d->clock.wait_ms (d->clock.ud, delay)) {
         return FW_PARK_STOPPED;
      }
   }
   if (out == FW_PARK_CLOSED) {
      /* A replay closed it: the event is handled as any other. */
      fw_dlq_sequences_remove (d->park.open_seqs, d->park.key);
   }
   return out;
}

void
fw_park_settle (fw_dispatcher_t *d)
{
   fw_error_t err;
   fw_dlq_store_t *store;

   if (d->park.index < 0) {
      return;
   }
   /* Best effort: a settle that fails leaves inflight > 0, which only keeps
    * replays from closing the sequence until the stream's next start. */
   if (!(store = park_store (d, &err)) ||
       !store->seq_settle (store, d->prog.cfg.name, d->park.key, &err)) {
      fw_log (FW_LOG_WARN, d->prog.cfg.name,
              "%s: the sequence cannot be closed by a replay until this stream restarts",
              err.message);
   }
   if (!fw_dlq_sequences_add (d->park.open_seqs, d->park.key)) {
      fw_log (FW_LOG_WARN, d->prog.cfg.name, "not enough memory to remember open sequence %.300s",
              d->park.key);
   }
}
