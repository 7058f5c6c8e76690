/*
 * event_txn_limits.c - exactly_once (issue 39): the server's limits an
 * attempt's transaction meets, as far as flowwarden must know them.
 *
 * transactionLifetimeLimitSeconds (60 s by default; MongoDB's manual,
 * "Production Considerations", "Runtime Limit"): the server aborts a
 * transaction open longer, and its next statement gets 251
 * NoSuchTransaction (jstests/core/txns/abort_expired_transaction.js). Knowing
 * the limit lets fw.mongo name that 251 Mongo.TransactionTooLong
 * (mongo_errors.c) instead of a transient error retried into the same wall.

 * (A deployment without transactions: fw_txn_unsupported_stops, event_txn.c.)
 */
#include "runtime/dispatch/event_txn.h"

/* MongoDB's default transactionLifetimeLimitSeconds. */
#define DEFAULT_LIFETIME_MS 60000

int64_t
fw_txn_lifetime_ms (mongoc_client_t *client)
{
   bson_t cmd = BSON_INITIALIZER, reply;
   bson_iter_t it;
   int64_t ms = DEFAULT_LIFETIME_MS;

   BSON_APPEND_INT32 (&cmd, "getParameter", 1);
   BSON_APPEND_INT32 (&cmd, "transactionLifetimeLimitSeconds", 1);
   if (mongoc_client_command_simple (client, "admin", &cmd, NULL, &reply, NULL) &&
       bson_iter_init_find (&it, &reply, "transactionLifetimeLimitSeconds") &&
       BSON_ITER_HOLDS_NUMBER (&it) && bson_iter_as_double (&it) > 0) {
      ms = (int64_t) (bson_iter_as_double (&it) * 1000.0);
   }
   bson_destroy (&reply);
   bson_destroy (&cmd);
   return ms;
}
