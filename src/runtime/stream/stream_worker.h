/*
 * stream_worker.h - one declared stream: its own thread, Lua state and
 * pooled client, reading its change stream in order and calling handlers.
 */
#ifndef FLOWWARDEN_STREAM_WORKER_H
#define FLOWWARDEN_STREAM_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "flowwarden/shutdown.h"
#include "ops/admin.h"
#include "ops/metrics.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"
#include "runtime/stream/event_settle.h"

typedef struct fw_stream_worker fw_stream_worker_t;

/*
 * Creates the worker for stream `index` of the script. host must have the
 * script loaded; the worker takes ownership of it (also on failure). pool
 * (the change stream's and checkpoints') and conns (fw.mongo's connections,
 * may be NULL: fw.mongo then has none) are borrowed and must outlive the
 * worker. Returns NULL with error filled when the spec cannot be read.
 */
fw_stream_worker_t *fw_stream_worker_new (fw_lua_host_t *host, int index,
                                          mongoc_client_pool_t *pool, fw_connections_t *conns,
                                          fw_error_t *error);

/* Loads the script into a new host for one lane (see below): the host is
 * the caller's; NULL with error filled. */
typedef fw_lua_host_t *(*fw_stream_lane_loader_t) (void *ud, fw_error_t *error);

/*
 * lanes = N > 1 (issue 16): builds the stream's N lane programs, each in a
 * host load(ud) returns, sharing w's fw.state store; nothing for lanes = 1.
 * Every dispatcher of w (its own, its lanes') also rebuilds a full Lua
 * state with load(ud) (fw_dispatcher_set_loader): ud must outlive w and
 * load may run on w's and its lanes' threads at once.
 * Call it right after fw_stream_worker_new, before set_metrics; a reload's
 * new program builds its own, so the reload is rolled back when one fails.
 * False with error filled (w unchanged but usable for destroy).
 */
bool fw_stream_worker_build_lanes (fw_stream_worker_t *w, fw_stream_lane_loader_t load, void *ud,
                                   fw_error_t *error);

/* Asks the stream to stop: the in-flight handler finishes, a backoff wait
 * ends at once, the final checkpoint is written. Returns at once; join to
 * wait. */
void fw_stream_worker_stop (fw_stream_worker_t *w);

/* True when the thread has ended (stopped or failed). */
bool fw_stream_worker_finished (const fw_stream_worker_t *w);

/* True while the stream's thread was started and has not finished yet (the
 * thread that starts and joins it asks). */
bool fw_stream_worker_running (const fw_stream_worker_t *w);

/* True when next, a worker built (not started) from a newly loaded script,
 * reads the same change stream as w: same database, collection, pipeline
 * (operation_types included) and full_document options. */
bool fw_stream_worker_same_source (fw_stream_worker_t *w, const fw_stream_worker_t *next);

/* True when w's stream is called name. Unlike comparing fw_stream_worker_name,
 * safe on another thread while w runs (a reload's swap changes its config). */
bool fw_stream_worker_is_named (fw_stream_worker_t *w, const char *name);

/*
 * Hands w the handlers and policies of next (same name and source, not
 * started). w switches at its next attempt boundary: the attempt running now
 * finishes on the old code. w takes ownership of next; a replacement still
 * pending when another arrives is dropped in its favour.
 */
void fw_stream_worker_replace_program (fw_stream_worker_t *w, fw_stream_worker_t *next);

/*
 * Gives w (built, not started) the fw.state store of from, a worker of the
 * same stream whose thread has been joined (a reload restarting a stream
 * whose source changed), so the stream's fw.state entries carry over; from
 * gets w's empty store. w's bound (state.max_bytes) applies to the store.
 */
void fw_stream_worker_take_state (fw_stream_worker_t *w, fw_stream_worker_t *from);

/*
 * Makes w (built, not started) count its metrics in registry's block for its
 * name, and binds its Lua state to that block for fw.metrics. A reload's
 * replacement gets the same block as the worker it replaces, so counters go
 * on. registry is borrowed and must outlive w.
 */
void fw_stream_worker_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry);

/* The block set by fw_stream_worker_set_metrics, or NULL; lives as long as
 * its registry. */
fw_stream_metrics_t *fw_stream_worker_metrics (const fw_stream_worker_t *w);

/*
 * Asks the running stream's thread (any thread may ask; returns at once):
 *   FW_STREAM_PAUSE    stop at the next event boundary, write the checkpoint,
 *                      close the change stream, wait;
 *   FW_STREAM_RESUME   re-open it from that checkpoint;
 *   FW_STREAM_RESTART  close and re-open it now (from the checkpoint it writes).
 * The stream's state in its metrics block shows when it happened.
 */
void fw_stream_worker_control (fw_stream_worker_t *w, fw_stream_action_t action);

/* The stream's name; valid for the worker's life. */
const char *fw_stream_worker_name (const fw_stream_worker_t *w);

/* The stream has a sequenced DLQ (dlq.sequenced, issue 14). */
bool fw_stream_worker_sequenced (const fw_stream_worker_t *w);

/* Starts the thread. A worker whose thread ended (a stream stopped on an
 * error) and was joined may be started again: it begins anew from its
 * checkpoint. */
bool fw_stream_worker_start (fw_stream_worker_t *w, fw_error_t *error);

/* Asks the running stream for an incremental snapshot of its collection
 * (issue 28), limited by filter (copied; NULL: every document); the
 * stream's thread starts it between two live events. False (error says why)
 * for a database-wide stream or a stream not running. */
bool fw_stream_worker_snapshot (fw_stream_worker_t *w, const bson_t *filter, fw_error_t *error);

/* Waits for the thread to end (after a shutdown request or a terminal
 * error), having written its final checkpoint. */
void fw_stream_worker_join (fw_stream_worker_t *w);

/* Copies the stream's summary: its counts at any time (read atomically),
 * failed safely after join. */
void fw_stream_worker_stats (const fw_stream_worker_t *w, fw_stream_stats_t *out);

typedef struct fw_dispatcher fw_dispatcher_t;

/* w's dispatcher (runtime/dispatch/dispatcher.h), owned by w: what replays drive. */
fw_dispatcher_t *fw_stream_worker_dispatcher (fw_stream_worker_t *w);

/* Lane i's dispatcher (fw_stream_worker_build_lanes), owned by w, its
 * outcomes settled by w; NULL when w has no lane i. */
fw_dispatcher_t *fw_stream_worker_lane (fw_stream_worker_t *w, int i);

/* For the command line: gives w (built, never started) a client of its pool
 * so its dispatcher can be driven from the calling thread;
 * fw_stream_worker_unbind closes what it opened and gives the client back.
 * Both on the same thread. */
void fw_stream_worker_bind (fw_stream_worker_t *w);
void fw_stream_worker_unbind (fw_stream_worker_t *w);

/* Joins if needed and frees everything. NULL is a no-op. */
void fw_stream_worker_destroy (fw_stream_worker_t *w);

#endif
