/* The metrics registry: per-stream blocks written by their threads, the
 * Prometheus exposition (checked by promtool when it is installed), and the
 * metrics scripts define with fw.metrics. */
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
#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/secrets.h"
#include "lua_api/metrics_lua.h"
#include "ops/metrics.h"
#include "runtime/host/lua_host.h"

static bool
contains (const char *text, const char *line)
{
   return strstr (text, line) != NULL;
}

static const char *
promtool (void)
{
   static const char *const paths[] = {"/usr/bin/promtool", "/usr/local/bin/promtool"};
   for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
      if (access (paths[i], X_OK) == 0) {
         return paths[i];
      }
   }
   return NULL;
}

/* Runs `promtool check metrics` on text: asserts exit 0 and no output
 * (promtool prints lint problems and exits 3). Skipped without promtool. */
static void
assert_promtool_clean (const char *text, size_t len)
{
   const char *tool = promtool ();
   char in[] = "/tmp/fw_metrics_XXXXXX";
   char cmd[512], out[4096];
   size_t n;
   FILE *p;
   int fd, rc;

   if (!tool) {
      fprintf (stderr, "promtool not installed: exposition lint skipped\n");
      return;
   }
   fd = mkstemp (in);
   assert_true (fd >= 0);
   assert_int_equal (write (fd, text, len), (ssize_t) len);
   close (fd);
   snprintf (cmd, sizeof cmd, "%s check metrics < %s 2>&1", tool, in);
   p = popen (cmd, "r");
   assert_non_null (p);
   n = fread (out, 1, sizeof out - 1, p);
   out[n] = '\0';
   rc = pclose (p);
   unlink (in);
   if (rc != 0 || n != 0) {
      fprintf (stderr, "promtool check metrics (exit %d):\n%s\n--- exposition ---\n%s\n", rc, out,
               text);
   }
   assert_int_equal (rc, 0);
   assert_int_equal (n, 0);
}

static fw_metric_t *
define (fw_metrics_t *m, const char *name, fw_metric_type_t type, const char *const *labels,
        int n_labels, bool pending, fw_error_t *err)
{
   fw_metric_spec_t spec = {name, "What it counts.", type, labels, n_labels, NULL, 0};
   return fw_metrics_define (m, &spec, pending, err);
}

/* A registry with every kind of value set. */
static fw_metrics_t *
busy_registry (void)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *a = fw_metrics_stream (m, "orders");
   fw_stream_metrics_t *b = fw_metrics_stream (m, "we\"ird \\ name\n\xff");
   static const char *const kind[] = {"kind"};
   static const double buckets[] = {0.5, 1, 2.5};
   fw_metric_spec_t hist = {
      "shop_basket_size", "Items per basket.", FW_METRIC_HISTOGRAM, NULL, 0, buckets, 3};
   fw_error_t err;
   const char *paid[] = {"paid"}, *quoted[] = {"a \"quoted\"\nvalue"};
   fw_metric_t *c, *g, *h;

   fw_metrics_set_build_info (m, "0.1.0", "1.23.1", "Lua 5.4.4");
   fw_metrics_set_script_version (m, "66a54c34624c");
   fw_metrics_count_reload (m, true);
   fw_metrics_count_reload (m, false);
   fw_metrics_count_reload (m, true);
   for (int i = 0; i < 3; i++) {
      fw_stream_metrics_event_received (a, FW_METRICS_OP_INSERT, 1700000000000LL + i);
      fw_stream_metrics_handler_call (a, 300000 * (i + 1)); /* 0.3, 0.6, 0.9 ms */
      fw_stream_metrics_event_finished (a, FW_METRICS_OUTCOME_OK, 1700000000500LL + i);
   }
   fw_stream_metrics_event_received (a, FW_METRICS_OP_DROP_DATABASE, 1700000001000LL);
   fw_stream_metrics_event_finished (a, FW_METRICS_OUTCOME_NONE, 1700000001000LL);
   fw_stream_metrics_event_received (a, FW_METRICS_OP_DELETE, 1700000002000LL);
   fw_stream_metrics_handler_call (a, 40LL * 1000000000); /* beyond 30 s */
   fw_stream_metrics_handler_error (a, "Payment.Timeout");
   fw_stream_metrics_retry (a);
   fw_stream_metrics_handler_error (a, "Payment.Timeout");
   fw_stream_metrics_handler_error (a, "Validation");
   fw_stream_metrics_dlq_write (a);
   fw_stream_metrics_event_finished (a, FW_METRICS_OUTCOME_DLQ, 1700000002250LL);
   fw_stream_metrics_checkpoint (a, true, 1700000002300LL);
   fw_stream_metrics_checkpoint (a, false, 1700000002400LL);
   fw_stream_metrics_set_dlq_pending (a, 7, 12.5);
   fw_stream_metrics_set_state (a, FW_STREAM_RUNNING, NULL);
   fw_stream_metrics_restart (a, FW_METRICS_RESTART_INVALIDATE);
   fw_stream_metrics_state_rebuilt (a, FW_METRICS_REBUILD_MEMORY);
   fw_stream_metrics_state_rebuilt (a, FW_METRICS_REBUILD_MEMORY);
   fw_stream_metrics_set_lua_memory (a, 123456);
   fw_stream_metrics_io (a, FW_METRICS_IO_MONGO, FW_METRICS_IO_OK, 2000000);
   fw_stream_metrics_io (a, FW_METRICS_IO_HTTP, FW_METRICS_IO_TIMEOUT, 5000000000LL);
   fw_stream_metrics_set_state (b, FW_STREAM_FAILED, "history lost");

   c = define (m, "shop_orders_total", FW_METRIC_COUNTER, kind, 1, false, &err);
   g = define (m, "shop_queue_depth", FW_METRIC_GAUGE, NULL, 0, false, &err);
   h = fw_metrics_define (m, &hist, false, &err);
   assert_non_null (c);
   assert_non_null (g);
   assert_non_null (h);
   fw_metric_series_add (fw_metric_series_get (c, a, paid), 2);
   fw_metric_series_add (fw_metric_series_get (c, b, quoted), 1.5);
   fw_metric_series_set (fw_metric_series_get (g, a, NULL), -3);
   fw_metric_series_observe (fw_metric_series_get (h, a, NULL), 0.5);
   fw_metric_series_observe (fw_metric_series_get (h, a, NULL), 2);
   fw_metric_series_observe (fw_metric_series_get (h, a, NULL), 99);
   return m;
}

static void
metrics_exposition_passes_promtool_check_metrics (void **state)
{
   fw_metrics_t *m = busy_registry ();
   size_t len;
   char *text = fw_metrics_render (m, &len);
   (void) state;

   assert_non_null (text);
   assert_int_equal (strlen (text), len);
   assert_promtool_clean (text, len);
   free (text);
   /* An empty registry too (no stream yet). */
   fw_metrics_destroy (m);
   m = fw_metrics_new ();
   text = fw_metrics_render (m, &len);
   assert_promtool_clean (text, len);
   free (text);
   fw_metrics_destroy (m);
}

static void
metrics_exposition_has_every_value (void **state)
{
   fw_metrics_t *m = busy_registry ();
   char *text = fw_metrics_render (m, NULL);
   (void) state;

   assert_true (
      contains (text, "flowwarden_events_total{stream=\"orders\",operation=\"insert\"} 3\n"));
   assert_true (
      contains (text, "flowwarden_events_total{stream=\"orders\",operation=\"dropDatabase\"} 1\n"));
   assert_true (
      contains (text, "flowwarden_events_handled_total{stream=\"orders\",outcome=\"ok\"} 3\n"));
   assert_true (
      contains (text, "flowwarden_events_handled_total{stream=\"orders\",outcome=\"dlq\"} 1\n"));
   assert_true (contains (
      text,
      "flowwarden_handler_errors_total{stream=\"orders\",error_type=\"Payment.Timeout\"} 2\n"));
   assert_true (contains (
      text, "flowwarden_handler_errors_total{stream=\"orders\",error_type=\"Validation\"} 1\n"));
   assert_true (contains (text, "flowwarden_retries_total{stream=\"orders\"} 1\n"));
   /* Cumulative buckets; _count is the +Inf bucket. */
   assert_true (contains (
      text, "flowwarden_handler_duration_seconds_bucket{stream=\"orders\",le=\"0.00025\"} 0\n"));
   assert_true (contains (
      text, "flowwarden_handler_duration_seconds_bucket{stream=\"orders\",le=\"0.0005\"} 1\n"));
   assert_true (contains (
      text, "flowwarden_handler_duration_seconds_bucket{stream=\"orders\",le=\"0.001\"} 3\n"));
   assert_true (contains (
      text, "flowwarden_handler_duration_seconds_bucket{stream=\"orders\",le=\"30\"} 3\n"));
   assert_true (contains (
      text, "flowwarden_handler_duration_seconds_bucket{stream=\"orders\",le=\"+Inf\"} 4\n"));
   assert_true (
      contains (text, "flowwarden_handler_duration_seconds_sum{stream=\"orders\"} 40.0018\n"));
   assert_true (
      contains (text, "flowwarden_handler_duration_seconds_count{stream=\"orders\"} 4\n"));
   /* The lag froze when the last event finished, 250 ms after its time. */
   assert_true (contains (text, "flowwarden_lag_seconds{stream=\"orders\"} 0.25\n"));
   assert_true (
      contains (text, "flowwarden_last_event_timestamp_seconds{stream=\"orders\"} 1700000002\n"));
   assert_true (
      contains (text, "flowwarden_checkpoint_timestamp_seconds{stream=\"orders\"} 1700000002.3\n"));
   assert_true (contains (text, "flowwarden_checkpoint_writes_total{stream=\"orders\"} 1\n"));
   assert_true (contains (text, "flowwarden_checkpoint_errors_total{stream=\"orders\"} 1\n"));
   assert_true (contains (text, "flowwarden_dlq_writes_total{stream=\"orders\"} 1\n"));
   assert_true (contains (text, "flowwarden_dlq_pending{stream=\"orders\"} 7\n"));
   /* The age grows from the count on: 12.5 s then, a few ms more now. */
   assert_true (
      contains (text, "flowwarden_dlq_oldest_pending_age_seconds{stream=\"orders\"} 12."));
   assert_true (contains (text, "flowwarden_stream_up{stream=\"orders\"} 1\n"));
   assert_true (
      contains (text, "flowwarden_stream_state{stream=\"orders\",state=\"running\"} 1\n"));
   assert_true (contains (text, "flowwarden_stream_state{stream=\"orders\",state=\"failed\"} 0\n"));
   assert_true (contains (
      text, "flowwarden_stream_restarts_total{stream=\"orders\",reason=\"invalidate\"} 1\n"));
   assert_true (
      contains (text, "flowwarden_states_rebuilt_total{stream=\"orders\",reason=\"memory\"} 2\n"));
   assert_true (contains (text, "flowwarden_lua_memory_bytes{stream=\"orders\"} 123456\n"));
   assert_true (contains (
      text,
      "flowwarden_io_requests_total{stream=\"orders\",client=\"http\",result=\"timeout\"} 1\n"));
   assert_true (contains (
      text,
      "flowwarden_io_duration_seconds_bucket{stream=\"orders\",client=\"mongo\",le=\"0.0025\"} 1\n"));
   assert_true (contains (text, "flowwarden_reloads_total{result=\"success\"} 2\n"));
   assert_true (contains (text, "flowwarden_reloads_total{result=\"failure\"} 1\n"));
   assert_true (contains (text, "flowwarden_script_info{version=\"66a54c34624c\"} 1\n"));
   assert_true (contains (
      text, "flowwarden_build_info{version=\"0.1.0\",libmongoc=\"1.23.1\",lua=\"Lua 5.4.4\"} 1\n"));
   assert_true (contains (text, "\nprocess_resident_memory_bytes "));
   assert_true (contains (text, "\nprocess_cpu_seconds_total "));
   assert_true (contains (text, "\nprocess_open_fds "));
   assert_true (contains (text, "\nprocess_start_time_seconds "));
   /* The odd stream name is escaped, its bad byte replaced. */
   assert_true (
      contains (text, "flowwarden_stream_up{stream=\"we\\\"ird \\\\ name\\n\xEF\xBF\xBD\"} 0\n"));
   assert_true (contains (
      text,
      "flowwarden_stream_state{stream=\"we\\\"ird \\\\ name\\n\xEF\xBF\xBD\",state=\"failed\"} 1\n"));
   /* Handler-defined metrics carry the stream. */
   assert_true (contains (text, "# TYPE shop_orders_total counter\n"));
   assert_true (contains (text, "shop_orders_total{stream=\"orders\",kind=\"paid\"} 2\n"));
   assert_true (contains (text, "kind=\"a \\\"quoted\\\"\\nvalue\"} 1.5\n"));
   assert_true (contains (text, "shop_queue_depth{stream=\"orders\"} -3\n"));
   assert_true (contains (text, "shop_basket_size_bucket{stream=\"orders\",le=\"0.5\"} 1\n"));
   assert_true (contains (text, "shop_basket_size_bucket{stream=\"orders\",le=\"2.5\"} 2\n"));
   assert_true (contains (text, "shop_basket_size_bucket{stream=\"orders\",le=\"+Inf\"} 3\n"));
   assert_true (contains (text, "shop_basket_size_sum{stream=\"orders\"} 101.5\n"));
   assert_true (contains (text, "shop_basket_size_count{stream=\"orders\"} 3\n"));
   free (text);
   fw_metrics_destroy (m);
}

/* --- several threads ------------------------------------------------------ */

#define THREADS 4
#define EVENTS 200000

typedef struct {
   fw_metrics_t *m;
   fw_metric_t *user;
   int index;
} writer_t;

static void *
writer_main (void *arg)
{
   writer_t *w = arg;
   char name[32];
   fw_stream_metrics_t *b;
   fw_metric_series_t *s;

   snprintf (name, sizeof name, "stream-%d", w->index);
   b = fw_metrics_stream (w->m, name);
   s = fw_metric_series_get (w->user, b, NULL);
   for (int i = 0; i < EVENTS; i++) {
      fw_stream_metrics_event_received (b, (fw_metrics_op_t) (i % 4), 1700000000000LL + i);
      fw_stream_metrics_handler_call (b, 150000);
      fw_stream_metrics_event_finished (b, i % 10 ? FW_METRICS_OUTCOME_OK : FW_METRICS_OUTCOME_DLQ,
                                        1700000000000LL + i);
      fw_metric_series_add (s, 1);
   }
   return NULL;
}

static volatile int readers_stop;

static void *
reader_main (void *arg)
{
   fw_metrics_t *m = arg;
   int renders = 0;

   while (!__atomic_load_n (&readers_stop, __ATOMIC_ACQUIRE) || renders == 0) {
      free (fw_metrics_render (m, NULL));
      renders++;
   }
   return NULL;
}

static void
metrics_counters_from_several_threads_add_up_while_scraped (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   pthread_t threads[THREADS], reader;
   writer_t w[THREADS];
   fw_error_t err;
   fw_metric_t *user = define (m, "shop_seen_total", FW_METRIC_COUNTER, NULL, 0, false, &err);
   fw_stream_snapshot_t *snaps;
   char *text;
   int n;
   (void) state;

   readers_stop = 0;
   assert_int_equal (pthread_create (&reader, NULL, reader_main, m), 0);
   for (int i = 0; i < THREADS; i++) {
      w[i] = (writer_t){m, user, i};
      assert_int_equal (pthread_create (&threads[i], NULL, writer_main, &w[i]), 0);
   }
   for (int i = 0; i < THREADS; i++) {
      pthread_join (threads[i], NULL);
   }
   __atomic_store_n (&readers_stop, 1, __ATOMIC_RELEASE);
   pthread_join (reader, NULL);

   n = fw_metrics_snapshot_all (m, 1700000000000LL + EVENTS, &snaps);
   assert_int_equal (n, THREADS);
   for (int i = 0; i < n; i++) {
      assert_int_equal (snaps[i].events, EVENTS);
      assert_int_equal (snaps[i].events_by_op[FW_METRICS_OP_UPDATE], EVENTS / 4);
      assert_int_equal (snaps[i].handled[FW_METRICS_OUTCOME_OK], EVENTS - EVENTS / 10);
      assert_int_equal (snaps[i].handled[FW_METRICS_OUTCOME_DLQ], EVENTS / 10);
   }
   free (snaps);
   text = fw_metrics_render (m, NULL);
   for (int i = 0; i < THREADS; i++) {
      char line[128];
      snprintf (line, sizeof line, "shop_seen_total{stream=\"stream-%d\"} %d\n", i, EVENTS);
      assert_true (contains (text, line));
      snprintf (line, sizeof line,
                "flowwarden_handler_duration_seconds_count{stream=\"stream-%d\"} %d\n", i, EVENTS);
      assert_true (contains (text, line));
   }
   free (text);
   fw_metrics_destroy (m);
}

/* --- blocks --------------------------------------------------------------- */

static void
metrics_error_types_beyond_fifty_count_as_other (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   fw_stream_snapshot_t snap;
   char type[32], *text;
   (void) state;

   for (int i = 0; i < 60; i++) {
      snprintf (type, sizeof type, "Type%d", i);
      fw_stream_metrics_handler_error (b, type);
   }
   fw_stream_metrics_handler_error (b, "Type0");
   fw_stream_metrics_handler_error (b, "bad\xff");
   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "error_type=\"Type0\"} 2\n"));
   assert_true (contains (text, "error_type=\"Type49\"} 1\n"));
   assert_false (contains (text, "error_type=\"Type50\""));
   assert_true (contains (text, "error_type=\"other\"} 11\n"));
   free (text);
   fw_stream_metrics_snapshot (b, 0, &snap);
   assert_int_equal (snap.handler_errors, 62);
   assert_string_equal (snap.last_error_type, "bad\xff");
   fw_metrics_destroy (m);
}

static void
metrics_removed_stream_is_hidden_and_counts_on_when_back (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "gone");
   fw_stream_snapshot_t *snaps;
   char *text;
   (void) state;

   fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, 0);
   fw_stream_metrics_set_active (b, false);
   text = fw_metrics_render (m, NULL);
   assert_false (contains (text, "stream=\"gone\""));
   free (text);
   assert_int_equal (fw_metrics_snapshot_all (m, 0, &snaps), 0);
   assert_ptr_equal (fw_metrics_stream (m, "gone"), b);
   fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, 0);
   text = fw_metrics_render (m, NULL);
   assert_true (
      contains (text, "flowwarden_events_total{stream=\"gone\",operation=\"insert\"} 2\n"));
   free (text);
   fw_metrics_destroy (m);
}

static void
metrics_lag_grows_while_an_event_is_in_flight_then_freezes (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   fw_stream_snapshot_t snap;
   (void) state;

   fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, 10000);
   fw_stream_metrics_set_attempt (b, 2);
   fw_stream_metrics_snapshot (b, 15000, &snap);
   assert_true (snap.lag_seconds == 5.0);
   assert_int_equal (snap.attempt, 2);
   fw_stream_metrics_snapshot (b, 70000, &snap);
   assert_true (snap.lag_seconds == 60.0);
   fw_stream_metrics_event_finished (b, FW_METRICS_OUTCOME_OK, 70500);
   fw_stream_metrics_snapshot (b, 99000, &snap);
   assert_true (snap.lag_seconds == 60.5);
   assert_int_equal (snap.attempt, 0);
   assert_int_equal (snap.last_event_ms, 10000);
   fw_stream_metrics_caught_up (b);
   fw_stream_metrics_snapshot (b, 99000, &snap);
   assert_true (snap.lag_seconds == 0.0);
   fw_metrics_destroy (m);
}

static void
metrics_events_per_second_over_the_last_minute (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   fw_stream_snapshot_t snap;
   int64_t t = 1000000;
   (void) state;

   /* 10 events a second for two minutes, then silence. */
   for (int i = 0; i < 1200; i++, t += 100) {
      fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, t);
      fw_stream_metrics_event_finished (b, FW_METRICS_OUTCOME_OK, t);
   }
   fw_stream_metrics_snapshot (b, t, &snap);
   assert_true (snap.events_per_second > 9.5 && snap.events_per_second < 10.5);
   fw_stream_metrics_snapshot (b, t + 120000, &snap);
   assert_true (snap.events_per_second == 0.0);
   fw_metrics_destroy (m);
}

static void
metrics_dlq_pending_moves_with_every_write_and_the_count_corrects_it (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *a = fw_metrics_stream (m, "orders");
   fw_stream_snapshot_t snap;
   (void) state;

   /* Not counted yet: a write leaves it unknown (the count gives the base). */
   fw_stream_metrics_dlq_write (a);
   fw_stream_metrics_snapshot (a, fw_now_ms (), &snap);
   assert_int_equal (snap.dlq_pending, -1);
   fw_stream_metrics_set_dlq_pending (a, 0, 0);
   for (int i = 0; i < 13; i++) {
      fw_stream_metrics_dlq_write (a);
   }
   fw_stream_metrics_snapshot (a, fw_now_ms (), &snap);
   assert_int_equal (snap.dlq_pending, 13);
   assert_int_equal ((int) snap.dlq_writes, 14);
   assert_true (snap.dlq_oldest_age_seconds >= 0 && snap.dlq_oldest_age_seconds < 5);
   /* The periodic count wins (a replay resolved some meanwhile). */
   fw_stream_metrics_set_dlq_pending (a, 4, 60);
   fw_stream_metrics_snapshot (a, fw_now_ms (), &snap);
   assert_int_equal (snap.dlq_pending, 4);
   assert_true (snap.dlq_oldest_age_seconds >= 60 && snap.dlq_oldest_age_seconds < 65);
   fw_metrics_destroy (m);
}

static void
metrics_last_error_has_a_time_and_an_age (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *a = fw_metrics_stream (m, "orders");
   fw_stream_snapshot_t snap;
   int64_t before = fw_now_ms ();
   (void) state;

   fw_stream_metrics_snapshot (a, before, &snap);
   assert_true (snap.last_error_age_seconds < 0);
   assert_int_equal (snap.last_error_ms, 0);
   fw_stream_metrics_handler_error (a, "Mongo.Network");
   fw_stream_metrics_snapshot (a, fw_now_ms () + 90000, &snap);
   assert_string_equal (snap.last_error_type, "Mongo.Network");
   assert_true (snap.last_error_ms >= before);
   assert_true (snap.last_error_age_seconds >= 90 && snap.last_error_age_seconds < 95);
   fw_metrics_destroy (m);
}

static void
metrics_last_reload_is_kept_with_its_time_and_message (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_reload_result_t r;
   (void) state;

   assert_false (fw_metrics_last_reload (m, &r));
   fw_metrics_set_last_reload (m, false, 1700000000000LL, "reload failed; still running ...");
   assert_true (fw_metrics_last_reload (m, &r));
   assert_false (r.ok);
   assert_int_equal (r.at_ms, 1700000000000LL);
   assert_string_equal (r.message, "reload failed; still running ...");
   fw_metrics_set_last_reload (m, true, 1700000005000LL, "reloaded x");
   assert_true (fw_metrics_last_reload (m, &r) && r.ok);
   fw_metrics_destroy (m);
}

static void
metrics_oplog_window_is_absent_until_known_and_in_every_snapshot (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "orders");
   fw_stream_snapshot_t snap;
   size_t len;
   char *text;
   (void) state;

   text = fw_metrics_render (m, &len);
   assert_false (contains (text, "flowwarden_oplog_window_seconds"));
   free (text);
   fw_stream_metrics_snapshot (b, 1700000000000LL, &snap);
   assert_false (snap.has_oplog_window);

   fw_metrics_set_oplog_window (m, 86400);
   text = fw_metrics_render (m, &len);
   assert_true (contains (text, "# TYPE flowwarden_oplog_window_seconds gauge\n"));
   assert_true (contains (text, "\nflowwarden_oplog_window_seconds 86400.000\n"));
   free (text);
   fw_stream_metrics_snapshot (b, 1700000000000LL, &snap);
   assert_true (snap.has_oplog_window);
   assert_true (snap.oplog_window_seconds == 86400.0);

   fw_metrics_set_oplog_window (m, -1); /* no longer readable */
   text = fw_metrics_render (m, &len);
   assert_false (contains (text, "flowwarden_oplog_window_seconds"));
   free (text);
   assert_true (fw_metrics_oplog_window (m) < 0);
   fw_metrics_destroy (m);
}

static void
metrics_state_reason_is_kept_for_streams_not_ready (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   fw_stream_snapshot_t snap;
   (void) state;

   fw_stream_metrics_set_state (b, FW_STREAM_RESTARTING, "change stream failed: boom");
   fw_stream_metrics_set_script_version (b, "abc");
   fw_stream_metrics_snapshot (b, 0, &snap);
   assert_int_equal (snap.state, FW_STREAM_RESTARTING);
   assert_string_equal (snap.reason, "change stream failed: boom");
   assert_string_equal (snap.script_version, "abc");
   assert_int_equal (snap.dlq_pending, -1);
   fw_stream_metrics_set_state (b, FW_STREAM_RUNNING, NULL);
   fw_stream_metrics_snapshot (b, 0, &snap);
   assert_string_equal (snap.reason, "");
   assert_true (fw_stream_state_ready (FW_STREAM_RETRYING));
   assert_false (fw_stream_state_ready (FW_STREAM_PAUSED));
   assert_int_equal (fw_metrics_op_from_name ("dropDatabase"), FW_METRICS_OP_DROP_DATABASE);
   assert_int_equal (fw_metrics_op_from_name ("createIndexes"), FW_METRICS_OP_OTHER);
   fw_metrics_destroy (m);
}

/* --- handler-defined metrics ------------------------------------------------- */

static void
metrics_names_follow_prometheus_rules (void **state)
{
   static const struct {
      const char *name;
      fw_metric_type_t type;
      const char *error; /* NULL: accepted */
   } cases[] = {
      {"shop_orders_total", FW_METRIC_COUNTER, NULL},
      {"shop_queue_depth", FW_METRIC_GAUGE, NULL},
      {"shop_payment_duration_seconds", FW_METRIC_HISTOGRAM, NULL},
      {"shop_body_bytes", FW_METRIC_GAUGE, NULL},
      {"HTTP_requests_total", FW_METRIC_COUNTER, NULL},
      {"orders", FW_METRIC_COUNTER,
       "counter name \"orders\" must end in _total (Prometheus convention): use \"orders_total\""},
      {"depth_total", FW_METRIC_GAUGE,
       "gauge name \"depth_total\" must not end in _total (only counters do)"},
      {"shop:orders_total", FW_METRIC_COUNTER, "':' is reserved for recording rules"},
      {"9lives", FW_METRIC_GAUGE, "use letters, digits and '_'"},
      {"shop-orders", FW_METRIC_GAUGE, "use letters, digits and '_'"},
      {"", FW_METRIC_GAUGE, "metric name must be 1 to 200 characters"},
      {"__hidden", FW_METRIC_GAUGE, "names starting with \"__\" are reserved"},
      {"shopOrders_total", FW_METRIC_COUNTER, "write it in snake_case"},
      {"flowwarden_events_total", FW_METRIC_COUNTER,
       "is reserved: flowwarden_* and process_* are flowwarden's own metrics"},
      {"process_cpu_seconds_total", FW_METRIC_COUNTER, "is reserved"},
      {"latency_milliseconds", FW_METRIC_HISTOGRAM,
       "use the base unit \"seconds\" instead of \"milliseconds\""},
      {"payload_kilobytes", FW_METRIC_GAUGE,
       "use the base unit \"bytes\" instead of \"kilobytes\""},
      {"uptime_hours", FW_METRIC_GAUGE, "use the base unit \"seconds\" instead of \"hours\""},
      {"latency_ms", FW_METRIC_GAUGE, "must not contain the abbreviated unit \"ms\""},
      {"size_kb_now", FW_METRIC_GAUGE, "must not contain the abbreviated unit \"kb\""},
      {"queue_gauge", FW_METRIC_GAUGE, "must not contain the type word \"gauge\""},
      {"event_counter_total", FW_METRIC_COUNTER, "must not contain the type word \"counter\""},
      {"items_count", FW_METRIC_GAUGE, "must not end in _bucket, _count or _sum"},
      {"items_sum", FW_METRIC_GAUGE, "must not end in _bucket, _count or _sum"},
   };
   fw_error_t err;
   (void) state;

   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      bool ok = fw_metrics_check_name (cases[i].name, cases[i].type, &err);
      if (ok != (cases[i].error == NULL) || (!ok && !strstr (err.message, cases[i].error))) {
         fail_msg ("%s: got %s", cases[i].name, ok ? "accepted" : err.message);
      }
   }
}

static void
metrics_labels_and_buckets_are_checked (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   const char *stream[] = {"stream"}, *le[] = {"le"}, *twice[] = {"a", "a"},
              *camel[] = {"shopKind"};
   const double down[] = {1, 0.5};
   fw_metric_spec_t h = {"shop_wait_seconds", "Wait.", FW_METRIC_HISTOGRAM, NULL, 0, down, 2};
   fw_metric_spec_t nohelp = {"shop_x", "", FW_METRIC_GAUGE, NULL, 0, NULL, 0};
   fw_error_t err;
   (void) state;

   assert_null (define (m, "shop_a_total", FW_METRIC_COUNTER, stream, 1, false, &err));
   assert_non_null (
      strstr (err.message, "label name \"stream\" is reserved (flowwarden adds \"stream\""));
   assert_null (define (m, "shop_wait_seconds", FW_METRIC_HISTOGRAM, le, 1, false, &err));
   assert_non_null (strstr (err.message, "label name \"le\" is reserved"));
   assert_null (define (m, "shop_c_total", FW_METRIC_COUNTER, twice, 2, false, &err));
   assert_non_null (strstr (err.message, "label \"a\" is declared twice"));
   assert_null (define (m, "shop_kinds_total", FW_METRIC_COUNTER, camel, 1, false, &err));
   assert_non_null (strstr (err.message, "write label name \"shopKind\" in snake_case"));
   assert_null (fw_metrics_define (m, &h, false, &err));
   assert_non_null (strstr (err.message,
                            "histogram shop_wait_seconds: buckets must be finite upper "
                            "bounds in increasing order (bucket 2 is 0.5, not above "
                            "the one before); +Inf is added by itself"));
   assert_null (fw_metrics_define (m, &nohelp, false, &err));
   assert_non_null (strstr (err.message, "metric shop_x: help must be a non-empty UTF-8 text"));
   fw_metrics_destroy (m);
}

static void
metrics_redefinition_returns_the_same_metric_or_fails_on_a_change (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   const char *ab[] = {"a", "b"}, *ba[] = {"b", "a"}, *a[] = {"a"};
   fw_metric_t *first;
   fw_error_t err;
   (void) state;

   first = define (m, "shop_orders_total", FW_METRIC_COUNTER, ab, 2, false, &err);
   assert_non_null (first);
   /* The order labels are declared in does not matter. */
   assert_ptr_equal (define (m, "shop_orders_total", FW_METRIC_COUNTER, ba, 2, true, &err), first);
   assert_null (define (m, "shop_orders_total", FW_METRIC_COUNTER, a, 1, true, &err));
   assert_string_equal (err.message,
                        "metric shop_orders_total is already defined as a counter with labels "
                        "{a, b}; it cannot become a counter with labels {a} while flowwarden runs "
                        "(keep the definition, or restart flowwarden to change it)");
   /* Name rules keep counters apart from the rest; gauges and histograms
    * share theirs. */
   assert_non_null (define (m, "shop_depth", FW_METRIC_GAUGE, NULL, 0, false, &err));
   assert_null (define (m, "shop_depth", FW_METRIC_HISTOGRAM, NULL, 0, true, &err));
   assert_string_equal (err.message,
                        "metric shop_depth is already defined as a gauge with labels {}; it "
                        "cannot become a histogram with labels {} while flowwarden runs (keep the "
                        "definition, or restart flowwarden to change it)");
   fw_metrics_destroy (m);
}

static void
metrics_pending_definitions_show_after_commit_and_vanish_on_rollback (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   fw_metric_t *x;
   fw_error_t err;
   char *text;
   (void) state;

   /* A reload that fails: its new metric is forgotten, so the fixed script
    * may define the name with another type. */
   x = define (m, "shop_new_total", FW_METRIC_COUNTER, NULL, 0, true, &err);
   fw_metric_series_add (fw_metric_series_get (x, b, NULL), 1);
   text = fw_metrics_render (m, NULL);
   assert_false (contains (text, "shop_new_total"));
   free (text);
   fw_metrics_rollback (m);
   assert_non_null (define (m, "shop_new", FW_METRIC_GAUGE, NULL, 0, true, &err));
   x = define (m, "shop_new_total", FW_METRIC_COUNTER, NULL, 0, true, &err);
   assert_non_null (x);
   fw_metrics_commit (m);
   fw_metric_series_add (fw_metric_series_get (x, b, NULL), 5);
   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "shop_new_total{stream=\"s\"} 5\n"));
   assert_true (contains (text, "# TYPE shop_new gauge\n"));
   free (text);
   /* Committed metrics survive a failed reload. */
   fw_metrics_rollback (m);
   assert_ptr_equal (define (m, "shop_new_total", FW_METRIC_COUNTER, NULL, 0, true, &err), x);
   fw_metrics_destroy (m);
}

static void
metrics_series_beyond_the_cap_are_dropped (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   const char *k[] = {"k"};
   fw_error_t err;
   fw_metric_t *x = define (m, "shop_keys_total", FW_METRIC_COUNTER, k, 1, false, &err);
   char value[32];
   const char *v[] = {value};
   (void) state;

   for (int i = 0; i < FW_METRIC_MAX_SERIES; i++) {
      snprintf (value, sizeof value, "v%d", i);
      assert_non_null (fw_metric_series_get (x, b, v));
   }
   snprintf (value, sizeof value, "one-too-many");
   assert_null (fw_metric_series_get (x, b, v));
   snprintf (value, sizeof value, "v7");
   assert_non_null (fw_metric_series_get (x, b, v));
   fw_metrics_destroy (m);
}

/* Two label values that differ only in a secret stay two series (the
 * marker alone would give two samples with the same labels). Registers
 * secrets process-wide: runs last. */
static void
metrics_labels_hiding_different_secrets_stay_apart (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "s");
   const char *k[] = {"token"};
   const char *one[] = {"tok-Alpha-1234"}, *two[] = {"tok-Bravo-5678"}, *plain[] = {"tok-x"};
   fw_error_t err;
   fw_metric_t *x = define (m, "hook_calls_total", FW_METRIC_COUNTER, k, 1, false, &err);
   size_t len;
   char *text;
   (void) state;

   assert_true (fw_secrets_add ("Alpha-1234", 10));
   assert_true (fw_secrets_add ("Bravo-5678", 10));
   fw_metric_series_add (fw_metric_series_get (x, b, one), 1);
   fw_metric_series_add (fw_metric_series_get (x, b, two), 2);
   fw_metric_series_add (fw_metric_series_get (x, b, plain), 3);
   text = fw_metrics_render (m, &len);
   assert_true (contains (text, "hook_calls_total{stream=\"s\",token=\"tok-[redacted]\"} 1\n"));
   assert_true (contains (text, "hook_calls_total{stream=\"s\",token=\"tok-[redacted]#2\"} 2\n"));
   assert_true (contains (text, "hook_calls_total{stream=\"s\",token=\"tok-x\"} 3\n"));
   assert_null (strstr (text, "Alpha"));
   assert_null (strstr (text, "Bravo"));
   assert_promtool_clean (text, len);
   free (text);
   /* The same value keeps its rank on the next scrape. */
   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "token=\"tok-[redacted]#2\"} 2\n"));
   free (text);
   fw_metrics_destroy (m);
}

/* --- fw.metrics in a Lua state ------------------------------------------------ */

static char result[2048];

static bool
run (fw_lua_host_t *host, const char *code)
{
   lua_State *L = fw_lua_host_state (host);
   char chunk[4096];
   fw_lua_stop_t stop;
   bool ok;

   snprintf (chunk, sizeof chunk, "local fw = require('flowwarden')\n%s", code);
   assert_int_equal (luaL_loadstring (L, chunk), LUA_OK);
   ok = fw_lua_host_call (host, 0, 1, 5000, &stop);
   if (!ok) {
      lua_getfield (L, -1, "value");
      lua_replace (L, -2);
   }
   snprintf (result, sizeof result, "%s", luaL_tolstring (L, -1, NULL));
   lua_pop (L, 2);
   return ok;
}

static void
metrics_lua_handles_count_per_stream_and_survive_a_new_state (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *b = fw_metrics_stream (m, "orders");
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   char *text;
   (void) state;

   fw_metrics_lua_attach (L, m);
   /* The script's top level: definitions only. */
   assert_true (
      run (host,
           "C = fw.metrics.counter('shop_orders_total', 'Orders.', { labels = { 'kind' } })\n"
           "G = fw.metrics.gauge('shop_depth', 'Depth.')\n"
           "H = fw.metrics.histogram('shop_size', 'Size.', { 1, 10 })\n"
           "return tostring(C)"));
   assert_string_equal (result, "fw.metrics.counter(shop_orders_total)");
   assert_false (run (host, "G:set(1)"));
   assert_non_null (strstr (result, "fw.metrics: shop_depth:set() works inside handlers only"));
   fw_metrics_commit (m);
   /* Handlers. */
   fw_metrics_lua_bind_stream (L, b);
   assert_true (run (host,
                     "for i = 1, 10 do C:inc({ kind = 'paid' }) end\n"
                     "C:inc(2.5, { kind = 'paid' }) C:inc(1, { kind = 42 })\n"
                     "G:set(7) G:add(-2) H:observe(0.5) H:observe(5) H:observe(50)"));
   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "shop_orders_total{stream=\"orders\",kind=\"paid\"} 12.5\n"));
   assert_true (contains (text, "shop_orders_total{stream=\"orders\",kind=\"42\"} 1\n"));
   assert_true (contains (text, "shop_depth{stream=\"orders\"} 5\n"));
   assert_true (contains (text, "shop_size_bucket{stream=\"orders\",le=\"10\"} 2\n"));
   assert_true (contains (text, "shop_size_count{stream=\"orders\"} 3\n"));
   free (text);
   /* A reload: a new state defines the same metrics and counts on. */
   fw_lua_host_destroy (host);
   host = fw_lua_host_new (NULL);
   L = fw_lua_host_state (host);
   fw_metrics_lua_attach (L, m);
   assert_true (run (
      host,
      "C = fw.metrics.counter('shop_orders_total', 'Orders again.', { labels = { 'kind' } })"));
   assert_false (run (host, "fw.metrics.histogram('shop_depth', 'x')"));
   assert_non_null (strstr (
      result,
      "fw.metrics.histogram: metric shop_depth is already defined as a gauge with labels {}"));
   fw_metrics_lua_bind_stream (L, b);
   assert_true (run (host, "C:inc(1, { kind = 'paid' })"));
   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "shop_orders_total{stream=\"orders\",kind=\"paid\"} 13.5\n"));
   assert_true (contains (text, "# HELP shop_orders_total Orders.\n"));
   free (text);
   fw_lua_host_destroy (host);
   fw_metrics_destroy (m);
}

static void
metrics_lua_misuse_is_reported_clearly (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_metrics_t *m = fw_metrics_new ();
   (void) state;

   /* No registry attached (flowwarden check): the state's own applies the rules. */
   assert_false (run (host, "fw.metrics.counter('orders', 'Orders.')"));
   assert_non_null (
      strstr (result, "fw.metrics.counter: counter name \"orders\" must end in _total"));
   assert_false (run (host, "fw.metrics.counter('shop_orders_total')"));
   assert_non_null (strstr (result, "fw.metrics.counter: help must be a string"));
   assert_false (run (host, "fw.metrics.gauge('shop_g', 'G.', { lables = {} })"));
   assert_non_null (strstr (result, "fw.metrics.gauge: unknown option lables (options: labels)"));
   assert_false (run (host, "fw.metrics.histogram('shop_h', 'H.', { buckets = { 1, 'x' } })"));
   assert_non_null (
      strstr (result, "fw.metrics.histogram: buckets[2] must be a number, got string"));
   assert_true (run (host,
                     "C = fw.metrics.counter('shop_c_total', 'C.', { labels = { 'kind' } })\n"
                     "P = fw.metrics.counter('shop_p_total', 'P.')\n"
                     "G = fw.metrics.gauge('shop_g', 'G.') return 1"));
   fw_metrics_lua_bind_stream (L, fw_metrics_stream (m, "s"));
   assert_false (run (host, "C:inc(-1, { kind = 'x' })"));
   assert_non_null (strstr (result, "fw.metrics: shop_c_total:inc: counters only go up"));
   assert_false (run (host, "C:inc()"));
   assert_non_null (
      strstr (result, "fw.metrics: shop_c_total needs its labels: inc(..., { kind = ... })"));
   assert_false (run (host, "C:inc(1, { kind = 'x', color = 'red' })"));
   assert_non_null (
      strstr (result, "fw.metrics: shop_c_total: unknown label color (declared: kind)"));
   assert_false (run (host, "C:inc(1, { })"));
   assert_non_null (strstr (result, "fw.metrics: shop_c_total: label kind is missing"));
   assert_false (run (host, "C:inc(1, { kind = 'a\\0b' })"));
   assert_non_null (
      strstr (result, "label kind must be UTF-8 text of at most 256 bytes without NUL"));
   assert_false (run (host, "P:inc(1, { kind = 'x' })"));
   assert_non_null (strstr (result, "fw.metrics: shop_p_total has no labels"));
   assert_false (run (host, "C:set(1)"));
   assert_non_null (
      strstr (result, "fw.metrics: shop_c_total is a counter: use :inc([n] [, labels])"));
   assert_false (run (host, "G:observe(1)"));
   assert_non_null (strstr (
      result, "fw.metrics: shop_g is a gauge: use :set(v [, labels]) or :add(v [, labels])"));
   assert_false (run (host, "G.set(1)"));
   assert_non_null (strstr (result, "fw.metrics: call set with ':' on a metric"));
   fw_lua_host_destroy (host);
   fw_metrics_destroy (m);
}

/* Issue 38: a group's units. The holder exports lag and position; a
 * standby (given up while an event was in flight) exports neither and is
 * up; an orphaned unit says how long, and holds readiness back only where
 * this instance is short of its share. */
static void
metrics_group_units_holder_standby_orphaned (void **state)
{
   fw_metrics_t *m = fw_metrics_new ();
   fw_stream_metrics_t *held = fw_metrics_stream (m, "kv#0/4");
   fw_stream_metrics_t *given = fw_metrics_stream (m, "kv#1/4");
   fw_stream_metrics_t *orphan = fw_metrics_stream (m, "kv#2/4");
   fw_stream_metrics_t *plain = fw_metrics_stream (m, "plain");
   int64_t now = fw_now_ms ();
   fw_stream_snapshot_t snap;
   char name[64], *text;
   (void) state;

   for (int i = 0; i < 3; i++) {
      fw_stream_metrics_t *b = i == 0 ? held : i == 1 ? given : orphan;
      fw_stream_metrics_set_lease (b, 10000);
      fw_stream_metrics_set_role (b, FW_STREAM_ROLE_LEADER);
      fw_stream_metrics_set_state (b, FW_STREAM_RUNNING, NULL);
      fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, now - 60000);
      fw_stream_metrics_checkpoint (b, true, now - 1000);
   }
   fw_stream_metrics_event_finished (held, FW_METRICS_OUTCOME_OK, now - 59750);
   fw_stream_metrics_set_state (plain, FW_STREAM_RUNNING, NULL);
   /* Given up with its event in flight (read ahead, dropped). */
   fw_stream_metrics_set_role (given, FW_STREAM_ROLE_STANDBY);
   fw_stream_metrics_set_unit_view (given, "host:1:abc", 0, false);
   fw_stream_metrics_set_state (given, FW_STREAM_STANDBY,
                                "standby (shared): unit held by host:1:abc");
   fw_stream_metrics_set_role (orphan, FW_STREAM_ROLE_STANDBY);
   fw_stream_metrics_set_unit_view (orphan, "host:2:def", now - 5000, true);
   fw_stream_metrics_set_state (orphan, FW_STREAM_ORPHANED, "orphaned for 5.0 s");

   text = fw_metrics_render (m, NULL);
   assert_true (contains (text, "flowwarden_lag_seconds{stream=\"kv#0/4\"} 0.25\n"));
   assert_false (contains (text, "flowwarden_lag_seconds{stream=\"kv#1/4\"}"));
   assert_false (contains (text, "flowwarden_lag_seconds{stream=\"kv#2/4\"}"));
   assert_false (contains (text, "flowwarden_checkpoint_timestamp_seconds{stream=\"kv#1/4\"}"));
   assert_true (contains (text, "flowwarden_checkpoint_timestamp_seconds{stream=\"kv#0/4\"}"));
   assert_true (contains (text, "flowwarden_stream_up{stream=\"kv#1/4\"} 1\n"));
   assert_true (contains (text, "flowwarden_stream_up{stream=\"kv#2/4\"} 0\n"));
   assert_true (
      contains (text, "flowwarden_stream_state{stream=\"kv#1/4\",state=\"standby\"} 1\n"));
   assert_true (
      contains (text, "flowwarden_stream_state{stream=\"kv#2/4\",state=\"orphaned\"} 1\n"));
   assert_true (contains (text, "flowwarden_unit_held{stream=\"kv\",unit=\"kv#0/4\"} 1\n"));
   assert_true (contains (text, "flowwarden_unit_held{stream=\"kv\",unit=\"kv#1/4\"} 0\n"));
   assert_true (contains (text, "flowwarden_unit_held{stream=\"plain\",unit=\"plain\"} 1\n"));
   assert_true (
      contains (text, "flowwarden_unit_orphaned_seconds{stream=\"kv\",unit=\"kv#0/4\"} 0\n"));
   assert_true (
      contains (text, "flowwarden_unit_orphaned_seconds{stream=\"kv\",unit=\"kv#2/4\"} 5"));
   assert_false (contains (text, "flowwarden_unit_orphaned_seconds{stream=\"plain\""));
   assert_true (
      contains (text, "flowwarden_unit_lease_seconds{stream=\"kv\",unit=\"kv#1/4\"} 10\n"));
   free (text);

   fw_stream_metrics_snapshot (given, fw_now_ms (), &snap);
   assert_true (fw_stream_snapshot_ready (&snap));
   assert_string_equal (snap.holder, "host:1:abc");
   assert_string_equal (snap.reason, "standby (shared): unit held by host:1:abc");
   assert_true (snap.orphaned_seconds < 0);
   assert_true (snap.lag_seconds == 0.0); /* the dropped event's lag is gone */
   fw_stream_metrics_snapshot (orphan, fw_now_ms (), &snap);
   assert_false (fw_stream_snapshot_ready (&snap)); /* short of its share */
   assert_true (snap.orphaned_seconds >= 5.0 && snap.orphaned_seconds < 60.0);
   fw_stream_metrics_set_unit_view (orphan, "host:2:def", now - 5000, false);
   fw_stream_metrics_snapshot (orphan, fw_now_ms (), &snap);
   assert_true (fw_stream_snapshot_ready (&snap)); /* at its share: others should take it */
   /* Taken: orphaned no more, a lag of its own again. */
   fw_stream_metrics_set_role (orphan, FW_STREAM_ROLE_LEADER);
   fw_stream_metrics_snapshot (orphan, fw_now_ms (), &snap);
   assert_true (snap.orphaned_seconds < 0);

   fw_metrics_unit_stream ("kv#12/16", name, sizeof name);
   assert_string_equal (name, "kv");
   fw_metrics_unit_stream ("a#b", name, sizeof name);
   assert_string_equal (name, "a#b");
   fw_metrics_unit_stream ("x#1/4z", name, sizeof name);
   assert_string_equal (name, "x#1/4z");
   fw_metrics_unit_stream ("x#-1/4", name, sizeof name);
   assert_string_equal (name, "x#-1/4");
   fw_metrics_destroy (m);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (metrics_exposition_passes_promtool_check_metrics),
      cmocka_unit_test (metrics_exposition_has_every_value),
      cmocka_unit_test (metrics_counters_from_several_threads_add_up_while_scraped),
      cmocka_unit_test (metrics_error_types_beyond_fifty_count_as_other),
      cmocka_unit_test (metrics_removed_stream_is_hidden_and_counts_on_when_back),
      cmocka_unit_test (metrics_lag_grows_while_an_event_is_in_flight_then_freezes),
      cmocka_unit_test (metrics_events_per_second_over_the_last_minute),
      cmocka_unit_test (metrics_state_reason_is_kept_for_streams_not_ready),
      cmocka_unit_test (metrics_dlq_pending_moves_with_every_write_and_the_count_corrects_it),
      cmocka_unit_test (metrics_last_error_has_a_time_and_an_age),
      cmocka_unit_test (metrics_last_reload_is_kept_with_its_time_and_message),
      cmocka_unit_test (metrics_oplog_window_is_absent_until_known_and_in_every_snapshot),
      cmocka_unit_test (metrics_names_follow_prometheus_rules),
      cmocka_unit_test (metrics_labels_and_buckets_are_checked),
      cmocka_unit_test (metrics_redefinition_returns_the_same_metric_or_fails_on_a_change),
      cmocka_unit_test (metrics_pending_definitions_show_after_commit_and_vanish_on_rollback),
      cmocka_unit_test (metrics_series_beyond_the_cap_are_dropped),
      cmocka_unit_test (metrics_lua_handles_count_per_stream_and_survive_a_new_state),
      cmocka_unit_test (metrics_lua_misuse_is_reported_clearly),
      cmocka_unit_test (metrics_labels_hiding_different_secrets_stay_apart),
      cmocka_unit_test (metrics_group_units_holder_standby_orphaned),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
