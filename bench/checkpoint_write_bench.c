/*
 * fw_checkpoint_write_bench: the cost of the writer generation (writerGen) in a checkpoint write.
 *
 * Against a server (the stand-in, or mongod: a replica set, for the transactions), alternating
 * rounds of N writes each: exactly_once's write of the position in a transaction
 * (fw_checkpoint_save_in, then commitTransaction) without a generation (gen 0, as under ha) and
 * with the run's (its filter's $not $gt and its $set), then the synchronous save
 * (fw_checkpoint_save_with against fw_checkpoint_save_ordered_with with the generation).
 *
 *   fw_checkpoint_write_bench URI [N] [ROUNDS]
 *
 * Output: one line per round and kind, "<kind> gen=<0|g>: <us> us a write" (the checkpoint
 * write alone, the transaction's start and commit not counted), and the medians at the end.
 * Exit status: 0, 1 on an error, 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mongoc/mongoc.h>

#include "runtime/checkpoint/checkpoint_store.h"

#define DB "bench_ckpt"
#define MAX_ROUNDS 64

static double
now_us (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static int
cmp_double (const void *a, const void *b)
{
   double x = *(const double *) a, y = *(const double *) b;
   return x < y ? -1 : x > y;
}

static double
median (double *v, int n)
{
   qsort (v, (size_t) n, sizeof *v, cmp_double);
   return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* N writes of the position in a transaction each; the mean time of the write alone (us), < 0
 * on an error. */
static double
txn_round (mongoc_client_t *client, const char *stream, int n, int64_t gen)
{
   double spent = 0;
   bson_error_t berr;
   mongoc_client_session_t *s = mongoc_client_start_session (client, NULL, &berr);

   if (!s) {
      fprintf (stderr, "cannot start a session: %s\n", berr.message);
      return -1;
   }
   for (int i = 0; i < n; i++) {
      char data[24];
      bson_t *token, reply;
      fw_error_t err;
      bool fenced, ok;
      double t0;

      snprintf (data, sizeof data, "%016d", i);
      token = BCON_NEW ("_data", BCON_UTF8 (data));
      if (!token || !mongoc_client_session_start_transaction (s, NULL, &berr)) {
         fprintf (stderr, "cannot start a transaction: %s\n", berr.message);
         bson_destroy (token);
         mongoc_client_session_destroy (s);
         return -1;
      }
      t0 = now_us ();
      ok = fw_checkpoint_save_in (client, s, DB, stream, token, "bench", 0, gen, &fenced, &reply,
                                  &err);
      spent += now_us () - t0;
      bson_destroy (&reply);
      bson_destroy (token);
      if (!ok) {
         fprintf (stderr, "checkpoint write failed: %s\n", err.message);
         (void) mongoc_client_session_abort_transaction (s, NULL);
         mongoc_client_session_destroy (s);
         return -1;
      }
      if (!mongoc_client_session_commit_transaction (s, NULL, &berr)) {
         fprintf (stderr, "commit failed: %s\n", berr.message);
         mongoc_client_session_destroy (s);
         return -1;
      }
   }
   mongoc_client_session_destroy (s);
   return spent / n;
}

/* N synchronous saves; the mean time of one (us), < 0 on an error. */
static double
sync_round (mongoc_client_t *client, const char *stream, int n, int64_t gen)
{
   double t0 = now_us ();

   for (int i = 0; i < n; i++) {
      char data[24];
      bson_t *token;
      fw_error_t err;
      bool ok;

      snprintf (data, sizeof data, "%016d", i);
      if (!(token = BCON_NEW ("_data", BCON_UTF8 (data)))) {
         fprintf (stderr, "out of memory\n");
         return -1;
      }
      ok = gen > 0
              ? fw_checkpoint_save_ordered_with (client, DB, stream, token, token, "bench", NULL, 0,
                                                 gen, NULL, 0, &err) == FW_CHECKPOINT_SAVED
              : fw_checkpoint_save_with (client, DB, stream, token, token, "bench", NULL, 0, &err);
      bson_destroy (token);
      if (!ok) {
         fprintf (stderr, "checkpoint save failed: %s\n", err.message);
         return -1;
      }
   }
   return (now_us () - t0) / n;
}

int
main (int argc, char **argv)
{
   int n = argc > 2 ? atoi (argv[2]) : 2000;
   int rounds = argc > 3 ? atoi (argv[3]) : 6;
   double txn[2][MAX_ROUNDS], plain[2][MAX_ROUNDS];
   mongoc_client_t *client;
   fw_error_t err;
   int64_t gen;
   int rc = 0;

   if (argc < 2 || n < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
      fprintf (stderr, "usage: %s URI [N] [ROUNDS (1-%d)]\n", argv[0], MAX_ROUNDS);
      return 2;
   }
   mongoc_init ();
   if (!(client = mongoc_client_new (argv[1]))) {
      fprintf (stderr, "bad URI %s\n", argv[1]);
      mongoc_cleanup ();
      return 2;
   }
   mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
   if (!fw_checkpoint_claim_generation (client, DB, "with", &gen, &err)) {
      fprintf (stderr, "%s\n", err.message);
      rc = 1;
   }
   for (int r = 0; rc == 0 && r < rounds; r++) {
      /* alternate which goes first */
      for (int k = 0; rc == 0 && k < 2; k++) {
         int with = (r + k) % 2;
         const char *stream = with ? "with" : "without";
         txn[with][r] = txn_round (client, stream, n, with ? gen : 0);
         plain[with][r] = sync_round (client, stream, n, with ? gen : 0);
         if (txn[with][r] < 0 || plain[with][r] < 0) {
            rc = 1;
         } else {
            printf ("round %d gen=%lld: in a transaction %.1f us a write, sync %.1f us a write\n",
                    r + 1, (long long) (with ? gen : 0), txn[with][r], plain[with][r]);
         }
      }
   }
   if (rc == 0) {
      printf (
         "median of %d rounds of %d: in a transaction %.1f us without, %.1f us with the "
         "generation; sync %.1f us without, %.1f us with\n",
         rounds, n, median (txn[0], rounds), median (txn[1], rounds), median (plain[0], rounds),
         median (plain[1], rounds));
   }
   mongoc_client_destroy (client);
   mongoc_cleanup ();
   return rc;
}
