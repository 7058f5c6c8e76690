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
 *
 * A deployment without transactions (Mongo.TransactionsUnsupported: 20
 * IllegalOperation inside the transaction, libmongoc's refusal to start one)
 * fails every attempt of every event alike: the stream stops before the
 * event rather than send them all to the DLQ.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/dispatch/dispatcher-private.h"
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

bool
fw_txn_unsupported_stops (fw_dispatcher_t *d, bool replay, const char *type, const char *message)
{
   const char *conn = d->prog.cfg.exactly_once_connection ? d->prog.cfg.exactly_once_connection
                                                          : "default";

   if (!fw_txn_wanted (d, replay) || d->eo.sink.begin ||
       strcmp (type, "Mongo.TransactionsUnsupported") != 0) {
      return false;
   }
   snprintf (d->out.failure, sizeof d->out.failure,
             "exactly_once: connection \"%s\" has no transactions (Mongo.TransactionsUnsupported: "
             "%.400s): every event would fail alike, so the stream stops before this one instead "
             "of dead-lettering them (nothing is lost: it is read again at the next start). Run "
             "that deployment as a replica set (one member will do) or a sharded cluster "
             "(MongoDB 4.2+), or turn exactly_once off, then start the stream again",
             conn, message);
   return true;
}
