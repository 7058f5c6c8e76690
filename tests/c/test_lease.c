/*
 * lease.c against the MongoDB stand-in (issue 17): taking, renewing, losing and releasing a
 * stream's lease, a leader that cannot renew stopping before anyone else can start, malformed
 * lease documents, clock skew, and the checkpoint fence. Leases of 1 s keep it short; several
 * instances live in one process, told apart by their owner ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/ha/lease.h"
#include "standin_process.h"

#define LEASE_MS 1000
#define SKEW_MS 3000

static standin_t g_standin;

static int
group_setup (void **state)
{
   (void) state;
   return standin_group_start (&g_standin);
}

static int
group_teardown (void **state)
{
   (void) state;
   return standin_group_stop (&g_standin);
}

/* ---- helpers ---- */

static mongoc_uri_t *g_uri;
static mongoc_client_t *g_client;

static int
setup (void **state)
{
   (void) state;
   /* Set before the lease module first reads its wall clock: this process's clock is 3 s
    * ahead of the server's, which must change nothing but the reported offset. */
   setenv ("FW_TEST_CLOCK_SKEW_MS", "3000", 1);
   if (group_setup (state) != 0) {
      return -1;
   }
   g_uri = mongoc_uri_new (g_standin.uri);
   g_client = mongoc_client_new_from_uri (g_uri);
   mongoc_client_set_error_api (g_client, MONGOC_ERROR_API_VERSION_2);
   return g_uri && g_client ? 0 : -1;
}

static int
teardown (void **state)
{
   mongoc_client_destroy (g_client);
   mongoc_uri_destroy (g_uri);
   return group_teardown (state);
}

static void
command (const char *json)
{
   bson_error_t error;
   bson_t *cmd = bson_new_from_json ((const uint8_t *) json, -1, &error);
   bson_t reply;
   assert_non_null (cmd);
   if (!mongoc_client_command_simple (g_client, "admin", cmd, NULL, &reply, &error)) {
      fail_msg ("command %s failed: %s", json, error.message);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
}

static void
insert_lease (const char *json)
{
   bson_error_t error;
   bson_t *doc = bson_new_from_json ((const uint8_t *) json, -1, &error);
   mongoc_collection_t *c = mongoc_client_get_collection (g_client, "ha", FW_LEASE_COLLECTION);
   assert_non_null (doc);
   assert_true (mongoc_collection_insert_one (c, doc, NULL, NULL, &error));
   mongoc_collection_destroy (c);
   bson_destroy (doc);
}

static fw_lease_t *
lease (const char *stream, const char *owner)
{
   fw_error_t err;
   fw_lease_t *l = fw_lease_new (g_uri, "ha", stream, LEASE_MS, owner, &err);
   assert_non_null (l);
   return l;
}

/* Seconds until l leads (fails the test after limit_s). */
static double
time_to_lead (fw_lease_t *l, double limit_s)
{
   double t0 = now_s ();
   while (!fw_lease_is_leader (l, NULL)) {
      if (now_s () - t0 > limit_s) {
         fail_msg ("no leadership within %.1f s", limit_s);
      }
      usleep (5000);
   }
   return now_s () - t0;
}

static int64_t
epoch_of (fw_lease_t *l)
{
   int64_t e = -1;
   assert_true (fw_lease_is_leader (l, &e));
   return e;
}

/* ---- the lease's writes, as the server made them ----
 * Time bounds checked on the server's clock ($$NOW in the lease document) instead of this
 * test's polling, which a busy machine delays: a change stream on the lease document records
 * every write (a take, a renewal, a release or yield) with who held it afterwards. */

typedef struct {
   char owner[32];     /* "" once given up (release, yield) */
   int64_t at_ms;      /* the server's $$NOW at the write */
   int64_t expires_ms; /* the expiresAt it left */
} lease_write_t;

typedef struct {
   mongoc_change_stream_t *cs;
   lease_write_t opened; /* the lease as read when the change stream opened */
   lease_write_t now;    /* the lease as last seen */
   lease_write_t w[512];
   int n;
} lease_history_t;

static lease_history_t g_history;

static int64_t
wall_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_REALTIME, &ts);
   return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Applies the fields a write set (an update's updatedFields, an insert's document). */
static void
history_apply (lease_history_t *h, const bson_t *fields)
{
   bson_iter_t it;
   int64_t renewed = -1;

   if (bson_iter_init_find (&it, fields, "owner")) {
      snprintf (h->now.owner, sizeof h->now.owner, "%s",
                BSON_ITER_HOLDS_UTF8 (&it) ? bson_iter_utf8 (&it, NULL) : "");
   }
   if (bson_iter_init_find (&it, fields, "expiresAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      h->now.expires_ms = bson_iter_date_time (&it);
   }
   if (bson_iter_init_find (&it, fields, "renewedAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      renewed = bson_iter_date_time (&it);
   }
   /* A take or renewal sets renewedAt = $$NOW; a release or yield expiresAt = $$NOW. */
   h->now.at_ms = h->now.owner[0] && renewed >= 0 ? renewed : h->now.expires_ms;
}

/* Opens the change stream on stream's lease, then reads the lease as it is. */
static void
history_open (lease_history_t *h, const char *stream)
{
   mongoc_collection_t *c = mongoc_client_get_collection (g_client, "ha", FW_LEASE_COLLECTION);
   bson_t *pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "documentKey._id",
                                BCON_UTF8 (stream), "}", "}", "]");
   bson_t *opts = BCON_NEW ("maxAwaitTimeMS", BCON_INT64 (50));
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (stream));
   const bson_t *doc, *err_doc;
   bson_error_t error;
   mongoc_cursor_t *cur;

   memset (h, 0, sizeof *h);
   h->cs = mongoc_collection_watch (c, pipeline, opts);
   if (mongoc_change_stream_error_document (h->cs, &error, &err_doc)) {
      fail_msg ("watching the lease: %s", error.message);
   }
   cur = mongoc_collection_find_with_opts (c, filter, NULL, NULL);
   assert_true (mongoc_cursor_next (cur, &doc));
   history_apply (h, doc);
   h->opened = h->now;
   mongoc_cursor_destroy (cur);
   bson_destroy (filter);
   bson_destroy (opts);
   bson_destroy (pipeline);
   mongoc_collection_destroy (c);
}

/* Records the writes until one leaves owner holding the lease (fails after limit_s). */
static void
history_until (lease_history_t *h, const char *owner, double limit_s)
{
   double t0 = now_s ();
   const bson_t *ev, *err_doc;
   bson_error_t error;
   bson_iter_t it, sub;

   while (h->n == 0 || strcmp (h->w[h->n - 1].owner, owner) != 0) {
      if (now_s () - t0 > limit_s) {
         fail_msg ("the lease's writes showed no take by %s within %.1f s", owner, limit_s);
      }
      if (!mongoc_change_stream_next (h->cs, &ev)) {
         if (mongoc_change_stream_error_document (h->cs, &error, &err_doc)) {
            fail_msg ("watching the lease: %s", error.message);
         }
         continue;
      }
      if (bson_iter_init (&it, ev) &&
          (bson_iter_find_descendant (&it, "updateDescription.updatedFields", &sub) ||
           (bson_iter_init (&it, ev) && bson_iter_find_descendant (&it, "fullDocument", &sub))) &&
          BSON_ITER_HOLDS_DOCUMENT (&sub)) {
         const uint8_t *data;
         uint32_t len;
         bson_t fields;
         bson_iter_document (&sub, &len, &data);
         assert_true (bson_init_static (&fields, data, len));
         history_apply (h, &fields);
         assert_true (h->n < (int) (sizeof h->w / sizeof h->w[0]));
         h->w[h->n++] = h->now;
      }
   }
}

/* Records the writes made until none comes for the change stream's wait (50 ms). */
static void
history_drain (lease_history_t *h)
{
   const bson_t *ev, *err_doc;
   bson_error_t error;
   bson_iter_t it, sub;

   while (mongoc_change_stream_next (h->cs, &ev)) {
      if (bson_iter_init (&it, ev) &&
          bson_iter_find_descendant (&it, "updateDescription.updatedFields", &sub) &&
          BSON_ITER_HOLDS_DOCUMENT (&sub)) {
         const uint8_t *data;
         uint32_t len;
         bson_t fields;
         bson_iter_document (&sub, &len, &data);
         assert_true (bson_init_static (&fields, data, len));
         history_apply (h, &fields);
         assert_true (h->n < (int) (sizeof h->w / sizeof h->w[0]));
         h->w[h->n++] = h->now;
      }
   }
   if (mongoc_change_stream_error_document (h->cs, &error, &err_doc)) {
      fail_msg ("watching the lease: %s", error.message);
   }
}

/* The first write after index from that left owner holding the lease (-1: none). */
static int
history_find (const lease_history_t *h, int from, const char *owner)
{
   for (int i = from; i < h->n; i++) {
      if (strcmp (h->w[i].owner, owner) == 0) {
         return i;
      }
   }
   return -1;
}

static void
history_close (lease_history_t *h)
{
   mongoc_change_stream_destroy (h->cs);
   h->cs = NULL;
}

/* The expiresAt the last write before index i left for owner (the lease as opened when none). */
static int64_t
history_expiry_before (const lease_history_t *h, int i, const char *owner)
{
   while (--i >= 0) {
      if (strcmp (h->w[i].owner, owner) == 0) {
         return h->w[i].expires_ms;
      }
   }
   assert_string_equal (h->opened.owner, owner);
   return h->opened.expires_ms;
}

/* Prints the writes recorded (a failing case's evidence). */
static void
history_print (const lease_history_t *h)
{
   for (int i = 0; i < h->n; i++) {
      fprintf (stderr,
               "LEASE write %d: owner \"%s\" at %lld, expiresAt %lld (%lld ms after the "
               "write before)\n",
               i, h->w[i].owner, (long long) h->w[i].at_ms, (long long) h->w[i].expires_ms,
               (long long) (h->w[i].at_ms - (i ? h->w[i - 1].at_ms : h->opened.at_ms)));
   }
}

/* b never leads for seconds (with g_history open on the lease: its writes printed if it does). */
static void
standby_never_leads (fw_lease_t *b, double seconds)
{
   for (double t0 = now_s (); now_s () - t0 < seconds;) {
      if (fw_lease_is_leader (b, NULL)) {
         history_drain (&g_history);
         history_print (&g_history);
         fail_msg ("the standby leads: the lease expired on the server between two renewals");
      }
      usleep (10000);
   }
}

/* Kept by renewals, on the server's clock: every write was owner's, each before the lease the
 * previous one left had expired (a leader's own deadline may pass on a machine too busy to
 * answer a renewal in time: it leads again with the next one, same epoch). */
static void
kept_by_renewals (const lease_history_t *h, const char *owner)
{
   int64_t most = 0;
   for (int i = 0; i < h->n; i++) {
      int64_t before = i ? h->w[i - 1].at_ms : h->opened.at_ms;
      if (strcmp (h->w[i].owner, owner) != 0 ||
          h->w[i].at_ms >= (i ? h->w[i - 1].expires_ms : h->opened.expires_ms)) {
         history_print (h);
         fail_msg ("write %d: not a renewal by %s before the lease expired", i, owner);
      }
      most = h->w[i].at_ms - before > most ? h->w[i].at_ms - before : most;
   }
   fprintf (stderr, "LEASE %d renewals on the server's clock, at most %lld ms apart (every %d)\n",
            h->n, (long long) most, LEASE_MS / 3);
}

/* ---- cases ---- */

static void
lease_is_taken_at_once_and_kept_by_renewals (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("kept", "a"), *b;
   fw_lease_status_t st;

   time_to_lead (a, 10.0);
   b = lease ("kept", "b");
   assert_int_equal (epoch_of (a), 1);
   history_open (&g_history, "kept");
   /* Five lease periods: a renews, b never leads. */
   standby_never_leads (b, 5.0 * LEASE_MS / 1000);
   history_drain (&g_history);
   history_close (&g_history);
   assert_true (g_history.n >= 5);
   kept_by_renewals (&g_history, "a");
   time_to_lead (a, 2.0);
   assert_int_equal (epoch_of (a), 1);
   fw_lease_status (b, &st);
   assert_int_equal (st.role, FW_LEASE_STANDBY);
   assert_string_equal (st.holder, "a");
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

/* docs/operations.md, "The lease": the leader renews every lease / 3, counted from when it sent
 * the renewal before: answers that come late (250 ms here, within the lease client's timeout of
 * lease / 3) do not push the renewals apart. Counted from the answers instead, a renewal would
 * reach the server a third of the lease plus the answer's wait after the one before, and two
 * slow answers in a row would leave the lease no time at all on a busy machine. */
#define SLOW_ANSWER_MS 250

static void
a_leader_answered_slowly_still_renews_every_third_of_the_lease (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("slow", "a"), *b;
   int64_t on, sum = 0;
   int gaps = 0, i, first = -1;
   char fp[400];

   time_to_lead (a, 10.0);
   b = lease ("slow", "b");
   history_open (&g_history, "slow");
   snprintf (fp, sizeof fp,
             "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
             "{\"failCommands\": [\"update\"], \"blockConnection\": true, \"blockTimeMS\": %d, "
             "\"appName\": \"flowwarden-lease-a\"}}",
             SLOW_ANSWER_MS);
   command (fp);
   on = wall_ms ();
   standby_never_leads (b, 3.0 * LEASE_MS / 1000);
   command ("{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}");
   history_drain (&g_history);
   history_close (&g_history);
   kept_by_renewals (&g_history, "a");
   /* The renewals surely sent after the fail point was on: those after one that the server
    * made once it was on (the next is sent after that one's answer). Each waited 250 ms on the
    * server before its write, so the time between two of them is the time between their
    * sends: lease / 3 on average, where it would be at least lease / 3 + 250 ms counted from
    * the answers. */
   for (i = 0; i < g_history.n; i++) {
      if (g_history.w[i].at_ms < on + SLOW_ANSWER_MS) {
         continue;
      }
      if (first < 0) {
         first = i + 1; /* sent after w[i] was made */
      } else if (i > first) {
         sum += g_history.w[i].at_ms - g_history.w[i - 1].at_ms;
         gaps++;
      }
   }
   assert_true (gaps >= 3);
   fprintf (stderr, "LEASE renewals answered %d ms late: %lld ms apart on average (every %d)\n",
            SLOW_ANSWER_MS, (long long) (sum / gaps), LEASE_MS / 3);
   assert_true (sum / gaps < LEASE_MS / 3 + SLOW_ANSWER_MS);
   assert_int_equal (epoch_of (a), 1);
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

/* docs/operations.md, "Take-over time": a standby reads a held lease again when it expires and
 * at least every STANDBY_READ_MS, and takes it at the first read that finds it expired. */
#define STANDBY_READ_MS 250
/* Room for what this process's own clock and threads add to a bound on the server's clock: the
 * round trips of a read and a take, and a thread that a busy machine runs late. */
#define SCHED_MARGIN_MS 300

static void
a_crashed_leader_is_replaced_within_lease_and_250_ms (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("crash", "a"), *b;
   double took_s;
   int64_t expiry;
   int took;

   time_to_lead (a, 10.0);
   b = lease ("crash", "b");
   usleep (100000);
   history_open (&g_history, "crash");
   fw_lease_destroy (a); /* no release: as kill -9 */
   took_s = time_to_lead (b, 5.0);
   fprintf (stderr, "LEASE takeover after a crash: %.0f ms (bound %d)\n", took_s * 1000,
            LEASE_MS + STANDBY_READ_MS);
   /* The bound of docs/operations.md ("Take-over time"), on the server's clock: b took the
    * lease once the expiresAt a's last renewal left had passed, and within a standby's read
    * of it (the renewal itself was at most at the crash). */
   history_until (&g_history, "b", 5.0);
   took = history_find (&g_history, 0, "b");
   expiry = history_expiry_before (&g_history, took, "a");
   fprintf (stderr, "LEASE taken %lld ms after the crashed leader's lease expired (bound %d)\n",
            (long long) (g_history.w[took].at_ms - expiry), STANDBY_READ_MS);
   history_close (&g_history);
   assert_true (g_history.w[took].at_ms >= expiry);
   assert_true (g_history.w[took].at_ms <= expiry + STANDBY_READ_MS + SCHED_MARGIN_MS);
   assert_int_equal (epoch_of (b), 2);
   fw_lease_destroy (b);
}

/* After history_open (&g_history, ...): from's lease was given up (release or yield: owner null, expiresAt
 * the server's now) before it would have expired, and to took it after that and before that
 * expiry too (docs/operations.md, "Hand-over": the standby's next read takes it, within
 * 250 ms, not after the lease). On the server's clock: the margin for this process's
 * scheduling is the rest of the lease, at least lease - lease / 3 after the last renewal. */
static void
given_up_then_taken (const char *from, const char *to)
{
   int given, took;
   int64_t expiry;

   history_until (&g_history, to, 5.0);
   given = history_find (&g_history, 0, "");
   assert_true (given >= 0);
   took = history_find (&g_history, given, to);
   expiry = history_expiry_before (&g_history, given, from);
   fprintf (stderr, "LEASE given up %lld ms before its expiry, taken %lld ms after that\n",
            (long long) (expiry - g_history.w[given].at_ms),
            (long long) (g_history.w[took].at_ms - g_history.w[given].at_ms));
   history_close (&g_history);
   assert_true (g_history.w[given].at_ms < expiry);
   assert_true (took > given && g_history.w[took].at_ms >= g_history.w[given].at_ms);
   assert_true (g_history.w[took].at_ms < expiry);
   /* Within a standby's read of the release, on the server's clock. */
   assert_true (g_history.w[took].at_ms - g_history.w[given].at_ms <=
                STANDBY_READ_MS + SCHED_MARGIN_MS);
}

static void
a_released_lease_is_taken_over_at_once (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("release", "a"), *b;
   double took;

   time_to_lead (a, 10.0);
   b = lease ("release", "b");
   usleep (50000);
   history_open (&g_history, "release");
   assert_true (fw_lease_release (a, 2000));
   assert_false (fw_lease_is_leader (a, NULL));
   took = time_to_lead (b, 5.0);
   fprintf (stderr, "LEASE takeover after a release: %.0f ms (bound 250)\n", took * 1000);
   given_up_then_taken ("a", "b");
   assert_int_equal (epoch_of (b), 2);
   /* Released means given up for good. */
   usleep (LEASE_MS * 1000 * 2 / 3);
   assert_false (fw_lease_is_leader (a, NULL));
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

/* ha.mode = "shared" (issue 31): a gated lease is taken only when its gate says so; a
 * yielded one is given up at once and taken again later, unlike a released one. */
static bool g_allow;

static bool
allow (void *ud)
{
   (void) ud;
   return __atomic_load_n (&g_allow, __ATOMIC_RELAXED);
}

static void
a_gated_lease_waits_for_its_gate_and_a_yielded_one_can_be_taken_again (void **state)
{
   (void) state;
   fw_error_t err;
   fw_lease_t *a, *b;
   fw_lease_status_t st;
   double took;

   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED);
   a = fw_lease_new_gated (g_uri, "ha", "gated", LEASE_MS, "a", allow, NULL, &err);
   assert_non_null (a);
   usleep (LEASE_MS * 1000); /* free all along, but the gate says no */
   assert_false (fw_lease_is_leader (a, NULL));
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (a, 1.0);
   b = lease ("gated", "b");
   usleep (50000);
   history_open (&g_history, "gated");
   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED); /* over its share now */
   assert_true (fw_lease_yield (a, 2000));
   assert_false (fw_lease_is_leader (a, NULL));
   took = time_to_lead (b, 5.0);
   fprintf (stderr, "LEASE takeover after a yield: %.0f ms (bound 250)\n", took * 1000);
   given_up_then_taken ("a", "b");
   fw_lease_status (a, &st);
   assert_int_equal (st.role, FW_LEASE_STANDBY); /* not released: it may lead again */
   fw_lease_destroy (b);                         /* as kill -9 */
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (a, 3.0);
   assert_int_equal (epoch_of (a), 3);
   fw_lease_destroy (a);
}

/* free_ms is counted from the expiresAt, not from when a standby first saw the lease free:
 * a standby started (and first reading) at least 500 ms after the expiry, by the wall clock
 * that is the server's, sees the server's now, and so its free_ms, at least that much past
 * it. The gate keeps it from taking the lease. */
static void
free_ms_counts_from_the_expiry (int64_t expiry)
{
   fw_error_t err;
   fw_lease_status_t st;
   fw_lease_t *c;
   int64_t created, w1;
   double t0;

   while ((created = wall_ms ()) < expiry + 500) {
      usleep (20000);
   }
   c = fw_lease_new_gated (g_uri, "ha", "orphan", LEASE_MS, "c", allow, NULL, &err);
   assert_non_null (c);
   for (t0 = now_s ();; usleep (10000)) {
      fw_lease_status (c, &st);
      w1 = wall_ms ();
      if (st.free_ms >= 0 || now_s () - t0 > 10.0) {
         break;
      }
   }
   fprintf (stderr, "LEASE a standby started %lld ms after the expiry: free_ms %lld\n",
            (long long) (created - expiry), (long long) st.free_ms);
   assert_false (st.live_holder);
   assert_true (st.free_ms >= created - expiry - 3);
   assert_true (st.free_ms <= w1 - expiry + 3);
   fw_lease_destroy (c);
}

/* Issue 38: what a standby sees of the lease: a live holder while it renews; once it
 * crashed, no live holder since the lease's expiry (the server's clock), growing while the
 * gate keeps this one from taking it. */
static void
a_standby_sees_the_holder_then_how_long_the_lease_has_been_free (void **state)
{
   (void) state;
   fw_error_t err;
   fw_lease_t *a = lease ("orphan", "a"), *b;
   fw_lease_status_t st;
   int64_t expiry, w0, w1, free_ms;
   double t0;

   time_to_lead (a, 10.0);
   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED);
   b = fw_lease_new_gated (g_uri, "ha", "orphan", LEASE_MS, "b", allow, NULL, &err);
   assert_non_null (b);
   /* The holder's expiresAt less the server's now at b's last read, less the time since: at
    * most the lease, whenever read; above 0 while b reads the renewed lease in time (a status
    * read long after b's last read, on a busy machine, may show it past: b's next read finds
    * the next renewal). This process's clock runs 3 s ahead (FW_TEST_CLOCK_SKEW_MS): a value
    * taken from it instead of the server's never comes above 0. */
   for (t0 = now_s ();; usleep (10000)) {
      fw_lease_status (b, &st);
      if (st.live_holder) {
         assert_string_equal (st.holder, "a");
         assert_int_equal (st.free_ms, -1);
         assert_true (st.expires_in_ms <= LEASE_MS + 100);
         if (st.expires_in_ms > 0) {
            break;
         }
      }
      if (now_s () - t0 > 10.0) {
         fail_msg (
            "no status with a live holder whose lease had time left within 10 s (last: "
            "live %d, expires_in_ms %lld)",
            st.live_holder, (long long) st.expires_in_ms);
      }
   }
   fw_lease_destroy (a); /* as kill -9; its thread joined: no renewal comes after this */
   /* The expiresAt a's last renewal left: the server's clock is this machine's wall clock. */
   history_open (&g_history, "orphan");
   history_close (&g_history);
   assert_string_equal (g_history.opened.owner, "a");
   expiry = g_history.opened.expires_ms;
   /* Seen free once b reads the lease after its expiry. How soon a standby reads it is
    * checked on the server's clock by the crash case (the take at its first read); here a
    * bounded wait, since a busy machine may run b's thread late. */
   for (t0 = now_s ();; usleep (10000)) {
      w0 = wall_ms ();
      fw_lease_status (b, &st);
      w1 = wall_ms ();
      if (!st.live_holder) {
         break;
      }
      if (now_s () - t0 > 10.0) {
         fail_msg ("the lease still seen held %lld ms after its expiry", (long long) (w0 - expiry));
      }
   }
   /* free_ms: how long the lease has been free, from its expiresAt by the server's clock: never
    * more than the time since (+ 3: both clocks read to the millisecond, the wall clock slewed
    * against the monotonic one), at least 0. */
   fprintf (stderr, "LEASE standby saw it free: free_ms %lld, %lld ms after its expiry\n",
            (long long) st.free_ms, (long long) (w1 - expiry));
   assert_true (st.free_ms >= 0);
   assert_true (st.free_ms <= w1 - expiry + 3);
   free_ms = st.free_ms;
   usleep (600000);
   w0 = wall_ms ();
   fw_lease_status (b, &st);
   w1 = wall_ms ();
   assert_false (st.live_holder);
   /* Grown by at least the time slept, and still the time since the expiry. */
   assert_true (st.free_ms >= free_ms + 600);
   assert_true (st.free_ms <= w1 - expiry + 3);
   free_ms_counts_from_the_expiry (expiry);
   assert_false (fw_lease_is_leader (b, NULL));
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (b, 2.0);
   fw_lease_status (b, &st);
   assert_int_equal (st.free_ms, -1); /* the holder sees no orphan */
   fw_lease_destroy (b);
}

/* The renewals of the leader fail (or hang): it must stop leading before the standby can
 * start, every time. */
static void
partitioned (const char *stream, const char *fail_point)
{
   fw_lease_t *a = lease (stream, "a"), *b = NULL;
   double stopped = 0, started = 0, t0;
   int64_t deadline = 0, expiry, margin = fw_lease_margin_ms (LEASE_MS);
   int took;

   time_to_lead (a, 10.0);
   b = lease (stream, "b");
   usleep (50000);
   history_open (&g_history, stream);
   command (fail_point);
   for (t0 = now_s (); now_s () - t0 < 5.0 && !started;) {
      /* a's own deadline on the wall clock, from its time left: the clock is read first, so
       * this is never later than the deadline, however late this loop runs. */
      int64_t wall = wall_ms (), left = fw_lease_remaining_ms (a);
      /* b first: a leading after b was seen leading is an overlap however late this thread
       * runs between the two (a, cut off, leads once; b, once it took the lease, keeps it),
       * where b seen after a could be a stall of this thread longer than the margin. */
      bool lb = fw_lease_is_leader (b, NULL);
      bool la = fw_lease_is_leader (a, NULL);
      assert_false (la && lb);
      if (left > 0 && wall + left > deadline) {
         deadline = wall + left;
      }
      if (!la && !stopped) {
         stopped = now_s ();
      }
      if (lb) {
         started = now_s ();
      }
      usleep (1000);
   }
   command ("{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}");
   assert_true (stopped > 0 && started > 0 && deadline > 0);
   /* docs/operations.md, "The leader's deadline": the leader stops at least the margin before
    * its lease's expiresAt, and the server lets nobody take the lease before then. Both on the
    * server's clock (the stand-in's $$NOW, this machine's wall clock, to the millisecond). */
   history_until (&g_history, "b", 5.0);
   took = history_find (&g_history, 0, "b");
   expiry = history_expiry_before (&g_history, took, "a");
   fprintf (stderr,
            "LEASE %s: the leader's deadline %lld ms before its lease expired (margin %lld), "
            "the standby took it %lld ms after (seen stopping %.0f ms before it started)\n",
            stream, (long long) (expiry - deadline), (long long) margin,
            (long long) (g_history.w[took].at_ms - expiry), (started - stopped) * 1000);
   history_close (&g_history);
   /* + 3: both clocks are read to the millisecond ($$NOW is cut to it, the time left is in
    * whole milliseconds), and the wall clock may be slewed against the monotonic one. */
   assert_true (deadline <= expiry - margin + 3);
   assert_true (g_history.w[took].at_ms >= expiry);
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

static void
a_leader_whose_renewals_fail_stops_before_the_standby_starts (void **state)
{
   (void) state;
   partitioned ("renew-fails",
                "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"update\", \"findAndModify\", \"aggregate\"], \"errorCode\": "
                "96, \"appName\": \"flowwarden-lease-a\"}}");
}

static void
a_leader_whose_renewals_hang_stops_before_the_standby_starts (void **state)
{
   (void) state;
   partitioned ("renew-hangs",
                "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"update\", \"findAndModify\", \"aggregate\"], "
                "\"blockConnection\": true, \"blockTimeMS\": 3000, \"appName\": "
                "\"flowwarden-lease-a\"}}");
}

/* Four instances start together on a lease nobody holds: their takes race, exactly one leads,
 * and the others learn from their own take who holds it (no error, no second leader). */
static void
racing_takes_make_one_leader_and_standbys_that_name_it (void **state)
{
   (void) state;
   const char *owners[] = {"r1", "r2", "r3", "r4"};
   fw_lease_t *ls[4];
   fw_lease_status_t st;
   int leader = -1, named = 0, i;
   double t0;

   for (i = 0; i < 4; i++) {
      ls[i] = lease ("race", owners[i]);
   }
   for (t0 = now_s (); now_s () - t0 < 5.0 && (leader < 0 || named < 3);) {
      int leading = 0;
      named = 0;
      for (i = 0; i < 4; i++) {
         if (fw_lease_is_leader (ls[i], NULL)) {
            leading++;
            leader = i;
         }
      }
      assert_true (leading <= 1);
      for (i = 0; leader >= 0 && i < 4; i++) {
         fw_lease_status (ls[i], &st);
         named += i != leader && st.role == FW_LEASE_STANDBY &&
                  strcmp (st.holder, owners[leader]) == 0;
      }
      usleep (2000);
   }
   assert_true (leader >= 0);
   assert_int_equal (named, 3);
   assert_int_equal (epoch_of (ls[leader]), 1);
   for (i = 0; i < 4; i++) {
      fw_lease_destroy (ls[i]);
   }
}

static void
a_malformed_lease_is_taken_and_never_crashes (void **state)
{
   (void) state;
   fw_lease_t *a;
   insert_lease ("{\"_id\": \"bad\", \"owner\": 5, \"epoch\": \"x\", \"expiresAt\": \"never\"}");
   a = lease ("bad", "a");
   time_to_lead (a, 10.0);
   assert_int_equal (epoch_of (a), 1);
   fw_lease_destroy (a);
}

static void
a_lease_held_far_into_the_future_is_never_taken (void **state)
{
   (void) state;
   fw_lease_t *a;
   fw_lease_status_t st;
   insert_lease (
      "{\"_id\": \"held\", \"owner\": \"other\", \"epoch\": {\"$numberLong\": \"3\"}, "
      "\"expiresAt\": {\"$date\": \"2999-01-01T00:00:00Z\"}}");
   a = lease ("held", "a");
   usleep (LEASE_MS * 1000 * 3 / 2);
   assert_false (fw_lease_is_leader (a, NULL));
   fw_lease_status (a, &st);
   assert_string_equal (st.holder, "other");
   assert_int_equal (st.epoch, 3);
   fw_lease_destroy (a);
}

static void
the_servers_clock_decides_not_a_skewed_host (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("skew", "a"), *b;
   fw_lease_status_t st;
   double t0;

   time_to_lead (a, 10.0);
   b = lease ("skew", "b");
   fw_lease_status (a, &st);
   /* The hook is in effect: this host's clock reads 3 s ahead of the server's. */
   assert_true (st.clock_offset_ms < -SKEW_MS + 500 && st.clock_offset_ms > -SKEW_MS - 500);
   for (t0 = now_s (); now_s () - t0 < 3.0 * LEASE_MS / 1000;) {
      assert_false (fw_lease_is_leader (b, NULL));
      usleep (10000);
   }
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

static void
a_deposed_leaders_checkpoint_is_fenced_off (void **state)
{
   (void) state;
   fw_error_t err;
   fw_checkpoint_t cp;
   bson_t *t1 = BCON_NEW ("_data", BCON_UTF8 ("01"));
   bson_t *t2 = BCON_NEW ("_data", BCON_UTF8 ("02"));
   bson_t *t3 = BCON_NEW ("_data", BCON_UTF8 ("03"));
   int64_t stored;
   bool fenced;

   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 1, &stored, &err));
   assert_int_equal (stored, 1);
   assert_true (fw_checkpoint_save_fenced (g_client, "ha", "fence", t1, t1, "v", 1, &fenced, &err));
   /* A new leader (epoch 2) fences; the old one's late write moves nothing. */
   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 2, &stored, &err));
   assert_int_equal (stored, 2);
   assert_false (
      fw_checkpoint_save_fenced (g_client, "ha", "fence", t3, t3, "v", 1, &fenced, &err));
   assert_true (fenced);
   assert_non_null (strstr (err.message, "NOT saved"));
   assert_true (fw_checkpoint_load (g_client, "ha", "fence", &cp, &err));
   assert_true (bson_equal (&cp.processed, t1));
   fw_checkpoint_cleanup (&cp);
   assert_true (fw_checkpoint_save_fenced (g_client, "ha", "fence", t2, t2, "v", 2, &fenced, &err));
   /* A fence lower than the stored one leaves it: the caller sees it is behind. */
   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 1, &stored, &err));
   assert_int_equal (stored, 2);
   bson_destroy (t1);
   bson_destroy (t2);
   bson_destroy (t3);
}

static void
epochs_continue_above_the_fence_when_the_lease_document_is_gone (void **state)
{
   (void) state;
   fw_error_t err;
   int64_t stored;
   fw_lease_t *a;
   assert_true (fw_checkpoint_fence (g_client, "ha", "gone", 7, &stored, &err));
   a = lease ("gone", "a");
   time_to_lead (a, 10.0);
   assert_int_equal (epoch_of (a), 8);
   fw_lease_destroy (a);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (lease_is_taken_at_once_and_kept_by_renewals),
      cmocka_unit_test (a_leader_answered_slowly_still_renews_every_third_of_the_lease),
      cmocka_unit_test (a_crashed_leader_is_replaced_within_lease_and_250_ms),
      cmocka_unit_test (a_released_lease_is_taken_over_at_once),
      cmocka_unit_test (a_gated_lease_waits_for_its_gate_and_a_yielded_one_can_be_taken_again),
      cmocka_unit_test (a_standby_sees_the_holder_then_how_long_the_lease_has_been_free),
      cmocka_unit_test (a_leader_whose_renewals_fail_stops_before_the_standby_starts),
      cmocka_unit_test (a_leader_whose_renewals_hang_stops_before_the_standby_starts),
      cmocka_unit_test (racing_takes_make_one_leader_and_standbys_that_name_it),
      cmocka_unit_test (a_malformed_lease_is_taken_and_never_crashes),
      cmocka_unit_test (a_lease_held_far_into_the_future_is_never_taken),
      cmocka_unit_test (the_servers_clock_decides_not_a_skewed_host),
      cmocka_unit_test (a_deposed_leaders_checkpoint_is_fenced_off),
      cmocka_unit_test (epochs_continue_above_the_fence_when_the_lease_document_is_gone),
   };
   return cmocka_run_group_tests_name ("lease", tests, setup, teardown);
}
