/*
 * batch_run.c - a batch's attempts and its bisection (batch_run.h).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/dispatch/batch_run.h"

typedef struct {
   const fw_batch_ops_t *ops;
   bool *marked; /* scratch: one call's marks, consumed at once */
   fw_batch_stats_t *stats;
} run_t;

typedef enum { SET_DONE, SET_MARKED, SET_FAILED, SET_FAILED_FINAL, SET_STOPPED } set_t;

/* One call of the handler with idx[0..*n) as attempt *attempt: settles the
 * events it did not mark and moves the marked ones, in order, to the front
 * of idx (*n their number). A call that asks to be made again
 * (FW_BATCH_CALL_AGAIN) is, as the next attempt: *attempt is the last one
 * made. */
static set_t
call_once (run_t *r, size_t *idx, size_t *n, int *attempt)
{
   size_t kept = 0;
   fw_batch_call_t c;

   for (;; ++*attempt) {
      memset (r->marked, 0, *n * sizeof *r->marked);
      r->stats->calls++;
      c = r->ops->call (r->ops->ud, idx, *n, *attempt, r->marked);
      if (c != FW_BATCH_CALL_AGAIN) {
         break;
      }
   }
   if (c == FW_BATCH_CALL_STOPPED) {
      return SET_STOPPED;
   }
   if (c == FW_BATCH_CALL_FAILED || c == FW_BATCH_CALL_FAILED_FINAL) {
      return c == FW_BATCH_CALL_FAILED ? SET_FAILED : SET_FAILED_FINAL;
   }
   for (size_t k = 0; k < *n; k++) {
      if (r->marked[k]) {
         idx[kept++] = idx[k];
      } else {
         r->ops->succeeded (r->ops->ud, idx[k]);
      }
   }
   *n = kept;
   return kept ? SET_MARKED : SET_DONE;
}

static bool bisect (run_t *r, size_t *idx, size_t n);

/* A set of events whose attempts are used up: one event goes its own way,
 * more are tried once more, and what fails of them is split. */
static bool
settle (run_t *r, size_t *idx, size_t n)
{
   int attempt = r->ops->max_attempts;
   set_t s;

   if (n == 1) {
      r->stats->singles++;
      return r->ops->single (r->ops->ud, idx[0]);
   }
   s = call_once (r, idx, &n, &attempt);
   if (s == SET_STOPPED) {
      return false;
   }
   return s == SET_DONE || bisect (r, idx, n);
}

/* Where idx[0..n) (n >= 2) may be split: n / 2, or with source
 * transactions (ops->joined) the group boundary nearest to it; 0 when the
 * set is one group. */
static size_t
split_at (const run_t *r, const size_t *idx, size_t n)
{
   size_t half = n / 2;

   if (!r->ops->joined) {
      return half;
   }
   for (size_t d = 0; d < n; d++) {
      if (half + d < n && !r->ops->joined (r->ops->ud, idx[half + d - 1], idx[half + d])) {
         return half + d;
      }
      if (half > d && !r->ops->joined (r->ops->ud, idx[half - d - 1], idx[half - d])) {
         return half - d;
      }
   }
   return 0;
}

/* Splits idx[0..n) (n >= 1) in halves, each settled on its own. */
static bool
bisect (run_t *r, size_t *idx, size_t n)
{
   size_t half;

   if (n == 1) {
      return settle (r, idx, 1);
   }
   if ((half = split_at (r, idx, n)) == 0) {
      r->stats->singles += (int64_t) n;
      return r->ops->group (r->ops->ud, idx, n); /* one source transaction: whole */
   }
   r->stats->splits++;
   return settle (r, idx, half) && settle (r, idx + half, n - half);
}

/* The whole batch's attempts: *n is what still fails after them. False on
 * a stop. */
static bool
attempts (run_t *r, size_t *idx, size_t *n)
{
   for (int attempt = 1; *n > 1; attempt++) {
      set_t s = call_once (r, idx, n, &attempt);
      if (s == SET_STOPPED) {
         return false;
      }
      if (s == SET_DONE || s == SET_FAILED_FINAL || attempt >= r->ops->max_attempts) {
         return true;
      }
      if (!r->ops->retry_wait (r->ops->ud, attempt, *n)) {
         return false;
      }
   }
   return true;
}

bool
fw_batch_run (const fw_batch_ops_t *ops, size_t n, fw_batch_stats_t *stats)
{
   fw_batch_stats_t ignored = {0, 0, 0};
   run_t r = {ops, NULL, stats ? stats : &ignored};
   size_t *idx;
   bool ok;

   if (n == 0) {
      return true;
   }
   idx = malloc (n * sizeof *idx);
   r.marked = malloc (n * sizeof *r.marked);
   if (!idx || !r.marked) {
      free (idx);
      free (r.marked);
      return false;
   }
   for (size_t i = 0; i < n; i++) {
      idx[i] = i;
   }
   /* A single event (a quiet stream's batch) takes the per-event path
    * straight away, as do the attempts' leftovers of one event. */
   ok = attempts (&r, idx, &n) && (n == 0 || bisect (&r, idx, n));
   free (idx);
   free (r.marked);
   return ok;
}
