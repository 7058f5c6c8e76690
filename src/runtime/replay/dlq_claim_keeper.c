/*
 * dlq_claim_keeper.c - a thread that extends a replay's claim while its
 * handler runs (see dlq_claim_keeper.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/shutdown.h"
#include "runtime/replay/dlq_claim_keeper.h"

struct fw_claim_keeper {
   pthread_t thread;
   pthread_mutex_t mu;     /* guards extensions */
   fw_shutdown_t stop;     /* fw_claim_keeper_stop asks; the thread's waits end at once */
   int64_t extensions;     /* under mu */
   fw_dlq_store_t *shared; /* o->store, borrowed */
   fw_connections_t *conns;
   char *connection, *database, *collection, *stream, *actor;
   bson_value_t id;
   int64_t ttl_ms;
};

static void
keeper_free (fw_claim_keeper_t *k)
{
   free (k->connection);
   free (k->database);
   free (k->collection);
   free (k->stream);
   free (k->actor);
   bson_value_destroy (&k->id);
   free (k);
}

/* The keeper's own store: the shared thread-safe one, or a reader on a
 * client popped for this thread (its set in *clients, the caller's). */
static fw_dlq_store_t *
open_store (fw_claim_keeper_t *k, fw_connection_clients_t **clients, fw_error_t *error)
{
   mongoc_client_t *client;

   if (k->shared) {
      return k->shared;
   }
   if (!*clients && !(*clients = fw_connection_clients_new (k->conns))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return NULL;
   }
   if (!(client = fw_connection_clients_get (*clients, k->connection, error))) {
      return NULL;
   }
   return fw_dlq_store_mongo_open (client, k->database, k->collection, NULL, error);
}

static void *
keeper_main (void *arg)
{
   fw_claim_keeper_t *k = arg;
   fw_connection_clients_t *clients = NULL;
   fw_dlq_store_t *store = NULL;
   int64_t every = k->ttl_ms / 3 > 0 ? k->ttl_ms / 3 : 1;
   fw_error_t err;
   bool held = true;

   while (held && !fw_shutdown_wait_ms (&k->stop, every)) {
      if (!store && !(store = open_store (k, &clients, &err))) {
         fw_log (FW_LOG_WARN, k->stream, "cannot extend the replay's claim: %s", err.message);
         continue; /* tries again at the next tick */
      }
      if (!store->extend (store, &k->id, k->actor, fw_now_ms () + k->ttl_ms, &held, &err)) {
         fw_log (FW_LOG_WARN, k->stream, "cannot extend the replay's claim: %s", err.message);
         held = true; /* the server failed, not the claim: try again */
         continue;
      }
      if (!held) {
         fw_log (FW_LOG_WARN, k->stream,
                 "the replay's claim expired and another process took the entry");
      }
      pthread_mutex_lock (&k->mu);
      k->extensions += held;
      pthread_mutex_unlock (&k->mu);
   }
   if (store != k->shared) {
      fw_dlq_store_destroy (store);
   }
   fw_connection_clients_destroy (clients);
   return NULL;
}

static char *
dup_or_null (const char *s, bool *ok)
{
   char *copy = s ? strdup (s) : NULL;
   *ok = *ok && (!s || copy);
   return copy;
}

fw_claim_keeper_t *
fw_claim_keeper_start (const fw_claim_keeper_opts_t *o, fw_error_t *error)
{
   fw_claim_keeper_t *k = calloc (1, sizeof *k);
   bool ok = k != NULL, mu_made = false, stop_made = false;
   int rc;

   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory starting the claim keeper");
      return NULL;
   }
   k->shared = o->store;
   k->conns = o->conns;
   k->ttl_ms = o->claim_ttl_ms;
   k->connection = dup_or_null (o->connection ? o->connection : "default", &ok);
   k->database = dup_or_null (o->database, &ok);
   k->collection = dup_or_null (o->collection, &ok);
   k->stream = dup_or_null (o->stream, &ok);
   k->actor = dup_or_null (o->actor, &ok);
   bson_value_copy (o->id, &k->id);
   if (!ok || (!k->shared && (!k->conns || !k->database || !k->collection))) {
      fw_error_set (error, ok ? FW_ERROR_INVALID : FW_ERROR_NOMEM,
                    ok ? "the claim keeper has no store"
                       : "out of memory starting the claim keeper");
      keeper_free (k);
      return NULL;
   }
   if (!(mu_made = (rc = pthread_mutex_init (&k->mu, NULL)) == 0) ||
       !(stop_made = (rc = fw_shutdown_init (&k->stop)) == 0) ||
       (rc = pthread_create (&k->thread, NULL, keeper_main, k)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the claim keeper's thread: %s",
                    strerror (rc));
      if (stop_made) {
         fw_shutdown_cleanup (&k->stop);
      }
      if (mu_made) {
         pthread_mutex_destroy (&k->mu);
      }
      keeper_free (k);
      return NULL;
   }
   return k;
}

int64_t
fw_claim_keeper_extensions (fw_claim_keeper_t *k)
{
   int64_t n;
   pthread_mutex_lock (&k->mu);
   n = k->extensions;
   pthread_mutex_unlock (&k->mu);
   return n;
}

void
fw_claim_keeper_stop (fw_claim_keeper_t *k)
{
   if (!k) {
      return;
   }
   fw_shutdown_request (&k->stop);
   pthread_join (k->thread, NULL);
   fw_shutdown_cleanup (&k->stop);
   pthread_mutex_destroy (&k->mu);
   keeper_free (k);
}
