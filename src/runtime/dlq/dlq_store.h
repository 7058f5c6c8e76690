/*
 * dlq_store.h - where dead-lettered events go: the DlqStore SPI of seed 002,
 * and the one interface to dead letters.
 *
 * A store is a table of functions plus its own state, so another backend
 * (a file, a queue) can be added by filling an fw_dlq_store_t. flowwarden
 * ships the MongoDB store (fw_dlq_store_mongo_new for a stream,
 * fw_dlq_store_mongo_open for a reader), which writes seed 002's document
 * to the stream's DLQ collection and a sequenced DLQ's sequences beside it,
 * and the in-memory store (fw_dlq_store_memory_new), with the same answers.
 * Whoever saves, lists, counts, claims, settles, discards or purges entries,
 * or takes a sequence's indexes, does it through these methods: the
 * collections' field names are the stores' business (and dlq_entry.c's,
 * which builds the document).
 *
 * Entries are BSON documents shaped exactly as seed 002's "DLQ Document
 * Schema", plus eventId, ns {db, coll}, clusterTime, scriptVersion, the
 * entry's life fields and the event fields a replay needs (dlq_entry.h).
 * A store keeps one entry per (streamName, eventId). A store is used by
 * one thread at a time, except the in-memory store, which is thread-safe.
 */
#ifndef FLOWWARDEN_DLQ_STORE_H
#define FLOWWARDEN_DLQ_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/dlq/dlq_sequence.h"

#define FW_DLQ_MAX_IDS 64

/* The filters every `flowwarden dlq` verb shares, and what a store's query
 * selects. Strings are borrowed (usually argv). Zero/NULL fields filter
 * nothing. */
typedef struct {
   const char *stream;              /* --stream NAME */
   const char *status;              /* --status S: PENDING, REPROCESSING, RESOLVED, DISCARDED;
                                  * may be a comma-separated list */
   const char *error_type;          /* --error-type T: T and its subtypes (T.*) */
   int64_t since_ms;                /* --since: createdAt >= (ms since the epoch); 0 = none */
   int64_t until_ms;                /* --until: createdAt < ; 0 = none */
   const char *ids[FW_DLQ_MAX_IDS]; /* --id ID, repeatable */
   int n_ids;
   int64_t limit;           /* --limit N; 0 = none */
   const char *filter_json; /* --filter JSON: Extended JSON query, ANDed with the rest
                                  * (the MongoDB store only) */
} fw_dlq_filter_t;

/* What a store's query, tally, discard and purge select: the entries filter
 * matches (NULL: every entry), default_status standing in for an unset
 * filter->status (NULL: any status), and, when ids (an array document,
 * borrowed) is set, whose _id is one of ids. limit caps query's entries (0: none;
 * filter->limit is not used: the caller splits it between stores). Unless
 * with_documents, query leaves fullDocument, fullDocumentBeforeChange and
 * updateDescription out (they may hold personal data). */
typedef struct {
   const fw_dlq_filter_t *filter;
   const char *default_status;
   const bson_t *ids;
   int64_t limit;
   bool with_documents;
} fw_dlq_query_t;

/* What claimable selects beyond its query. */
typedef struct {
   const char *sequence; /* only the entries of this sequence; NULL: any or none */
   bool in_sequence;     /* only entries in a sequence */
   int64_t max_attempts; /* only entries with reprocessAttempts below (missing: 0); 0: any */
   int64_t now_ms;       /* a claim that ends before this has expired */
} fw_dlq_claimable_t;

/* Whether entry matches q (the in-memory store's filter; the MongoDB store
 * makes a query of it, fw_dlq_filter_to_query). False with error filled for
 * a bad status name, or a --filter (a MongoDB query only MongoDB runs). */
bool fw_dlq_query_matches (const fw_dlq_query_t *q, const bson_t *entry, bool *match,
                           fw_error_t *error);

/* Called for every entry a query finds, oldest first (createdAt, then _id);
 * entry is borrowed for the call. Returning false stops the query (the
 * visitor fills error). */
typedef bool (*fw_dlq_entry_fn) (const bson_t *entry, void *ud, fw_error_t *error);

/* One group of a tally: the entries with the same stream, status and error
 * type (each borrowed for the call; "?" when missing or not a string).
 * parked: the entries have no error and a sequenceId (parked behind their
 * sequence's head). */
typedef struct {
   const char *stream;
   const char *status;
   const char *error_type;
   bool parked;
   int64_t n;
} fw_dlq_group_t;

typedef bool (*fw_dlq_group_fn) (const fw_dlq_group_t *group, void *ud, fw_error_t *error);

/* A sequence's record (dlq_sequence.h), as a store lists it; the strings are
 * borrowed for the call, "?" when a record edited by hand lacks them. */
typedef struct {
   const char *stream;
   const char *id;
   int open; /* 1, 0, or -1: missing or not a bool */
   int64_t next;
   int64_t inflight;
} fw_dlq_seq_t;

typedef bool (*fw_dlq_seq_fn) (const fw_dlq_seq_t *seq, void *ud, fw_error_t *error);

/* What becomes of an entry a replay claimed (the store's settle). */
typedef enum {
   FW_DLQ_RELEASE,   /* back to PENDING as it was (lastTouched) */
   FW_DLQ_RESOLVE,   /* RESOLVED, resolution REPLAYED (SKIPPED with skipped), resolvedAt;
                    * history "resolved" with result "ok" ("skipped") */
   FW_DLQ_REQUEUE,   /* PENDING after a failed replay: lastReprocessAt, lastReprocessError
                    * {type, message}, reprocessAttempts + 1, diagnostics.<key> set from
                    * diagnostics; history "requeued" with result "type: message" */
   FW_DLQ_EVICT,     /* DISCARDED by the enqueue policy: as REQUEUE but no diagnostics,
                    * discardedAt and discardReason "evicted by enqueue policy"; history
                    * "discarded" */
   FW_DLQ_RESCHEDULE /* a deferred retry failed (issue 29): attempts + 1, error {type,
                      * message} and lastAttemptAt replaced; SCHEDULED with nextAttemptAt
                      * next_attempt_ms, or (next_attempt_ms 0: no attempt left) PENDING
                      * without it; history "rescheduled" / "requeued" */
} fw_dlq_settle_t;

typedef struct {
   fw_dlq_settle_t kind;
   int64_t now_ms;         /* lastTouched, and the history item's at */
   bool skipped;           /* FW_DLQ_RESOLVE */
   const char *error_type; /* FW_DLQ_REQUEUE, FW_DLQ_EVICT */
   const char *error_message;
   const bson_t *diagnostics; /* FW_DLQ_REQUEUE; NULL: none */
   int64_t next_attempt_ms;   /* FW_DLQ_RESCHEDULE */
   int attempts_added;        /* FW_DLQ_RESCHEDULE: attempts made (0: released unrun) */
} fw_dlq_outcome_t;

typedef struct fw_dlq_store fw_dlq_store_t;

/* What a store can do beyond what every store does: its answer is its
 * capabilities field, asked through fw_dlq_store_can. Callers ask the store,
 * never test whether a method is NULL; the methods of a capability a store
 * lacks are NULL. */
typedef enum {
   /* Keeps deferred retries (retry.mode = "deferred", issue 29): claim_due,
    * scheduled and settle's FW_DLQ_RESCHEDULE. */
   FW_DLQ_CAN_DEFER = 1u << 0,
   /* Writes inside a caller's MongoDB transaction (exactly_once, issue 39):
    * save_in, settle_in. */
   FW_DLQ_CAN_JOIN = 1u << 1,
} fw_dlq_capability_t;

/*
 * Every method returns false with error filled when the backend fails (or
 * memory runs out); out parameters are then unspecified unless said. A
 * method never takes ownership of its arguments; strings are borrowed for
 * the call.
 */
struct fw_dlq_store {
   /* Persists entry (as fw_dlq_entry_build made it) durably; true only once
    * the backend acknowledged it. An entry for an event already stored
    * (same streamName and eventId) updates that entry instead: attempts
    * added, lastAttemptAt, error and lastTouched replaced, status back to
    * PENDING, its history item appended (the last FW_DLQ_HISTORY_MAX kept).
    * May be called again with the same entry after a failure: an entry
    * already applied counts as saved. */
   bool (*save) (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error);
   /* Finds the entry with _id == id; *found tells whether it exists. out is
    * initialised by the callee (also on failure) and owned by the caller. */
   bool (*find_by_id) (fw_dlq_store_t *store, const char *id, bson_t *out, bool *found,
                       fw_error_t *error);
   /* Appends every entry of stream, oldest first, to out (an array document
    * initialised by the callee, also on failure; owned by the caller). */
   bool (*find_by_stream) (fw_dlq_store_t *store, const char *stream, bson_t *out,
                           fw_error_t *error);
   /* Counts the entries of stream (all streams when stream is NULL) into
    * *out. */
   bool (*count) (fw_dlq_store_t *store, const char *stream, int64_t *out, fw_error_t *error);
   /* The PENDING entries of stream: how many (*count), and the createdAt of
    * the oldest (*oldest_ms; 0 when there is none or it has no date). */
   bool (*pending) (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
                    fw_error_t *error);
   /* Visits the entries q selects, oldest first, at most q->limit. */
   bool (*query) (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_entry_fn visit, void *ud,
                  fw_error_t *error);
   /* What a replay or a reprocess round may claim: the entries q selects
    * that c allows, but no entry a live replay holds (REPROCESSING with
    * claimedUntil not before c->now_ms). Oldest clusterTime first (then
    * createdAt, _id), at most q->limit. Each entry is whole with
    * q->with_documents, else only _id, clusterTime, createdAt and
    * sequenceId (those it has). */
   bool (*claimable) (fw_dlq_store_t *store, const fw_dlq_query_t *q, const fw_dlq_claimable_t *c,
                      fw_dlq_entry_fn visit, void *ud, fw_error_t *error);
   /* Visits the groups of the entries q selects (q->limit ignored), and
    * lowers *oldest_pending_ms (the caller's, left alone when nothing is
    * older) to the createdAt of the oldest selected PENDING entry with a
    * date. */
   bool (*tally) (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_group_fn visit, void *ud,
                  int64_t *oldest_pending_ms, fw_error_t *error);
   /* Marks the entries q selects DISCARDED: discardedAt and lastTouched =
    * now_ms, discardReason = reason, and a history item {at, action:
    * "discarded", actor, result: reason}, the last FW_DLQ_HISTORY_MAX kept.
    * *touched: how many changed. */
   bool (*discard) (fw_dlq_store_t *store, const fw_dlq_query_t *q, const char *reason,
                    const char *actor, int64_t now_ms, int64_t *touched, fw_error_t *error);
   /* Deletes the entries q selects; *touched: how many. */
   bool (*purge) (fw_dlq_store_t *store, const fw_dlq_query_t *q, int64_t *touched,
                  fw_error_t *error);
   /* Stores entry as it is in place of the entry with its _id (an import, a
    * replay's outcome), or adds it; *inserted says which. False when entry
    * has no _id. */
   bool (*put) (fw_dlq_store_t *store, const bson_t *entry, bool *inserted, fw_error_t *error);

   /* --- a replay's claim on an entry (id: its _id, borrowed) -------------- */

   /* Claims the entry of stream with _id id when it is PENDING, or
    * REPROCESSING with a claim that ended before now_ms: REPROCESSING,
    * claimedBy actor, claimedUntil until_ms, lastTouched now_ms. *got says
    * whether it was claimable; out (initialised by the callee, also on
    * failure; the caller's) is then the entry as claimed. */
   bool (*claim) (fw_dlq_store_t *store, const char *stream, const bson_value_t *id,
                  const char *actor, int64_t now_ms, int64_t until_ms, bson_t *out, bool *got,
                  fw_error_t *error);
   /* Pushes actor's claim on the entry to until_ms. *held is false when
    * the claim was lost (expired and taken meanwhile). */
   bool (*extend) (fw_dlq_store_t *store, const bson_value_t *id, const char *actor,
                   int64_t until_ms, bool *held, fw_error_t *error);
   /* Applies what became of the entry while actor still holds its claim,
    * and gives the claim up (claimedBy, claimedUntil removed). *held as
    * extend's. */
   bool (*settle) (fw_dlq_store_t *store, const bson_value_t *id, const char *actor,
                   const fw_dlq_outcome_t *outcome, bool *held, fw_error_t *error);
   /* Deferred retries (issue 29): claims the SCHEDULED entry of stream
    * whose nextAttemptAt is earliest and not after now_ms (or one a killed
    * process left REPROCESSING with a nextAttemptAt and an expired claim):
    * as claim does. *got false when none is due; out as claim's. Set only
    * in a store that can FW_DLQ_CAN_DEFER. */
   bool (*claim_due) (fw_dlq_store_t *store, const char *stream, const char *actor, int64_t now_ms,
                      int64_t until_ms, bson_t *out, bool *got, fw_error_t *error);
   /* The SCHEDULED entries of stream: how many (*count), the oldest one's
    * createdAt (*oldest_ms) and the earliest nextAttemptAt (*next_ms); 0:
    * none. Set as claim_due. */
   bool (*scheduled) (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
                      int64_t *next_ms, fw_error_t *error);
   /* A claim a killed replay left (REPROCESSING, claimedUntil before
    * now_ms): back to PENDING, the claim removed. */
   bool (*release_stale) (fw_dlq_store_t *store, const bson_value_t *id, int64_t now_ms,
                          fw_error_t *error);

   /* --- the sequences of a sequenced DLQ (dlq_sequence.h) --------------- */

   /* Replaces into's content (the caller's) with stream's open sequences
    * and resets their inflight counts (the caller is the stream, starting:
    * none of its index requests is in flight). The MongoDB store also
    * ensures the DLQ's {streamName, sequenceId, sequenceIndex} index the
    * first time (failing when it cannot be created). */
   bool (*seq_load) (fw_dlq_store_t *store, const char *stream, fw_dlq_sequences_t *into,
                     fw_error_t *error);
   /* Takes the next index of sequence id into *index (*result FW_SEQ_TAKEN).
    * open = true (the head is dead-lettered): opens or reopens it; open =
    * false (a later event parks): only while it is open, else *result is
    * FW_SEQ_CLOSED. */
   bool (*seq_take) (fw_dlq_store_t *store, const char *stream, const char *id, bool open,
                     int64_t *index, fw_seq_take_t *result, fw_error_t *error);
   /* The entry of an index seq_take gave is stored: gives inflight back. */
   bool (*seq_settle) (fw_dlq_store_t *store, const char *stream, const char *id,
                       fw_error_t *error);
   /* The sequence's state into *out (out->exists false when it has none). */
   bool (*seq_read) (fw_dlq_store_t *store, const char *stream, const char *id, fw_seq_state_t *out,
                     fw_error_t *error);
   /* Closes the sequence if it is still open with next == expected_next and
    * nothing in flight; *closed says whether it was. */
   bool (*seq_close) (fw_dlq_store_t *store, const char *stream, const char *id,
                      int64_t expected_next, bool *closed, fw_error_t *error);
   /* The sequence's entries still waiting (PENDING or REPROCESSING). */
   bool (*seq_size) (fw_dlq_store_t *store, const char *stream, const char *id, int64_t *out,
                     fw_error_t *error);
   /* Visits the sequences of stream (all streams when NULL) that are not
    * closed (open is not false), and those whose sequenceId is in ids (an
    * array of strings, borrowed; NULL: none). */
   bool (*seq_list) (fw_dlq_store_t *store, const char *stream, const bson_t *ids,
                     fw_dlq_seq_fn visit, void *ud, fw_error_t *error);
   /* Visits the waiting entries (PENDING or REPROCESSING) of sequence id,
    * whole, lowest sequenceIndex first. */
   bool (*seq_entries) (fw_dlq_store_t *store, const char *stream, const char *id,
                        fw_dlq_entry_fn visit, void *ud, fw_error_t *error);
   /* How many waiting entries of sequence id have a sequenceIndex below
    * index (none: the entry at index is the sequence's head). */
   bool (*seq_before) (fw_dlq_store_t *store, const char *stream, const char *id, int64_t index,
                       int64_t *out, fw_error_t *error);
   /* Visits one group per sequence of stream (all when NULL) with waiting
    * entries (PENDING or REPROCESSING, with a string sequenceId), by
    * (stream, sequenceId), borrowed for the call: { _id: { s: stream, q:
    * sequenceId }, n: how many wait, and of the one with the lowest
    * sequenceIndex (its head): head: its _id, sequenceIndex, status, error,
    * createdAt (each null or missing when the entry lacks it) }. */
   bool (*seq_waiting) (fw_dlq_store_t *store, const char *stream, fw_dlq_entry_fn visit, void *ud,
                        fw_error_t *error);

   /* --- inside a caller's transaction (FW_DLQ_CAN_JOIN) ----------------- */

   /* save's work in the transaction session has in progress (session: one
    * of the store's client; the transaction's commit makes it durable, with
    * the commit's write concern): one entry per (streamName, eventId), a
    * new one inserted whole, one stored before updated as save does. Any
    * failure leaves the transaction to be aborted by the caller. */
   bool (*save_in) (fw_dlq_store_t *store, mongoc_client_session_t *session, const bson_t *entry,
                    fw_error_t *error);
   /* settle's work in the transaction session has in progress: *held false
    * (nothing changed) when actor no longer holds the claim. */
   bool (*settle_in) (fw_dlq_store_t *store, mongoc_client_session_t *session,
                      const bson_value_t *id, const char *actor, const fw_dlq_outcome_t *outcome,
                      bool *held, fw_error_t *error);

   void (*destroy) (fw_dlq_store_t *store);

   /* The fw_dlq_capability_t bits of what this store can do (0: only what
    * every store does). Set by the store's constructor. */
   unsigned capabilities;
};

/* Whether store can do cap (dlq_store.h's capabilities). */
static inline bool
fw_dlq_store_can (const fw_dlq_store_t *store, fw_dlq_capability_t cap)
{
   return (store->capabilities & (unsigned) cap) != 0;
}

/* The MongoDB store. Its sequences are in "<collection>_sequences" beside
 * it (fw_dlq_sequences_name). client is borrowed and must outlive the store;
 * write_concern_tag ("majority") or, when NULL, write_concern_w is used for
 * saves. Ensures the TTL index on expiresAt, the {streamName, createdAt}
 * index, the readers' sort indexes, the deferred retries' claim index
 * {streamName, status, nextAttemptAt} and the unique {streamName, eventId}
 * index (fw_stream_event_unique),
 * idempotently; fails if they cannot be created, except when the unique
 * index is refused because the collection already holds duplicates: then
 * it logs a warning and works without it (saves are upserts). */
fw_dlq_store_t *fw_dlq_store_mongo_new (mongoc_client_t *client, const char *database,
                                        const char *collection, const char *write_concern_tag,
                                        int write_concern_w, fw_error_t *error);

/* The MongoDB store of a reader or an operator (`flowwarden dlq`, metrics):
 * creates no index and writes with the client's write concern. Its error
 * messages say "<what> on DB.COLL (connection "NAME") failed: <server's
 * message>" (connection may be NULL: no parenthesis). client is borrowed
 * and must outlive the store; NULL when out of memory. */
fw_dlq_store_t *fw_dlq_store_mongo_open (mongoc_client_t *client, const char *database,
                                         const char *collection, const char *connection,
                                         fw_error_t *error);

/*
 * Seed 004's in-memory variant (dlq = { store = "memory" }): the entries live
 * in the process and are lost when it exits, so it suits tests
 * (flowwarden.testing uses it), not production. Same semantics as the
 * MongoDB store: one entry per (streamName, eventId), a retried save of an
 * entry already stored (same _id) counts as saved. Thread-safe.
 */
fw_dlq_store_t *fw_dlq_store_memory_new (fw_error_t *error);

/* A memory store only: copies the entry the last successful save wrote (as
 * stored, after an update) into out (initialised here, owned by the caller);
 * false when nothing was saved since the last call. Clears it. */
bool fw_dlq_store_memory_take_last (fw_dlq_store_t *store, bson_t *out);

/* A memory store only: appends one document per sequence of stream (all
 * streams when NULL), in the order they were first opened, to out (an array
 * document initialised here, owned by the caller): { streamName, sequenceId,
 * open, next, inflight }. False when store is not a memory store. */
bool fw_dlq_store_memory_sequences (fw_dlq_store_t *store, const char *stream, bson_t *out);

/* Destroys any store. NULL is a no-op. */
void fw_dlq_store_destroy (fw_dlq_store_t *store);

#endif
