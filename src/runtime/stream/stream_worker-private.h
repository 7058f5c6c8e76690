/*
 * stream_worker-private.h - a stream's state (fw_stream_worker_t), shared by
 * the files of stream/ that run its thread. What one of those files offers
 * the others is declared in its own <file>-private.h (stream_position-,
 * stream_lanes-, stream_control-private.h, ...), so each includes what it
 * uses. The blocks of the state that a file keeps are typed in that file's
 * header, with what the file reads of the stream (links set as it is made,
 * stream_program.c): the ha group (stream_shared-private.h), exactly_once
 * (stream_exactly_once-private.h), the checkpoint (stream_checkpoint-private.h),
 * a reload's hand-over (stream_reload-private.h); those files take the block
 * (or, off the per-event path, reach it through stream_parts-private.h), not
 * the worker's layout. The parts below it have interfaces of their own: the dispatcher
 * (runtime/dispatch/dispatcher.h), the reader and the oversize policy
 * (stream_read-private.h, event_oversize-private.h), the checkpoint writer
 * and the lease (runtime/checkpoint/checkpoint_writer.h, lease.h).
 */
#ifndef FLOWWARDEN_STREAM_WORKER_PRIVATE_H
#define FLOWWARDEN_STREAM_WORKER_PRIVATE_H

#include <pthread.h>

#include <lauxlib.h>

#include "bson/event.h"
#include "flowwarden/clock.h"
#include "ops/metrics.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/checkpoint_writer.h"
#include "runtime/config/stream_config.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/ha/lease.h"
#include "runtime/host/connections.h"
#include "runtime/stream/stream_checkpoint-private.h"
#include "runtime/stream/stream_circuit-private.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_reload-private.h"
#include "runtime/stream/stream_shared-private.h"
#include "runtime/stream/stream_worker.h"

/* A stream: its thread, its dispatcher (and its lanes'), its position and
 * checkpoint writer, its lease, what the admin endpoint and a reload ask of
 * it. */
struct fw_stream_worker {
   fw_dispatcher_t *d;            /* the stream's program and dispatcher (owned) */
   const fw_stream_config_t *cfg; /* fw_dispatcher_config (d): follows reloads */
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;      /* popped by the thread; its dispatcher's too */
   mongoc_client_t *read_client; /* the change stream's, used by its reader (read-ahead) */
   fw_shutdown_t *shutdown;      /* points at own_shutdown */
   fw_shutdown_t own_shutdown;   /* this stream's stop: SIGTERM, or a reload removing it */
   fw_stream_pending_t pending;  /* a reload's program, left for the thread (stream_reload.c) */
   struct {
      pthread_t id;
      bool started;
      bool joined;
      bool finished; /* set by the thread as it ends */
   } thread;
   uint64_t rng;                 /* the restart backoff's jitter */
   fw_stream_stats_t summary;    /* what its events came to (fw_event_settle; its lanes'
                                  * threads add to it too, atomically), and whether it
                                  * stopped for good (failed: fw_stream_failed) */
   fw_stream_metrics_t *metrics; /* the stream's block in the process's registry, or NULL
                                  * (written by this stream's thread and its lanes) */
   int control;                  /* W_CONTROL_*: asked by the admin endpoint (atomic) */
   struct {
      int64_t reprocess_at_ms; /* next automatic DLQ round (dlq.reprocess); 0: not
                                * scheduled yet, -1: none */
      int64_t count_at_ms;     /* next count of the DLQ's pending entries (metrics) */
   } dlq;
   fw_stream_ckpt_t ckpt;       /* its checkpoint writer, version, epoch (stream_position.c) */
   fw_stream_eo_t eo;           /* exactly_once (stream_exactly_once.c, _pg.c) */
   fw_stream_circuit_t circuit; /* the breaker kept across restarts (stream_circuit.c) */
   struct {                     /* ha.mode = "leader" (lease.h): */
      fw_lease_t *lease;        /* the stream's lease, NULL without ha */
      int64_t epoch;            /* the epoch this thread leads with; 0: not leading */
   } lead;
   fw_stream_shared_t shared; /* ha: the shared units' group, a standby's view (stream_shared.c) */
   char failure[1200];        /* why the stream stops */
   /* Per-key lanes (stream_lanes.c, issue 16), cfg->lanes > 1: */
   struct {
      int index;               /* the stream's index in its script */
      fw_connections_t *conns; /* borrowed (fw_stream_worker_new's) */
   } script;
   struct {
      fw_dispatcher_t **d; /* the lanes' dispatchers (cfg->lanes, each with a Lua state
                                * of its own): built with the program, swapped with it by a
                                * reload; NULL: no lanes */
      int n;
      struct fw_stream_lanes *run; /* the running lanes (threads, queues, watermark), owned
                                    * by the stream's thread; NULL: events handled here */
   } lane;
   const bson_t *batch_held; /* on_batch: read while taking a batch but not of it, to be
                                * taken next (the reader's, stream_batch.c); else NULL */
   struct {
      struct fw_stream_snap *run; /* the incremental snapshot running (stream_snapshot.c),
                                   * owned by the stream's thread; NULL: none */
      bson_t *request;            /* an on-demand snapshot asked (its filter; empty: all),
                                   * exchanged atomically with the admin endpoint */
      bool short_await;           /* the change stream open asked for a snapshot's short
                                   * maxAwaitTimeMS (fw_stream_snapshot_opening) */
   } snap;
};

/* The admin endpoint's pending request (W_CONTROL_*, stream_control-private.h),
 * left in place. Inline: read at every event boundary. */
static inline int
fw_stream_control_peek (fw_stream_worker_t *w)
{
   return __atomic_load_n (&w->control, __ATOMIC_ACQUIRE);
}

#endif
