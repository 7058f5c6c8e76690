/*
 * checkpoint_writer.c through a fake sink: the slots trade places (a
 * position handed over while one is in flight waits, a newer one replaces
 * it), a failed write is tried again (after retry_ms, or at once for a
 * newer position), quiesce drops what waits and waits for what flies,
 * fenced writes carry the epoch, max_behind bounds how far the stored
 * checkpoint lags. With several writes in flight (issue 41): a second one
 * starts only when the position is far enough past the first, completions
 * out of order never move the stored position back, an error on one of them
 * is tried again only when nothing newer holds it, quiesce waits for all,
 * fencing holds for all, and a connection the pool cannot lend is not used.
 * With a time allowance (max_unsaved): the handler does not wait while the
 * newest stored save is younger, waits once it is older, and 0 keeps the
 * count bound; a second write starts once half the allowance is used.
 * Every wait is for a condition, bounded by a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <dirent.h>

#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"
#include "runtime/checkpoint/checkpoint_writer.h"

#define DEADLINE_MS 10000
#define MAX_WRITES 64
#define CONNS FW_CHECKPOINT_MAX_IN_FLIGHT

/* The fake store: every write tried, in order of its end, with what it
 * carried; it keeps a position as fw_checkpoint_save_ordered does (never
 * over a later seq) and refuses writes fenced with an epoch below fence. */
typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t changed;
   int opened[CONNS], closed[CONNS];
   bool lend;                 /* conns > 0 get a connection */
   int n;                     /* writes tried */
   int64_t value[MAX_WRITES]; /* the position's "n" (processed), -1: none */
   int64_t epoch[MAX_WRITES];
   uint64_t seq[MAX_WRITES];
   int conn[MAX_WRITES];
   fw_checkpoint_saved_t saved[MAX_WRITES];
   bool ok[MAX_WRITES];     /* saved or superseded */
   int fail_next;           /* this many writes fail */
   uint64_t fail_seq;       /* the write of this seq fails (once) */
   int broken;              /* rules the writer broke (checked by the test's thread) */
   int64_t fence;           /* writes fenced below this epoch are refused */
   bool newer_run;          /* a newer run holds the store: every write is refused */
   bool hold;               /* every write waits here until released */
   bool hold_conn[CONNS];   /* ... the writes of that conn */
   bool holding[CONNS];     /* a write of that conn is waiting */
   uint64_t writing[CONNS]; /* the seq that conn writes now, 0: none */
   uint64_t stored_seq;     /* the store: the seq and value it holds */
   int64_t stored_value;
   int stored_moves; /* times the stored value changed */
   bool went_back;   /* the stored value ever decreased */
} fake_t;

static void
fake_init (fake_t *f)
{
   memset (f, 0, sizeof *f);
   pthread_mutex_init (&f->mu, NULL);
   assert_int_equal (fw_mono_cond_init (&f->changed), 0);
   f->lend = true;
   f->stored_value = -1;
}

static bool
fake_open (void *ud, int conn, bool wait)
{
   fake_t *f = ud;
   bool lent;
   pthread_mutex_lock (&f->mu);
   lent = conn == 0 || f->lend;
   f->broken += wait != (conn == 0); /* only the first connection waits for one */
   if (lent) {
      f->opened[conn]++;
   }
   pthread_mutex_unlock (&f->mu);
   return lent;
}

static void
fake_close (void *ud, int conn)
{
   fake_t *f = ud;
   pthread_mutex_lock (&f->mu);
   f->closed[conn]++;
   pthread_mutex_unlock (&f->mu);
}

static int64_t
value_of (const bson_t *doc)
{
   bson_iter_t it;
   return doc && bson_iter_init_find (&it, doc, "n") ? bson_iter_as_int64 (&it) : -1;
}

/* With f->mu held: what the store does with a write that is not failed. */
static fw_checkpoint_saved_t
fake_store (fake_t *f, const fw_checkpoint_write_t *w, fw_error_t *error)
{
   int64_t v = value_of (w->processed);
   if (f->newer_run) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "checkpoint of stream \"s\" NOT saved: a newer run of the stream "
                    "(writer generation 2, this run's 1) has written it");
      return FW_CHECKPOINT_REFUSED;
   }
   if (w->epoch > 0 && w->epoch < f->fence) {
      fw_error_set (error, FW_ERROR_MONGO, "the fake store was fenced with a newer epoch");
      return FW_CHECKPOINT_NOT_SAVED;
   }
   if (w->seq <= f->stored_seq) {
      return FW_CHECKPOINT_SUPERSEDED;
   }
   f->went_back = f->went_back || v < f->stored_value;
   f->stored_moves += v != f->stored_value;
   f->stored_seq = w->seq;
   f->stored_value = v;
   return FW_CHECKPOINT_SAVED;
}

static fw_checkpoint_saved_t
fake_write (void *ud, int conn, const fw_checkpoint_write_t *w, fw_error_t *error)
{
   fake_t *f = ud;
   fw_checkpoint_saved_t saved;

   pthread_mutex_lock (&f->mu);
   f->broken += f->writing[conn] != 0; /* one write per conn at a time */
   f->writing[conn] = w->seq;
   pthread_cond_broadcast (&f->changed);
   while (f->hold || f->hold_conn[conn]) {
      f->holding[conn] = true;
      pthread_cond_broadcast (&f->changed);
      pthread_cond_wait (&f->changed, &f->mu);
   }
   f->holding[conn] = false;
   if (f->fail_next > 0 || (f->fail_seq && f->fail_seq == w->seq)) {
      f->fail_next -= f->fail_next > 0;
      f->fail_seq = f->fail_seq == w->seq ? 0 : f->fail_seq;
      fw_error_set (error, FW_ERROR_MONGO, "the fake store refuses this write");
      saved = FW_CHECKPOINT_NOT_SAVED;
   } else {
      saved = fake_store (f, w, error);
   }
   if (f->n < MAX_WRITES) {
      f->value[f->n] = value_of (w->processed);
      f->epoch[f->n] = w->epoch;
      f->seq[f->n] = w->seq;
      f->conn[f->n] = conn;
      f->saved[f->n] = saved;
      f->ok[f->n] = saved == FW_CHECKPOINT_SAVED || saved == FW_CHECKPOINT_SUPERSEDED;
      f->n++;
   }
   f->writing[conn] = 0;
   pthread_cond_broadcast (&f->changed);
   pthread_mutex_unlock (&f->mu);
   return saved;
}

/* A state of f a test waits for (under f->mu), with its two arguments. */
typedef bool (*fake_reached_fn) (const fake_t *f, int64_t a, int64_t b);

/* Waits up to ms until reached (f, a, b) holds; false if it never did. */
static bool
fake_wait_for (fake_t *f, fake_reached_fn reached_fn, int64_t a, int64_t b, int64_t ms)
{
   int64_t until = fw_mono_ms () + ms;
   bool reached;

   pthread_mutex_lock (&f->mu);
   while (!(reached = reached_fn (f, a, b)) && fw_mono_ms () < until) {
      fw_mono_cond_wait_ms (&f->changed, &f->mu, 50);
   }
   pthread_mutex_unlock (&f->mu);
   return reached;
}

/* f has tried n writes (or one is held, with n < 0). */
static bool
tried (const fake_t *f, int64_t n, int64_t unused)
{
   (void) unused;
   return n < 0 ? f->holding[0] : f->n >= n;
}

/* conn is held writing seq. */
static bool
held (const fake_t *f, int64_t conn, int64_t seq)
{
   return f->holding[conn] && f->writing[conn] == (uint64_t) seq;
}

/* f has written position v. */
static bool
written (const fake_t *f, int64_t v, int64_t unused)
{
   (void) unused;
   for (int i = 0; i < f->n; i++) {
      if (f->value[i] == v && f->ok[i]) {
         return true;
      }
   }
   return false;
}

static bool
fake_wait_ms (fake_t *f, int n, int64_t ms)
{
   return fake_wait_for (f, tried, n, 0, ms);
}

static bool
fake_wait (fake_t *f, int n)
{
   return fake_wait_for (f, tried, n, 0, DEADLINE_MS);
}

static bool
fake_wait_held (fake_t *f, int conn, uint64_t seq)
{
   return fake_wait_for (f, held, conn, (int64_t) seq, DEADLINE_MS);
}

static bool
fake_wait_value (fake_t *f, int64_t v)
{
   return fake_wait_for (f, written, v, 0, DEADLINE_MS);
}

static void
fake_hold (fake_t *f, bool hold)
{
   pthread_mutex_lock (&f->mu);
   f->hold = hold;
   pthread_cond_broadcast (&f->changed);
   pthread_mutex_unlock (&f->mu);
}

static void
fake_hold_conn (fake_t *f, int conn, bool hold)
{
   pthread_mutex_lock (&f->mu);
   f->hold_conn[conn] = hold;
   pthread_cond_broadcast (&f->changed);
   pthread_mutex_unlock (&f->mu);
}

static fw_checkpoint_writer_t *
writer_with (fake_t *f, int64_t retry_ms, int in_flight)
{
   fw_checkpoint_sink_t sink = {fake_open, fake_write, fake_close, f};
   fw_error_t err;
   fw_checkpoint_writer_t *cw = fw_checkpoint_writer_start (&sink, "s", retry_ms, in_flight, &err);
   assert_non_null (cw);
   return cw;
}

static fw_checkpoint_writer_t *
writer_over (fake_t *f, int64_t retry_ms)
{
   return writer_with (f, retry_ms, 1);
}

/* Hands n over with a bound of max_behind hand-overs and max_unsaved_ms. */
static void
submit_within (fw_checkpoint_writer_t *cw, int64_t n, int max_behind, int64_t max_unsaved_ms)
{
   bson_t doc = BSON_INITIALIZER;
   BSON_APPEND_INT64 (&doc, "n", n);
   fw_checkpoint_writer_submit (cw, &doc, NULL, "v1", max_behind, max_unsaved_ms);
   bson_destroy (&doc);
}

/* ... with the count bound alone (max_unsaved 0). */
static void
submit (fw_checkpoint_writer_t *cw, int64_t n, int max_behind)
{
   submit_within (cw, n, max_behind, 0);
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
   assert_int_equal (f.opened[0], 1);
   assert_int_equal (f.closed[0], 1);
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

/* A call of the writer that may block, run on a thread of its own: a
 * quiesce, or hand-overs of v, v + 1, ... (count of them, at least one) with
 * max_behind and max_unsaved_ms (submit_within). */
typedef struct {
   fw_checkpoint_writer_t *cw;
   fake_t *f;
   bool quiesce;
   int64_t v;
   int max_behind;
   int64_t max_unsaved_ms;
   int count;
   int tried_at_return; /* how many writes the store had tried when it returned */
   bool returned;       /* under f->mu, broadcast on f->changed */
   pthread_t thread;
} call_t;

static void *
call_main (void *arg)
{
   call_t *c = arg;
   if (c->quiesce) {
      fw_checkpoint_writer_quiesce (c->cw);
   } else {
      for (int i = 0; i < (c->count > 0 ? c->count : 1); i++) {
         submit_within (c->cw, c->v + i, c->max_behind, c->max_unsaved_ms);
      }
   }
   pthread_mutex_lock (&c->f->mu);
   c->tried_at_return = c->f->n;
   c->returned = true;
   pthread_cond_broadcast (&c->f->changed);
   pthread_mutex_unlock (&c->f->mu);
   return NULL;
}

static void
call_start (call_t *c)
{
   c->tried_at_return = -1;
   c->returned = false;
   assert_int_equal (pthread_create (&c->thread, NULL, call_main, c), 0);
}

/* The call c (a) has returned. */
static bool
call_returned (const fake_t *f, int64_t c, int64_t unused)
{
   (void) f;
   (void) unused;
   return ((const call_t *) (intptr_t) c)->returned;
}

/* Waits up to ms for c's return; false if it has not returned by then. */
static bool
call_wait_ms (call_t *c, int64_t ms)
{
   return fake_wait_for (c->f, call_returned, (int64_t) (intptr_t) c, 0, ms);
}

/* Waits for the call's return (then tried_at_return is set). */
static void
call_join (call_t *c)
{
   pthread_join (c->thread, NULL);
}

/* quiesce waits for the write in flight; the position waiting is dropped
 * unless the writer took it before the quiesce (the threads race there),
 * and the next hand-over is written after it, in order. */
static void
test_quiesce_waits_for_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .quiesce = true};
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1));
   submit (cw, 2, 0);
   call_start (&a);
   fake_hold (&f, false);
   call_join (&a);
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
   call_t a = {.f = &f, .quiesce = true};
   (void) state;

   fake_init (&f);
   f.fail_next = 1;
   cw = writer_over (&f, 100); /* a retry would come 100 ms after the failure */
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1)); /* 1 is in flight, and will fail */
   call_start (&a);
   /* Let the quiesce reach its wait for the flight (if it has not, it
    * drops the retry as it starts: the test then shows less). */
   nanosleep (&(struct timespec){0, 50 * 1000 * 1000}, NULL);
   fake_hold (&f, false);
   call_join (&a);
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

/* With max_behind = 2, a hand-over waits while two are not yet tried: the
 * stored checkpoint lags the handed-over position by a bounded amount. */
static void
test_max_behind_bounds_the_lag (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .v = 3, .max_behind = 2};
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   fake_hold (&f, true);
   submit (cw, 1, 2);
   assert_true (fake_wait (&f, -1)); /* 1 in flight */
   submit (cw, 2, 2);                /* 2 waits: two not yet tried */
   call_start (&a);                  /* hands 3 over */
   fake_hold (&f, false);
   call_join (&a);
   /* 3 was handed over only once 1 was tried */
   assert_true (a.tried_at_return >= 1);
   assert_true (fake_wait_value (&f, 3));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.value[0], 1);
   assert_int_equal (f.value[f.n - 1], 3); /* 2 and 3 may coalesce; 3 is the last */
}

/* ---- several writes in flight (issue 41) ---- */

/* Destroys cw and checks what every test of several writes checks: the
 * writer broke no rule of the sink and the stored position never went back. */
static void
finish_writer (fw_checkpoint_writer_t *cw, fake_t *f)
{
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f->broken, 0);
   assert_false (f->went_back);
   for (int i = 0; i < CONNS; i++) {
      assert_int_equal (f->opened[i], f->closed[i]); /* every connection given back */
   }
}

/* Two connections, max_behind 6: a second write starts once the position is
 * 6 / 3 = 2 hand-overs past the one in flight (3, not 2, on conn 1); when 3
 * ends before 1, 1 changes nothing (superseded): the store stays at 3. */
static void
test_out_of_order_never_moves_back (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   int ok, failed;
   int64_t at;
   (void) state;

   fake_init (&f);
   cw = writer_with (&f, 1000, 2);
   fake_hold_conn (&f, 0, true);
   fake_hold_conn (&f, 1, true);
   submit (cw, 1, 6);
   assert_true (fake_wait_held (&f, 0, 1));
   submit (cw, 2, 6); /* too close to 1: waits */
   submit (cw, 3, 6); /* replaces 2 and starts on the second connection */
   assert_true (fake_wait_held (&f, 1, 3));
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait (&f, 1));
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_quiesce (cw);
   fw_checkpoint_writer_take_results (cw, &ok, &failed, &at);
   finish_writer (cw, &f);
   assert_int_equal (f.n, 2);
   assert_int_equal (f.seq[0], 3);
   assert_int_equal (f.conn[0], 1);
   assert_int_equal (f.saved[0], FW_CHECKPOINT_SAVED);
   assert_int_equal (f.seq[1], 1);
   assert_int_equal (f.saved[1], FW_CHECKPOINT_SUPERSEDED);
   assert_int_equal (f.stored_value, 3);
   assert_int_equal (ok, 2); /* a superseded write is no failure: a later one holds it */
   assert_int_equal (failed, 0);
   assert_int_equal (f.opened[1], 1);
}

/* This process's threads (Linux: /proc/self/task). */
static int
thread_count (void)
{
   DIR *d = opendir ("/proc/self/task");
   struct dirent *e;
   int n = 0;
   assert_non_null (d);
   while ((e = readdir (d))) {
      n += e->d_name[0] != '.';
   }
   closedir (d);
   return n;
}

/* max_behind 19: a second write starts only once the writer lags by half of
 * it (9 hand-overs past the newest tried), not at 8 (7 past the one in
 * flight, 19 / 3 rounded up, would do): a write that keeps up is not
 * doubled, and the second connection's thread starts only then. */
static void
test_second_write_only_when_lagging (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   int threads = thread_count ();

   fake_init (&f);
   cw = writer_with (&f, 1000, 2);
   fake_hold_conn (&f, 0, true);
   fake_hold_conn (&f, 1, true);
   submit (cw, 1, 19);
   assert_true (fake_wait_held (&f, 0, 1));
   for (int64_t v = 2; v <= 8; v++) {
      submit (cw, v, 19); /* 8 behind at most: waits */
   }
   assert_int_equal (thread_count (), threads + 1); /* the second connection's not started */
   submit (cw, 9, 19);                              /* 9 behind: starts */
   assert_true (fake_wait_held (&f, 1, 9));
   assert_int_equal (thread_count (), threads + 2);
   fake_hold_conn (&f, 0, false);
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_quiesce (cw);
   finish_writer (cw, &f);
   assert_int_equal (f.n, 2);
   assert_int_equal (f.stored_value, 9);
}

/* Two writes held in flight: 1 on the first connection, 3 on the second
 * (2, submitted between, superseded by 3 before it is taken). */
static void
two_in_flight (fake_t *f, fw_checkpoint_writer_t *cw)
{
   fake_hold_conn (f, 0, true);
   fake_hold_conn (f, 1, true);
   submit (cw, 1, 6);
   assert_true (fake_wait_held (f, 0, 1));
   submit (cw, 2, 6);
   submit (cw, 3, 6);
   assert_true (fake_wait_held (f, 1, 3));
}

/* The newer of two writes in flight fails while the older is still out: it
 * is tried again (nothing newer holds it) and stored. */
static void
test_newer_of_two_failing_is_retried (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.fail_seq = 3;
   cw = writer_with (&f, 20, 2);
   fake_hold_conn (&f, 0, true);
   fake_hold_conn (&f, 1, true);
   submit (cw, 1, 6);
   assert_true (fake_wait_held (&f, 0, 1));
   submit (cw, 3, 6); /* seq 2 */
   submit (cw, 3, 6); /* seq 3: on conn 1 */
   assert_true (fake_wait_held (&f, 1, 3));
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait (&f, 1)); /* 3 failed */
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait (&f, 3)); /* 1 stored, then 3 again */
   fw_checkpoint_writer_quiesce (cw);
   finish_writer (cw, &f);
   assert_int_equal (f.n, 3);
   assert_false (f.ok[0]);
   assert_int_equal (f.seq[1], 1);
   assert_int_equal (f.seq[2], 3);
   assert_true (f.ok[2]);
   assert_int_equal (f.stored_value, 3);
}

/* The older of two writes in flight fails while the newer is out: it is not
 * tried again (the newer one holds it), and the newer is stored. */
static void
test_older_of_two_failing_is_not_retried (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.fail_seq = 1;
   cw = writer_with (&f, 20, 2);
   two_in_flight (&f, cw);
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait (&f, 1)); /* 1 failed */
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait_value (&f, 3));
   fw_checkpoint_writer_quiesce (cw);
   finish_writer (cw, &f);
   assert_int_equal (f.n, 2); /* 1 once, 3 once: no retry of 1 */
   assert_int_equal (f.seq[0], 1);
   assert_false (f.ok[0]);
   assert_int_equal (f.stored_value, 3);
}

/* quiesce returns only once every write in flight has ended. */
static void
test_quiesce_waits_for_every_write (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .quiesce = true};
   (void) state;

   fake_init (&f);
   cw = writer_with (&f, 1000, 2);
   a.cw = cw;
   two_in_flight (&f, cw);
   call_start (&a);
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait (&f, 1));
   fake_hold_conn (&f, 1, false);
   call_join (&a);
   assert_int_equal (a.tried_at_return, 2);
   finish_writer (cw, &f);
   assert_int_equal (f.n, 2);
   assert_int_equal (f.stored_value, 3);
}

/* Writes in flight carry the epoch they started with; once a newer leader
 * fenced the store, they are refused and change nothing; after a quiesce and
 * the new epoch, writes carry it and are stored. */
static void
test_fencing_with_writes_in_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.fence = 7;
   cw = writer_with (&f, 60000, 2);
   fw_checkpoint_writer_set_epoch (cw, 7);
   two_in_flight (&f, cw);
   pthread_mutex_lock (&f.mu);
   f.fence = 8; /* another instance leads now */
   pthread_mutex_unlock (&f.mu);
   fake_hold_conn (&f, 0, false);
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_quiesce (cw); /* drops 3's retry */
   assert_int_equal (f.stored_value, -1);
   fw_checkpoint_writer_set_epoch (cw, 8); /* this instance leads again */
   submit (cw, 4, 6);
   assert_true (fake_wait_value (&f, 4));
   finish_writer (cw, &f);
   assert_int_equal (f.n, 3);
   assert_int_equal (f.epoch[0], 7);
   assert_int_equal (f.epoch[1], 7);
   assert_false (f.ok[0]);
   assert_false (f.ok[1]);
   assert_int_equal (f.epoch[2], 8);
   assert_int_equal (f.stored_value, 4);
}

/* When the pool lends no second connection, every write goes through the
 * first, one at a time, and the last position is stored. */
static void
test_without_a_second_connection (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   (void) state;

   fake_init (&f);
   f.lend = false;
   cw = writer_with (&f, 1000, 3);
   fake_hold_conn (&f, 0, true);
   submit (cw, 1, 0);
   assert_true (fake_wait_held (&f, 0, 1));
   for (int64_t v = 2; v <= 6; v++) {
      submit (cw, v, 0);
   }
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait_value (&f, 6));
   finish_writer (cw, &f);
   for (int i = 0; i < f.n; i++) {
      assert_int_equal (f.conn[i], 0);
   }
   assert_int_equal (f.opened[1] + f.opened[2], 0);
   assert_int_equal (f.stored_value, 6);
}

/* With two writes in flight, max_behind still bounds the lag: with 1 and 3
 * out and 4 waiting, hand-over 5 (4 past the newest tried, none) waits until
 * a write ends. */
static void
test_max_behind_with_writes_in_flight (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .v = 5, .max_behind = 4};
   (void) state;

   fake_init (&f);
   cw = writer_with (&f, 1000, 2);
   a.cw = cw;
   fake_hold_conn (&f, 0, true);
   fake_hold_conn (&f, 1, true);
   submit (cw, 1, 4);
   assert_true (fake_wait_held (&f, 0, 1));
   submit (cw, 2, 4); /* gap 4 / 3 -> 2 */
   submit (cw, 3, 4);
   assert_true (fake_wait_held (&f, 1, 3));
   submit (cw, 4, 4);
   call_start (&a); /* hands 5 over */
   fake_hold_conn (&f, 1, false);
   call_join (&a);
   assert_true (a.tried_at_return >= 1); /* 5 was handed over once 3 was tried */
   fake_hold_conn (&f, 0, false);
   assert_true (fake_wait_value (&f, 5));
   finish_writer (cw, &f);
   assert_int_equal (f.stored_value, 5);
}

/* The stamp of the stream's own synchronous save (at shutdown, a pause):
 * its seq is past every hand-over, the next hand-over's is past it, and the
 * handler's bound counts from it (nothing waits for what the save holds). */
static void
test_stamp_comes_after_every_hand_over (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   bson_oid_t writer;
   int64_t seq = 0;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   fake_hold (&f, true);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, -1));
   submit (cw, 2, 0); /* waits behind 1: dropped by the quiesce */
   fake_hold (&f, false);
   fw_checkpoint_writer_quiesce (cw);
   assert_false (fw_checkpoint_writer_stamp (cw, &writer, &seq)); /* the fake has no id */
   assert_int_equal (seq, 3);
   submit (cw, 4, 1); /* max_behind 1: would wait for 2 and the stamp's seq if they counted */
   assert_true (fake_wait_value (&f, 4));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.seq[f.n - 1], 4);
   assert_int_equal (f.broken, 0);
}

/* A write refused by a newer run of the stream is final: it is not tried
 * again (a retry_ms of 20 ms would have tried it many times within the
 * wait), the writer says why, and a hand-over after it never waits for the
 * handler's bound: the stream stops instead. */
static void
test_a_newer_runs_refusal_is_not_tried_again (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   fw_error_t why;
   int ok, failed;
   int64_t last_ok_ms;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 20);
   submit (cw, 1, 0);
   assert_true (fake_wait (&f, 1));
   fw_checkpoint_writer_quiesce (cw); /* the write's end is counted */
   assert_false (fw_checkpoint_writer_refused (cw, &why));

   pthread_mutex_lock (&f.mu);
   f.newer_run = true;
   pthread_mutex_unlock (&f.mu);
   submit (cw, 2, 0);
   assert_true (fake_wait (&f, 2));
   fw_checkpoint_writer_quiesce (cw);
   assert_true (fw_checkpoint_writer_refused (cw, &why));
   assert_non_null (strstr (why.message, "a newer run of the stream"));
   submit (cw, 3, 1); /* max_behind 1: would wait for ever for a write that never starts */
   submit (cw, 4, 1);
   assert_false (fake_wait_ms (&f, 3, 500));
   fw_checkpoint_writer_take_results (cw, &ok, &failed, &last_ok_ms);
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.n, 2);
   assert_int_equal (ok, 1);
   assert_int_equal (failed, 1);
   assert_int_equal (f.stored_value, 1);
}

/* ---- the time allowance (checkpoint.max_unsaved, issue 41) ---- */

/* Waits until the monotonic clock reads at least until_ms. (A time read
 * with fw_mono_ms before t is under t + 1 ms: a test waits for t + d + 1 to
 * be sure that d or more has passed since.) */
static void
clock_passes (int64_t until_ms)
{
   while (fw_mono_ms () < until_ms) {
      nanosleep (&(struct timespec){0, 5 * 1000 * 1000}, NULL);
   }
}

/* Hands 1 over and waits for its write and for the writer to count it (a
 * quiesce: the writer then counts its own save's place as handed over now):
 * the newest tried was handed over before the returned time (fw_mono_ms),
 * and no connection is busy. */
static int64_t
first_written (fake_t *f, fw_checkpoint_writer_t *cw, int max_behind, int64_t max_unsaved_ms)
{
   submit_within (cw, 1, max_behind, max_unsaved_ms);
   assert_true (fake_wait_value (f, 1));
   fw_checkpoint_writer_quiesce (cw);
   return fw_mono_ms ();
}

/* max_behind 19, max_unsaved a minute: with 2 held in flight, 30 more saves
 * (up to 29 past the newest tried, 1) are handed over without a wait, as
 * 1 was handed over less than a minute ago; the newest is written once the
 * write ends. */
static void
test_no_wait_while_the_unsaved_are_younger_than_the_allowance (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .v = 2, .max_behind = 19, .max_unsaved_ms = 60000, .count = 30};
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   first_written (&f, cw, 19, 60000);
   fake_hold (&f, true);
   call_start (&a);
   assert_true (call_wait_ms (&a, DEADLINE_MS)); /* 2 .. 31 handed over, none waited */
   call_join (&a);
   assert_int_equal (a.tried_at_return, 1); /* 2 still held: nothing else ended */
   fake_hold (&f, false);
   assert_true (fake_wait_value (&f, 31));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.n, 3); /* 1, 2, then 31 (3 .. 30 coalesced) */
   assert_int_equal (f.value[1], 2);
   assert_int_equal (f.value[2], 31);
   assert_int_equal (f.broken, 0);
}

/* max_behind 19, max_unsaved 200 ms: once 1 (the newest tried) was handed
 * over 200 ms ago or more, the hand-over 19 saves past it waits until a
 * write ends. */
static void
test_waits_once_the_newest_stored_is_older_than_the_allowance (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .v = 21, .max_behind = 19, .max_unsaved_ms = 200};
   int64_t handed;
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   handed = first_written (&f, cw, 19, 200);
   clock_passes (handed + 200 + 1);
   fake_hold (&f, true);
   for (int64_t v = 2; v <= 20; v++) {
      submit_within (cw, v, 19, 200); /* up to 18 past 1: no wait */
   }
   call_start (&a); /* 21: 19 past 1, handed over 200 ms ago or more */
   assert_false (call_wait_ms (&a, 300));
   assert_int_equal (tried_now (&f), 1);
   fake_hold (&f, false);
   call_join (&a);
   assert_true (a.tried_at_return >= 2); /* 21 was handed over once 2 was tried */
   assert_true (fake_wait_value (&f, 21));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.broken, 0);
}

/* max_unsaved 0 keeps the count bound alone: however young 1 is, the
 * hand-over 19 saves past it waits for a write to end (the call would hand
 * over 2 .. 31 at once with an allowance, as above). */
static void
test_zero_allowance_keeps_the_count_bound (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &f, .v = 2, .max_behind = 19, .max_unsaved_ms = 0, .count = 30};
   (void) state;

   fake_init (&f);
   cw = writer_over (&f, 1000);
   a.cw = cw;
   first_written (&f, cw, 19, 0);
   fake_hold (&f, true);
   call_start (&a);
   assert_false (call_wait_ms (&a, 300)); /* 21 waits */
   assert_int_equal (tried_now (&f), 1);
   fake_hold (&f, false);
   call_join (&a);
   assert_true (a.tried_at_return >= 2);
   assert_true (fake_wait_value (&f, 31));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.broken, 0);
}

/* Two connections, max_behind 19: while 1 (the newest tried) is younger than
 * half the allowance, no second write starts however many saves wait (a
 * minute's allowance: 2 .. 12 on conn 0's write of 2); once it is older (a
 * 200 ms allowance, 100 ms and more since 1 and 66 since 2), the next save
 * starts on the second connection. */
static void
test_second_write_once_half_the_allowance_is_used (void **state)
{
   fake_t f;
   fw_checkpoint_writer_t *cw;
   int64_t handed;
   (void) state;

   fake_init (&f);
   cw = writer_with (&f, 1000, 2);
   first_written (&f, cw, 19, 60000);
   fake_hold_conn (&f, 0, true);
   fake_hold_conn (&f, 1, true);
   submit_within (cw, 2, 19, 60000);
   handed = fw_mono_ms (); /* 2 was handed over before */
   assert_true (fake_wait_held (&f, 0, 2));
   for (int64_t v = 3; v <= 12; v++) {
      submit_within (cw, v, 19, 60000); /* 11 past 1, 10 past 2: lagging in saves only */
   }
   pthread_mutex_lock (&f.mu);
   assert_int_equal (f.opened[1], 0);
   pthread_mutex_unlock (&f.mu);
   clock_passes (handed + 100 + 1);
   submit_within (cw, 13, 19, 200);
   assert_true (fake_wait_held (&f, 1, 13));
   fake_hold_conn (&f, 0, false);
   fake_hold_conn (&f, 1, false);
   assert_true (fake_wait_value (&f, 13));
   fw_checkpoint_writer_quiesce (cw);
   finish_writer (cw, &f);
   assert_int_equal (f.stored_value, 13);
}

/* Until its first write ends, the position a writer started from counts as
 * handed over long ago: 19 hand-overs past it wait however large the
 * allowance. With its origin set (fw_checkpoint_writer_set_origin: the
 * stream's run began just now), they do not. */
static void
test_origin_sets_the_age_of_the_position_started_from (void **state)
{
   fake_t f, g;
   fw_checkpoint_writer_t *cw;
   call_t a = {.f = &g, .v = 1, .max_behind = 19, .max_unsaved_ms = 60000, .count = 30};
   (void) state;

   fake_init (&g);
   fake_hold (&g, true);
   cw = writer_over (&g, 1000);
   a.cw = cw;
   call_start (&a);
   assert_false (call_wait_ms (&a, 300)); /* 20 waits: 19 past the position started from */
   fake_hold (&g, false);
   call_join (&a);
   assert_true (a.tried_at_return >= 1);
   fw_checkpoint_writer_destroy (cw);

   fake_init (&f);
   fake_hold (&f, true);
   cw = writer_over (&f, 1000);
   fw_checkpoint_writer_set_origin (cw, fw_mono_ns ());
   a.cw = cw;
   a.f = &f;
   call_start (&a);
   assert_true (call_wait_ms (&a, DEADLINE_MS)); /* 1 .. 30 handed over, none waited */
   call_join (&a);
   assert_int_equal (a.tried_at_return, 0);
   fake_hold (&f, false);
   assert_true (fake_wait_value (&f, 30));
   fw_checkpoint_writer_destroy (cw);
   assert_int_equal (f.broken, 0);
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
      cmocka_unit_test (test_out_of_order_never_moves_back),
      cmocka_unit_test (test_second_write_only_when_lagging),
      cmocka_unit_test (test_newer_of_two_failing_is_retried),
      cmocka_unit_test (test_stamp_comes_after_every_hand_over),
      cmocka_unit_test (test_older_of_two_failing_is_not_retried),
      cmocka_unit_test (test_quiesce_waits_for_every_write),
      cmocka_unit_test (test_fencing_with_writes_in_flight),
      cmocka_unit_test (test_without_a_second_connection),
      cmocka_unit_test (test_max_behind_with_writes_in_flight),
      cmocka_unit_test (test_a_newer_runs_refusal_is_not_tried_again),
      cmocka_unit_test (test_no_wait_while_the_unsaved_are_younger_than_the_allowance),
      cmocka_unit_test (test_waits_once_the_newest_stored_is_older_than_the_allowance),
      cmocka_unit_test (test_zero_allowance_keeps_the_count_bound),
      cmocka_unit_test (test_second_write_once_half_the_allowance_is_used),
      cmocka_unit_test (test_origin_sets_the_age_of_the_position_started_from),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
