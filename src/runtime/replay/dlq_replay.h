/*
 * dlq_replay.h - replaying dead letters (issue 12): `flowwarden dlq replay`
 * and the automatic rounds of dlq.reprocess inside `run`.
 *
 * A replay claims an entry (PENDING, or REPROCESSING whose claim expired ->
 * REPROCESSING, claimedBy, claimedUntil) with one findAndModify, rebuilds the
 * change event from it, runs the stream's current handler through
 * fw_event_dispatch (the same retry policy and budgets as `run`, attempts
 * counted from 1 again) with ctx:dead_letter() showing the letter, and then
 * records the outcome: RESOLVED (resolution REPLAYED, or SKIPPED when
 * on_error returned fw.SKIP), or what dlq.enqueue_policy decides for a
 * failure (requeue: PENDING again; evict: DISCARDED). Claims keep two
 * replays, or a replay and run's rounds, from handling one entry twice; a
 * claim left by a killed process expires and is taken again.
 *
 * The claim logic is in src/runtime/replay/dlq_replay.c, run's rounds in
 * src/runtime/replay/dlq_reprocess.c, the command line in src/cli/dlq_replay_cli.c.
 */
#ifndef FLOWWARDEN_DLQ_REPLAY_H
#define FLOWWARDEN_DLQ_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_store.h"

/*
 * The whole `replay` verb: argv[0] is "replay", the rest its arguments
 * (SCRIPT and options, parsed with getopt_long from optind = 1). Prints its
 * own messages and returns the process exit code: 0 when every entry it
 * replayed was resolved, 3 when some failed again (or could not be
 * replayed), 1 on bad usage or a connection error.
 */
int fw_dlq_replay_main (int argc, char **argv);

/* A claim's TTL: its keeper renews it every third of it while the handler
 * runs, so a dead holder's claim expires within three keeper periods. */
#define FW_DLQ_CLAIM_TTL_MS (30 * 1000)

typedef struct {
   const char *actor;    /* "<host>:<pid>": claimedBy and history[].actor */
   int64_t claim_ttl_ms; /* a claim not extended for this long may be taken again */
   bool no_retry;        /* one attempt, whatever the retry policy says */
   bool dry_run;         /* check and say what would run; write nothing */
   /* Each run counts in the stream's summary (its dispatcher's outcome
    * sink), as the deferred retry whose sequence it releases does; false:
    * a replay is no live event (the CLI's, a dlq.reprocess round). */
   bool counted;
} fw_replay_options_t;

typedef enum {
   FW_REPLAY_RESOLVED,  /* the handler succeeded: RESOLVED */
   FW_REPLAY_SKIPPED,   /* on_error returned fw.SKIP: RESOLVED, resolution SKIPPED */
   FW_REPLAY_REQUEUED,  /* failed again; the enqueue policy put it back to PENDING */
   FW_REPLAY_EVICTED,   /* failed again; the enqueue policy discarded it */
   FW_REPLAY_UNHANDLED, /* no handler for its operation type: left PENDING */
   FW_REPLAY_INVALID,   /* cannot be rebuilt into an event: left as it is */
   FW_REPLAY_BUSY,      /* claimed by another process, or gone: not touched */
   FW_REPLAY_WOULD_RUN, /* dry run: would be replayed */
   FW_REPLAY_STOPPED,   /* a stop request came first: claim released */
   FW_REPLAY_ERROR      /* the server failed us: see what */
} fw_replay_status_t;

typedef struct {
   fw_replay_status_t status;
   char what[1200]; /* one line saying what happened, e.g. "requeued: Http.Timeout: slow" */
   char notes[300]; /* fields the entry did not store, e.g. "fullDocument not stored", or "" */
} fw_replay_result_t;

/*
 * Replays one entry of d's stream (entry: the document as last read, borrowed)
 * on the calling thread, which must be the one using d's clients; store is
 * its DLQ (fw_dlq_replay_store; borrowed), where it claims, extends and
 * settles the entry. Fills out.
 */
void fw_dlq_replay_entry (fw_dispatcher_t *d, fw_dlq_store_t *store, const bson_t *entry,
                          const fw_replay_options_t *opts, fw_replay_result_t *out);

/*
 * Called by a stream's thread between events: when the stream has
 * dlq.reprocess and its round is due, replays up to batch_size of its own
 * PENDING entries with reprocessAttempts < max_attempts, oldest clusterTime
 * first, then schedules the next round (*next_ms: when it is due; 0: not
 * read yet, -1: never). Returns at once otherwise. Stops between entries
 * when the stream is asked to stop.
 */
void fw_dlq_reprocess_tick (fw_dispatcher_t *d, int64_t *next_ms);

/* --- a sequenced DLQ (issue 14; dlq_sequence.h) ------------------------------ */

/* Called for every entry a sequence replay ran (entry: as read before). */
typedef void (*fw_replay_report_fn) (void *ud, const bson_t *entry, const fw_replay_result_t *r);

typedef enum {
   FW_SEQ_REPLAY_NONE,   /* the entry is in no sequence: replayed alone */
   FW_SEQ_REPLAY_CLOSED, /* every entry resolved (or evicted): the sequence is closed */
   FW_SEQ_REPLAY_OPEN,   /* stopped at an entry that failed again (it stays head), a stop
                          * request, a dry run, or a live event still being parked */
   FW_SEQ_REPLAY_BEHIND, /* the entry is not its sequence's head: not touched */
   FW_SEQ_REPLAY_ERROR   /* the server failed us: error says how */
} fw_seq_replay_t;

/*
 * Replays sequence seq of d's stream: its waiting entries by sequenceIndex,
 * each through fw_dlq_replay_entry and then report. The first entry that
 * is not resolved, skipped or evicted stops it. When none is left it closes
 * the sequence (conditional on no live event having joined it since it read
 * the entries; if one has, it replays that one too) and removes it from the
 * stream's open sequences. dlq: the stream's DLQ store (borrowed), which
 * keeps the sequence's record beside the entries.
 */
fw_seq_replay_t fw_dlq_replay_sequence (fw_dispatcher_t *d, fw_dlq_store_t *dlq, const char *seq,
                                        const fw_replay_options_t *opts, fw_replay_report_fn report,
                                        void *ud, fw_error_t *error);

/* Replays entry as a selection does: alone when it has no sequenceId, its
 * whole sequence when it is the head (the lowest waiting sequenceIndex), and
 * nothing (FW_SEQ_REPLAY_BEHIND) when an earlier entry of its sequence waits. */
fw_seq_replay_t fw_dlq_replay_select (fw_dispatcher_t *d, fw_dlq_store_t *dlq, const bson_t *entry,
                                      const fw_replay_options_t *opts, fw_replay_report_fn report,
                                      void *ud, fw_error_t *error);

/* Whether entry is the head of its sequence (true for an entry in none). */
bool fw_dlq_replay_is_head (fw_dlq_store_t *dlq, const bson_t *entry, bool *head,
                            fw_error_t *error);

/* Rebuilds the change event entry was made from into event (initialised
 * here, owned by the caller, also on failure) and parses it into ev, which
 * points into event. False with why filled when the entry cannot be one. */
bool fw_dlq_replay_build_event (const bson_t *entry, bson_t *event, fw_event_t *ev, char *why,
                                size_t len);

/* Deferred retries (retry.mode = "deferred", issue 29; deferred_retry.c):
 * called by a stream's thread between events and while idle. When its next
 * check is due, claims the stream's due SCHEDULED entries one by one, runs
 * each once through fw_event_dispatch (as a replay, no blocking retry) and
 * settles it: RESOLVED (a sequenced DLQ's parked followers then replayed,
 * as fw_dlq_replay_sequence does), SCHEDULED again after the retry backoff,
 * or PENDING once retry.max_attempts attempts were made. Then counts what
 * is scheduled into the stream's metrics. No-op for other streams. */
void fw_deferred_tick (fw_dispatcher_t *d);

/* "resolved", "requeued", ...: the status as the summary names it. */
const char *fw_dlq_replay_status_name (fw_replay_status_t status);

#endif
