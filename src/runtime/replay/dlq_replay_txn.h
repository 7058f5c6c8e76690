/*
 * dlq_replay_txn.h - exactly_once for a replayed dead letter (issue 39),
 * used by dlq_replay.c only (dlq_replay_txn.c).
 */
#ifndef FLOWWARDEN_DLQ_REPLAY_TXN_H
#define FLOWWARDEN_DLQ_REPLAY_TXN_H

#include <stdbool.h>

#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_store.h"

typedef struct {
   fw_dlq_store_t *sink;   /* the DLQ on the transactions' client */
   const bson_value_t *id; /* the claimed entry's _id, borrowed */
   const char *actor;      /* its claim's holder, borrowed */
   bool resolved;          /* the last attempt wrote RESOLVED in its transaction */
} fw_replay_txn_t;

/* When d's stream has exactly_once and its DLQ lives on the transactions'
 * client: each attempt of the replay of entry id (claimed by actor) runs
 * in a transaction that also resolves the entry (RESOLVED, REPLAYED), so its
 * writes and its resolution commit together. False (t unused) otherwise:
 * the replay runs as without exactly_once (at least once). */
bool fw_replay_txn_start (fw_dispatcher_t *d, const bson_value_t *id, const char *actor,
                          fw_replay_txn_t *t);

/* Ends what start began (after the dispatch). */
void fw_replay_txn_stop (fw_dispatcher_t *d, fw_replay_txn_t *t);

#endif
