/*
 * A stream's summary (the counts of its exit line, fw_stream_worker_stats):
 * the dispatcher counts nothing; the outcome of each event carries what the
 * summary needs (its end, its failed attempts, its retries) and the stream's
 * settle counts it once. Each kind through a real stream worker's
 * dispatcher (script, in-memory DLQ, no server): handled (at once and after
 * a retry), skipped, dead-lettered, parked, scheduled as a deferred retry
 * (and its retry run later), lost, no handler; a batch whose first call
 * failed; and a stream's two lanes counting into its summary from their
 * own threads while the stream's thread counts too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "change_event_fixture.h"

#include "bson/event.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/dispatcher_access-private.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/host/lua_host.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/stream/stream_worker.h"

/* The streams of the script, by index. Key k of an event says what its
 * handler does: 1 returns, 2 fails its first attempt only, 10 fails and
 * on_error skips it, 11 fails and on_error dead-letters it, anything else
 * fails every attempt. */
enum { S_PLAIN, S_NO_DLQ, S_DLQ, S_SEQ, S_DEFERRED, S_BATCH, S_LANES };

static const char *const SCRIPT =
   "local fw = require('flowwarden')\n"
   "local function handle(ctx)\n"
   "  local k = ctx:document_key()._id\n"
   "  if k == 1 or (k == 2 and ctx:attempt_number() > 1) then return end\n"
   "  error(fw.error('Test.Failure', 'it fails'))\n"
   "end\n"
   "local function decide(err, ctx)\n"
   "  local k = ctx:document_key()._id\n"
   "  if k == 10 then return fw.SKIP end\n"
   "  if k == 11 then return fw.DLQ end\n"
   "end\n"
   "local fast = { max_attempts = 2, initial_delay = '1ms', jitter = false }\n"
   "fw.stream { name = 'plain', collection = 'c', retry = fast, dlq = { store = 'memory' },\n"
   "  on_insert = handle, on_error = decide }\n"
   "fw.stream { name = 'no_dlq', collection = 'c', retry = fast, on_insert = handle }\n"
   "fw.stream { name = 'dlq', collection = 'c', retry = fast, dlq = { store = 'memory' },\n"
   "  on_insert = handle }\n"
   "fw.stream { name = 'seq', collection = 'c', retry = { max_attempts = 1 },\n"
   "  dlq = { store = 'memory', sequenced = true }, on_insert = handle }\n"
   "fw.stream { name = 'deferred', collection = 'c', dlq = true,\n"
   "  retry = { mode = 'deferred', max_attempts = 3, initial_delay = '1ms', jitter = false },\n"
   "  on_insert = handle }\n"
   "local calls = 0\n"
   "fw.stream { name = 'batch', collection = 'c', batch = { max_events = 10 },\n"
   "  retry = { max_attempts = 3, initial_delay = '1ms', jitter = false },\n"
   "  on_batch = function(batch)\n"
   "    calls = calls + 1\n"
   "    if calls == 1 then error(fw.error('Test.Failure', 'the first call fails')) end\n"
   "  end }\n"
   "fw.stream { name = 'lanes', collection = 'c', lanes = 2, retry = fast, on_insert = handle }\n";

static fw_lua_host_t *
host_of (void)
{
   return host_of_script (SCRIPT);
}

/* Stream `index` of the script as `run` builds it (its dispatcher's outcomes
 * settled by the stream), with no server. */
static fw_stream_worker_t *
worker_for (int index)
{
   fw_error_t err;
   fw_stream_worker_t *w = fw_stream_worker_new (host_of (), index, NULL, NULL, &err);

   if (!w) {
      fail_msg ("%s", err.message);
   }
   return w;
}

static void
worker_free (fw_stream_worker_t *w)
{
   fw_stream_worker_unbind (w); /* its DLQ store closed, as its thread ends */
   fw_stream_worker_destroy (w);
}

/* Event (op, k, i) through d; returns its outcome's kind. */
static fw_outcome_kind_t
dispatch (fw_dispatcher_t *d, const char *op, int k, int i)
{
   return dispatch_change_event (d, op, k, i).kind;
}

typedef struct {
   uint64_t handled, handler_errors, retries, dead_lettered, skipped, lost, parked;
} counts_t;

/* w's summary is exactly c. */
static void
expect (const fw_stream_worker_t *w, counts_t c)
{
   fw_stream_stats_t s;

   fw_stream_worker_stats (w, &s);
   assert_int_equal (s.handled, c.handled);
   assert_int_equal (s.handler_errors, c.handler_errors);
   assert_int_equal (s.retries, c.retries);
   assert_int_equal (s.dead_lettered, c.dead_lettered);
   assert_int_equal (s.skipped, c.skipped);
   assert_int_equal (s.lost, c.lost);
   assert_int_equal (s.parked, c.parked);
   assert_false (s.failed);
}

static void
test_handled_once_each (void **state)
{
   fw_stream_worker_t *w = worker_for (S_PLAIN);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   (void) state;

   expect (w, (counts_t){0});
   assert_int_equal (dispatch (d, "insert", 1, 0), FW_OUTCOME_HANDLED);
   expect (w, (counts_t){.handled = 1});
   /* Handled on its second attempt: one failed attempt, one retry. */
   assert_int_equal (dispatch (d, "insert", 2, 1), FW_OUTCOME_HANDLED);
   expect (w, (counts_t){.handled = 2, .handler_errors = 1, .retries = 1});
   worker_free (w);
}

static void
test_no_handler_counts_nothing (void **state)
{
   fw_stream_worker_t *w = worker_for (S_PLAIN);
   (void) state;

   /* Only on_insert is declared. */
   assert_int_equal (dispatch (fw_stream_worker_dispatcher (w), "delete", 1, 0),
                     FW_OUTCOME_NO_HANDLER);
   expect (w, (counts_t){0});
   worker_free (w);
}

static void
test_skipped (void **state)
{
   fw_stream_worker_t *w = worker_for (S_PLAIN);
   (void) state;

   assert_int_equal (dispatch (fw_stream_worker_dispatcher (w), "insert", 10, 0),
                     FW_OUTCOME_SKIPPED);
   expect (w, (counts_t){.skipped = 1, .handler_errors = 1});
   worker_free (w);
}

static void
test_dead_lettered (void **state)
{
   fw_stream_worker_t *w = worker_for (S_DLQ);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   (void) state;

   /* After its two attempts; and at once when on_error says fw.DLQ (no
    * on_error on this stream: both retried). */
   assert_int_equal (dispatch (d, "insert", 3, 0), FW_OUTCOME_DEAD_LETTERED);
   expect (w, (counts_t){.dead_lettered = 1, .handler_errors = 2, .retries = 1});
   worker_free (w);

   w = worker_for (S_PLAIN);
   assert_int_equal (dispatch (fw_stream_worker_dispatcher (w), "insert", 11, 0),
                     FW_OUTCOME_DEAD_LETTERED);
   expect (w, (counts_t){.dead_lettered = 1, .handler_errors = 1});
   worker_free (w);
}

static void
test_lost (void **state)
{
   fw_stream_worker_t *w = worker_for (S_NO_DLQ);
   (void) state;

   assert_int_equal (dispatch (fw_stream_worker_dispatcher (w), "insert", 3, 0), FW_OUTCOME_LOST);
   expect (w, (counts_t){.lost = 1, .handler_errors = 2, .retries = 1});
   worker_free (w);
}

/* Key 3's first event opens its sequence; its next one is parked behind. */
static void
test_parked (void **state)
{
   fw_stream_worker_t *w = worker_for (S_SEQ);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   (void) state;

   assert_true (fw_dispatcher_open_dlq (d));
   assert_true (fw_dispatcher_load_sequences (d));
   assert_int_equal (dispatch (d, "insert", 3, 0), FW_OUTCOME_DEAD_LETTERED);
   assert_int_equal (dispatch (d, "insert", 3, 1), FW_OUTCOME_PARKED);
   expect (w, (counts_t){.dead_lettered = 1, .parked = 1, .handler_errors = 1});
   worker_free (w);
}

/* A deferred retry: scheduled (a failed attempt and a retry to come, no
 * end); its retry, run by the stream later as a replay, is the stream's
 * too: handled on attempt 2. */
static void
test_deferred_and_its_retry (void **state)
{
   fw_stream_worker_t *w = worker_for (S_DEFERRED);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   fw_stream_stats_t s = {0};
   int64_t deadline = fw_mono_ns () + 10 * 1000000000LL;
   fw_error_t err;
   fw_dlq_store_t *store = fw_dlq_store_memory_new (&err);
   (void) state;

   /* Deferred retries need the MongoDB store: the in-memory one stands in
    * for it as under flowwarden test (released with the dispatcher). */
   assert_non_null (store);
   fw_dispatcher_set_dlq_store (d, store);
   assert_int_equal (dispatch (d, "insert", 2, 0), FW_OUTCOME_DEFERRED);
   expect (w, (counts_t){.handler_errors = 1, .retries = 1});
   /* Due 1 ms later: the stream's tick runs it once due (bounded wait). */
   while (s.handled == 0 && fw_mono_ns () < deadline) {
      fw_deferred_tick (d);
      fw_stream_worker_stats (w, &s);
      if (s.handled == 0) {
         usleep (2000);
      }
   }
   expect (w, (counts_t){.handled = 1, .handler_errors = 1, .retries = 1});
   worker_free (w);
}

/* on_batch's first call fails, its retry handles the three events: each
 * event counted once, the failed call and the retry once. */
static void
test_batch (void **state)
{
   fw_stream_worker_t *w = worker_for (S_BATCH);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   bson_t *docs[3];
   fw_event_t evs[3];
   const fw_event_t *ptrs[3];
   fw_outcome_kind_t kinds[3];
   fw_error_t err;
   (void) state;

   for (int i = 0; i < 3; i++) {
      docs[i] = change_event_of ("insert", 20 + i, i);
      assert_true (fw_event_parse (docs[i], &evs[i], &err));
      ptrs[i] = &evs[i];
   }
   assert_int_equal (fw_batch_dispatch (d, ptrs, 3, kinds).kind, FW_OUTCOME_HANDLED);
   for (int i = 0; i < 3; i++) {
      assert_int_equal (kinds[i], FW_OUTCOME_HANDLED);
      bson_destroy (docs[i]);
   }
   expect (w, (counts_t){.handled = 3, .handler_errors = 1, .retries = 1});
   worker_free (w);
}

#define LANE_EVENTS 300

/* Loads the script for a lane. */
static fw_lua_host_t *
lane_host (void *ud, fw_error_t *error)
{
   (void) ud;
   (void) error;
   return host_of ();
}

/* A lane's events, on a thread of its own. */
static void *
lane_run (void *ud)
{
   fw_dispatcher_t *lane = ud;

   for (int i = 0; i < LANE_EVENTS; i++) {
      if (dispatch (lane, "insert", i % 2 ? 1 : 2, i) != FW_OUTCOME_HANDLED) {
         return "a lane's event was not handled";
      }
   }
   return NULL;
}

/* lanes = 2: both lanes' threads count into the stream's summary while the
 * stream's thread does too, each event once. */
static void
test_lanes_count_into_the_streams_summary (void **state)
{
   fw_stream_worker_t *w = worker_for (S_LANES);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   fw_error_t err;
   pthread_t t[2];
   void *why;
   (void) state;

   if (!fw_stream_worker_build_lanes (w, lane_host, NULL, &err)) {
      fail_msg ("%s", err.message);
   }
   assert_null (fw_stream_worker_lane (w, 2));
   for (int i = 0; i < 2; i++) {
      assert_non_null (fw_stream_worker_lane (w, i));
      assert_int_equal (pthread_create (&t[i], NULL, lane_run, fw_stream_worker_lane (w, i)), 0);
   }
   for (int i = 0; i < LANE_EVENTS; i++) {
      assert_int_equal (dispatch (d, "insert", 1, i), FW_OUTCOME_HANDLED);
   }
   for (int i = 0; i < 2; i++) {
      why = NULL;
      pthread_join (t[i], &why);
      assert_null (why);
   }
   /* Half of each lane's events handled on a retry. */
   expect (w, (counts_t){.handled = 3 * LANE_EVENTS,
                         .handler_errors = LANE_EVENTS,
                         .retries = LANE_EVENTS});
   for (int i = 0; i < 2; i++) {
      fw_dispatcher_release (fw_stream_worker_lane (w, i));
   }
   worker_free (w);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (test_handled_once_each),
      cmocka_unit_test (test_no_handler_counts_nothing),
      cmocka_unit_test (test_skipped),
      cmocka_unit_test (test_dead_lettered),
      cmocka_unit_test (test_lost),
      cmocka_unit_test (test_parked),
      cmocka_unit_test (test_deferred_and_its_retry),
      cmocka_unit_test (test_batch),
      cmocka_unit_test (test_lanes_count_into_the_streams_summary),
   };

   fw_log_configure (FW_LOG_ERROR, false); /* the LOST lines only */
   return cmocka_run_group_tests (tests, NULL, NULL);
}
