/*
 * An event's outcome as a value: what fw_event_dispatch returns for each
 * kind (handled, skipped, dead-lettered with its entry, parked behind its
 * sequence, lost, no handler, stopped, failed, no DLQ, yielded to a reload), with a script's
 * dispatcher over the in-memory DLQ store and no server; and what
 * fw_stream_settle (stream/stream_settle.c) makes of each kind through a
 * fake place: the position moves only past an event finished with.
 */
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
#include "flowwarden/shutdown.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/outcome.h"
#include "runtime/host/lua_host.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_settle.h"

/* The streams of the script, by index: what each one's events become. */
enum { S_PLAIN, S_SKIP, S_DLQ, S_LOST, S_RETRY, S_SEQ, S_SEQ_FULL, S_COUNT };

static const char *const SCRIPT =
   "local fw = require('flowwarden')\n"
   "local function fail() error(fw.error('Test.Failure', 'it fails')) end\n"
   "fw.stream { name = 'plain', collection = 'c', on_insert = function(ctx) end }\n"
   "fw.stream { name = 'skip', collection = 'c', retry = { max_attempts = 1 },\n"
   "  on_insert = fail, on_error = function(err, ctx) return fw.SKIP end }\n"
   "fw.stream { name = 'dlq', collection = 'c', retry = { max_attempts = 2, initial_delay = '1ms',\n"
   "  jitter = false }, dlq = { store = 'memory' }, on_insert = fail }\n"
   "fw.stream { name = 'lost', collection = 'c', retry = { max_attempts = 1 }, on_insert = fail }\n"
   "fw.stream { name = 'retry', collection = 'c', retry = { max_attempts = 5,\n"
   "  initial_delay = '10s', jitter = false }, on_insert = fail }\n"
   "fw.stream { name = 'seq', collection = 'c', retry = { max_attempts = 1 },\n"
   "  dlq = { store = 'memory', sequenced = true }, on_insert = fail }\n"
   "fw.stream { name = 'seq_full', collection = 'c', retry = { max_attempts = 1 },\n"
   "  dlq = { store = 'memory', sequenced = true, max_sequences = 1 }, on_insert = fail }\n";

/* No stream declares a DLQ: none to fall back on either. */
static const char *const SCRIPT_NO_DLQ =
   "local fw = require('flowwarden')\n"
   "fw.stream { name = 'plain', collection = 'c', on_insert = function(ctx) end }\n";

typedef struct {
   fw_dispatcher_t *d;
   fw_shutdown_t stop;
} fixture_t;

static fixture_t *
fixture_of (const char *script, int index)
{
   fw_error_t err;
   fixture_t *f = calloc (1, sizeof *f);
   fw_lua_host_t *host;

   assert_non_null (f);
   host = host_of_script (script);
   assert_int_equal (fw_shutdown_init (&f->stop), 0);
   f->d = fw_dispatcher_new (host, index, NULL, &f->stop, &err);
   if (!f->d) {
      fail_msg ("%s", err.message);
   }
   return f;
}

static fixture_t *
fixture_for (int index)
{
   return fixture_of (SCRIPT, index);
}

static void
fixture_free (fixture_t *f)
{
   fw_dispatcher_release (f->d);
   fw_dispatcher_destroy (f->d);
   fw_shutdown_cleanup (&f->stop);
   free (f);
}

/* Dispatches event (op, k, i) through f. */
static fw_outcome_t
dispatch (fixture_t *f, const char *op, int k, int i)
{
   return dispatch_change_event (f->d, op, k, i);
}

static void
test_handled (void **state)
{
   fixture_t *f = fixture_for (S_PLAIN);
   fw_outcome_t o = dispatch (f, "insert", 1, 0);
   (void) state;
   assert_int_equal (o.kind, FW_OUTCOME_HANDLED);
   assert_int_equal (o.attempts, 1);
   assert_int_equal (o.count, FW_COUNT_OK);
   assert_null (o.detail); /* no log line */
   assert_string_equal (o.entry_id, "");
   assert_true (fw_outcome_finished (o.kind));
   fixture_free (f);
}

static void
test_no_handler (void **state)
{
   fixture_t *f = fixture_for (S_PLAIN);
   fw_outcome_t o = dispatch (f, "delete", 1, 0); /* only on_insert is declared */
   (void) state;
   assert_int_equal (o.kind, FW_OUTCOME_NO_HANDLER);
   assert_int_equal (o.attempts, 0);
   assert_int_equal (o.count, FW_COUNT_NONE);
   assert_true (fw_outcome_finished (o.kind));
   fixture_free (f);
}

static void
test_skipped (void **state)
{
   fixture_t *f = fixture_for (S_SKIP);
   fw_outcome_t o = dispatch (f, "insert", 1, 0);
   (void) state;
   assert_int_equal (o.kind, FW_OUTCOME_SKIPPED);
   assert_int_equal (o.attempts, 1);
   assert_int_equal (o.count, FW_COUNT_SKIPPED);
   assert_string_equal (o.error_type, "Test.Failure");
   assert_string_equal (o.error, "it fails");
   fixture_free (f);
}

static void
test_dead_lettered (void **state)
{
   fixture_t *f = fixture_for (S_DLQ);
   fw_outcome_t o = dispatch (f, "insert", 1, 0);
   (void) state;
   assert_int_equal (o.kind, FW_OUTCOME_DEAD_LETTERED);
   assert_int_equal (o.attempts, 2);
   assert_int_equal (o.count, FW_COUNT_DLQ);
   assert_non_null (o.detail);
   assert_string_equal (o.detail->dlq, "_fw_dlq");
   assert_true (strlen (o.entry_id) > 0);
   assert_string_equal (o.error_type, "Test.Failure");
   fixture_free (f);
}

static void
test_lost (void **state)
{
   fixture_t *f = fixture_for (S_LOST);
   fw_outcome_t o = dispatch (f, "insert", 1, 0);
   (void) state;
   assert_int_equal (o.kind, FW_OUTCOME_LOST);
   assert_int_equal (o.attempts, 1);
   assert_int_equal (o.count, FW_COUNT_LOST);
   assert_string_equal (o.entry_id, "");
   assert_true (fw_outcome_finished (o.kind));
   fixture_free (f);
}

/* A stop during the retry's backoff: the event must come back. */
static void
test_stopped (void **state)
{
   fixture_t *f = fixture_for (S_RETRY);
   fw_outcome_t o;
   (void) state;

   fw_shutdown_request (&f->stop);
   o = dispatch (f, "insert", 1, 0);
   assert_int_equal (o.kind, FW_OUTCOME_STOPPED);
   assert_true (fw_outcome_comes_back (o.kind));
   assert_false (fw_outcome_finished (o.kind));
   fixture_free (f);
}

/* Key 1's first event opens its sequence; its next one is parked behind. */
static void
test_parked (void **state)
{
   fixture_t *f = fixture_for (S_SEQ);
   fw_outcome_t head, follower;
   char head_id[128];
   (void) state;

   assert_true (fw_dispatcher_open_dlq (f->d));
   assert_true (fw_dispatcher_load_sequences (f->d));
   head = dispatch (f, "insert", 1, 0);
   assert_int_equal (head.kind, FW_OUTCOME_DEAD_LETTERED);
   snprintf (head_id, sizeof head_id, "%s", head.entry_id);
   follower = dispatch (f, "insert", 1, 1);
   assert_int_equal (follower.kind, FW_OUTCOME_PARKED);
   assert_int_equal (follower.attempts, 0);
   assert_int_equal (follower.count, FW_COUNT_PARKED);
   assert_string_equal (follower.detail->sequence, "{ \"_id\" : { \"$numberInt\" : \"1\" } }");
   assert_true (strlen (follower.entry_id) > 0);
   assert_string_not_equal (follower.entry_id, head_id);
   fixture_free (f);
}

/* max_sequences = 1: a second key's sequence cannot open: the stream must
 * stop before the event, and says why. */
static void
test_failed (void **state)
{
   fixture_t *f = fixture_for (S_SEQ_FULL);
   fw_outcome_t o;
   (void) state;

   assert_true (fw_dispatcher_open_dlq (f->d));
   assert_true (fw_dispatcher_load_sequences (f->d));
   assert_int_equal (dispatch (f, "insert", 1, 0).kind, FW_OUTCOME_DEAD_LETTERED);
   o = dispatch (f, "insert", 2, 1);
   assert_int_equal (o.kind, FW_OUTCOME_FAILED);
   assert_false (fw_outcome_finished (o.kind));
   assert_false (fw_outcome_comes_back (o.kind));
   assert_true (strlen (o.error) > 0);
   assert_string_equal (o.error, fw_dispatcher_failure (f->d));
   fixture_free (f);
}

/* An unreadable event on a stream without a DLQ cannot be kept. */
static void
test_no_dlq (void **state)
{
   fixture_t *f = fixture_of (SCRIPT_NO_DLQ, 0);
   bson_t *doc = change_event_of ("insert", 1, 0);
   fw_event_t ev;
   fw_error_t err;
   fw_outcome_t o;
   (void) state;

   assert_true (fw_event_parse (doc, &ev, &err));
   o = fw_event_dispatch_unreadable (f->d, &ev, "a field of the wrong type");
   assert_int_equal (o.kind, FW_OUTCOME_NO_DLQ);
   assert_false (fw_outcome_finished (o.kind));
   bson_destroy (doc);
   fixture_free (f);
}

/* --- fw_stream_settle through a fake place ------------------------------- */

typedef struct {
   int finished, failed;
   fw_outcome_kind_t kind; /* the outcome finished was handed */
   bool lease_lost;
   char why[256];
} place_t;

static fw_read_end_t
p_finished (void *ud, const fw_outcome_t *o)
{
   place_t *p = ud;
   p->finished++;
   p->kind = o->kind;
   return FW_READ_NEXT;
}

static void
p_fail (void *ud, const char *why)
{
   place_t *p = ud;
   p->failed++;
   snprintf (p->why, sizeof p->why, "%s", why);
}

static bool
p_lease_lost (void *ud)
{
   return ((place_t *) ud)->lease_lost;
}

static fw_read_end_t
settle (place_t *p, fw_outcome_kind_t kind, const char *entry_id, const char *error)
{
   fw_settle_place_t place = {NULL, NULL, p_finished, p_fail, p_lease_lost, p, "no DLQ to keep it"};
   fw_outcome_t o = {
      kind, 1, 0, entry_id, "", error, 0, FW_COUNT_NOTHING, NULL, 0, FW_SUMMARY_NOTHING, 0, 0};
   return fw_stream_settle (&place, &o);
}

static bool
reload_waits (void *ud)
{
   return *(bool *) ud;
}

/* A reload's program waits: an event in retries gives way before its next
 * attempt (the program is never switched inside fw_event_dispatch), and run
 * again with attempt_base its attempts carry on: the policy counts them all. */
static void
test_yielded (void **state)
{
   fixture_t *f = fixture_for (S_DLQ); /* max_attempts = 2 */
   bool waits = true;
   bson_t *doc = change_event_of ("insert", 1, 0);
   fw_dispatch_run_t run = {0, NULL};
   fw_event_t ev;
   fw_error_t err;
   fw_outcome_t o;
   (void) state;

   assert_true (fw_event_parse (doc, &ev, &err));
   fw_dispatcher_set_reload_waits (f->d, reload_waits, &waits);
   o = fw_event_dispatch (f->d, &ev);
   assert_int_equal (o.kind, FW_OUTCOME_YIELDED);
   assert_int_equal (o.attempts, 1);
   assert_false (fw_outcome_finished (o.kind));
   assert_true (fw_outcome_comes_back (o.kind));
   waits = false; /* the stream switched programs */
   run.attempt_base = o.attempts;
   o = fw_event_dispatch_run (f->d, &ev, &run);
   assert_int_equal (o.kind, FW_OUTCOME_DEAD_LETTERED); /* attempt 2 was the last */
   assert_int_equal (o.attempts, 2);
   bson_destroy (doc);
   fixture_free (f);
}

/* --- the settle of one event: its log line and counts (event_settle.h) -- */

typedef struct {
   int lines;
   char last[2048];
} captured_t;

static void
capture_log (void *ud, fw_log_level_t level, const char *stream, const char *message)
{
   captured_t *c = ud;
   (void) level;
   if (stream && strcmp (stream, "dlq") == 0 && strstr (message, "dead-lettered to")) {
      c->lines++;
      snprintf (c->last, sizeof c->last, "%s", message);
   }
}

static void
settle_sink (void *ud, const char *stream, const fw_event_t *ev, const fw_outcome_t *o)
{
   fw_event_settle (ud, NULL, stream, ev, o);
}

/* The dispatcher writes neither the dead letter's line nor its counts: its
 * sink (the stream's settle) does, once per event, as run shows them. */
static void
test_event_settle_logs_and_counts (void **state)
{
   fixture_t *f = fixture_for (S_DLQ);
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b;
   fw_stream_snapshot_t snap;
   captured_t c = {0};
   fw_outcome_t o;
   char entry[160];
   (void) state;

   assert_non_null (m);
   b = fw_metrics_stream (m, "dlq");
   assert_non_null (b);
   fw_dispatcher_set_metrics (f->d, b);
   fw_log_set_sink (capture_log, &c);
   o = dispatch (f, "insert", 7, 0); /* no sink yet: nothing logged, nothing counted */
   assert_int_equal (o.kind, FW_OUTCOME_DEAD_LETTERED);
   assert_int_equal (c.lines, 0);
   fw_stream_metrics_snapshot (b, fw_now_ms (), &snap);
   assert_int_equal (snap.handled[FW_METRICS_OUTCOME_DLQ], 0);
   assert_int_equal (snap.dlq_writes, 0);

   fw_dispatcher_set_outcome_sink (f->d, settle_sink, b);
   o = dispatch (f, "insert", 7, 1);
   fw_log_set_sink (NULL, NULL);
   assert_int_equal (o.kind, FW_OUTCOME_DEAD_LETTERED);
   assert_true (o.finished_ms > 0);
   assert_int_equal (c.lines, 1);
   assert_non_null (strstr (c.last,
                            "dead-lettered to _fw_dlq after 2 attempt(s): "
                            "Test.Failure: it fails (at "));
   assert_non_null (strstr (c.last, "; key { \"_id\" : 7 }; entry "));
   snprintf (entry, sizeof entry, "entry %s)", o.entry_id);
   assert_non_null (strstr (c.last, entry));
   fw_stream_metrics_snapshot (b, fw_now_ms (), &snap);
   assert_int_equal (snap.handled[FW_METRICS_OUTCOME_DLQ], 1);
   assert_int_equal (snap.dlq_writes, 1);
   fixture_free (f);
   fw_metrics_destroy (m);
}

/* A dead letter whose error has no type is stored like a park but counts
 * as a dead letter; a park counts PARKED; a deferred retry counts DLQ and
 * writes no PENDING entry. */
static void
test_event_settle_counts_by_the_outcomes_count (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b;
   fw_stream_snapshot_t snap;
   fw_outcome_detail_t x = {"", "_fw_dlq", false, "k", 1, false};
   fw_outcome_t o = {FW_OUTCOME_PARKED, 0, 0, "e1", "", "", 1000, FW_COUNT_DLQ, &x, 0,
                     FW_SUMMARY_PARKED, 0, 0};
   bson_t *doc = change_event_of ("insert", 1, 0);
   fw_event_t ev;
   fw_error_t err;
   (void) state;

   assert_non_null (m);
   assert_true (fw_event_parse (doc, &ev, &err));
   b = fw_metrics_stream (m, "s");
   fw_event_settle (b, NULL, "s", &ev, &o);
   o.count = FW_COUNT_PARKED;
   fw_event_settle (b, NULL, "s", &ev, &o);
   o.kind = FW_OUTCOME_DEFERRED;
   o.until_ms = 6000;
   o.count = FW_COUNT_DLQ;
   fw_event_settle (b, NULL, "s", &ev, &o);
   o.kind = FW_OUTCOME_DEAD_LETTERED;
   o.count = FW_COUNT_NOTHING; /* unreadable, oversize: a write, no finished event */
   fw_event_settle (b, NULL, "s", &ev, &o);
   fw_stream_metrics_snapshot (b, fw_now_ms (), &snap);
   assert_int_equal (snap.handled[FW_METRICS_OUTCOME_DLQ], 2);
   assert_int_equal (snap.handled[FW_METRICS_OUTCOME_PARKED], 1);
   assert_int_equal (snap.dlq_writes, 3);
   bson_destroy (doc);
   fw_metrics_destroy (m);
}

/* Every kind finished with is handed, with its outcome, to the place once
 * (which counts it and moves the position). */
static void
test_settle_finished_kinds_move_the_position (void **state)
{
   static const fw_outcome_kind_t kinds[] = {
      FW_OUTCOME_HANDLED,  FW_OUTCOME_SKIPPED, FW_OUTCOME_DEAD_LETTERED, FW_OUTCOME_PARKED,
      FW_OUTCOME_DEFERRED, FW_OUTCOME_LOST,    FW_OUTCOME_NO_HANDLER};
   (void) state;

   for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
      place_t p = {0};
      assert_int_equal (settle (&p, kinds[i], "e1", ""), FW_READ_NEXT);
      assert_int_equal (p.finished, 1);
      assert_int_equal (p.kind, kinds[i]);
      assert_int_equal (p.failed, 0);
   }
}

/* A stop, or a hold behind the breaker, leaves the position before the
 * event: the read stops, or ends as lost when the lease went. */
static void
test_settle_stopped_and_held_come_back (void **state)
{
   place_t p = {0};
   (void) state;

   assert_int_equal (settle (&p, FW_OUTCOME_STOPPED, "", ""), FW_READ_STOP);
   assert_int_equal (settle (&p, FW_OUTCOME_HELD, "", ""), FW_READ_STOP);
   p.lease_lost = true;
   assert_int_equal (settle (&p, FW_OUTCOME_STOPPED, "", ""), FW_READ_LOST);
   assert_int_equal (p.finished + p.failed, 0);
}

/* FAILED stops the stream with the dispatcher's reason; NO_DLQ with the
 * place's. Neither moves the position. */
static void
test_settle_failed_and_no_dlq_stop_the_stream (void **state)
{
   place_t p = {0};
   (void) state;

   assert_int_equal (settle (&p, FW_OUTCOME_FAILED, "", "a sequence overflowed"), FW_READ_FAILED);
   assert_string_equal (p.why, "a sequence overflowed");
   assert_int_equal (settle (&p, FW_OUTCOME_NO_DLQ, "", ""), FW_READ_FAILED);
   assert_string_equal (p.why, "no DLQ to keep it");
   assert_int_equal (p.failed, 2);
   assert_int_equal (p.finished, 0);
}

/* A place with nothing to do once an event is finished with reads on; with
 * a metrics block the settle sets its Lua memory gauge to the outcome's
 * figure. */
static void
test_settle_without_finished (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_snapshot_t snap;
   place_t p = {0};
   fw_settle_place_t place = {NULL, NULL, NULL, p_fail, NULL, &p, NULL};
   fw_outcome_t o = {FW_OUTCOME_HANDLED, 1, 0, "", "", "", 0, FW_COUNT_OK, NULL, 0,
                     FW_SUMMARY_NOTHING, 0, 0};
   (void) state;

   assert_non_null (m);
   place.metrics = fw_metrics_stream (m, "s");
   o.lua_memory = 123456;
   assert_int_equal (fw_stream_settle (&place, &o), FW_READ_NEXT);
   assert_int_equal (p.failed, 0);
   fw_stream_metrics_snapshot (place.metrics, fw_now_ms (), &snap);
   assert_int_equal (snap.lua_memory_bytes, 123456);
   fw_metrics_destroy (m);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (test_handled),
      cmocka_unit_test (test_no_handler),
      cmocka_unit_test (test_skipped),
      cmocka_unit_test (test_dead_lettered),
      cmocka_unit_test (test_lost),
      cmocka_unit_test (test_stopped),
      cmocka_unit_test (test_parked),
      cmocka_unit_test (test_failed),
      cmocka_unit_test (test_no_dlq),
      cmocka_unit_test (test_yielded),
      cmocka_unit_test (test_event_settle_logs_and_counts),
      cmocka_unit_test (test_event_settle_counts_by_the_outcomes_count),
      cmocka_unit_test (test_settle_finished_kinds_move_the_position),
      cmocka_unit_test (test_settle_stopped_and_held_come_back),
      cmocka_unit_test (test_settle_failed_and_no_dlq_stop_the_stream),
      cmocka_unit_test (test_settle_without_finished),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
