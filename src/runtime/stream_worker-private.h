/*
 * stream_worker-private.h - the worker's state, shared by stream_worker.c
 * (reading and checkpointing) and event_dispatch.c (handlers, retries, DLQ).
 */
#ifndef FLOWWARDEN_STREAM_WORKER_PRIVATE_H
#define FLOWWARDEN_STREAM_WORKER_PRIVATE_H

#include <pthread.h>

#include "flowwarden/connections.h"
#include "flowwarden/dlq_store.h"
#include "flowwarden/event.h"
#include "flowwarden/event_ctx.h"
#include "flowwarden/metrics.h"
#include "flowwarden/mongo_lua.h"
#include "flowwarden/state_store.h"
#include "flowwarden/stream_config.h"
#include "flowwarden/stream_worker.h"

enum { H_INSERT, H_UPDATE, H_REPLACE, H_DELETE, H_CHANGE, H_COUNT };

/* How a replayed dead letter ended in fw_event_dispatch (dlq_replay.c). */
typedef enum {
   FW_REPLAYED_NO_HANDLER = 0, /* the (possibly reloaded) script has no handler for it */
   FW_REPLAYED_OK,
   FW_REPLAYED_SKIPPED,        /* on_error returned fw.SKIP */
   FW_REPLAYED_FAILED          /* failed for good: the enqueue policy decides */
} fw_replayed_t;

/* Set on the worker while a dead letter is replayed: the dispatcher then
 * hands the final failure back here instead of writing a new DLQ entry. */
typedef struct fw_replay_hook {
   bool no_retry;              /* --no-retry: one attempt */
   /* Called before every retry attempt (extends the entry's claim). */
   void (*before_retry) (struct fw_replay_hook *hook);
   void *ud;
   /* Filled by fw_event_dispatch. */
   fw_replayed_t result;
   int attempts;
   char error_type[128];
   char error_message[1024];
} fw_replay_hook_t;

struct fw_stream_worker {
   fw_stream_config_t cfg;
   fw_lua_host_t *host;
   int handler_ref[H_COUNT];   /* registry refs, LUA_NOREF when not declared */
   int spec_ref;               /* the stream's spec table */
   int on_failure_ref;         /* flowwarden.dispatch.on_failure */
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;    /* popped by the thread */
   fw_shutdown_t *shutdown;    /* points at own_shutdown */
   fw_shutdown_t own_shutdown; /* this stream's stop: SIGTERM, or a reload removing it */
   pthread_mutex_t pending_mu;
   fw_stream_worker_t *pending;/* a reload's replacement, applied at an attempt boundary */
   int has_pending;            /* read without the lock on the hot path */
   fw_dlq_store_t *dlq;
   pthread_t thread;
   bool started;
   bool joined;
   bool finished;              /* set by the thread as it ends */
   fw_dispatch_t dispatch;
   /* Called by the dispatcher at every attempt boundary; the worker sets it
    * to switch to the program a reload left pending. Returns true when it
    * switched: Lua state, handler refs and cfg may all have changed. */
   bool (*at_attempt_boundary) (fw_stream_worker_t *w);
   uint64_t rng;
   fw_stream_stats_t stats;
   fw_state_store_t *state;    /* fw.state: kept across reloads, see state_attach */
   fw_connection_clients_t *clients; /* fw.mongo's and a named DLQ connection's clients */
   fw_mongo_provider_t mongo;  /* hands fw.mongo the clients above */
   fw_replay_hook_t *replay;   /* a dead letter is being replayed, else NULL */
   int64_t reprocess_at_ms;    /* next automatic DLQ round (dlq.reprocess); 0: not
                                * scheduled yet, -1: none */
   fw_stream_metrics_t *metrics; /* the stream's block in the process's registry, or NULL
                                  * (written by this stream's thread only) */
   int control;                /* W_CONTROL_*: asked by the admin endpoint (atomic) */
   int64_t dlq_count_at_ms;    /* next count of the DLQ's pending entries (metrics) */
   int64_t finished_ms;        /* when the dispatcher last finished an event (with metrics) */
   int64_t wall_offset_ns;     /* CLOCK_REALTIME - CLOCK_MONOTONIC, read ... */
   int64_t wall_offset_until_ns; /* ... again from this CLOCK_MONOTONIC time on */
};

/* What the admin endpoint asked the stream's thread to do. */
enum { W_CONTROL_NONE = 0, W_CONTROL_PAUSE, W_CONTROL_RESUME, W_CONTROL_RESTART };

typedef enum {
   FW_DISPATCH_DONE,    /* the event is finished with: checkpoint may pass it */
   FW_DISPATCH_STOPPED, /* shutdown came first: the event must come back */
   FW_DISPATCH_NO_DLQ   /* an unreadable event and no DLQ to keep it: the stream stops */
} fw_dispatch_result_t;

/* Runs the handlers for one parsed event with the stream's retry and DLQ
 * policy. The event must stay valid until it returns. */
fw_dispatch_result_t fw_event_dispatch (fw_stream_worker_t *w, const fw_event_t *ev);

/* An event fw_event_parse refused (why says how) but that has its resume
 * token: dead-lettered whole (rawEvent, error type MalformedEvent) so the
 * stream can go on; FW_DISPATCH_NO_DLQ when the stream has no DLQ. */
fw_dispatch_result_t fw_event_dispatch_unreadable (fw_stream_worker_t *w, fw_event_t *ev,
                                                  const char *why);

/* An event oversize = "skip" turned into a stub (see fw_oversize_pipeline):
 * dead-lettered without its document (error type OversizeEvent, the message
 * gives its size), so the stream goes on and nothing vanishes unseen. */
fw_dispatch_result_t fw_event_dispatch_oversize (fw_stream_worker_t *w, const fw_event_t *ev,
                                                int64_t size);

/* Opens the DLQ store, retrying with the restart backoff until it works or a
 * shutdown is asked. Returns false only on shutdown. */
bool fw_event_dispatch_open_dlq (fw_stream_worker_t *w);

int64_t fw_now_ms (void);

/* --- event_oversize.c -------------------------------------------------- */

/* The field of an oversize stub that holds the event's $bsonSize. */
#define FW_OVERSIZE_FIELD "fwOversizeBytes"

/* Gathers the fragments of one split event ($changeStreamSplitLargeEvent). */
typedef struct {
   bson_t fields; /* the top-level fields of the fragments so far */
   bson_t whole;  /* the last reassembled event */
   int32_t next;  /* the fragment expected next (1-based); 0: none pending */
   int32_t of;
} fw_split_buffer_t;

typedef enum {
   FW_SPLIT_WHOLE,   /* not a fragment: *whole is the event itself */
   FW_SPLIT_PENDING, /* a fragment kept: more are to come */
   FW_SPLIT_DONE,    /* the last fragment: *whole is the reassembled event */
   FW_SPLIT_BROKEN   /* a fragment out of order (error says which): buffer emptied */
} fw_split_t;

void fw_split_buffer_init (fw_split_buffer_t *b);
void fw_split_buffer_reset (fw_split_buffer_t *b);
void fw_split_buffer_cleanup (fw_split_buffer_t *b);
bool fw_split_buffer_active (const fw_split_buffer_t *b);

/* Adds one change event. *whole is borrowed: doc itself, or the buffer's
 * reassembled event, valid until the next call with the same buffer. */
fw_split_t fw_split_buffer_add (fw_split_buffer_t *b, const bson_t *doc, const bson_t **whole,
                                fw_error_t *error);

/* The stream's pipeline (cfg->pipeline) plus, with split, the
 * $changeStreamSplitLargeEvent stage, or else with oversize = "skip" the stage
 * that turns events over the threshold into stubs. out is initialized here,
 * owned by the caller. */
void fw_oversize_pipeline (const fw_stream_config_t *cfg, bool split, bson_t *out);

/* True (and *size) when doc is an oversize stub. */
bool fw_oversize_stub_size (const bson_t *doc, int64_t *size);

/* True when the server refused the $changeStreamSplitLargeEvent stage. */
bool fw_oversize_stage_rejected (const bson_error_t *berr);

/* --- stream_control.c -------------------------------------------------- */

/* The admin endpoint's pending request (W_CONTROL_*), left in place. */
int fw_stream_control_peek (fw_stream_worker_t *w);

/* The pending request, cleared. */
int fw_stream_control_take (fw_stream_worker_t *w);

/* Sleeps up to ms; returns true at once on shutdown, false early when the
 * admin endpoint asks something (or when the time is up). */
bool fw_stream_wait (fw_stream_worker_t *w, int64_t ms);

/* The stream is paused (checkpoint written, change stream closed): waits for
 * resume or restart (returned, as W_CONTROL_*) or a shutdown
 * (W_CONTROL_NONE). */
int fw_stream_paused (fw_stream_worker_t *w);

/* With a metrics block: counts ev as received (its operation, its server
 * time for the lag), before fw_event_dispatch. */
void fw_stream_count_received (fw_stream_worker_t *w, const fw_event_t *ev);

/* With a metrics block, after fw_event_dispatch finished an event: the Lua
 * state's memory, and the DLQ count when it is due. */
void fw_stream_count_dispatched (fw_stream_worker_t *w);

/* Every 30 s (now_ms: the wall clock), counts the stream's pending DLQ
 * entries for the flowwarden_dlq_pending gauges. */
void fw_stream_dlq_count_tick (fw_stream_worker_t *w, int64_t now_ms);

#endif
