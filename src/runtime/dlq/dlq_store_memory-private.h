/*
 * dlq_store_memory-private.h - what the in-memory store's files share:
 * dlq_store_memory.c (saving, the sequences) and dlq_store_memory_ops.c
 * (reading and changing entries).
 */
#ifndef FLOWWARDEN_DLQ_STORE_MEMORY_PRIVATE_H
#define FLOWWARDEN_DLQ_STORE_MEMORY_PRIVATE_H

#include <pthread.h>

#include "runtime/dlq/dlq_store.h"

/* One sequence of a sequenced DLQ: the sequences collection's document. */
typedef struct {
   char *stream;
   char *id;
   bool open;
   int64_t next;
   int64_t inflight;
} fw_memory_seq_t;

typedef struct {
   fw_dlq_store_t base; /* first: a store pointer is a memory_store pointer */
   pthread_mutex_t mu;
   bson_t **entries; /* in the order they were first saved: oldest first */
   size_t n, cap;
   bson_t *last;          /* what the last save wrote, for fw_dlq_store_memory_take_last */
   fw_memory_seq_t *seqs; /* in the order they were first opened */
   size_t n_seqs, cap_seqs;
} fw_memory_store_t;

/* The string at key of doc, or NULL. */
static inline const char *
fw_dlq__utf8_field (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

/* Fills store's reading and changing methods (dlq_store_memory_ops.c). */
void fw_dlq__memory_methods (fw_dlq_store_t *store);

/* Fills store's claim methods (dlq_store_memory_claim.c). */
void fw_dlq__memory_claim_methods (fw_dlq_store_t *store);

/* entry as a MongoDB update leaves it (NULL when out of memory; the
 * caller's): the fields of set ($set, not dotted) replaced or added, those
 * of removed (NULL-terminated, may be NULL: $unset) left out,
 * reprocessAttempts + 1 when inc_attempts, diagnostics' fields set in the
 * entry's diagnostics (NULL: none), history_item pushed on its history, the
 * last FW_DLQ_HISTORY_MAX kept (NULL: none). */
bson_t *fw_dlq__memory_rebuilt (const bson_t *entry, const bson_t *set, const char *const *removed,
                                bool inc_attempts, const bson_t *diagnostics,
                                const bson_t *history_item);

#endif
