/*
 * dispatcher.h - one stream's dispatcher: its program (the script's stream
 * spec read into C, the Lua state that runs it, fw.state and fw.mongo) and
 * what takes one event through its handler: attempts, backoff, on_error,
 * the decision and the outcome (handled, skipped, dead-lettered, parked).
 *
 * A stream's thread owns one; with lanes = N each lane owns one more. A
 * dispatcher knows nothing of change streams: its stream gives it events,
 * its thread's client, its metrics block and (ha) its lease. Used on one
 * thread at a time.
 */
#ifndef FLOWWARDEN_DISPATCHER_H
#define FLOWWARDEN_DISPATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "bson/event.h"
#include "flowwarden/error.h"
#include "flowwarden/shutdown.h"
#include "lua_api/event_ctx.h"
#include "lua_api/state_store.h"
#include "ops/metrics.h"
#include "runtime/config/stream_config.h"
#include "runtime/dispatch/circuit.h"
#include "runtime/dispatch/outcome.h"
#include "runtime/dlq/dlq_store.h"
#include "runtime/ha/lease.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"

typedef struct fw_dispatcher fw_dispatcher_t;

/* The dispatcher of stream `index` of the script loaded in host, which it
 * takes over (also on failure). conns (fw.mongo's connections, may be NULL)
 * and shutdown (its waits end early when it is asked) are borrowed and must
 * outlive it. NULL with error filled when the spec cannot be read. */
fw_dispatcher_t *fw_dispatcher_new (fw_lua_host_t *host, int index, fw_connections_t *conns,
                                    fw_shutdown_t *shutdown, fw_error_t *error);

/* Frees d, its Lua state, its DLQ store and its fw.state store (unless
 * shared from another, fw_dispatcher_share_state). NULL is a no-op. */
void fw_dispatcher_destroy (fw_dispatcher_t *d);

/* The stream's settings: a pointer valid as long as d, whose contents a
 * reload (fw_dispatcher_take_program) replaces. */
const fw_stream_config_t *fw_dispatcher_config (const fw_dispatcher_t *d);

/* The stop d's waits end early at (fw_dispatcher_set_shutdown's), for its
 * clients' waits (a replay's). */
fw_shutdown_t *fw_dispatcher_shutdown (const fw_dispatcher_t *d);

/* A sequenced DLQ's sequence seq was resolved and closed: d no longer
 * holds its events back (its cache of the stream's open sequences). */
void fw_dispatcher_sequence_closed (fw_dispatcher_t *d, const char *seq);

/* The Lua state's host: changes at fw_dispatcher_take_program. Borrowed. */
fw_lua_host_t *fw_dispatcher_host (const fw_dispatcher_t *d);

/* A reload's switch: d takes from's program (settings, Lua state, handlers),
 * from gets d's old one (to destroy). d's fw.state store, clients, outcome
 * sink and DLQ sequences stay; its DLQ store is closed when the DLQ settings differ. */
void fw_dispatcher_take_program (fw_dispatcher_t *d, fw_dispatcher_t *from);

/* fw.state: d's store (owned by d unless shared). */
fw_state_store_t *fw_dispatcher_state (const fw_dispatcher_t *d);

/* d's Lua state uses store (borrowed from another dispatcher, which must
 * outlive d; d's own is destroyed). */
void fw_dispatcher_share_state (fw_dispatcher_t *d, fw_state_store_t *store);

/* d's Lua state uses store as fw.state, with the stream's label and bound;
 * and d's fw.mongo its clients. Called again after a reload. */
void fw_dispatcher_attach (fw_dispatcher_t *d);

/* Exchanges the fw.state stores of d and from (a reload keeps the running
 * stream's store). */
void fw_dispatcher_swap_state (fw_dispatcher_t *d, fw_dispatcher_t *from);

/* The client of the thread that runs d (DLQ writes, the default fw.mongo
 * connection); borrowed; NULL: none. */
void fw_dispatcher_bind (fw_dispatcher_t *d, mongoc_client_t *client);

/* The client of the named connection (d's own for that thread), or with
 * connection NULL the bound one; NULL with error filled when there is none.
 * Borrowed, on d's thread. */
mongoc_client_t *fw_dispatcher_client_for (fw_dispatcher_t *d, const char *connection,
                                           fw_error_t *error);

/* The stream's PENDING dead letters (*pending) and the oldest one's
 * createdAt (*oldest_ms, 0: none), through d's DLQ store or, while it is
 * closed, a reader of its collection. False with error filled. */
bool fw_dispatcher_dlq_pending (fw_dispatcher_t *d, int64_t *pending, int64_t *oldest_ms,
                                fw_error_t *error);

/* The thread that ran d is done with it: closes its DLQ store, fw.mongo's
 * cursors (unless its Lua state panicked) and gives its clients back. */
void fw_dispatcher_release (fw_dispatcher_t *d);

/* The stream's metrics block (borrowed, may be NULL) for d's counts; and
 * bound to the Lua state's fw.metrics. */
void fw_dispatcher_set_metrics (fw_dispatcher_t *d, fw_stream_metrics_t *metrics);

/* The stop d's waits end early at (borrowed, must outlive d). */
void fw_dispatcher_set_shutdown (fw_dispatcher_t *d, fw_shutdown_t *shutdown);

/* ha.mode = "leader": no handler is called while lease (borrowed, may be
 * NULL) is not held; DLQ entries carry epoch. */
void fw_dispatcher_set_lead (fw_dispatcher_t *d, fw_lease_t *lease, int64_t epoch);

/* fn(ud) is asked before every retry of a change event (not a replay's):
 * true when a reload's new program waits. The event then gives way
 * (FW_OUTCOME_YIELDED, its attempts so far in the outcome) instead of
 * running its next attempt on the old program: its stream switches
 * programs at the event's boundary, never inside fw_event_dispatch, and
 * runs it again with attempt_base = those attempts. Never inside a batch. */
void fw_dispatcher_set_reload_waits (fw_dispatcher_t *d, bool (*fn) (void *ud), void *ud);

/*
 * exactly_once (issue 39): each handler call runs in a transaction on a
 * session of the "default" connection's client, which every fw.mongo
 * operation on that client joins; before the commit fn(ud, ev, client,
 * session, reply, fenced, error) writes the stream's position past ev in
 * the same transaction (true when it did; false with error set and, for the
 * labels, the server's *reply, which the dispatcher initialises and
 * destroys; *fenced true when a newer leader holds the checkpoint: the
 * transaction is aborted and the event ends FW_OUTCOME_STOPPED). NULL fn:
 * no transactions (the default). A replayed dead letter never runs in one.
 */
typedef bool (*fw_txn_position_fn) (void *ud, const fw_event_t *ev, mongoc_client_t *client,
                                    mongoc_client_session_t *session, bson_t *reply, bool *fenced,
                                    fw_error_t *error);

/* The session the transactions run on is started once per dispatcher (on
 * its first attempt, or again after its client changed) and kept across
 * events; before its first use record(ud, client, lsid, error) stores its
 * lsid durably (true when it did; false with error set: the attempt fails
 * and the session is ended), so that a later start can kill a transaction a
 * killed process left open. NULL record: nothing stored. */
typedef bool (*fw_txn_session_fn) (void *ud, mongoc_client_t *client, const bson_t *lsid,
                                   fw_error_t *error);

void fw_dispatcher_set_exactly_once (fw_dispatcher_t *d, fw_txn_position_fn fn,
                                     fw_txn_session_fn record, void *ud);

/*
 * exactly_once into another store (issue 40: PostgreSQL): a sink the stream
 * hands the dispatcher instead of the MongoDB transaction above. The
 * dispatcher brackets each handler attempt with it and knows nothing else
 * of it:
 * - begin(ud, L): starts the attempt's transaction and joins L's calls to
 *   it; false with a handler failure table pushed on L (the attempt failed).
 * - commit(ud, L, ev): leaves the join, writes the position past ev in the
 *   transaction and commits it; FW_SINK_FAILED with a failure table pushed
 *   on L; FW_SINK_FENCED when a newer leader holds the position (nothing
 *   committed: the event ends FW_OUTCOME_STOPPED).
 * - end(ud, L): leaves the join and rolls back what is open.
 * - release(ud): before the dispatcher goes (may be NULL).
 * A NULL begin: no sink (the default). A replayed dead letter never runs in
 * a transaction.
 */
typedef enum {
   FW_SINK_COMMITTED,
   FW_SINK_FAILED,
   FW_SINK_FENCED,
} fw_sink_commit_t;

typedef struct {
   bool (*begin) (void *ud, lua_State *L);
   fw_sink_commit_t (*commit) (void *ud, lua_State *L, const fw_event_t *ev);
   void (*end) (void *ud, lua_State *L);
   void (*release) (void *ud);
   void *ud;
} fw_txn_sink_t;

/* Copies *sink (NULL: none). */
void fw_dispatcher_set_txn_sink (fw_dispatcher_t *d, const fw_txn_sink_t *sink);
/* After every commit of a transaction fn wrote a position in (one event's,
 * or a batch's after its last event), committed(ud) with fn's ud: the last
 * position fn wrote is now stored. NULL: not told (the default). */
void fw_dispatcher_set_txn_committed (fw_dispatcher_t *d, void (*committed) (void *ud));

/* exactly_once while a dead letter is replayed (issue 39): its attempts run
 * in transactions as a live event's, committed with fn(ud, ...) (the
 * entry's resolution written in the session) instead of the position; NULL:
 * replays run without transactions (the default). */
void fw_dispatcher_set_exactly_once_replay (fw_dispatcher_t *d, fw_txn_position_fn fn, void *ud);

/* The client of d's "default" connection, the one exactly_once's
 * transactions run on (owned by d); NULL with error set. */
mongoc_client_t *fw_dispatcher_txn_client (fw_dispatcher_t *d, fw_error_t *error);

/* Ends d's kept session (aborting a transaction still open in it): the next
 * attempt starts a new one and records it first. On d's thread. */
void fw_dispatcher_txn_reset (fw_dispatcher_t *d);

/* Loads the stream's script once more into a new host (the caller's), as
 * the stream's own was loaded; NULL with error filled. */
typedef fw_lua_host_t *(*fw_dispatcher_loader_t) (void *ud, fw_error_t *error);

/* A Lua state still over 90% of its memory_limit after a full collection
 * at the end of a handler call is rebuilt from the script with load(ud)
 * (same script version; fw.state kept, globals start afresh) and the event
 * retried on it. A state that fills up again within
 * FW_STATE_REFILL_EVENTS events of its rebuild (the event it was rebuilt
 * for counting as the first) stops the stream instead (FW_OUTCOME_FAILED,
 * fw_dispatcher_failure says why). Without a loader (NULL, the default)
 * nothing is rebuilt. ud is borrowed and must outlive d; load is called on
 * the thread running d. */
void fw_dispatcher_set_loader (fw_dispatcher_t *d, fw_dispatcher_loader_t load, void *ud);
#define FW_STATE_REFILL_EVENTS 3

/* d (a lane's) uses from's circuit breaker and rate limit (the stream's,
 * issue 29); from must outlive d. */
void fw_dispatcher_share_outage (fw_dispatcher_t *d, fw_dispatcher_t *from);

/* `flowwarden resume`: an open circuit breaker probes at once. Any thread;
 * d may be NULL. True when the breaker was open. */
bool fw_dispatcher_circuit_probe_now (fw_dispatcher_t *d);

/* Where a stream keeps its breaker across restarts (issue 37): save is
 * called when the breaker opens and after each failed probe (v: the breaker
 * now, times on the dispatcher's clock), clear when it closes for good (a
 * probe succeeded, give_up_after passed, a probe failed otherwise); a stop
 * calls neither, so a restart finds the breaker as it was. Called on the
 * thread of the event that holds the breaker (a lane's with lanes): they
 * must be thread-safe, and a write they cannot make must not stop the
 * stream (the breaker goes on in memory). */
typedef struct {
   void *ud;
   void (*save) (void *ud, const fw_circuit_view_t *v);
   void (*clear) (void *ud);
} fw_circuit_store_t;

/* d's breaker is kept through store (borrowed, must outlive d; NULL: in
 * memory only, the default). Set it on the stream's dispatcher before its
 * lanes share its outage (fw_dispatcher_share_outage copies it). */
void fw_dispatcher_set_circuit_store (fw_dispatcher_t *d, const fw_circuit_store_t *store);

/* A saved breaker (saved->state open) is put back on d's closed one: status
 * and metrics show it open at once, and the stream's first event holds it,
 * waits for saved->next_probe_ms and is attempted once per probe. False
 * (nothing changed) when the stream has no breaker (circuit off) or d's is
 * not closed. On the stream's thread, before its events. */
bool fw_dispatcher_circuit_restore (fw_dispatcher_t *d, const fw_circuit_view_t *saved);

/* The DLQ this stream writes to: its own, or, on a
 * stream without one, the script's default DLQ (only ctx:send_to_dlq uses
 * it). */
const fw_dlq_config_t *fw_dispatcher_dlq_config (const fw_dispatcher_t *d);

/* d's DLQ store (d keeps it; dispatcher_dlq.c), NULL until fw_dispatcher_open_dlq opened it. */
fw_dlq_store_t *fw_dispatcher_dlq_store (const fw_dispatcher_t *d);

/* d's clock: now (ms since the epoch, or the virtual clock's), a wait of ms
 * (true: a stop came first), and a draw of the retries' jitter in [0, 1). */
int64_t fw_dispatcher_now_ms (const fw_dispatcher_t *d);
bool fw_dispatcher_wait_ms (fw_dispatcher_t *d, int64_t ms);
double fw_dispatcher_random (fw_dispatcher_t *d);

/* Whether d's clock is flowwarden test's virtual one (not the wall clock). */
bool fw_dispatcher_clock_virtual (const fw_dispatcher_t *d);

/* The running thread's client (fw_dispatcher_bind), and fw.mongo's and a
 * named DLQ connection's clients (d keeps both). */
mongoc_client_t *fw_dispatcher_client (const fw_dispatcher_t *d);
fw_connection_clients_t *fw_dispatcher_clients (const fw_dispatcher_t *d);

/* The stream's metrics block (borrowed), or NULL. */
fw_stream_metrics_t *fw_dispatcher_metrics (const fw_dispatcher_t *d);

/* The registry ref of the stream's spec table in fw_dispatcher_host's state. */
int fw_dispatcher_spec_ref (const fw_dispatcher_t *d);

/* Whether the stream declares a handler for events of operation op. */
bool fw_dispatcher_handles (const fw_dispatcher_t *d, fw_op_t op);

/* Whether d knows the stream's open DLQ sequences (fw_dispatcher_load_sequences). */
bool fw_dispatcher_sequences_loaded (const fw_dispatcher_t *d);

/* The ctx's view of the event in hand (d keeps it): its attempt, its generation,
 * the dead letter a replay shows. */
fw_dispatch_t *fw_dispatcher_view (fw_dispatcher_t *d);

/* Why the stream must stop after FW_OUTCOME_FAILED. */
const char *fw_dispatcher_failure (const fw_dispatcher_t *d);

/* Where a dispatcher hands every change event it finished with, once, with
 * its outcome (stream: the stream's name): its log line and its counts
 * (metrics, the stream's summary) are the receiver's (the stream's settle,
 * runtime/stream/event_settle.h), never the dispatcher's. Called on the
 * dispatcher's thread, before fw_event_dispatch returns, and for each event
 * of a batch as it finishes. With ev NULL, o is no change event's: only
 * what it adds to the summary counts (o->summary, o->failed_attempts,
 * o->retries): a batch's calls that failed and the retries it waited out
 * (once, as fw_batch_dispatch ends), or a replayed dead letter whose client
 * counts it as the stream's (a deferred retry, fw_dispatcher_report). */
typedef void (*fw_outcome_sink_fn) (void *ud, const char *stream, const fw_event_t *ev,
                                    const fw_outcome_t *o);

/* d's events go to fn(ud, ...) (NULL: nowhere, neither logged nor counted). */
void fw_dispatcher_set_outcome_sink (fw_dispatcher_t *d, fw_outcome_sink_fn fn, void *ud);

/* Hands o (ev: its change event, or NULL, see fw_outcome_sink_fn) to d's
 * sink, on d's thread: a replay's client, for a run it counts as the
 * stream's. */
void fw_dispatcher_report (fw_dispatcher_t *d, const fw_event_t *ev, const fw_outcome_t *o);

/* An event fw_event_parse refused (why says how) but that has its resume
 * token: dead-lettered whole (rawEvent, error type MalformedEvent) so the
 * stream can go on; FW_OUTCOME_NO_DLQ when the stream has no DLQ. */
fw_outcome_t fw_event_dispatch_unreadable (fw_dispatcher_t *d, fw_event_t *ev, const char *why);

/* An event oversize = "skip" turned into a stub: dead-lettered without its
 * document (error type OversizeEvent, the message gives its size), so the
 * stream goes on and nothing vanishes unseen. */
fw_outcome_t fw_event_dispatch_oversize (fw_dispatcher_t *d, const fw_event_t *ev, int64_t size);

/* Opens the DLQ store, retrying with the restart backoff until it works or a
 * shutdown is asked. Returns false only on shutdown. */
bool fw_dispatcher_open_dlq (fw_dispatcher_t *d);

/* A sequenced DLQ: at start-up and every reconnect, reads the stream's open
 * sequences, retrying with the restart backoff. False only on shutdown. */
bool fw_dispatcher_load_sequences (fw_dispatcher_t *d);

/* dlq.sequence_key is a function (routing by it needs d's Lua state). */
bool fw_dispatcher_custom_key (const fw_dispatcher_t *d);

/* ev's sequence key by dlq.sequence_key, as bson_malloc'd text the caller
 * frees; NULL when it has none or the function failed. */
char *fw_dispatcher_sequence_key (fw_dispatcher_t *d, const fw_event_t *ev);

#endif
