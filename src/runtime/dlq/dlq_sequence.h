/*
 * dlq_sequence.h - seed 004's sequenced dead-letter queue (issue 14): the
 * sequences of a stream's DLQ, in memory and on the server.
 *
 * A sequence is the events of one key (the canonical Extended JSON of the
 * stream's dlq.sequence_key, by default the documentKey). When an event of
 * key S is dead-lettered, S is open: later live events of S are not handled
 * but parked behind it as DLQ entries (sequenceId S, sequenceIndex n, no
 * error), until a replay resolves the whole sequence in index order and
 * closes it.
 *
 * Both sides meet in one document per sequence, in the collection
 * "<dlq collection>_sequences" beside the DLQ:
 *
 *   { _id: { streamName, sequenceId }, streamName, sequenceId,
 *     open: bool, next: int64, inflight: int64,
 *     createdAt, openedAt, lastTouched, closedAt }
 *
 * - next is the index the next entry of the sequence gets; a live stream
 *   takes one with findAndModify ($inc next and inflight), conditional on
 *   open: true when it parks, and opening the sequence when it dead-letters
 *   the head. After the entry is stored it gives inflight back.
 * - A replay closes the sequence with one update conditional on
 *   { open: true, next: N, inflight: 0 }, N being what it read before it
 *   selected the entries it resolved. If a live event took an index
 *   meanwhile, next has moved and the close does not match: the replay
 *   reads again and handles the newcomer first. So a live event is either
 *   parked behind every entry of S (it took an index before the close) or
 *   handled after the close (its conditional index request finds S closed),
 *   never in between.
 * - A stream killed between taking an index and storing its entry leaves
 *   inflight > 0; the stream resets its own sequences' inflight when it
 *   starts (the event itself comes back after the restart and is parked
 *   again under a new index).
 *
 * A DLQ store's seq_* methods (dlq_store.h) are the way to both sides: the
 * in-memory store keeps the same documents beside its entries, and the
 * MongoDB store's methods are the requests above on its collections
 * (dlq_sequence.c, private to the store: dlq_sequence-private.h).
 */
#ifndef FLOWWARDEN_DLQ_SEQUENCE_H
#define FLOWWARDEN_DLQ_SEQUENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bson/bson.h>

#include "flowwarden/error.h"

/* --- the open sequences of one stream, in memory --------------------------- */

typedef struct fw_dlq_sequences fw_dlq_sequences_t;

/* NULL when memory runs out. Owned by the caller. */
fw_dlq_sequences_t *fw_dlq_sequences_new (void);
void fw_dlq_sequences_destroy (fw_dlq_sequences_t *s); /* NULL: no-op */

size_t fw_dlq_sequences_count (const fw_dlq_sequences_t *s);
bool fw_dlq_sequences_has (const fw_dlq_sequences_t *s, const char *id);
/* Copies id. False when memory runs out (the set is unchanged). */
bool fw_dlq_sequences_add (fw_dlq_sequences_t *s, const char *id);
void fw_dlq_sequences_remove (fw_dlq_sequences_t *s, const char *id);
void fw_dlq_sequences_clear (fw_dlq_sequences_t *s);

/* --- sequence ids ------------------------------------------------------------ */

/* The canonical Extended JSON of value (e.g. {"_id":{"$numberInt":"42"}} or
 * "c1"), as a string the caller frees with bson_free. NULL when value has
 * no JSON form. */
char *fw_dlq_sequence_id (const bson_value_t *value);

/* --- what a store's seq_* methods answer ---------------------------------- */

typedef enum {
   FW_SEQ_TAKEN, /* *index holds the entry's sequenceIndex */
   FW_SEQ_CLOSED /* park only: the sequence is closed (a replay resolved it) */
} fw_seq_take_t;

typedef struct {
   bool exists;
   bool open;
   int64_t next;
   int64_t inflight;
} fw_seq_state_t;

#endif
