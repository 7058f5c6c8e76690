/* Unit tests for a batch's attempts and bisection (batch_run.h), with a
 * fake handler failing on chosen events: which events are applied, which
 * reach the per-event path (on_error / the DLQ), and how many calls it
 * takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/dispatch/batch_run.h"

#define MAX_N 1024

typedef struct {
   bool poison[MAX_N]; /* fails on its own */
   bool mark;          /* poison is marked with batch:fail (else the call raises) */
   int fail_first;     /* the first calls raise whatever they hold (transient) */
   int stop_at_call;   /* that call stops (0: never) */
   int applied[MAX_N]; /* succeeded */
   int singled[MAX_N]; /* given to the per-event path */
   int dead[MAX_N];    /* ... where it failed on its own: the DLQ */
   int calls, waits, max_attempts;
   bool single_attempts; /* count the per-event path's attempts as calls */
   int group[MAX_N];     /* exactly_once: its source transaction (0: none) */
   int groups_run;       /* sets given to the group path */
   int again_at_call;    /* that call fails for its state's sake (0: never) */
   int attempts[16];     /* the attempt number of each call */
} fake_t;

/* Every source transaction present in a call is there whole. */
static void
assert_groups_whole (const fake_t *f, const size_t *idx, size_t n)
{
   for (size_t k = 0; k < n; k++) {
      size_t i = idx[k];
      if (f->group[i] && (i == 0 || f->group[i - 1] != f->group[i])) {
         size_t members = 0, in_call = 0;
         for (size_t j = i; j < MAX_N && f->group[j] == f->group[i]; j++) {
            members++;
         }
         for (size_t m = 0; m < n; m++) {
            in_call += f->group[idx[m]] == f->group[i];
         }
         assert_int_equal (in_call, members);
      }
   }
}

static fw_batch_call_t
fake_call (void *ud, const size_t *idx, size_t n, int attempt, bool *marked)
{
   fake_t *f = ud;
   bool raise = false;

   assert_true (n >= 2);
   assert_groups_whole (f, idx, n);
   f->calls++;
   if (f->calls <= (int) (sizeof f->attempts / sizeof f->attempts[0])) {
      f->attempts[f->calls - 1] = attempt;
   }
   if (f->stop_at_call && f->calls == f->stop_at_call) {
      return FW_BATCH_CALL_STOPPED;
   }
   if (f->again_at_call && f->calls == f->again_at_call) {
      return FW_BATCH_CALL_AGAIN;
   }
   if (f->calls <= f->fail_first) {
      return FW_BATCH_CALL_FAILED;
   }
   for (size_t k = 0; k < n; k++) {
      assert_true (k == 0 || idx[k] > idx[k - 1]); /* stream order */
      if (f->poison[idx[k]]) {
         marked[k] = f->mark;
         raise = raise || !f->mark;
      }
   }
   return raise ? FW_BATCH_CALL_FAILED : FW_BATCH_CALL_OK;
}

static bool
fake_wait (void *ud, int attempt, size_t n)
{
   fake_t *f = ud;
   (void) attempt;
   (void) n;
   f->waits++;
   return true;
}

static void
fake_succeeded (void *ud, size_t i)
{
   ((fake_t *) ud)->applied[i]++;
}

/* The per-event path: a poison event fails all its attempts and is
 * dead-lettered; any other is applied on its first. */
static bool
fake_single (void *ud, size_t i)
{
   fake_t *f = ud;
   f->singled[i]++;
   if (f->poison[i]) {
      f->dead[i]++;
      f->calls += f->max_attempts;
   } else {
      f->applied[i]++;
      f->calls++;
   }
   return true;
}

static bool
fake_joined (void *ud, size_t a, size_t b)
{
   const fake_t *f = ud;
   return f->group[a] && f->group[a] == f->group[b];
}

/* A source transaction alone (the dispatcher's fw_group_dispatch): a
 * poison among it is dead-lettered alone, the others applied together. */
static bool
fake_group (void *ud, const size_t *idx, size_t n)
{
   fake_t *f = ud;
   assert_true (n >= 2);
   assert_groups_whole (f, idx, n);
   f->groups_run++;
   for (size_t k = 0; k < n; k++) {
      assert_int_equal (f->group[idx[k]], f->group[idx[0]]);
      if (f->poison[idx[k]]) {
         f->dead[idx[k]]++;
      } else {
         f->applied[idx[k]]++;
      }
   }
   return true;
}

static bool
run (fake_t *f, size_t n, fw_batch_stats_t *stats)
{
   fw_batch_ops_t ops = {fake_call, fake_wait,       fake_succeeded, fake_single,
                         f,         f->max_attempts, NULL,           NULL};
   bool grouped = false;

   for (size_t i = 0; i < n; i++) {
      grouped = grouped || f->group[i];
   }
   if (grouped) {
      ops.joined = fake_joined;
      ops.group = fake_group;
   }
   return fw_batch_run (&ops, n, stats);
}

/* Every event finished with exactly once: applied, or dead-lettered. */
static void
assert_each_once (const fake_t *f, size_t n)
{
   for (size_t i = 0; i < n; i++) {
      if (f->poison[i]) {
         assert_int_equal (f->dead[i], 1);
         assert_int_equal (f->applied[i], 0);
      } else {
         assert_int_equal (f->applied[i], 1);
         assert_int_equal (f->dead[i], 0);
      }
   }
}

static int
ceil_log2 (size_t n)
{
   int l = 0;
   while (((size_t) 1 << l) < n) {
      l++;
   }
   return l;
}

static void
one_poison_among_512_alone_in_the_dlq (void **state)
{
   static fake_t f;
   fw_batch_stats_t st = {0, 0, 0};
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 3;
   f.poison[300] = true;
   assert_true (run (&f, 512, &st));
   assert_each_once (&f, 512);
   /* A whole-batch attempts, then two halves a level for 8 levels, then
    * the last two events alone: 3 + 16 + 1 + 3 = 23 calls. */
   assert_int_equal (f.calls, 23);
   assert_true (f.calls <= 3 + 1 * (2 * ceil_log2 (512) + 3));
   assert_int_equal (f.waits, 2); /* backoff only between the whole batch's attempts */
   assert_int_equal (st.singles, 2);
}

static void
ten_poison_events_ten_dead_letters_bounded_calls (void **state)
{
   static fake_t f;
   const size_t n = 1000;
   int dead = 0;
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 2;
   for (size_t i = 7; i < n; i += 97) {
      f.poison[i] = true;
   }
   assert_true (run (&f, n, NULL));
   assert_each_once (&f, n);
   for (size_t i = 0; i < n; i++) {
      dead += f.dead[i];
   }
   assert_int_equal (dead, 11);
   assert_true (f.calls <= 2 + 11 * (2 * ceil_log2 (n) + 2));
}

static void
marked_events_retried_alone_then_bisected (void **state)
{
   static fake_t f;
   fw_batch_stats_t st = {0, 0, 0};
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 3;
   f.mark = true;
   f.poison[3] = f.poison[40] = f.poison[41] = true;
   assert_true (run (&f, 100, &st));
   assert_each_once (&f, 100);
   /* call 1 settles the 97 others; calls 2 and 3 are the three marked
    * events alone; then they are split ({3}, {40, 41}): 3 alone, {40, 41}
    * tried once and split into two single events. */
   assert_int_equal (f.waits, 2);
   assert_int_equal (st.calls, 4);
   assert_int_equal (st.singles, 3);
   assert_int_equal (f.singled[3] + f.singled[40] + f.singled[41], 3);
}

static void
transient_failure_retried_whole_no_bisection (void **state)
{
   static fake_t f;
   fw_batch_stats_t st = {0, 0, 0};
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 3;
   f.fail_first = 2;
   assert_true (run (&f, 50, &st));
   assert_each_once (&f, 50);
   assert_int_equal (f.calls, 3);
   assert_int_equal (f.waits, 2);
   assert_int_equal (st.splits, 0);
   assert_int_equal (st.singles, 0);
}

static void
one_event_goes_the_per_event_path (void **state)
{
   static fake_t f;
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 3;
   f.poison[0] = true;
   assert_true (run (&f, 1, NULL));
   assert_int_equal (f.singled[0], 1);
   assert_int_equal (f.dead[0], 1);
   assert_int_equal (f.waits, 0);
}

static void
a_stop_ends_the_batch_unfinished (void **state)
{
   static fake_t f;
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 1;
   f.poison[5] = true;
   f.stop_at_call = 2; /* the first half after the whole batch failed */
   assert_false (run (&f, 16, NULL));
   for (size_t i = 0; i < 16; i++) {
      assert_int_equal (f.dead[i], 0);
   }
}

/* A call that failed in a full Lua state is made again at once, with the same events, as the
 * next attempt (no backoff, whatever max_attempts says), and the attempts carry on from it. */
static void
a_call_failed_for_its_state_is_made_again_as_the_next_attempt (void **state)
{
   static fake_t f;
   fw_batch_stats_t st = {0, 0, 0};
   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 1;
   f.again_at_call = 1;
   assert_true (run (&f, 8, &st));
   assert_each_once (&f, 8);
   assert_int_equal (f.calls, 2);
   assert_int_equal (f.attempts[0], 1);
   assert_int_equal (f.attempts[1], 2);
   assert_int_equal (f.waits, 0);
   assert_int_equal (st.splits, 0);

   /* Among the retries: attempt 2 failed for its state, 3 fails as usual, 4 is the last. */
   memset (&f, 0, sizeof f);
   f.max_attempts = 4;
   f.fail_first = 1;
   f.again_at_call = 2;
   f.poison[2] = true; /* raises until bisection leaves it alone */
   assert_true (run (&f, 4, NULL));
   assert_int_equal (f.attempts[0], 1);
   assert_int_equal (f.attempts[1], 2);
   assert_int_equal (f.attempts[2], 3);
   assert_int_equal (f.attempts[3], 4);
   assert_int_equal (f.waits, 2);       /* after 1 and after 3: none before the state's retry */
   assert_int_equal (f.attempts[4], 4); /* bisection's halves: tried once as the last */
   assert_each_once (&f, 4);

   /* In bisection: a half made again counts on from the last attempt. */
   memset (&f, 0, sizeof f);
   f.max_attempts = 2;
   f.poison[0] = true;
   f.again_at_call = 3; /* the first half {0, 1} */
   assert_true (run (&f, 4, NULL));
   assert_int_equal (f.attempts[2], 2);
   assert_int_equal (f.attempts[3], 3);
   assert_each_once (&f, 4);
}

/* exactly_once: bisection never splits a source transaction; the one
 * holding the poison is run whole on the group path (the poison alone
 * dead-lettered, the others applied), every other event applied once. */
static void
bisection_never_splits_a_source_transaction (void **state)
{
   static fake_t f;
   fw_batch_stats_t stats = {0, 0, 0};

   (void) state;
   memset (&f, 0, sizeof f);
   f.max_attempts = 2;
   for (size_t i = 30; i < 40; i++) {
      f.group[i] = 7; /* straddles the first split (32) */
   }
   for (size_t i = 50; i < 53; i++) {
      f.group[i] = 8;
   }
   f.poison[35] = true;
   assert_true (run (&f, 64, &stats));
   assert_each_once (&f, 64);
   assert_int_equal (f.groups_run, 1);
   assert_int_equal (f.singled[35], 0);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (one_poison_among_512_alone_in_the_dlq),
      cmocka_unit_test (ten_poison_events_ten_dead_letters_bounded_calls),
      cmocka_unit_test (marked_events_retried_alone_then_bisected),
      cmocka_unit_test (transient_failure_retried_whole_no_bisection),
      cmocka_unit_test (one_event_goes_the_per_event_path),
      cmocka_unit_test (a_stop_ends_the_batch_unfinished),
      cmocka_unit_test (bisection_never_splits_a_source_transaction),
      cmocka_unit_test (a_call_failed_for_its_state_is_made_again_as_the_next_attempt),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
