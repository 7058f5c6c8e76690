/*
 * stream_worker-private.h - a stream's state (fw_stream_worker_t), shared by
 * the files of stream/ that run its thread. The parts below it have
 * interfaces of their own: the dispatcher (flowwarden/dispatcher.h), the
 * reader and the oversize policy (stream_reader-private.h), the checkpoint
 * writer and the lease (flowwarden/checkpoint_writer.h, lease.h).
 */
#ifndef FLOWWARDEN_STREAM_WORKER_PRIVATE_H
#define FLOWWARDEN_STREAM_WORKER_PRIVATE_H

#include <pthread.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/checkpoint_writer.h"
#include "flowwarden/checkpoint_store.h"
#include "flowwarden/connections.h"
#include "flowwarden/dispatcher.h"
#include "flowwarden/event.h"
#include "flowwarden/lease.h"
#include "flowwarden/metrics.h"
#include "flowwarden/stream_config.h"
#include "flowwarden/stream_worker.h"
#include "runtime/stream/stream_read-private.h"
#include "runtime/stream/stream_settle.h"

/* A stream: its thread, its dispatcher (and its lanes'), its position and
 * checkpoint writer, its lease, what the admin endpoint and a reload ask of
 * it. */
typedef struct fw_stream_eo_pg fw_stream_eo_pg_t; /* stream_exactly_once_pg.c */

struct fw_stream_worker {
   fw_dispatcher_t *d;         /* the stream's program and dispatcher (owned) */
   fw_stream_eo_pg_t *eo_pg;   /* exactly once into PostgreSQL: its sink (owned), or NULL */
   const fw_stream_config_t *cfg; /* fw_dispatcher_config (d): follows reloads */
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;    /* popped by the thread; its dispatcher's too */
   mongoc_client_t *read_client; /* the change stream's, used by its reader (read-ahead) */
   fw_shutdown_t *shutdown;    /* points at own_shutdown */
   fw_shutdown_t own_shutdown; /* this stream's stop: SIGTERM, or a reload removing it */
   struct {
      pthread_mutex_t mu;
      fw_stream_worker_t *next; /* a reload's replacement, applied at an event boundary */
      int has;                  /* read without the lock on the hot path */
   } pending;
   struct {
      pthread_t id;
      bool started;
      bool joined;
      bool finished;            /* set by the thread as it ends */
   } thread;
   uint64_t rng;               /* the restart backoff's jitter */
   bool failed;                /* the stream stopped for good (fw_stream_failed) */
   int64_t reprocess_at_ms;    /* next automatic DLQ round (dlq.reprocess); 0: not
                                * scheduled yet, -1: none */
   fw_stream_metrics_t *metrics; /* the stream's block in the process's registry, or NULL
                                  * (written by this stream's thread and its lanes) */
   int control;                /* W_CONTROL_*: asked by the admin endpoint (atomic) */
   int64_t dlq_count_at_ms;    /* next count of the DLQ's pending entries (metrics) */
   struct {
      fw_checkpoint_writer_t *writer; /* checkpoint.mode = "async": started on first use
                                       * by the stream's thread, destroyed as it ends */
      bool unavailable;         /* the writer could not start: checkpoints are synchronous */
      int64_t epoch;            /* the epoch the writer fences with */
   } ckpt;
   struct {                    /* exactly_once (stream_exactly_once.c), the stream's thread: */
      bson_t *written;          /* the position last written in a transaction (NULL: none) */
      bson_t *committed;        /* the last one committed: the stored checkpoint's */
   } eo;
   struct {                    /* the breaker kept across restarts (stream_circuit.c) */
      fw_circuit_store_t store; /* the dispatcher's hooks (ud: w) */
      int warned;               /* a write failed and was said (atomic) */
   } circuit;
   struct {                    /* ha.mode = "leader" (lease.h): */
      fw_lease_t *lease;       /* the stream's lease, NULL without ha */
      int64_t epoch;           /* the epoch this thread leads with; 0: not leading */
   } lead;
   struct {
      struct fw_shared_group *group; /* ha.mode = "shared": the units' group (stream_shared.c) */
      fw_metric_series_t *held;      /* ... its gauges flowwarden_units_held, _members */
      fw_metric_series_t *members;
      int64_t seen_ms;               /* when they were last set (atomic) */
   } shared;
   struct {                    /* ha, this member's view of a unit it does not hold: */
      int64_t orphan_seen_ms;  /* wall clock it first saw the unit's holder gone (its member
                                * record); 0: not seen */
      int64_t seen_ms;         /* when fw_stream_standby_observe last looked (both: the
                                * stream's thread only) */
   } standby;
   char failure[1200];         /* why the stream stops */
   /* Per-key lanes (stream_lanes.c, issue 16), cfg->lanes > 1: */
   int index;                  /* the stream's index in its script */
   fw_connections_t *conns;    /* borrowed (fw_stream_worker_new's) */
   struct {
      fw_dispatcher_t **d;     /* the lanes' dispatchers (cfg->lanes, each with a Lua state
                                * of its own): built with the program, swapped with it by a
                                * reload; NULL: no lanes */
      int n;
   } lane;
   struct fw_stream_lanes *lanes; /* the running lanes (threads, queues, watermark), owned
                                   * by the stream's thread; NULL: events handled here */
   const bson_t *batch_held;   /* on_batch: read while taking a batch but not of it, to be
                                * taken next (the reader's, stream_batch.c); else NULL */
   struct {
      struct fw_stream_snap *run; /* the incremental snapshot running (stream_snapshot.c),
                                   * owned by the stream's thread; NULL: none */
      bson_t *request;            /* an on-demand snapshot asked (its filter; empty: all),
                                   * exchanged atomically with the admin endpoint */
   } snap;
};

/* What the admin endpoint asked the stream's thread to do. */
enum { W_CONTROL_NONE = 0, W_CONTROL_PAUSE, W_CONTROL_RESUME, W_CONTROL_RESTART };

/* --- stream_position.c ------------------------------------------------- */

/* Where the stream's thread has read to and what it has handled. */
typedef struct fw_position {
   bson_t resume;       /* where the stream has read to (event or post-batch token) */
   bool has_resume;
   bson_t processed;    /* last event handled */
   bool has_processed;
   int since_save;
   int64_t last_save_ms;
   bool dirty;
   bool invalidated;    /* the last event was an invalidate: re-open with startAfter */
   char error[600];     /* why the change stream last failed, for the stream's status */
   fw_split_buffer_t split; /* fragments of a split event, not yet handled */
   bool split_rejected; /* the server refused $changeStreamSplitLargeEvent */
   bool unsplittable;   /* the server could not split the next event (7182500):
                         * read without the stage until oversize = "skip" has
                         * dead-lettered it */
} fw_position_t;

/* dst = a copy of src (dst initialized). */
void fw_position_set_token (bson_t *dst, const bson_t *src);

/* dst = a copy of ev's resume token (its _id) when that is a document;
 * false (dst untouched) otherwise. */
bool fw_position_set_event_token (bson_t *dst, const fw_event_t *ev);

/* Saves p as the checkpoint on the stream's thread, after the checkpoint
 * writer's write in flight (if any): mode = "sync", and in async mode the
 * final save (shutdown, pause, restart) and the rare ones (start,
 * invalidate). A failure is logged and counted (why names the occasion). */
void fw_position_save (fw_stream_worker_t *w, fw_position_t *p, const char *why);

/* checkpoint.mode = "async": hands p to the stream's checkpoint writer
 * (started on first use) and goes on; as fw_position_save with mode = "sync"
 * or when the writer cannot start. */
void fw_position_save_async (fw_stream_worker_t *w, fw_position_t *p, const char *why);

/* Counts the checkpoint writer's outcomes in the stream's metrics. */
void fw_position_writer_results (fw_stream_worker_t *w);

/* --- stream_program.c: a worker's program, the lowest stream file ------- */

/* Points w's Lua state (and its lane programs') at w's fw.state store, and
 * w's fw.mongo at w's clients. */
void fw_stream_state_attach (fw_stream_worker_t *w);

/* The lane programs' counts added to w's (and zeroed). */
void fw_stream_fold_lane_stats (fw_stream_worker_t *w);

/* --- stream_shared.c: ha.mode = "shared" (issue 31) ----------------------- */

/* The stream's lease: a unit lease of its group with ha.mode = "shared",
 * else fw_lease_new's. NULL (err set) on failure. */
fw_lease_t *fw_stream_lease_new (fw_stream_worker_t *w, fw_error_t *err);

/* ha.mode = "shared": this unit is over the instance's share (sticky until
 * fw_stream_yield_unit gave it up). False otherwise. */
bool fw_stream_over_share (fw_stream_worker_t *w);

/* Gives the unit's lease up when it is over the share (its checkpoint
 * saved by the caller); true when it did. */
bool fw_stream_yield_unit (fw_stream_worker_t *w);

/* Destroys the lease (and leaves the group). */
void fw_stream_lease_destroy (fw_stream_worker_t *w);

/* Defines the unit's gauges in registry (ha.mode = "shared" only). */
void fw_stream_shared_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry);

/* ha.mode = "shared": sets the gauges, at most every 500 ms. Any of the
 * stream's threads. */
void fw_stream_shared_observe (fw_stream_worker_t *w);

/* ha, while the stream's thread waits to lead (fw_stream_wait_lead): the
 * gauges, and the unit's state as this member sees it: standby (naming the
 * holder) or orphaned with how long (issue 38), at most every 250 ms. The
 * stream's thread only. */
void fw_stream_standby_observe (fw_stream_worker_t *w);

/* --- stream_reload.c --------------------------------------------------- */

/* Switches to the program a reload left pending (handlers, policies, Lua
 * state, lane programs), if any: at an event boundary of the stream's
 * thread, never inside fw_event_dispatch (w->cfg points into the program).
 * Never while lanes run (w->lanes): fw_stream_lanes_boundary applies it
 * then. Returns true when it switched. */
bool fw_stream_reload_apply (fw_stream_worker_t *w);

/* The stream's thread runs ev on w->d, switching first to a reload's program
 * left pending: when ev gives way to a reload between two attempts
 * (FW_OUTCOME_YIELDED), the new program is switched to here, at the event's
 * boundary, and ev runs again on it, its attempts carrying on. */
fw_outcome_t fw_stream_dispatch (fw_stream_worker_t *w, const fw_event_t *ev);

/* --- stream_lanes.c: per-key lanes (issue 16) ------------------------------
 *
 * With cfg.lanes = N > 1 the stream's thread reads, parses and routes: each
 * event goes to the lane of hash(its sequence key) (the sequenced DLQ's key:
 * dlq.sequence_key, else the documentKey; events without one go to lane 0),
 * where a thread with a Lua state of its own handles the lane's events in
 * order. The checkpoint is the watermark: the newest event that, with every
 * earlier one, is handled or dead-lettered.
 */
typedef struct fw_stream_lanes fw_stream_lanes_t;

typedef enum {
   FW_LANES_NEXT,        /* read on */
   FW_LANES_INVALIDATED, /* an invalidate, handled: checkpoint written */
   FW_LANES_STOPPED,     /* shutdown */
   FW_LANES_FAILED       /* the stream must stop (w->failure says why) */
} fw_lanes_step_t;

/* At an event boundary of the stream's thread, instead of
 * fw_stream_reload_apply when the stream has (or had) lanes: a pending
 * reload waits for the lanes to finish what they hold, stops them, switches
 * every program and starts the lanes again, so all lanes run the new
 * version after the same event; lanes not running yet are started. False
 * when the stream must stop (shutdown, or w->failure says why). */
bool fw_stream_lanes_boundary (fw_stream_worker_t *w, fw_position_t *p);

/* Takes one event read (ev: fw_event_parse's result, to_lane: handled by a
 * lane, else already dead-lettered on this thread), token: the change
 * stream's resume token after it; moves p up to the watermark and saves
 * every save_every events. */
fw_lanes_step_t fw_stream_lanes_take (fw_stream_worker_t *w, fw_position_t *p,
                                      const fw_event_t *ev, bool to_lane, const bson_t *token);

/* Moves p up to the watermark; true when nothing is in flight. */
bool fw_stream_lanes_advance (fw_stream_worker_t *w, fw_position_t *p);

/* Waits for the lanes to finish what they hold (not on shutdown, nor after
 * a lane failed), stops and joins them, moves p to the watermark and adds
 * the lanes' counts to w's. NULL lanes: a no-op. */
void fw_stream_lanes_stop (fw_stream_worker_t *w, fw_position_t *p);

/* Waits for the lanes to finish what they hold and moves p to the
 * watermark; the lanes go on. False on shutdown or when a lane failed
 * (w->failure says why). NULL lanes: true. */
bool fw_stream_lanes_settle (fw_stream_worker_t *w, fw_position_t *p);

/* --- stream_circuit.c: the breaker kept across restarts (issue 37) ------ */

/* Gives w's dispatcher (and so its lanes) the hooks keeping its breaker in
 * "<w's checkpoint id>#circuit" (circuit_doc.h). */
void fw_stream_circuit_keep (fw_stream_worker_t *w);

/* At a start: a breaker kept by the last run is put back open (logged);
 * none, a read error (logged) or circuit off (the document is deleted)
 * leaves it closed. On the stream's thread, with its client. */
void fw_stream_circuit_restore (fw_stream_worker_t *w);

/* stream_exactly_once.c: exactly_once (issue 39) wires the dispatcher's
 * transactions to write the stream's position in them. */
void fw_stream_exactly_once_wire (fw_stream_worker_t *w);

/* At the start of a run (under ha: once the lease is held, before the
 * checkpoint is fenced, since the fence's write would wait for a
 * transaction that wrote the checkpoint; without ha: before the change
 * stream opens): kills the server sessions recorded by an earlier holder of
 * the checkpoint (a killed process, a deposed leader), aborting the
 * transaction it may have left open, and ends this thread's own; a failure
 * is logged and the run goes on. */
void fw_stream_exactly_once_recover (fw_stream_worker_t *w);

/* stream_exactly_once_pg.c: exactly_once = { connection = <PostgreSQL> }
 * (issue 40). _wire hands the dispatcher the PostgreSQL sink (its state made
 * on first use, owned by w, freed by _free after w's dispatcher). _load, at
 * the start of a run after the lease: raises the position's epoch to the
 * leader's (ha) and sets p to the position committed there, which wins over
 * _fw_checkpoints' (none there: p untouched); retried with the restart
 * backoff, false on shutdown (or when the sink could not be made: the
 * stream failed rather than run without its transactions). */
void fw_stream_exactly_once_pg_wire (fw_stream_worker_t *w);
void fw_stream_exactly_once_pg_free (fw_stream_worker_t *w);
bool fw_stream_exactly_once_pg_load (fw_stream_worker_t *w, fw_position_t *p, int *candidate,
                                     bool *from_checkpoint);
/* At each checkpoint save: stores p's processed position in the table when
 * no transaction did (the last events were dead-lettered, skipped or had no
 * handler), so a restart does not run them again. Best effort. */
void fw_stream_exactly_once_pg_advance (fw_stream_worker_t *w, const fw_position_t *p);

/* Whether p's handled and seen positions are the one the last transaction
 * committed (so a save of p would write again what is stored). */
bool fw_stream_exactly_once_stored (const fw_stream_worker_t *w, const fw_position_t *p);

/* --- stream_lead.c: the checkpoint and leadership a stream reads with ---- */

/* Reads the checkpoint into p (unless start_position = "latest"), retrying
 * with the restart backoff (exactly once into PostgreSQL: the position there
 * wins). False on shutdown, or when the stream failed. */
bool fw_stream_load_checkpoint (fw_stream_worker_t *w, fw_checkpoint_t *cp, fw_position_t *p,
                                int *candidate, bool *from_checkpoint);

/* With metrics: the stream's role (FW_STREAM_ROLE_*). */
void fw_stream_set_role (fw_stream_worker_t *w, int role);

/* ha.mode = "leader": waits as a standby until this instance holds the
 * lease, then fences the checkpoint with its epoch. False only on shutdown. */
bool fw_stream_wait_lead (fw_stream_worker_t *w);

/* ha.mode = "leader": whether this thread may no longer call handlers. */
bool fw_stream_lease_lost (fw_stream_worker_t *w);

/* --- stream_control.c -------------------------------------------------- */

/* The admin endpoint's pending request (W_CONTROL_*), left in place. */
int fw_stream_control_peek (fw_stream_worker_t *w);

/* The pending request, cleared. */
int fw_stream_control_take (fw_stream_worker_t *w);

/* Sleeps up to ms; returns true at once on shutdown, false early when the
 * admin endpoint asks something (or when the time is up). */
bool fw_stream_wait (fw_stream_worker_t *w, int64_t ms);

/* Probes the deployment until a writable server answers (stream_connect.c):
 * each new reason logged once, in status (in state) meanwhile. False on
 * shutdown. */
bool fw_stream_wait_server (fw_stream_worker_t *w, fw_stream_state_t state);

/* The stream is paused (checkpoint written, change stream closed): waits for
 * resume or restart (returned, as W_CONTROL_*) or a shutdown
 * (W_CONTROL_NONE). */
int fw_stream_paused (fw_stream_worker_t *w);

/* The stream's dispatchers' outcome sink (fw_dispatcher_set_outcome_sink,
 * ud: the worker): each event's log line and counts in its metrics block
 * (fw_event_settle). On the thread that ran the event (a lane's). */
void fw_stream_event_settled (void *ud, const char *stream, const fw_event_t *ev,
                              const fw_outcome_t *o);

/* With a metrics block, after an event (or a batch, o its outcome) was
 * settled: the Lua state's memory, and the DLQ count when it is due. */
void fw_stream_count_dispatched (fw_stream_worker_t *w, const fw_outcome_t *o);

/* Every 30 s (now_ms: the wall clock), counts the stream's pending DLQ
 * entries for the flowwarden_dlq_pending gauges. */
void fw_stream_dlq_count_tick (fw_stream_worker_t *w, int64_t now_ms);

/* --- stream_restart.c: what follows the end of a read ------------------- */

/* fw_read_end_t: how a read of the change stream ended (stream_settle.h). */

/* What the stream's thread keeps from one change stream to the next. */
typedef struct fw_stream_run {
   fw_checkpoint_t cp;   /* the checkpoint it started from */
   fw_position_t p;
   int restarts;         /* failed reads in a row, for the restart backoff */
   int candidate;        /* 0: processed token, 1: seen token, 2: from now */
   bool from_checkpoint;
   bool start_at_lost;   /* checkpoint.start_at was older than the oplog: from now on */
} fw_stream_run_t;

/* --- stream_start_at.c ---------------------------------------------------- */

/* A stream without a checkpoint opened at checkpoint.start_at and the server
 * said that history is gone: on_history_lost decides (fail, or from now).
 * False when the stream stops. */
bool fw_stream_start_at_lost (fw_stream_worker_t *w, fw_stream_run_t *run);

/* stream_control.c: the stream stops for good; what says why (status,
 * metrics, log). */
void fw_stream_failed (fw_stream_worker_t *w, const char *what);

/* The admin endpoint paused the stream: takes the request (saving the
 * position first when save), waits for resume or restart (an admin restart
 * is counted) and resets the restart backoff. False on shutdown. */
bool fw_stream_pause (fw_stream_worker_t *w, fw_stream_run_t *run, bool save);

/* After a read ended with end (not FW_READ_NEXT): a pause waited out, a
 * restart counted, after a lost lease the wait to lead again, after lost
 * history its fallback, else the restart backoff. True: open the change
 * stream again; false: the stream's thread ends. */
bool fw_stream_read_ended (fw_stream_worker_t *w, fw_stream_run_t *run, fw_read_end_t end);

/* --- stream_batch.c: on_batch without lanes (issue 30) -------------------- */

/* ev (parsed from the reader's current event, not a fragment, stub or
 * invalidate) is the first of a batch: takes up to batch.max_events events
 * within batch.max_wait, hands them to the dispatcher as one batch and
 * moves the position past them. An event read that cannot join the batch
 * is left in w->batch_held. FW_READ_NEXT: read on. */
fw_read_end_t fw_stream_batch_take (fw_stream_worker_t *w, fw_stream_reader_t *rd,
                                    fw_position_t *p, const fw_event_t *ev);

/* Whether doc (a change event read) may join a batch. */
bool fw_stream_batch_joins (const bson_t *doc, const fw_event_t *ev);

/* exactly_once (issue 39), per-event handlers: whether ev (doc) is an event
 * of a source transaction (lsid and txnNumber) that starts a group. */
bool fw_stream_group_wanted (const fw_stream_worker_t *w, const bson_t *doc,
                             const fw_event_t *ev);

/* ev and the events read after it of the same source transaction, up to an
 * event of another one (left in w->batch_held) or a getMore that returns
 * nothing, handed to the dispatcher as one group (fw_group_dispatch: one
 * transaction); the position moves past them once every one is finished
 * with. FW_READ_NEXT: read on. */
fw_read_end_t fw_stream_group_take (fw_stream_worker_t *w, fw_stream_reader_t *rd,
                                    fw_position_t *p, const fw_event_t *ev);

/* --- stream_snapshot.c: the incremental snapshot (issue 28, snapshot.h) --- */

/* After the checkpoint was read (cp): resumes a snapshot its progress says
 * is running, or starts one (start_position = "snapshot", no checkpoint),
 * storing it before the change stream opens. False only on shutdown. */
bool fw_stream_snapshot_setup (fw_stream_worker_t *w, const fw_checkpoint_t *cp);

/* At the loop's top, between live events: an on-demand request taken, the
 * last chunk's progress stored, the next chunks read when due and no live
 * event waits in rd (else at most half the thread's time). */
fw_read_end_t fw_stream_snapshot_between (fw_stream_worker_t *w, fw_position_t *p,
                                          fw_stream_reader_t *rd);

/* True when the snapshot would read a chunk now (between's turn ended on
 * its time budget): the loop reads on instead of waiting for the stream. */
bool fw_stream_snapshot_reading (fw_stream_worker_t *w);

/* A live event, before it is handled: the open chunk's rows are handed out
 * first when the event is past the high watermark. */
fw_read_end_t fw_stream_snapshot_live (fw_stream_worker_t *w, fw_position_t *p,
                                       const fw_event_t *ev);

/* Idle, with the post-batch resume token: as fw_stream_snapshot_live. */
fw_read_end_t fw_stream_snapshot_idle (fw_stream_worker_t *w, fw_position_t *p,
                                       const bson_t *token);

/* The change stream (re)opened: an open chunk is read again. */
void fw_stream_snapshot_reopened (fw_stream_worker_t *w);

/* The thread ends: the snapshot state freed (its progress is stored). */
void fw_stream_snapshot_teardown (fw_stream_worker_t *w);

#endif
