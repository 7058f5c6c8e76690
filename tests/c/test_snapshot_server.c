/*
 * snapshot.c's reads against the MongoDB stand-in (issue 37): the largest _id,
 * where the chunks stop, is read on the chunks' causally consistent session
 * after the low watermark. Read with the configured read preference and no
 * session, a secondary that lags gives a stale bound, and the documents
 * inserted in the lag before the change stream opened come neither as live
 * events nor in a chunk. The stand-in has no secondary to lag, so the test
 * reads the commands libmongoc sends (its command monitoring): the bound's
 * find carries the session of the watermark and readConcern.afterClusterTime
 * at or after the watermark's operationTime, which is what makes a secondary
 * wait until it has applied the watermark (MongoDB manual, "Causal
 * Consistency and Read and Write Concerns"; read concern afterClusterTime).
 * Issue 41: the reads of one run share their watermarks (a chunk's high one
 * is the next chunk's low one, on the same session), and the progress is
 * stored with the position in one write. Chunks read ahead on a thread of
 * their own drop their rows of the live events the stream was shown before
 * they joined the queue, and due rows those handled before them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/snapshot/snapshot-private.h" /* the run of the reads ahead */
#include "runtime/snapshot/snapshot.h"
#include "standin_process.h"

static standin_t g_standin;

#define MAX_SEEN 64

/* The commands one chunk's read sent, in order, with the replies' times. */
typedef struct {
   char name[32];
   bson_t *cmd;
   uint64_t op_time; /* the reply's operationTime */
} seen_t;

static seen_t g_seen[MAX_SEEN];
static int g_n_seen;

static uint64_t
timestamp_at (const bson_t *doc, const char *dotted)
{
   bson_iter_t it, sub;
   uint32_t t, i;

   if (!bson_iter_init (&it, doc) || !bson_iter_find_descendant (&it, dotted, &sub) ||
       !BSON_ITER_HOLDS_TIMESTAMP (&sub)) {
      return 0;
   }
   bson_iter_timestamp (&sub, &t, &i);
   return (uint64_t) t << 32 | i;
}

static void
started (const mongoc_apm_command_started_t *e)
{
   const char *name = mongoc_apm_command_started_get_command_name (e);

   if (g_n_seen < MAX_SEEN && (strcmp (name, "find") == 0 || strcmp (name, "update") == 0)) {
      seen_t *s = &g_seen[g_n_seen++];
      snprintf (s->name, sizeof s->name, "%s", name);
      s->cmd = bson_copy (mongoc_apm_command_started_get_command (e));
      s->op_time = 0;
   }
}

static void
succeeded (const mongoc_apm_command_succeeded_t *e)
{
   const char *name = mongoc_apm_command_succeeded_get_command_name (e);

   if (g_n_seen > 0 && strcmp (g_seen[g_n_seen - 1].name, name) == 0) {
      g_seen[g_n_seen - 1].op_time = timestamp_at (mongoc_apm_command_succeeded_get_reply (e),
                                                   "operationTime");
   }
}

static void
forget_seen (void)
{
   for (int i = 0; i < g_n_seen; i++) {
      bson_destroy (g_seen[i].cmd);
   }
   g_n_seen = 0;
}

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
   forget_seen ();
   return standin_group_stop (&g_standin);
}

/* Whether cmd has a sort on _id descending (the bound's find). */
static bool
is_bound_find (const bson_t *cmd)
{
   bson_iter_t it, sub;
   return bson_iter_init (&it, cmd) && bson_iter_find_descendant (&it, "sort._id", &sub) &&
          BSON_ITER_HOLDS_NUMBER (&sub) && bson_iter_as_int64 (&sub) == -1;
}

static bool
same_lsid (const bson_t *a, const bson_t *b)
{
   bson_iter_t ia, ib;
   const uint8_t *da, *db;
   uint32_t la, lb;

   if (!bson_iter_init_find (&ia, a, "lsid") || !bson_iter_init_find (&ib, b, "lsid") ||
       !BSON_ITER_HOLDS_DOCUMENT (&ia) || !BSON_ITER_HOLDS_DOCUMENT (&ib)) {
      return false;
   }
   bson_iter_document (&ia, &la, &da);
   bson_iter_document (&ib, &lb, &db);
   return la == lb && memcmp (da, db, la) == 0;
}

/* Inserts documents {_id: 0} to {_id: n - 1} into coll. */
static void
insert_ids (mongoc_collection_t *coll, int n)
{
   bson_error_t berr;

   for (int i = 0; i < n; i++) {
      bson_t *d = BCON_NEW ("_id", BCON_INT32 (i));
      assert_true (mongoc_collection_insert_one (coll, d, NULL, NULL, &berr));
      bson_destroy (d);
   }
}

static void
the_upper_bound_is_read_on_the_causal_session_after_the_low_watermark (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
   mongoc_collection_t *coll;
   fw_stream_config_t cfg;
   fw_snapshot_t *s;
   fw_error_t err;
   int low = -1, bound = -1;

   (void) state;
   assert_non_null (client);
   coll = mongoc_client_get_collection (client, "snapdb", "orders");
   insert_ids (coll, 5);
   mongoc_apm_set_command_started_cb (cbs, started);
   mongoc_apm_set_command_succeeded_cb (cbs, succeeded);
   assert_true (mongoc_client_set_apm_callbacks (client, cbs, NULL));

   memset (&cfg, 0, sizeof cfg);
   cfg.name = "s";
   cfg.database = "snapdb";
   cfg.collection = "orders";
   cfg.snapshot.chunk_size = 2;
   cfg.snapshot.read_mode = MONGOC_READ_SECONDARY_PREFERRED;
   assert_non_null (s = fw_snapshot_new (&cfg, NULL));
   memset (&err, 0, sizeof err);
   assert_true (fw_snapshot_read_chunk (s, client, &err));

   for (int i = 0; i < g_n_seen; i++) {
      if (low < 0 && strcmp (g_seen[i].name, "update") == 0) {
         low = i;
      } else if (bound < 0 && strcmp (g_seen[i].name, "find") == 0 &&
                 is_bound_find (g_seen[i].cmd)) {
         bound = i;
      }
   }
   assert_true (low >= 0);
   assert_true (bound >= 0);
   assert_true (low < bound); /* the watermark first */
   assert_true (g_seen[low].op_time > 0);
   assert_true (same_lsid (g_seen[low].cmd, g_seen[bound].cmd));
   assert_true (timestamp_at (g_seen[bound].cmd, "readConcern.afterClusterTime") >=
                g_seen[low].op_time);
   /* And the bound is the largest _id. */
   {
      bson_iter_t it;
      assert_true (fw_snapshot_progress (s)->has_until);
      assert_true (bson_iter_init_find (&it, &fw_snapshot_progress (s)->until, "_id"));
      assert_int_equal (bson_iter_as_int64 (&it), 4);
   }

   fw_snapshot_destroy (s);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
   mongoc_apm_callbacks_destroy (cbs);
}

/* The index of the chunk find (sorted by _id ascending) number n (0-based)
 * among the commands seen; -1 when there is none. */
static int
chunk_find (int n)
{
   for (int i = 0; i < g_n_seen; i++) {
      if (strcmp (g_seen[i].name, "find") == 0 && !is_bound_find (g_seen[i].cmd) && n-- == 0) {
         return i;
      }
   }
   return -1;
}

static fw_snapshot_t *
snapshot_of (const char *collection, int64_t chunk_size)
{
   fw_stream_config_t cfg;

   memset (&cfg, 0, sizeof cfg);
   cfg.name = "s";
   cfg.database = "snapdb";
   cfg.collection = (char *) collection;
   cfg.snapshot.chunk_size = chunk_size;
   cfg.snapshot.read_mode = MONGOC_READ_PRIMARY;
   return fw_snapshot_new (&cfg, NULL);
}

static void
a_run_of_reads_shares_its_watermarks (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
   mongoc_collection_t *coll;
   fw_snapshot_t *s;
   fw_error_t err;
   int f0 = -1, f1 = -1, f2 = -1, updates = 0;

   (void) state;
   assert_non_null (client);
   coll = mongoc_client_get_collection (client, "snapdb", "items");
   insert_ids (coll, 5);
   mongoc_apm_set_command_started_cb (cbs, started);
   mongoc_apm_set_command_succeeded_cb (cbs, succeeded);
   assert_true (mongoc_client_set_apm_callbacks (client, cbs, NULL));
   forget_seen ();
   assert_non_null (s = snapshot_of ("items", 2));
   memset (&err, 0, sizeof err);

   /* One run: chunks [0, 1] and [2, 3]. */
   assert_true (fw_snapshot_read_chunk (s, client, &err));
   assert_true (fw_snapshot_read_chunk (s, client, &err));
   assert_true ((f0 = chunk_find (0)) > 0 && (f1 = chunk_find (1)) > f0);
   for (int i = 0; i < g_n_seen; i++) {
      updates += strcmp (g_seen[i].name, "update") == 0;
   }
   assert_int_equal (updates, 3); /* low, high, high: no low of its own for the second */
   /* The second chunk's find comes right after the first one's high mark,
    * on its session, causally after it: that mark is its low watermark. */
   assert_string_equal (g_seen[f0 + 1].name, "update");
   assert_int_equal (f1, f0 + 2);
   assert_true (g_seen[f0 + 1].op_time > 0);
   assert_true (same_lsid (g_seen[f0 + 1].cmd, g_seen[f1].cmd));
   assert_true (timestamp_at (g_seen[f1].cmd, "readConcern.afterClusterTime") >=
                g_seen[f0 + 1].op_time);
   assert_string_equal (g_seen[f1 + 1].name, "update"); /* its own high mark */

   /* A new run writes its own low watermark, on a new session. */
   fw_snapshot_end_reads (s);
   forget_seen ();
   assert_true (fw_snapshot_read_chunk (s, client, &err));
   assert_true ((f2 = chunk_find (0)) == 1);
   assert_string_equal (g_seen[0].name, "update");
   assert_string_equal (g_seen[2].name, "update");
   assert_true (same_lsid (g_seen[0].cmd, g_seen[f2].cmd));
   assert_true (timestamp_at (g_seen[f2].cmd, "readConcern.afterClusterTime") >= g_seen[0].op_time);

   /* The read past the last row finds none and writes no high watermark
    * (and, in the run, no low one); no type is ordered after the bound's,
    * so the next read sends nothing and ends the snapshot's reads. */
   forget_seen ();
   assert_true (fw_snapshot_read_chunk (s, client, &err));
   assert_int_equal (g_n_seen, 1);
   assert_string_equal (g_seen[0].name, "find");
   assert_true (fw_snapshot_read_chunk (s, client, &err));
   assert_int_equal (g_n_seen, 1);
   assert_false (fw_snapshot_wants_chunk (s));

   fw_snapshot_destroy (s);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
   mongoc_apm_callbacks_destroy (cbs);
}

static int64_t
stored_documents (mongoc_client_t *client)
{
   fw_snapshot_progress_t p;
   fw_error_t err;
   int64_t n;

   fw_snapshot_progress_init (&p);
   assert_true (fw_checkpoint_snapshot_load (client, "snapdb", "c", &p, &err));
   n = p.present ? p.documents : -1;
   fw_snapshot_progress_cleanup (&p);
   return n;
}

static void
the_progress_is_stored_with_the_position_or_not_at_all (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   bson_t *token = BCON_NEW ("_data", BCON_UTF8 ("8200000001000000012B"));
   bson_t also = BSON_INITIALIZER;
   fw_snapshot_progress_t p;
   fw_checkpoint_t cp;
   fw_error_t err;

   (void) state;
   assert_non_null (client);
   fw_snapshot_progress_init (&p);
   p.present = true;
   p.documents = 2000;
   p.has_after = true;
   BSON_APPEND_INT32 (&p.after, "_id", 1999);
   assert_true (fw_checkpoint_snapshot_fields (&p, &also));
   assert_true (
      fw_checkpoint_save_with (client, "snapdb", "c", token, token, "v1", &also, 0, &err));
   memset (&cp, 0, sizeof cp);
   assert_true (fw_checkpoint_load (client, "snapdb", "c", &cp, &err));
   assert_true (cp.has_processed && bson_equal (&cp.processed, token));
   assert_true (cp.has_seen && bson_equal (&cp.seen, token));
   fw_checkpoint_cleanup (&cp);
   assert_int_equal (stored_documents (client), 2000);

   /* Fenced (the stored checkpoint has no epoch 7): neither is written. */
   bson_reinit (&also);
   p.documents = 3000;
   assert_true (fw_checkpoint_snapshot_fields (&p, &also));
   assert_false (
      fw_checkpoint_save_with (client, "snapdb", "c", token, token, "v1", &also, 7, &err));
   assert_int_equal (stored_documents (client), 2000);

   bson_destroy (&also);
   bson_destroy (token);
   fw_snapshot_progress_cleanup (&p);
   mongoc_client_destroy (client);
}

/* A live event of key (an int32 _id) at clusterTime (t, i), parsed into ev
 * from doc (the caller destroys it). */
static void
live_event (bson_t *doc, fw_event_t *ev, int32_t key, uint32_t t, uint32_t i)
{
   fw_error_t err;
   bson_t id;

   bson_init (doc);
   BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", "82live");
   bson_append_document_end (doc, &id);
   BSON_APPEND_UTF8 (doc, "operationType", "update");
   BSON_APPEND_TIMESTAMP (doc, "clusterTime", t, i);
   {
      bson_t ns, dk;
      BSON_APPEND_DOCUMENT_BEGIN (doc, "ns", &ns);
      BSON_APPEND_UTF8 (&ns, "db", "snapdb");
      BSON_APPEND_UTF8 (&ns, "coll", "ahead");
      bson_append_document_end (doc, &ns);
      BSON_APPEND_DOCUMENT_BEGIN (doc, "documentKey", &dk);
      BSON_APPEND_INT32 (&dk, "_id", key);
      bson_append_document_end (doc, &dk);
   }
   assert_true (fw_event_parse (doc, ev, &err));
}

static void
chunks_read_ahead_drop_their_rows_of_live_events_handled_before_them (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_client_pool_t *pool;
   mongoc_uri_t *uri = mongoc_uri_new (g_standin.uri);
   mongoc_collection_t *coll;
   bson_t *token = BCON_NEW ("_data", BCON_UTF8 ("82FFFFFFF0000000012B"));
   bson_t doc;
   fw_event_t ev;
   fw_snapshot_t *s;
   fw_error_t err;
   bool seen[6] = {false};
   int64_t deadline;

   (void) state;
   assert_non_null (client);
   assert_non_null (uri);
   assert_non_null (pool = mongoc_client_pool_new (uri));
   coll = mongoc_client_get_collection (client, "snapdb", "ahead");
   insert_ids (coll, 6);
   assert_non_null (s = snapshot_of ("ahead", 2));
   memset (&err, 0, sizeof err);
   assert_true (fw_snapshot_read_chunk (s, client, &err)); /* [0, 1], and the bound */
   assert_true (fw_snapshot_may_read_ahead (s));
   assert_true (fw_snapshot_ahead_start (s, pool, 0, 100, &err));
   assert_true (fw_snapshot_reading_ahead (s));
   assert_true (fw_snapshot_read_chunk (s, client, &err)); /* a no-op now */
   assert_int_equal (s->n_chunks, 1);
   /* Once the thread's first run began, a live event of key 3 after every
    * watermark (handled now, before the chunk [2, 3] joins the queue): the
    * row of 3 would come after a newer change of its key, so it is dropped
    * when the chunk joins. */
   deadline = fw_mono_ms () + 10000;
   while (fw_snapshot_ahead_run (s->ahead) == 0 && fw_mono_ms () < deadline) {
      struct timespec ts = {0, 1000000};
      nanosleep (&ts, NULL);
   }
   assert_true (fw_snapshot_ahead_run (s->ahead) >= 1);
   live_event (&doc, &ev, 3, 0xFFFFFFF0u, 1);
   (void) fw_snapshot_live (s, &ev);
   bson_destroy (&doc);
   while (fw_snapshot_reading_ahead (s) && fw_mono_ms () < deadline) {
      struct timespec ts = {0, 1000000};
      assert_true (fw_snapshot_ahead_collect (s, &err));
      nanosleep (&ts, NULL);
   }
   assert_false (fw_snapshot_reading_ahead (s)); /* every row read: the thread ended */
   assert_true (fw_snapshot_token_past (s, token));
   /* The chunks are due; a live event of key 4 handled before their rows
    * (the stream hands them out between live events) drops its row too. */
   live_event (&doc, &ev, 4, 0xFFFFFFF0u, 2);
   assert_true (fw_snapshot_live (s, &ev));
   bson_destroy (&doc);
   while (fw_snapshot_due (s)) {
      bson_iter_t it;
      if (!fw_snapshot_next_event (s, &ev)) {
         continue;
      }
      assert_true (bson_iter_init (&it, ev.doc) &&
                   bson_iter_find_descendant (&it, "documentKey._id", &it));
      seen[bson_iter_int32 (&it)] = true;
   }
   assert_true (fw_snapshot_finished (s));
   for (int i = 0; i < 6; i++) {
      assert_int_equal (seen[i], i != 3 && i != 4);
   }

   fw_snapshot_destroy (s);
   bson_destroy (token);
   mongoc_collection_destroy (coll);
   mongoc_client_pool_destroy (pool);
   mongoc_uri_destroy (uri);
   mongoc_client_destroy (client);
}

/* The event libbson's appends make of a chunk's row (the shape of an
 * insert's change event), with the clusterTime and wallTime given. */
static bson_t *
expected_event (uint64_t high, int index, uint64_t wall, const bson_t *row)
{
   bson_t *e = bson_new ();
   bson_t id, ns, key;
   bson_iter_t it;
   char data[64];

   snprintf (data, sizeof data, "fwsnapshot-%016llx-%d", (unsigned long long) high, index);
   BSON_APPEND_DOCUMENT_BEGIN (e, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", data);
   bson_append_document_end (e, &id);
   BSON_APPEND_UTF8 (e, "operationType", "snapshot");
   BSON_APPEND_TIMESTAMP (e, "clusterTime", (uint32_t) (high >> 32), (uint32_t) high);
   BSON_APPEND_DATE_TIME (e, "wallTime", (int64_t) wall);
   BSON_APPEND_DOCUMENT_BEGIN (e, "ns", &ns);
   BSON_APPEND_UTF8 (&ns, "db", "snapdb");
   BSON_APPEND_UTF8 (&ns, "coll", "shape");
   bson_append_document_end (e, &ns);
   BSON_APPEND_DOCUMENT_BEGIN (e, "documentKey", &key);
   assert_true (bson_iter_init_find (&it, row, "_id") && bson_append_iter (&key, "_id", 3, &it));
   bson_append_document_end (e, &key);
   BSON_APPEND_DOCUMENT (e, "fullDocument", row);
   return e;
}

/* Each row is handed out as an insert's change event of its document,
 * byte for byte what libbson's appends make: small and large rows (the
 * chunk's buffer grows past its first 64 KiB), _ids of two types. */
static void
rows_are_handed_out_as_insert_shaped_events (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_collection_t *coll;
   bson_t *rows[5];
   char *big = malloc (100000);
   fw_snapshot_t *s;
   fw_event_t ev;
   fw_error_t err;
   bson_error_t berr;
   int n = 0;

   (void) state;
   assert_non_null (client);
   assert_non_null (big);
   memset (big, 'x', 99999);
   big[99999] = '\0';
   coll = mongoc_client_get_collection (client, "snapdb", "shape");
   rows[0] = BCON_NEW ("_id", BCON_INT32 (1), "v", BCON_UTF8 ("small"));
   rows[1] = BCON_NEW ("_id", BCON_INT32 (2), "blob", BCON_UTF8 (big), "n", BCON_INT64 (7));
   rows[2] = BCON_NEW ("_id", BCON_INT32 (3), "blob", BCON_UTF8 (big));
   rows[3] = BCON_NEW ("_id", BCON_UTF8 ("a"), "nested", "{", "k", BCON_DOUBLE (1.5), "}");
   rows[4] = BCON_NEW ("_id", BCON_UTF8 ("b"));
   for (int i = 0; i < 5; i++) {
      assert_true (mongoc_collection_insert_one (coll, rows[i], NULL, NULL, &berr));
   }
   assert_non_null (s = snapshot_of ("shape", 3));
   memset (&err, 0, sizeof err);
   while (fw_snapshot_wants_chunk (s)) {
      assert_true (fw_snapshot_read_chunk (s, client, &err));
   }
   fw_snapshot_end_reads (s);
   assert_int_equal (s->n_chunks, 2); /* the int32 _ids, then the strings */
   s->passed = s->chunk[1].high;      /* the stream passed both high watermarks */
   assert_true (fw_snapshot_due (s));
   while (s->n_chunks > 0) {
      uint64_t high = s->chunk[0].high;
      int index = s->chunk[0].next;
      bson_iter_t it;
      bson_t *want;
      if (!fw_snapshot_next_event (s, &ev)) {
         continue; /* a chunk closed */
      }
      assert_true (n < 5);
      assert_true (bson_iter_init_find (&it, ev.doc, "wallTime") &&
                   BSON_ITER_HOLDS_DATE_TIME (&it));
      want = expected_event (high, index, (uint64_t) bson_iter_date_time (&it), rows[n]);
      assert_int_equal (ev.doc->len, want->len);
      assert_memory_equal (bson_get_data (ev.doc), bson_get_data (want), want->len);
      bson_destroy (want);
      n++;
   }
   assert_int_equal (n, 5);
   assert_true (fw_snapshot_finished (s));

   for (int i = 0; i < 5; i++) {
      bson_destroy (rows[i]);
   }
   free (big);
   fw_snapshot_destroy (s);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

/* More live events than the reads ahead can keep (a busy stream while a
 * read is held up): the reads ahead stop, and the chunks they had not
 * handed over are read on the caller's thread; no row is lost. */
static void
overflowing_the_kept_live_events_reads_on_the_callers_thread (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_uri_t *uri = mongoc_uri_new (g_standin.uri);
   mongoc_client_pool_t *pool = mongoc_client_pool_new (uri);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "snapdb", "busy");
   bson_t *token = BCON_NEW ("_data", BCON_UTF8 ("82FFFFFFF0000000012B"));
   bson_t doc;
   fw_event_t ev;
   fw_snapshot_t *s;
   fw_error_t err;
   int handed = 0;
   int64_t deadline = fw_mono_ms () + 10000;

   (void) state;
   assert_non_null (pool);
   insert_ids (coll, 6);
   assert_non_null (s = snapshot_of ("busy", 2));
   memset (&err, 0, sizeof err);
   assert_true (fw_snapshot_ahead_start (s, pool, 0, 100, &err));
   while (fw_snapshot_ahead_run (s->ahead) == 0 && fw_mono_ms () < deadline) {
      struct timespec ts = {0, 1000000};
      nanosleep (&ts, NULL);
   }
   assert_true (fw_snapshot_ahead_run (s->ahead) >= 1);
   for (int i = 0; i <= FW_SNAPSHOT_MAX_LOG; i++) {
      live_event (&doc, &ev, 1000 + i, 0xFFFFFFF0u, 1); /* keys no row has */
      (void) fw_snapshot_live (s, &ev);
      bson_destroy (&doc);
   }
   assert_true (fw_snapshot_ahead_collect (s, &err));
   assert_false (fw_snapshot_reading_ahead (s));
   assert_false (fw_snapshot_may_read_ahead (s));
   while (!fw_snapshot_finished (s) && fw_mono_ms () < deadline) {
      assert_true (fw_snapshot_read_chunk (s, client, &err));
      fw_snapshot_end_reads (s);
      (void) fw_snapshot_token_past (s, token);
      while (fw_snapshot_due (s)) {
         handed += fw_snapshot_next_event (s, &ev);
      }
   }
   assert_true (fw_snapshot_finished (s));
   assert_int_equal (handed, 6);

   fw_snapshot_destroy (s);
   bson_destroy (token);
   mongoc_collection_destroy (coll);
   mongoc_client_pool_destroy (pool);
   mongoc_uri_destroy (uri);
   mongoc_client_destroy (client);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (the_upper_bound_is_read_on_the_causal_session_after_the_low_watermark),
      cmocka_unit_test (a_run_of_reads_shares_its_watermarks),
      cmocka_unit_test (the_progress_is_stored_with_the_position_or_not_at_all),
      cmocka_unit_test (chunks_read_ahead_drop_their_rows_of_live_events_handled_before_them),
      cmocka_unit_test (overflowing_the_kept_live_events_reads_on_the_callers_thread),
      cmocka_unit_test (rows_are_handed_out_as_insert_shaped_events),
   };
   return cmocka_run_group_tests_name ("snapshot_server", tests, group_setup, group_teardown);
}
