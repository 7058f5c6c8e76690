/*
 * dlq_store.h - where dead-lettered events go: the DlqStore SPI of seed 002.
 *
 * A store is a table of functions plus its own state, so another backend
 * (a file, a queue) can be added by filling an fw_dlq_store_t. flowwarden
 * ships the MongoDB store (fw_dlq_store_mongo_new), which writes seed 002's
 * document to the stream's DLQ collection.
 *
 * Entries are BSON documents shaped exactly as seed 002's "DLQ Document
 * Schema", plus eventId, ns {db, coll}, clusterTime, scriptVersion, the
 * entry's life fields and the event fields a replay needs (dlq_entry.h).
 * A store keeps one entry per (streamName, eventId).
 */
#ifndef FLOWWARDEN_DLQ_STORE_H
#define FLOWWARDEN_DLQ_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/dlq_sequence.h"
#include "flowwarden/error.h"

typedef struct fw_dlq_store fw_dlq_store_t;

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
    * initialised by the callee and owned by the caller. */
   bool (*find_by_id) (fw_dlq_store_t *store, const char *id, bson_t *out, bool *found,
                       fw_error_t *error);
   /* Appends every entry of stream, oldest first, to out (an array document
    * initialised by the callee, owned by the caller). */
   bool (*find_by_stream) (fw_dlq_store_t *store, const char *stream, bson_t *out,
                           fw_error_t *error);
   /* Counts the entries of stream (all streams when stream is NULL). */
   bool (*count) (fw_dlq_store_t *store, const char *stream, int64_t *out, fw_error_t *error);
   void (*destroy) (fw_dlq_store_t *store);
};

/* The MongoDB store. client is borrowed and must outlive the store;
 * write_concern_tag ("majority") or, when NULL, write_concern_w is used for
 * saves. Ensures the TTL index on expiresAt, the {streamName, createdAt}
 * index and the unique {streamName, eventId} index (fw_stream_event_unique),
 * idempotently; fails if they cannot be created, except when the unique
 * index is refused because the collection already holds duplicates: then
 * it logs a warning and works without it (saves are upserts). */
fw_dlq_store_t *fw_dlq_store_mongo_new (mongoc_client_t *client, const char *database,
                                        const char *collection, const char *write_concern_tag,
                                        int write_concern_w, fw_error_t *error);

/*
 * Seed 004's in-memory variant (dlq = { store = "memory" }): the entries live
 * in the process and are lost when it exits, so it suits tests
 * (flowwarden.testing uses it), not production. Same semantics as the
 * MongoDB store: one entry per (streamName, eventId), a retried save of an
 * entry already stored (same _id) counts as saved. Thread-safe.
 */
fw_dlq_store_t *fw_dlq_store_memory_new (fw_error_t *error);

/* A memory store only: replaces the entry whose _id is entry's _id (a
 * replay's outcome), or adds it. False when out of memory or entry has no
 * _id. */
bool fw_dlq_store_memory_put (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error);

/* A memory store only: copies the entry the last successful save wrote (as
 * stored, after an update) into out (initialised here, owned by the caller);
 * false when nothing was saved since the last call. Clears it. */
bool fw_dlq_store_memory_take_last (fw_dlq_store_t *store, bson_t *out);

/*
 * A memory store only: the sequences of a sequenced DLQ (dlq_sequence.h),
 * kept beside the entries under the store's lock: one record per (stream,
 * sequence id) with the sequences collection's open, next and inflight, and
 * the same semantics as the fw_dlq_sequence_* function of the same name
 * (load resets inflight; take with open = false answers FW_SEQ_CLOSED for a
 * sequence that is closed or unknown; size counts the sequence's PENDING and
 * REPROCESSING entries). They live and die with the store: a process that
 * exits loses them with the entries. They fail (error filled) only when
 * store is not a memory store or memory runs out.
 */
bool fw_dlq_store_memory_seq_load (fw_dlq_store_t *store, const char *stream,
                                   fw_dlq_sequences_t *into, fw_error_t *error);
bool fw_dlq_store_memory_seq_take (fw_dlq_store_t *store, const char *stream, const char *id,
                                   bool open, int64_t *index, fw_seq_take_t *result,
                                   fw_error_t *error);
bool fw_dlq_store_memory_seq_settle (fw_dlq_store_t *store, const char *stream, const char *id,
                                     fw_error_t *error);
bool fw_dlq_store_memory_seq_read (fw_dlq_store_t *store, const char *stream, const char *id,
                                   fw_seq_state_t *out, fw_error_t *error);
bool fw_dlq_store_memory_seq_close (fw_dlq_store_t *store, const char *stream, const char *id,
                                    int64_t expected_next, bool *closed, fw_error_t *error);
bool fw_dlq_store_memory_seq_size (fw_dlq_store_t *store, const char *stream, const char *id,
                                   int64_t *out, fw_error_t *error);

/* A memory store only: appends one document per sequence of stream (all
 * streams when NULL), in the order they were first opened, to out (an array
 * document initialised here, owned by the caller): { streamName, sequenceId,
 * open, next, inflight }. False when store is not a memory store. */
bool fw_dlq_store_memory_sequences (fw_dlq_store_t *store, const char *stream, bson_t *out);

/* Destroys any store. NULL is a no-op. */
void fw_dlq_store_destroy (fw_dlq_store_t *store);

#endif
