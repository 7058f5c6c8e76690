/*
 * dlq_store-private.h - what the MongoDB store's files share: dlq_store.c
 * (saving, indexes, the constructors) and dlq_store_mongo_ops.c (reading,
 * changing and the sequences).
 */
#ifndef FLOWWARDEN_DLQ_STORE_PRIVATE_H
#define FLOWWARDEN_DLQ_STORE_PRIVATE_H

#include "runtime/dlq/dlq_store.h"

typedef struct {
   fw_dlq_store_t base; /* first: a store pointer is a mongo_store pointer */
   mongoc_collection_t *coll;
   mongoc_collection_t *seqs; /* "<collection>_sequences" */
   mongoc_write_concern_t *wc;
   char *name;        /* db.collection [(connection "NAME")], for messages */
   char *seqs_name;   /* db.collection_sequences [(connection "NAME")] */
   bool unique_index; /* fw_stream_event_unique exists: a first write can insert */
   bool unsure;       /* the last save failed: it may have been applied all the same */
   bool seq_indexed;  /* seq_load ensured the DLQ's sequence index */
} fw_mongo_store_t;

/* Fills store's methods other than save, find_by_id, find_by_stream, count
 * and destroy (dlq_store_mongo_ops.c). */
void fw_dlq__mongo_methods (fw_dlq_store_t *store);

/* The upsert of entry keyed on key (its streamName and eventId): a new
 * event inserts the whole entry; one dead-lettered before (it came back
 * after a crash between the DLQ write and the checkpoint) adds its attempts,
 * takes the new error and times, goes back to PENDING and gets an "enqueued"
 * history item, the history kept to its last FW_DLQ_HISTORY_MAX items. opts
 * (a write concern, or a session) are added to the update's
 * (dlq_store_mongo_upsert.c). */
bool fw_dlq__mongo_upsert (fw_mongo_store_t *m, const bson_t *entry, const bson_t *key,
                           const bson_t *opts, bson_error_t *berr);

/* The update of an entry settled with o other than FW_DLQ_RESCHEDULE, by
 * actor, appended to update (the caller's, empty) (dlq_store_mongo_claim.c). */
void fw_dlq__mongo_settle_update (const fw_dlq_outcome_t *o, const char *actor, bson_t *update);

/* Fills store's methods that join a caller's transaction
 * (dlq_store_mongo_txn.c). */
void fw_dlq__mongo_txn_methods (fw_dlq_store_t *store);

/* Fills store's claim methods (dlq_store_mongo_claim.c). */
void fw_dlq__mongo_claim_methods (fw_dlq_store_t *store);

/* Fills store's deferred-retry methods (dlq_store_mongo_deferred.c). */
void fw_dlq__mongo_deferred_methods (fw_dlq_store_t *store);

/* The update of a settled FW_DLQ_RESCHEDULE (dlq_store_mongo_deferred.c),
 * appended to update (the caller's, empty). */
void fw_dlq__mongo_reschedule_update (const fw_dlq_outcome_t *o, const char *actor, bson_t *update);

/* "<what> on <m->name> failed: <berr's message>" */
static inline void
fw_dlq__mongo_error (fw_error_t *error, const char *what, const char *name,
                     const bson_error_t *berr)
{
   fw_error_set_code (error, FW_ERROR_MONGO, (int) berr->code, "%s on %s failed: %s", what, name,
                      berr->message);
}

#endif
