/*
 * event_txn.h - exactly_once (issue 39): a handler attempt's transaction
 * (event_txn.c), used by event_dispatch.c only.
 */
#ifndef FLOWWARDEN_EVENT_TXN_H
#define FLOWWARDEN_EVENT_TXN_H

#include <stdbool.h>

#include <lua.h>

#include "lua_api/mongo_lua.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_store.h"

typedef enum {
   FW_TXN_COMMITTED,
   FW_TXN_FAILED, /* a failure table is on top of L's stack */
   FW_TXN_FENCED, /* a newer leader holds the checkpoint: nothing committed */
} fw_txn_end_t;

/* Whether d's attempts run in transactions: fw_txn_wanted, inline in
 * dispatcher-private.h. */

/* Starts the attempt's transaction (on d's kept session, started and
 * recorded first when there is none) and joins fw.mongo to them
 * through *join (the caller's, alive until fw_txn_end). False with a failure
 * table pushed when it cannot. */
bool fw_txn_begin (fw_dispatcher_t *d, lua_State *L, fw_mongo_txn_t *join);

/* Writes the position past ev (a replay: the entry's resolution) in the
 * transaction and commits it; the
 * transaction is over whatever happens (the session is kept). */
fw_txn_end_t fw_txn_commit (fw_dispatcher_t *d, lua_State *L, const fw_event_t *ev);

/* Aborts the transaction (if any); the session is kept for the next one. */
void fw_txn_end (fw_dispatcher_t *d);

/* The server's transactionLifetimeLimitSeconds, in ms, as getParameter
 * tells it (admin only: a user without the privilege is refused, and then
 * MongoDB's default, 60 s, is assumed) (event_txn_limits.c). */
int64_t fw_txn_lifetime_ms (mongoc_client_t *client);

/* True, with d->out.failure set, when an attempt of d's transactions (a
 * change event's, or with replay a replayed dead letter's) failed with error
 * type: Mongo.TransactionsUnsupported, a deployment setting that fails every
 * event alike, stops the stream (FW_OUTCOME_FAILED) instead of dead-lettering
 * each. */
bool fw_txn_unsupported_stops (fw_dispatcher_t *d, bool replay, const char *type,
                               const char *message);

typedef enum {
   FW_TXN_DLQ_NOT_JOINED, /* no transaction, or the DLQ is elsewhere: save it as before */
   FW_TXN_DLQ_COMMITTED,  /* the entry and the position past the event are committed */
   FW_TXN_DLQ_STOPPED,    /* a shutdown came first, or a newer leader holds the checkpoint */
} fw_txn_dlq_t;

/* Writes entry (built for ev, whose log id is id) and the position past ev
 * in one transaction when d runs its attempts in transactions and its DLQ
 * is MongoDB's on the transactions' client; tried a few times with the
 * restart backoff, then left to the caller (NOT_JOINED) with a warning
 * (event_txn_dlq.c). entry stays the caller's. */
fw_txn_dlq_t fw_txn_dead_letter (fw_dispatcher_t *d, const fw_event_t *ev, const bson_t *entry,
                                 const char *id);

/* The stream's DLQ opened on client (a reader's store, no index made) when
 * it is MongoDB's on that very client, else NULL (another connection, the
 * in-memory store, or out of memory). The caller destroys it
 * (event_txn_dlq.c). */
fw_dlq_store_t *fw_txn_sink_dlq (fw_dispatcher_t *d, mongoc_client_t *client);

/* Whether d's attempts run in MongoDB transactions (exactly_once into
 * MongoDB, not another store's sink), and the session they run in (d's;
 * NULL before the first). */
bool fw_txn_in_mongo (const fw_dispatcher_t *d);
mongoc_client_session_t *fw_txn_session (const fw_dispatcher_t *d);

/* Ends d's kept session (before its client goes). */
void fw_txn_release (fw_dispatcher_t *d);

#endif
