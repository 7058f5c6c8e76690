/*
 * oplog_window.c - the oplog's first and last entries, read for doctor and
 * sampled by `run` into flowwarden_oplog_window_seconds (oplog_window.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/log.h"
#include "flowwarden/shutdown.h"
#include "runtime/host/oplog_window.h"

/* A read that takes longer is abandoned by the server (maxTimeMS). */
#define READ_MAX_TIME_MS 5000
#define ERR_UNAUTHORIZED 13
#define CONNECT_TIMEOUT_MS 2000

/* The ts (seconds) of the oplog's first (dir 1) or last (dir -1) entry:
 * 1 found, 0 none, -1 error. */
static int
oplog_end (mongoc_collection_t *coll, int dir, int64_t *secs, bson_error_t *berr)
{
   bson_t filter = BSON_INITIALIZER;
   bson_t *opts = BCON_NEW ("sort", "{", "$natural", BCON_INT32 (dir), "}", "limit", BCON_INT64 (1),
                            "projection", "{", "ts", BCON_INT32 (1), "}", "maxTimeMS",
                            BCON_INT64 (READ_MAX_TIME_MS));
   mongoc_cursor_t *cur;
   const bson_t *doc;
   bson_iter_t it;
   int found = 0;

   if (!opts) {
      bson_set_error (berr, MONGOC_ERROR_BSON, MONGOC_ERROR_BSON_INVALID, "out of memory");
      return -1;
   }
   cur = mongoc_collection_find_with_opts (coll, &filter, opts, NULL);
   if (cur && mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "ts") &&
       BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      uint32_t t, inc;
      bson_iter_timestamp (&it, &t, &inc);
      *secs = t;
      found = 1;
   }
   if (!cur) {
      bson_set_error (berr, MONGOC_ERROR_CURSOR, MONGOC_ERROR_CURSOR_INVALID_CURSOR,
                      "cannot create a cursor on local.oplog.rs");
      found = -1;
   } else if (mongoc_cursor_error (cur, berr)) {
      found = -1;
   }
   mongoc_cursor_destroy (cur);
   bson_destroy (opts);
   bson_destroy (&filter);
   return found;
}

int
fw_oplog_window_read (mongoc_client_t *client, int64_t *first_s, int64_t *last_s,
                      bson_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "local", "oplog.rs");
   int first, last;

   if (!coll) {
      bson_set_error (error, MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_NOT_READY, "out of memory");
      return -1;
   }
   first = oplog_end (coll, 1, first_s, error);
   last = first == 1 ? oplog_end (coll, -1, last_s, error) : first;
   mongoc_collection_destroy (coll);
   if (first < 0 || last < 0) {
      return -1;
   }
   return first == 1 && last == 1 ? 1 : 0;
}

/* --- the sampler ---------------------------------------------------------- */

struct fw_oplog_sampler {
   pthread_t thread;
   fw_shutdown_t stop;      /* fw_oplog_sampler_stop asks; the wait ends at once */
   mongoc_client_t *client; /* the thread's own: a read never waits for the pool */
   fw_metrics_t *metrics;   /* borrowed */
   int64_t interval_ms;
   bool unknown_told; /* the window is unknown and the log said why */
};

/* FW_TEST_OPLOG_WINDOW_INTERVAL_MS (docs/testing.md): a test need not wait a
 * minute for the first samples. 0 when unset or out of range. */
static int64_t
test_interval_ms (void)
{
   const char *v = getenv ("FW_TEST_OPLOG_WINDOW_INTERVAL_MS");
   char *end = NULL;
   long long n;

   if (!v || !*v) {
      return 0;
   }
   errno = 0;
   n = strtoll (v, &end, 10);
   return errno == 0 && end && *end == '\0' && n >= 50 && n <= 86400000LL ? (int64_t) n : 0;
}

/* Once per stretch of unknown window: why, and what to do. Some reasons say
 * nothing: an empty oplog (a new replica set has none yet, the stand-in until
 * its first write; a standalone server has none and fails every stream with
 * its own error), and a server that cannot be reached (the streams say so). */
static void
tell_unknown (fw_oplog_sampler_t *s, int got, const bson_error_t *berr)
{
   if (s->unknown_told || got == 0 || berr->domain == MONGOC_ERROR_SERVER_SELECTION ||
       berr->domain == MONGOC_ERROR_STREAM) {
      return;
   }
   s->unknown_told = true;
   if (berr->code == ERR_UNAUTHORIZED) {
      fw_log (FW_LOG_WARN, NULL,
              "the oplog window is unknown: this user may not read local.oplog.rs (%s); "
              "flowwarden_oplog_window_seconds stays absent. Grant find on local.oplog.rs "
              "(e.g. the clusterMonitor role) to have it, or watch the window where the "
              "deployment reports it (Atlas: the Oplog Window metric)",
              berr->message);
   } else {
      fw_log (FW_LOG_WARN, NULL,
              "the oplog window is unknown: cannot read local.oplog.rs (%s; through mongos "
              "it cannot be read); flowwarden_oplog_window_seconds stays absent until a read "
              "succeeds. Connect to the replica set itself, or watch the window where the "
              "deployment reports it (Atlas: the Oplog Window metric)",
              berr->message);
   }
}

static void
sample (fw_oplog_sampler_t *s)
{
   int64_t first = 0, last = 0;
   bson_error_t berr = {0};
   int got = fw_oplog_window_read (s->client, &first, &last, &berr);

   if (got == 1) {
      if (s->unknown_told) {
         fw_log (FW_LOG_INFO, NULL, "the oplog window is known again: %lld s",
                 (long long) (last - first));
      }
      s->unknown_told = false;
      fw_metrics_set_oplog_window (s->metrics, (double) (last - first));
      return;
   }
   fw_metrics_set_oplog_window_unknown (s->metrics,
                                        got == 0 ? FW_OPLOG_UNKNOWN_EMPTY
                                        : berr.domain == MONGOC_ERROR_SERVER_SELECTION ||
                                              berr.domain == MONGOC_ERROR_STREAM
                                           ? FW_OPLOG_UNKNOWN_UNREACHABLE
                                           : FW_OPLOG_UNKNOWN_UNREADABLE);
   tell_unknown (s, got, &berr);
}

static void *
sampler_main (void *arg)
{
   fw_oplog_sampler_t *s = arg;

   do {
      sample (s);
   } while (!fw_shutdown_wait_ms (&s->stop, s->interval_ms));
   return NULL;
}

/* A single-threaded client of its own: one scan per server selection
 * (serverSelectionTryOnce) and connect and socket timeouts of at most 2 s and
 * 7 s whatever the URI says (its reads are two one-document finds), so that
 * a stop never waits long behind a read. */
static void
cap_option (mongoc_uri_t *uri, const char *name, int32_t most)
{
   int32_t v = mongoc_uri_get_option_as_int32 (uri, name, 0);
   if (v <= 0 || v > most) {
      mongoc_uri_set_option_as_int32 (uri, name, most);
   }
}

static mongoc_client_t *
own_client (const mongoc_uri_t *uri, fw_error_t *error)
{
   mongoc_uri_t *copy = mongoc_uri_copy (uri);
   mongoc_client_t *client = NULL;
   bson_error_t berr;

   if (!copy) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return NULL;
   }
   cap_option (copy, MONGOC_URI_CONNECTTIMEOUTMS, CONNECT_TIMEOUT_MS);
   cap_option (copy, MONGOC_URI_SOCKETTIMEOUTMS, READ_MAX_TIME_MS + 2000);
   mongoc_uri_set_option_as_bool (copy, MONGOC_URI_SERVERSELECTIONTRYONCE, true);
   if (!(client = mongoc_client_new_from_uri_with_error (copy, &berr))) {
      fw_error_set (error, FW_ERROR_MONGO, "cannot create the oplog window's client: %s",
                    berr.message);
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      mongoc_client_set_appname (client, "flowwarden");
   }
   mongoc_uri_destroy (copy);
   return client;
}

fw_oplog_sampler_t *
fw_oplog_sampler_start (const mongoc_uri_t *uri, fw_metrics_t *metrics, int64_t interval_ms,
                        fw_error_t *error)
{
   fw_oplog_sampler_t *s = calloc (1, sizeof *s);
   bool stop_made = false;
   int rc;

   if (!s) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return NULL;
   }
   if (!(s->client = own_client (uri, error))) {
      free (s);
      return NULL;
   }
   s->metrics = metrics;
   s->interval_ms = interval_ms > 0 ? interval_ms : test_interval_ms ();
   if (s->interval_ms <= 0) {
      s->interval_ms = FW_OPLOG_WINDOW_INTERVAL_MS;
   }
   if (!(stop_made = (rc = fw_shutdown_init (&s->stop)) == 0) ||
       (rc = pthread_create (&s->thread, NULL, sampler_main, s)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the oplog window's thread: %s",
                    strerror (rc));
      if (stop_made) {
         fw_shutdown_cleanup (&s->stop);
      }
      mongoc_client_destroy (s->client);
      free (s);
      return NULL;
   }
   return s;
}

void
fw_oplog_sampler_stop (fw_oplog_sampler_t *s)
{
   if (!s) {
      return;
   }
   fw_shutdown_request (&s->stop);
   pthread_join (s->thread, NULL);
   fw_shutdown_cleanup (&s->stop);
   mongoc_client_destroy (s->client);
   free (s);
}
