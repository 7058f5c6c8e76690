/*
 * stream_worker-private.h - a stream worker's state (fw_stream_worker_t),
 * shared by the stream's parts (stream/), its dispatcher (dispatch/) and
 * the DLQ's replays (dlq/). Too many files reach into it: the redesign of
 * issue 24 (docs/architecture.md) is to give those parts interfaces of
 * their own instead.
 */
#ifndef FLOWWARDEN_STREAM_WORKER_PRIVATE_H
#define FLOWWARDEN_STREAM_WORKER_PRIVATE_H

#include <pthread.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/checkpoint_writer.h"
#include "flowwarden/checkpoint_store.h"
#include "flowwarden/connections.h"
#include "flowwarden/dlq_sequence.h"
#include "flowwarden/dlq_store.h"
#include "flowwarden/event.h"
#include "flowwarden/event_ctx.h"
#include "flowwarden/lease.h"
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

/* dlq_replay.c: runs dlq.enqueue_policy for a replay that failed for good
 * (hook's error; ctx:dead_letter()'s letter in w->dispatch). True: evict;
 * false: requeue, the diagnostics to merge in diagnostics (initialised by
 * the caller; emptied when the policy fails or they have no BSON form). */
bool fw_dlq_replay_policy (fw_stream_worker_t *w, const fw_replay_hook_t *hook,
                           bson_t *diagnostics);

/* Set on a worker that `flowwarden test` drives (test_app.c); NULL in run,
 * where each use costs one pointer test on a failure path. */
/* flowwarden test's recorder: after every failed attempt, the decided error
 * and its action ("retry", "dlq", "skip", "drop"). */
typedef struct fw_dispatch_hooks {
   void (*attempt_failed) (void *ud, int attempt, const char *type, const char *message,
                           const char *traceback, const char *action);
   void *ud;
} fw_dispatch_hooks_t;

/* The clock a stream's dispatcher reads and waits on: the wall clock for the
 * times it writes down (DLQ entries, metrics) and every wait it makes (a
 * retry's backoff, a DLQ that cannot be written yet). The real one by
 * default (fw_stream_worker_new: waits end early at a shutdown);
 * flowwarden test plugs its virtual clock in (testing/test_app.c). */
typedef struct {
   int64_t (*now_ms) (void *ud);
   bool (*wait_ms) (void *ud, int64_t ms); /* true: a stop came first */
   void *ud;
   bool is_virtual; /* now_ms is not the wall clock: never derived from the monotonic one */
} fw_stream_clock_t;

struct fw_stream_worker {
   fw_stream_config_t cfg;
   fw_lua_host_t *host;
   int handler_ref[H_COUNT];   /* registry refs, LUA_NOREF when not declared */
   int spec_ref;               /* the stream's spec table */
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;    /* popped by the thread */
   mongoc_client_t *read_client; /* the change stream's, used by its reader (read-ahead) */
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
   fw_checkpoint_writer_t *ckpt; /* checkpoint.mode = "async": started on first use by the
                                  * stream's thread, destroyed as it ends */
   bool ckpt_unavailable;      /* the writer could not start: checkpoints are synchronous */
   /* ha.mode = "leader" (lease.h): */
   fw_lease_t *lease;          /* the stream's lease, NULL without ha */
   int64_t epoch;              /* the epoch this thread leads with; 0: not leading */
   int64_t ckpt_epoch;         /* the epoch the checkpoint writer fences with */
   const fw_dispatch_hooks_t *hooks; /* flowwarden test's recorder, else NULL */
   fw_stream_clock_t clock;          /* see fw_stream_clock_t */
   /* A sequenced DLQ (event_park.c): */
   const struct fw_park_ops *park_ops; /* its store's sequence operations (fw_park_ops_t);
                                        * NULL: chosen by cfg.dlq.memory */
   fw_dlq_sequences_t *open_seqs; /* the stream's open sequences; NULL until loaded */
   int64_t seqs_loaded_ms;     /* when they were last read (CLOCK_MONOTONIC) */
   bool seq_indexed;           /* the DLQ's sequence index exists */
   char *seq_key;              /* the current event's sequence id (bson_malloc), or NULL */
   bool seq_key_done;          /* seq_key is computed (NULL then: the event has none) */
   int64_t seq_index;          /* the index taken for the entry being stored; -1: none */
   char failure[1200];         /* why the stream stops, with FW_DISPATCH_FAILED */
   /* Per-key lanes (stream_lanes.c, issue 16), cfg.lanes > 1: */
   int index;                  /* the stream's index in its script */
   fw_connections_t *conns;    /* borrowed (fw_stream_worker_new's) */
   fw_stream_worker_t **lane_w; /* the lanes' programs (cfg.lanes workers, each with a Lua
                                * state of its own, never started as streams): built with
                                * the program, swapped with it by a reload; NULL: no lanes */
   int n_lane_w;
   fw_stream_worker_t *coord;  /* on a lane's program: the stream's worker, else NULL */
   struct fw_stream_lanes *lanes; /* the running lanes (threads, queues, watermark), owned
                                   * by the stream's thread; NULL: events handled here */
};

/* The registry ref of the handler for an event of operation op: its own
 * (on_insert, ...), else on_change, else LUA_NOREF. Inline: once per event. */
static inline int
fw_stream_handler_for (const fw_stream_worker_t *w, fw_op_t op)
{
   int specific = op == FW_OP_INSERT    ? w->handler_ref[H_INSERT]
                  : op == FW_OP_UPDATE  ? w->handler_ref[H_UPDATE]
                  : op == FW_OP_REPLACE ? w->handler_ref[H_REPLACE]
                  : op == FW_OP_DELETE  ? w->handler_ref[H_DELETE]
                                        : LUA_NOREF;
   return specific != LUA_NOREF ? specific : w->handler_ref[H_CHANGE];
}

/* What the admin endpoint asked the stream's thread to do. */
enum { W_CONTROL_NONE = 0, W_CONTROL_PAUSE, W_CONTROL_RESUME, W_CONTROL_RESTART };

typedef enum {
   FW_DISPATCH_DONE,    /* the event is finished with: checkpoint may pass it */
   FW_DISPATCH_STOPPED, /* shutdown came first: the event must come back */
   FW_DISPATCH_NO_DLQ,  /* an unreadable event and no DLQ to keep it: the stream stops */
   FW_DISPATCH_FAILED   /* the stream must stop before the event (w->failure says why) */
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

/* MongoDB's errors for an event too large to send: BSONObjectTooLarge, and
 * the split stage's "fragment size ... is greater than maximum allowed
 * fragment size" when one field alone fills a fragment
 * (change_stream_split_event_helpers.cpp). */
#define FW_ERR_OBJECT_TOO_LARGE 10334
#define FW_ERR_SPLIT_FAILED 7182500

/* True when berr is one of them: the oversize policy applies. */
bool fw_oversize_error (const bson_error_t *berr);

/* Writes into what (size bytes) why the stream stops on BSONObjectTooLarge
 * or a failed split (berr): the event after position (NULL: the stream's
 * start) is over 16 MiB; split says whether the split stage was in use, skip
 * whether the oversize = "skip" stage was; then what to do. */
void fw_oversize_failure (const bson_t *position, bool split, bool skip,
                          const bson_error_t *berr, char *what, size_t size);

typedef enum {
   FW_OVERSIZE_EVENT,    /* a whole event for the dispatcher (*parsed: readable) */
   FW_OVERSIZE_FRAGMENT, /* a fragment kept in the buffer: read on */
   FW_OVERSIZE_SKIPPED,  /* an oversize stub, dead-lettered: the event is done */
   FW_OVERSIZE_STOPPED,  /* shutdown came while dead-lettering a stub */
   FW_OVERSIZE_FAILED,   /* a stub and no DLQ: the stream stops (error says why) */
   FW_OVERSIZE_BROKEN    /* fragments out of order (error says which): re-open */
} fw_oversize_step_t;

/* Takes one change event *doc as fw_event_parse left it in *ev (*parsed: it
 * succeeded): keeps a fragment of a split event, turns the last one into the
 * reassembled event (*doc, *ev and *parsed then describe it; *doc is
 * borrowed from split, valid until its next use), and dead-letters an
 * oversize = "skip" stub. */
fw_oversize_step_t fw_oversize_take (fw_stream_worker_t *w, fw_split_buffer_t *split,
                                     const bson_t **doc, fw_event_t *ev, bool *parsed,
                                     fw_error_t *error);

/* --- event_park.c: a sequenced DLQ's live side (dlq_sequence.h) ---------- */

/* The sequence operations of dlq_sequence.h's protocol on the backend of
 * the stream's DLQ store (event_park_store.c): the sequences collection
 * beside a MongoDB DLQ, or the records an in-memory store keeps beside its
 * entries. Chosen with the store (fw_event_dispatch_open_dlq); flowwarden
 * test sets the memory ones on its workers. Called on the stream's thread;
 * false with error filled when the backend fails (the caller retries). */
typedef struct fw_park_ops {
   /* The stream's open sequences into into, their inflight counts reset. */
   bool (*load) (fw_stream_worker_t *w, fw_dlq_sequences_t *into, fw_error_t *error);
   /* The next index of sequence id: open = true opens it, false only while
    * it is open (*result FW_SEQ_CLOSED otherwise). */
   bool (*take) (fw_stream_worker_t *w, const char *id, bool open, int64_t *index,
                 fw_seq_take_t *result, fw_error_t *error);
   /* The entry of an index taken is stored: gives the request back. */
   bool (*settle) (fw_stream_worker_t *w, const char *id, fw_error_t *error);
   /* The entries of sequence id waiting in the DLQ (PENDING, REPROCESSING). */
   bool (*size) (fw_stream_worker_t *w, const char *id, int64_t *out, fw_error_t *error);
} fw_park_ops_t;

extern const fw_park_ops_t fw_park_mongo_ops;
extern const fw_park_ops_t fw_park_memory_ops;

/* dlq.sequenced on the stream's own DLQ. */
bool fw_park_enabled (const fw_stream_worker_t *w);

/* At start-up and every reconnect: reads the stream's open sequences,
 * retrying with the restart backoff. False only on shutdown. */
bool fw_park_load (fw_stream_worker_t *w);

/* Whether ev, a live event, must be looked up in the open sequences: none
 * are open (the common case) costs one comparison. */
bool fw_park_check_needed (fw_stream_worker_t *w, const fw_event_t *ev);

typedef enum {
   FW_PARK_KEY_OK,     /* w->seq_key holds the event's sequence id */
   FW_PARK_KEY_NONE,   /* the event has no key: never sequenced */
   FW_PARK_KEY_FAILED  /* dlq.sequence_key failed: its failure table is on the Lua stack */
} fw_park_key_t;

/* Computes the event's sequence id once per event (w->seq_key). */
fw_park_key_t fw_park_key (fw_stream_worker_t *w, const fw_event_t *ev, fw_lua_stop_t *stop);

/* The event's sequence (w->seq_key) is open in the stream's memory. */
bool fw_park_is_open (const fw_stream_worker_t *w);

typedef enum {
   FW_PARK_TAKEN,    /* w->seq_index is the entry's sequenceIndex */
   FW_PARK_CLOSED,   /* park: the sequence was closed meanwhile; handle the event */
   FW_PARK_OVERFLOW, /* max_sequences or max_sequence_size: w->failure says which */
   FW_PARK_STOPPED   /* shutdown while the server failed */
} fw_park_take_t;

/* Takes the next index of the event's sequence: open = true opens it (the
 * event is its head), false parks behind it. Retries server errors. */
fw_park_take_t fw_park_take (fw_stream_worker_t *w, bool open);

/* The entry of the taken index is stored: gives the index request back and
 * remembers the sequence as open. */
void fw_park_settle (fw_stream_worker_t *w);

/* The event is finished with: forgets its key. */
void fw_park_end (fw_stream_worker_t *w);

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

/* --- stream_reader.c --------------------------------------------------- */

/* Read-ahead: a thread reading a change stream ahead of the stream's thread,
 * which calls the functions below in place of libmongoc's, with the same
 * results in the same order. */
typedef struct fw_stream_reader fw_stream_reader_t;

/* Starts reading cs (created on a client that only the reader uses from now
 * on) into a queue of at most max_events events and, past one event, at most
 * max_bytes bytes. While hold(hold_ud) (called on the reader's thread) is
 * true, the reader asks for nothing more and hands over one idle mark: the
 * caller is about to stop it. Without a thread (it could not start) the
 * calls go to cs on the caller's thread. NULL when out of memory. */
fw_stream_reader_t *fw_stream_reader_start (mongoc_change_stream_t *cs, int max_events,
                                            size_t max_bytes, bool (*hold) (void *ud),
                                            void *hold_ud);

/* As mongoc_change_stream_next: the next event (*doc valid until the next
 * call), or false when idle or after the error. Waits for the reader. */
bool fw_stream_reader_next (fw_stream_reader_t *r, const bson_t **doc);

/* As mongoc_change_stream_error_document, after a false next. */
bool fw_stream_reader_error (fw_stream_reader_t *r, bson_error_t *error);

/* As mongoc_change_stream_get_resume_token, as it was after what next
 * returned (empty, never NULL). Valid until the next call to next. */
const bson_t *fw_stream_reader_resume_token (fw_stream_reader_t *r);

/* Stops and joins the thread (after its getMore in flight: at most
 * maxAwaitTimeMS when the stream is idle), frees what it read ahead; cs is
 * the caller's again. NULL is a no-op. */
void fw_stream_reader_stop (fw_stream_reader_t *r);

/* --- stream_program.c: a worker's program, the lowest stream file ------- */

/* Points w's Lua state (and its lane programs') at w's fw.state store, and
 * w's fw.mongo at w's clients. */
void fw_stream_state_attach (fw_stream_worker_t *w);

/* The lane programs' counts added to w's (and zeroed). */
void fw_stream_fold_lane_stats (fw_stream_worker_t *w);

/* --- stream_reload.c --------------------------------------------------- */

/* Switches to the program a reload left pending (handlers, policies, Lua
 * state, lane programs), if any; the dispatcher calls it at attempt
 * boundaries. Never while lanes run (w->lanes): fw_stream_lanes_boundary
 * applies it then. Returns true when it switched. */
bool fw_stream_reload_apply (fw_stream_worker_t *w);

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

/* --- stream_lead.c: the checkpoint and leadership a stream reads with ---- */

/* Reads the checkpoint into p (unless start_position = "latest"), retrying
 * with the restart backoff. False only on shutdown. */
bool fw_stream_load_checkpoint (fw_stream_worker_t *w, fw_checkpoint_t *cp, fw_position_t *p,
                                int *candidate, bool *from_checkpoint);

/* With metrics: the stream's role (FW_STREAM_ROLE_*). */
void fw_stream_set_role (fw_stream_worker_t *w, int role);

/* ha.mode = "leader": waits as a standby until this instance holds the
 * lease, then fences the checkpoint with its epoch. False only on shutdown. */
bool fw_stream_wait_lead (fw_stream_worker_t *w);

/* ha.mode = "leader": whether this thread may no longer call handlers. */
bool fw_stream_lease_lost (fw_stream_worker_t *w);

/* --- stream_server.c: what the stream's server can take ------------------ */

/* False when the stream asks for a change stream option the server
 * (selected with w->read_client) is too old for, by its maxWireVersion: the
 * reason, naming the option, the stream and the server's version, is written
 * to what[len]. True when it can, or its version is not known yet. */
bool fw_stream_server_supports (fw_stream_worker_t *w, char *what, size_t len);

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

/* --- stream_restart.c: what follows the end of a read ------------------- */

/* How a read of the change stream ended (stream_worker.c). */
typedef enum {
   FW_READ_STOP,
   FW_READ_REOPEN,       /* re-open at once where the position is (no backoff) */
   FW_READ_FAILED,       /* the stream stopped for good (fw_stream_failed said why) */
   FW_READ_ERROR,
   FW_READ_INVALIDATED,
   FW_READ_HISTORY_LOST,
   FW_READ_PAUSE,        /* the admin endpoint asked to pause: checkpoint written */
   FW_READ_RESTART,      /* the admin endpoint asked to restart: checkpoint written */
   FW_READ_LOST,         /* ha: the lease's deadline passed: handling stopped */
   FW_READ_NEXT          /* within a read only: no end, read on */
} fw_read_end_t;

/* What the stream's thread keeps from one change stream to the next. */
typedef struct fw_stream_run {
   fw_checkpoint_t cp;   /* the checkpoint it started from */
   fw_position_t p;
   int restarts;         /* failed reads in a row, for the restart backoff */
   int candidate;        /* 0: processed token, 1: seen token, 2: from now */
   bool from_checkpoint;
} fw_stream_run_t;

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

#endif
