/*
 * dlq_claim_keeper.h - keeps a replay's claim on a DLQ entry alive while
 * its handler runs (issue 25, section 5).
 *
 * A replay claims an entry for claim_ttl_ms (dlq_store.h's claim). One
 * handler attempt may take longer than that (a slow HTTP call, a long
 * fw.sleep); the replay's thread is inside the handler and cannot extend
 * the claim itself. A keeper is a thread of its own that pushes the claim
 * forward by claim_ttl_ms every claim_ttl_ms / 3 until it is stopped, so a
 * claim is lost only when the process dies (or cannot reach the server for
 * a whole TTL).
 *
 * libmongoc clients are single-threaded: the keeper never uses the
 * replay's client. With conns set it pops a client of its own from the
 * connection's pool and opens its own reader store on the DLQ collection;
 * with store set (a thread-safe store: the in-memory one) it uses that.
 */
#ifndef FLOWWARDEN_DLQ_CLAIM_KEEPER_H
#define FLOWWARDEN_DLQ_CLAIM_KEEPER_H

#include <stdint.h>

#include <bson/bson.h>

#include "flowwarden/error.h"
#include "runtime/dlq/dlq_store.h"
#include "runtime/host/connections.h"

typedef struct {
   fw_dlq_store_t *store;   /* a thread-safe store (borrowed), or NULL: conns */
   fw_connections_t *conns; /* the registry to pop the keeper's client from (borrowed) */
   const char *connection;  /* its name: the DLQ's dlq.connection, or "default" */
   const char *database;    /* the DLQ's database and collection */
   const char *collection;
   const char *stream;     /* for the log */
   const bson_value_t *id; /* the claimed entry's _id */
   const char *actor;      /* the claim's claimedBy */
   int64_t claim_ttl_ms;   /* > 0 */
} fw_claim_keeper_opts_t;

typedef struct fw_claim_keeper fw_claim_keeper_t;

/* Starts a keeper for o's claim (every field is copied). NULL with error
 * filled when the thread cannot be started or memory runs out. The first
 * extension comes claim_ttl_ms / 3 after the start. */
fw_claim_keeper_t *fw_claim_keeper_start (const fw_claim_keeper_opts_t *o, fw_error_t *error);

/* How many extensions the keeper made that found the claim held. */
int64_t fw_claim_keeper_extensions (fw_claim_keeper_t *k);

/* Stops the keeper, waits for its thread (an extension in flight ends
 * first), gives its client back and frees it. NULL is a no-op. */
void fw_claim_keeper_stop (fw_claim_keeper_t *k);

#endif
