/*
 * dispatcher-private.h - a dispatcher's state (fw_dispatcher_t), shared by
 * the files of dispatch/ that take an event through it (attempts, decision,
 * parking, transactions, a rebuilt state). Everything else goes through
 * runtime/dispatch/dispatcher.h and narrow headers: dispatcher_access-private.h
 * (flowwarden.testing's plugs, what the DLQ's replays change),
 * event_park-private.h (the sequenced DLQ's live side), outage-private.h
 * (breaker, rate limit), replay_hook-private.h (a dead letter replayed
 * through the dispatcher).
 */
#ifndef FLOWWARDEN_DISPATCHER_PRIVATE_H
#define FLOWWARDEN_DISPATCHER_PRIVATE_H

#include <lauxlib.h>

#include "lua_api/event_ctx.h"
#include "lua_api/mongo_lua.h"
#include "runtime/dispatch/circuit.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/dispatcher_access-private.h"
#include "runtime/dispatch/outage-private.h"
#include "runtime/dispatch/rate_limit.h"
#include "runtime/dispatch/state_rebuild.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/dlq/dlq_store.h"

enum { H_INSERT, H_UPDATE, H_REPLACE, H_DELETE, H_CHANGE, H_BATCH, H_SNAPSHOT, H_COUNT };

/* The texts an event's outcome (fw_outcome_t) points to, kept by its
 * dispatcher until the next event. */
typedef struct {
   char entry_id[128];
   char type[128];
   char message[1024];
   char failure[1200];         /* why the stream stops, with FW_OUTCOME_FAILED */
   char where[256];            /* the failing line */
   char sequence[304];         /* the DLQ sequence parked behind or opened */
   fw_outcome_detail_t detail; /* what its log line needs, pointing to the above */
} fw_outcome_text_t;

/* A sequenced DLQ's live side (event_park.c): the stream's open sequences
 * and the current event's place in them. */
typedef struct {
   fw_dlq_sequences_t *open_seqs; /* the stream's open sequences; NULL until loaded */
   int64_t loaded_ms;             /* when they were last read (CLOCK_MONOTONIC) */
   char *key;                     /* the current event's sequence id (bson_malloc), or NULL */
   bool key_done;                 /* key is computed (NULL then: the event has none) */
   int64_t index;                 /* the index taken for the entry being stored; -1: none */
} fw_park_state_t;

/* The program: what a reload replaces whole (fw_dispatcher_take_program). */
typedef struct {
   fw_stream_config_t cfg;
   fw_lua_host_t *host;
   lua_State *L;             /* fw_lua_host_state (host), read once per event */
   int handler_ref[H_COUNT]; /* registry refs, LUA_NOREF when not declared */
   int spec_ref;             /* the stream's spec table */
} fw_program_t;

struct fw_dispatcher {
   fw_program_t prog;
   struct {
      fw_state_store_t *store; /* fw.state: kept across reloads */
      bool shared;             /* store is another dispatcher's (a lane's) */
   } state;
   fw_connection_clients_t *clients; /* fw.mongo's and a named DLQ connection's clients */
   fw_mongo_provider_t mongo;        /* hands fw.mongo the clients above */
   mongoc_client_t *client;          /* the running thread's (fw_dispatcher_bind) */
   fw_shutdown_t *shutdown;          /* borrowed: the stream's stop */
   fw_stream_metrics_t *metrics;     /* borrowed: the stream's block, or NULL */
   struct {
      fw_lease_t *lease; /* borrowed: ha.mode = "leader", else NULL */
      int64_t epoch;     /* the epoch the stream leads with; 0: not leading */
   } lead;
   struct {
      bool (*fn) (void *ud); /* see fw_dispatcher_set_reload_waits */
      void *ud;
   } reload_waits;
   struct {
      fw_txn_position_fn fn; /* exactly_once: see fw_dispatcher_set_exactly_once */
      void *ud;
      fw_txn_session_fn record;
      void (*committed) (void *ud);     /* see fw_dispatcher_set_txn_committed */
      mongoc_client_session_t *session; /* kept across attempts (fw_txn_release) */
      mongoc_client_t *client;
      fw_txn_sink_t sink;           /* exactly once into another store (begin NULL: none) */
      int64_t lifetime_ms;          /* the server's transactionLifetimeLimitSeconds */
      fw_txn_position_fn replay_fn; /* see fw_dispatcher_set_exactly_once_replay */
      void *replay_ud;
   } eo;
   struct {                         /* fw_group_dispatch: a source transaction's events, */
      const fw_event_t *const *evs; /* run in one attempt, in one transaction; n 0: one event */
      size_t n;
      const fw_event_t *failed; /* the event the last attempt was about (its failure's) */
   } group;
   fw_stream_clock_t clock;
   const fw_dispatch_hooks_t *hooks; /* flowwarden test's recorder, else NULL */
   fw_dispatch_t dispatch;           /* the ctx's view of the event in hand */
   fw_dlq_store_t *dlq;              /* opened on demand (fw_dispatcher_open_dlq) */
   uint64_t rng;
   struct {
      int failed;  /* the event in hand's failed attempts, for its outcome (fw_outcome_t: */
      int retries; /* failed_attempts, retries); zeroed as each run starts */
   } tally;
   struct {
      fw_outcome_sink_fn fn; /* see fw_dispatcher_set_outcome_sink */
      void *ud;
   } sink;
   struct {
      int64_t offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC, read ... */
      int64_t until_ns;  /* ... again from this CLOCK_MONOTONIC time on */
   } wall;
   fw_park_state_t park;
   fw_outcome_text_t out;        /* what the last outcome's strings point to */
   fw_state_rebuild_t rebuild;   /* a full Lua state built afresh (state_rebuild.c) */
   fw_outage_t outage;           /* circuit breaker, rate limit (outage.c) */
   struct fw_batch_state *batch; /* on_batch's per-call state (batch.c), NULL until used */
   struct {
      int64_t check_at_ms; /* when the stream next looks for due retries */
   } deferred;
};

/* Whether used (the Lua state's bytes) is past 90% of the memory_limit of a
 * state that can be rebuilt (fw_state_over_mark). Inline: once per event. */
static inline bool
fw_state_past_mark (const fw_dispatcher_t *d, size_t used)
{
   size_t limit = d->prog.cfg.memory_limit;
   return d->rebuild.load && limit && used > limit - limit / 10;
}

/* Whether d has a breaker or a rate limit (fw_outage_admit has something to
 * do). Inline: once per attempt. */
static inline bool
fw_outage_on (const fw_dispatcher_t *d)
{
   return d->prog.cfg.circuit.enabled || d->prog.cfg.rate_limit.count != 0;
}

/* Whether d's attempts run in transactions (exactly_once): a change
 * event's (replay false), or a replayed dead letter's (replay true: only
 * while fw_dispatcher_set_exactly_once_replay set a resolution to commit).
 * Inline: once per event. */
static inline bool
fw_txn_wanted (const fw_dispatcher_t *d, bool replay)
{
   if (replay) { /* its resolution, only with a DLQ on the transactions' client */
      return d->eo.replay_fn != NULL && d->eo.sink.begin == NULL;
   }
   return d->eo.fn != NULL || d->eo.sink.begin != NULL;
}

/* A sequenced DLQ (dlq = { sequenced = true }): events may be parked. Inline:
 * once per event. */
static inline bool
fw_park_enabled (const fw_dispatcher_t *d)
{
   return d->prog.cfg.dlq.enabled && d->prog.cfg.dlq.sequenced;
}

/* Whether the event in hand left anything of a sequence for fw_park_end. */
static inline bool
fw_park_held (const fw_dispatcher_t *d)
{
   return d->park.key || d->park.key_done || d->park.index != -1;
}

/* The registry ref of the handler for an event of operation op: its own
 * (on_insert, ...), else on_change, else LUA_NOREF. Inline: once per event. */
static inline int
fw_program_handler_for (const fw_program_t *p, fw_op_t op)
{
   int specific = op == FW_OP_INSERT    ? p->handler_ref[H_INSERT]
                  : op == FW_OP_UPDATE  ? p->handler_ref[H_UPDATE]
                  : op == FW_OP_REPLACE ? p->handler_ref[H_REPLACE]
                  : op == FW_OP_DELETE  ? p->handler_ref[H_DELETE]
                                        : LUA_NOREF;
   if (op == FW_OP_SNAPSHOT) { /* on_snapshot, else on_insert (issue 28) */
      specific = p->handler_ref[H_SNAPSHOT] != LUA_NOREF ? p->handler_ref[H_SNAPSHOT]
                                                         : p->handler_ref[H_INSERT];
   }
   specific = specific != LUA_NOREF ? specific : p->handler_ref[H_CHANGE];
   return specific != LUA_NOREF ? specific : p->handler_ref[H_BATCH]; /* on_batch: a batch of one */
}

#endif
