/*
 * dlq_sequence-private.h - the MongoDB store's sequence requests
 * (dlq_sequence.c, the protocol of runtime/dlq/dlq_sequence.h) on its
 * "<dlq collection>_sequences" and DLQ collections. Only the MongoDB store
 * (dlq_store*.c) calls them; everyone else uses the store's seq_* methods.
 */
#ifndef FLOWWARDEN_DLQ_SEQUENCE_PRIVATE_H
#define FLOWWARDEN_DLQ_SEQUENCE_PRIVATE_H

#include <mongoc/mongoc.h>

#include "runtime/dlq/dlq_sequence.h"

/* "<dlq_collection>_sequences" (fw_dlq_sequences_name) in database, on
 * client. Owned by the caller; NULL when out of memory. */
mongoc_collection_t *fw_dlq_sequence_collection (mongoc_client_t *client, const char *database,
                                                 const char *dlq_collection);

/* Replaces into's content with the stream's open sequences, and resets
 * their inflight counts (the caller is the stream, starting or
 * reconnecting: none of its index requests is in flight). */
bool fw_dlq_sequence_load (mongoc_collection_t *seqs, const char *stream, fw_dlq_sequences_t *into,
                           fw_error_t *error);

/* Takes the next index of sequence id. open = true (the head of a sequence
 * is dead-lettered): opens or reopens it, creating its document; open =
 * false (a later event is parked): only while it is open. */
bool fw_dlq_sequence_take (mongoc_collection_t *seqs, const char *stream, const char *id, bool open,
                           int64_t *index, fw_seq_take_t *result, fw_error_t *error);

/* The entry of an index taken with fw_dlq_sequence_take is stored. */
bool fw_dlq_sequence_settle (mongoc_collection_t *seqs, const char *stream, const char *id,
                             fw_error_t *error);

bool fw_dlq_sequence_read (mongoc_collection_t *seqs, const char *stream, const char *id,
                           fw_seq_state_t *out, fw_error_t *error);

/* Closes the sequence if it is still open with next == expected_next and
 * nothing in flight; *closed says whether it was. */
bool fw_dlq_sequence_close (mongoc_collection_t *seqs, const char *stream, const char *id,
                            int64_t expected_next, bool *closed, fw_error_t *error);

/* Entries of sequence id still waiting in the DLQ (PENDING or
 * REPROCESSING). */
bool fw_dlq_sequence_size (mongoc_collection_t *dlq, const char *stream, const char *id,
                           int64_t *out, fw_error_t *error);

/* Creates the DLQ's index on (streamName, sequenceId, sequenceIndex). */
bool fw_dlq_sequence_indexes (mongoc_collection_t *dlq, fw_error_t *error);

#endif
