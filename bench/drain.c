/*
 * fw_drain: the benchmark "ceiling" - a bare libmongoc change-stream drain loop.
 *
 * It watches one collection from a given point (startAtOperationTime or resumeAfter), counts
 * events until it has seen N, and prints the rate. No handler, no decoding beyond what
 * mongoc_change_stream_next itself does, so flowwarden's own benchmark can be compared with
 * the fastest a libmongoc client can go against the same server.
 *
 *   fw_drain URI DB COLL N [--start-at SECONDS:INCREMENT | --resume-after HEXDATA]
 *            [--batch-size N] [--timeout-s S]
 *
 * Output (one line): "drained <n> events in <s> s: <rate> events/s"
 * Exit status: 0 when N events arrived, 1 on error or timeout, 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
now_s (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int
usage (const char *prog)
{
   fprintf (stderr,
            "usage: %s URI DB COLL N [--start-at SECONDS:INCREMENT | --resume-after HEXDATA]"
            " [--batch-size N] [--timeout-s S]\n",
            prog);
   return 2;
}

static bool
parse_u64 (const char *text, uint64_t *out)
{
   char *end = NULL;
   errno = 0;
   unsigned long long v = strtoull (text, &end, 10);
   if (errno || !end || *end || end == text) {
      return false;
   }
   *out = (uint64_t) v;
   return true;
}

int
main (int argc, char **argv)
{
   int rc = 1;
   mongoc_client_t *client = NULL;
   mongoc_collection_t *coll = NULL;
   mongoc_change_stream_t *stream = NULL;
   bson_t opts = BSON_INITIALIZER;
   bson_t pipeline = BSON_INITIALIZER;
   bson_error_t error;
   uint64_t want = 0;
   double timeout_s = 120.0;

   if (argc < 5 || !parse_u64 (argv[4], &want) || want == 0) {
      return usage (argv[0]);
   }
   for (int i = 5; i < argc; i++) {
      if (strcmp (argv[i], "--start-at") == 0 && i + 1 < argc) {
         unsigned int secs = 0, inc = 0;
         if (sscanf (argv[++i], "%u:%u", &secs, &inc) != 2) {
            return usage (argv[0]);
         }
         BSON_APPEND_TIMESTAMP (&opts, "startAtOperationTime", secs, inc);
      } else if (strcmp (argv[i], "--resume-after") == 0 && i + 1 < argc) {
         bson_t token;
         const char *hex = argv[++i];
         BSON_APPEND_DOCUMENT_BEGIN (&opts, "resumeAfter", &token);
         BSON_APPEND_UTF8 (&token, "_data", hex);
         bson_append_document_end (&opts, &token);
      } else if (strcmp (argv[i], "--batch-size") == 0 && i + 1 < argc) {
         uint64_t bs = 0;
         if (!parse_u64 (argv[++i], &bs)) {
            return usage (argv[0]);
         }
         BSON_APPEND_INT32 (&opts, "batchSize", (int32_t) bs);
      } else if (strcmp (argv[i], "--timeout-s") == 0 && i + 1 < argc) {
         timeout_s = atof (argv[++i]);
      } else {
         return usage (argv[0]);
      }
   }

   mongoc_init ();
   client = mongoc_client_new (argv[1]);
   if (!client) {
      fprintf (stderr, "fw_drain: invalid URI: %s\n", argv[1]);
      goto done;
   }
   mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
   coll = mongoc_client_get_collection (client, argv[2], argv[3]);

   double t0 = now_s ();
   stream = mongoc_collection_watch (coll, &pipeline, &opts);
   uint64_t seen = 0;
   const bson_t *event;
   double first = 0.0;
   while (seen < want) {
      if (mongoc_change_stream_next (stream, &event)) {
         if (seen == 0) {
            first = now_s ();
         }
         seen++;
         continue;
      }
      const bson_t *reply = NULL;
      if (mongoc_change_stream_error_document (stream, &error, &reply)) {
         fprintf (stderr, "fw_drain: change stream error: %s\n", error.message);
         goto done;
      }
      if (now_s () - t0 > timeout_s) {
         fprintf (stderr, "fw_drain: timed out after %" PRIu64 " of %" PRIu64 " events\n", seen,
                  want);
         goto done;
      }
   }
   double elapsed = now_s () - t0;
   printf ("drained %" PRIu64 " events in %.3f s: %.0f events/s (first event after %.3f s)\n", seen,
           elapsed, (double) seen / elapsed, first - t0);
   rc = 0;

done:
   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
   bson_destroy (&opts);
   bson_destroy (&pipeline);
   mongoc_cleanup ();
   return rc;
}
