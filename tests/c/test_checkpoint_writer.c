/*
 * checkpoint_writer.c through a fake sink: the slots trade places (a
 * position handed over while one is in flight waits, a newer one replaces
 * it), a failed write is tried again (after retry_ms, or at once for a
 * newer position), quiesce drops what waits and waits for what flies,
 * fenced writes carry the epoch, max_behind bounds how far the stored
 * checkpoint lags. Every wait is for a condition, bounded by a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_writer.h"

#define DEADLINE_MS 10000
#define MAX_WRITES 64

/* The fake store: every write tried, in order, with what it carried. */
typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t changed;
   int opened, closed;
   int n;                     /* writes tried */
   int64_t value[MAX_WRITES]; /* the position's "n" (processed), -1: none */
   int64_t epoch[MAX_WRITES];
   bool ok[MAX_WRITES];
   int fail_next; /* this many writes fail */
   bool hold;     /* a write waits here until released */
   bool holding;  /* a write is waiting */
} fake_t;

static void
fake_init (fake_t *f)
{
   memset (f, 0, sizeof *f);
   pthread_mutex_init (&f->mu, NULL);
   pthread_cond_init (&f->changed, NULL);
}

static void
fake_open (void *ud)
{
   fake_t *f = ud;
   pthread_mutex_lock (&f->mu);
   f->opened++;
   pthread_mutex_unlock (&f->mu);
}

static void
fake_close (void *ud)
{
   fake_t *f = ud;
   pthread_mutex_lock (&f->mu);
   f->closed++;
   pthread_mutex_unlock (&f->mu);
}

static int64_t
value_of (const bson_t *doc)
{
   bson_iter_t it;
   return doc && bson_iter_init_find (&it, doc, "n") ? bson_iter_as_int64 (&it) : -1;
}

static bool
fake_write (void *ud, const bson_t *processed, const bson_t *seen, const char *version,
            int64_t epoch, fw_error_t *error)
{
   fake_t *f = ud;
   bool ok;
   (void) seen;
   (void) version;

   pthread_mutex_lock (&f->mu);
   while (f->hold) {
      f->holding = true;
      pthread_cond_broadcast (&f->changed);
      pthread_cond_wait (&f->changed, &f->mu);
   }
   f->holding = false;
   ok = f->fail_next == 0;
   if (!ok) {
      f->fail_next--;
      fw_error_set (error, FW_ERROR_MONGO, "the fake store refuses this write");
   }
   if (f->n < MAX_WRITES) {
      f->value[f->n] = value_of (processed);
      f->epoch[f->n] = epoch;
      f->ok[f->n] = ok;
      f->n++;
   }
   pthread_cond_broadcast (&f->changed);
   pthread_mutex_unlock (&f->mu);
   return ok;
}

/* Waits up to ms until f has tried n writes (or one is held, with n < 0). */
static bool
fake_wait_ms (fake_t *f, int n, int64_t ms)
{
   int64_t until = fw_mono_ms () + ms;
   bool reached;

   pthread_mutex_lock (&f->mu);
   while (!(reached = n < 0 ? f->holding : f->n >= n) && fw_mono_ms () < until) {
      struct timespec ts = fw_clock_after (CLOCK_REALTIME, 50);
      pthread_cond_timedwait (&f->changed, &f->mu, &ts);
   }
   pthread_mutex_unlock (&f->mu);
   return reached;
}

static bool
fake_wait (fake_t *f, int n)
{
   return fake_wait_ms (f, n, DEADLINE_MS);
}

/* Waits until f has written position v. */
static bool
fake_wait_value (fake_t *f, int64_t v)
{
   int64_t until = fw_mono_ms () + DEADLINE_MS;
   bool reached = false;

   pthread_mutex_lock (&f->mu);
   while (!reached && fw_mono_ms () < until) {
      for (int i = 0; i < f->n; i++) {
         reached = reached || (f->value[i] == v && f->ok[i]);
      }
      if (!reached) {
         struct timespec ts = fw_clock_after (CLOCK_REALTIME, 50);
         pthread_cond_timedwait (&f->changed, &f->mu, &ts);
      }
   }
   pthread_mutex_unlock (&f->mu);
   return reached;
}

static void
fake_hold (fake_t *f, bool hold)
{
   pthread_mutex_lock (&f->mu);
   f->hold = hold;
   pthread_cond_broadcast (&f->changed);
   pthread_mutex_unlock (&f->mu);
}

static fw_checkpoint_writer_t *
writer_over (fake_t *f, int64_t retry_ms)
{
   fw_checkpoint_sink_t sink = {fake_open, fake_write, fake_close, f};
   fw_error_t err;
   fw_checkpoint_writer_t *cw = fw_checkpoint_writer_start (&sink, "s", retry_ms, &err);
   assert_non_null (cw);
   return cw;
}

static void
submit (fw_checkpoint_writer_t *cw, int64_t n, int max_behind)
{
   bson_t doc = BSON_INITIALIZER;
   BSON_APPEND_INT64 (&doc, "n", n);
   fw_checkpoint_writer_submit (cw, &doc, NULL, "v1", max_behind);
   bson_destroy (&doc);
}

/* A position handed over while one is written waits; a newer one replaces
 * it, so the store sees 1 then 3, never 2. */
static void
test_coalesces_while_in_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1)); /* 1 is in flight */
   submit (cw, 2, 0);
   submit (cw, 3, 0);
   fake_hold (&f, false);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.n, 2);
   assert_int_equal (f.value[0], 1);
   assert_int_equal (f.value[1], 3);
   assert_int_equal (f.opened, 1);
   assert_int_equal (f.closed, 1);
}

/* A failed write is tried again after retry_ms with the same position. */
static void
test_retries_after_error (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   int ok, failed;
   int64_t last_ok_ms;
   (void) state;

   fake_init (&f);
   f.fail_next = 1;
   cw = writer_over (&f, 20);
   submit (cw, 7, 0);
   assert_true (fake_wait (&f, 2));
   /* The writer counts a write once the store answered it: wait for it. */
   fw_checkpoint_writer_quiesce (cw);
   fw_checkpoint_writer_take_results (cw, &ok, &failed, &last_ok_ms);
   fw_checkpoint_writer_destroy (cw);
   assert_false (f.ok[0]);
   assert_true (f.ok[1]);
   assert_int_equal (f.value[0], 7);
   assert_int_equal (f.value[1], 7);
   assert_int_equal (ok, 1);
   assert_int_equal (failed, 1);
   assert_true (last_ok_ms > 0);
}

/* After a failure a newer position does not wait for the retry: it is
 * written at once (a retry_ms of a minute would fail the deadline). */
static void
test_newer_position_skips_the_retry_wait (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.fail_next = 1;
   cw = writer_over (&f, 60000);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, 1));
   submit (cw, 2, 0);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_destroy (cw);
   assert_false (f.ok[0]);
   assert_true (f.ok[1]);
   assert_int_equal (f.value[1], 2);
}

/* How many writes the store had tried when a call returned. */
static int
tried_now (fake_t *f)
{
   int n;
   pthread_mutex_lock (&f->mu);
   n = f->n;
   pthread_mutex_unlock (&f->mu);
   return n;
}

typedef struct {
   fw_checkpoint_writer_t *cw;
   fake_t *f;
   int tried_at_return;
} call_arg_t;

static void *
quiesce_main (void *arg)
{
   call_arg_t *a = arg;
   fw_checkpoint_writer_quiesce (a->cw);
   a->tried_at_return = tried_now (a->f);
   return NULL;
}

/* quiesce waits for the write in flight; the position waiting is dropped
 * unless the writer took it before the quiesce (the threads race there),
 * and the next hand-over is written after it, in order. */
static void
test_quiesce_waits_for_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   pthread_t t;
   call_arg_t a = {NULL, &f, -1};
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1));
   submit (cw, 2, 0);
   assert_int_equal (pthread_create (&t, NULL, quiesce_main, &a), 0);
   fake_hold (&f, false);
   pthread_join (t, NULL);
   assert_true (a.tried_at_return >= 1); /* it returned once 1 was written */
   int before = tried_now (&f);
   submit (cw, 3, 0);
   assert_true (before >= 1);
   assert_true (fake_wait_value (&f, 3));
   fw_checkpoint_writer_destroy (cw);
   assert_true (f.n == 2 || f.n == 3);
   assert_int_equal (f.value[0], 1);
   assert_int_equal (f.value[f.n - 1], 3);
   for (int i = 1; i < f.n; i++) {
      assert_true (f.value[i] > f.value[i - 1]); /* never backwards */
   }
}

/* A failed position waiting for its retry is dropped by quiesce: the
 * writer tries nothing more until the next hand-over, which is written. */
static void
test_quiesce_drops_a_retry (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.fail_next = 1;
   cw = writer_over (&f, 60000);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, 1));
   fw_checkpoint_writer_quiesce (cw);
   submit (cw, 2, 0);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.n, 2);
   assert_false (f.ok[0]);
   assert_int_equal (f.value[1], 2);
   assert_true (f.ok[1]);
}

/* The write in flight during a quiesce fails: its position is not put back
 * for a retry that would land after the caller's own save (which would move
 * the stored checkpoint back). None may start after the quiesce returned. */
static void
test_quiesce_drops_a_retry_of_the_write_in_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   pthread_t t;
   call_arg_t a = {NULL, &f, -1};
   (void) state;

   fake_init (&f);
   f.fail_next = 1;
   cw = writer_over (&f, 100); /* a retry would come 100 ms after the failure */
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1)); /* 1 is in flight, and will fail */
   assert_int_equal (pthread_create (&t, NULL, quiesce_main, &a), 0);
   /* Let the quiesce reach its wait for the flight (if it has not, it
    * drops the retry as it starts: the test then shows less). */
   nanosleep (&(struct timespec){0, 50 * 1000 * 1000}, NULL);
   fake_hold (&f, false);
   pthread_join (t, NULL);
   /* Nothing tried after the quiesce returned: a look well past the retry's
    * 100 ms (a retry would wait for it, then be written). */
   assert_false (fake_wait_ms (&f, a.tried_at_return + 1, 500));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.n, a.tried_at_return);
   assert_false (f.ok[0]);
}

/* Writes carry the epoch set before them; 0 goes back to plain saves. */
static void
test_fenced_writes_carry_the_epoch (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, 1));
   fw_checkpoint_writer_quiesce (cw);
   fw_checkpoint_writer_set_epoch (cw, 7);
   submit (cw, 2, 0);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_quiesce (cw);
   fw_checkpoint_writer_set_epoch (cw, 9);
   submit (cw, 3, 0);
   assert_true (fake_wait (&f, 3));
   fw_checkpoint_writer_quiesce (cw);
   fw_checkpoint_writer_set_epoch (cw, 0);
   submit (cw, 4, 0);
   assert_true (fake_wait (&f, 4));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.epoch[0], 0);
   assert_int_equal (f.epoch[1], 7);
   assert_int_equal (f.epoch[2], 9);
   assert_int_equal (f.epoch[3], 0);
}

static void *
submit_main (void *arg)
{
   call_arg_t *a = arg;
   submit (a->cw, 3, 2);
   a->tried_at_return = tried_now (a->f);
   return NULL;
}

/* With max_behind = 2, a hand-over waits while two are not yet tried: the
 * stored checkpoint lags the handed-over position by a bounded amount. */
static void
test_max_behind_bounds_the_lag (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_arg_t a = {NULL, &f, -1};
   pthread_t t;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 2);
   assert_true (fake_wait (&f, -1)); /* 1 in flight */
   submit (cw, 2, 2);                /* 2 waits: two not yet tried */
   assert_int_equal (pthread_create (&t, NULL, submit_main, &a), 0);
   fake_hold (&f, false);
   pthread_join (t, NULL);
   /* 3 was handed over only once 1 was tried */
   assert_true (a.tried_at_return >= 1);
   assert_true (fake_wait_value (&f, 3));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.value[0], 1);
   assert_int_equal (f.value[f.n - 1], 3); /* 2 and 3 may coalesce; 3 is the last */
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (test_coalesces_while_in_flight),
      cmocka_unit_test (test_retries_after_error),
      cmocka_unit_test (test_newer_position_skips_the_retry_wait),
      cmocka_unit_test (test_quiesce_waits_for_flight),
      cmocka_unit_test (test_quiesce_drops_a_retry),
      cmocka_unit_test (test_quiesce_drops_a_retry_of_the_write_in_flight),
      cmocka_unit_test (test_fenced_writes_carry_the_epoch),
      cmocka_unit_test (test_max_behind_bounds_the_lag),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
