/*
 * fw_checkpoint_save_ordered against the MongoDB stand-in (issue 41): the
 * checkpoint writer's several writes in flight may reach the server out of
 * order, and a write of an earlier hand-over never replaces a later one
 * (its upsert then meets the document and fails with a duplicate key, which
 * mongod does not retry for a query that is not only equalities), while a
 * document without the stamp (a synchronous save, a seeded checkpoint) or
 * with another writer's is overwritten; a fenced ordered write tells a
 * newer leader's fence from a later write of its own. Across runs without
 * ha, the writer generation keeps an older run's late write (a position, a
 * snapshot's progress, the breaker's document, a transaction's position)
 * from landing over a newer run's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/circuit_doc.h"
#include "runtime/snapshot/snapshot.h"
#include "standin_process.h"

#define DB "ordered"

static standin_t g_standin;
static mongoc_uri_t *g_uri;
static mongoc_client_t *g_client;

static int
setup (void **state)
{
   (void) state;
   mongoc_init ();
   if (!standin_start (&g_standin)) {
      return -1;
   }
   g_uri = mongoc_uri_new (g_standin.uri);
   g_client = g_uri ? mongoc_client_new_from_uri (g_uri) : NULL;
   if (!g_client) {
      return -1;
   }
   mongoc_client_set_error_api (g_client, MONGOC_ERROR_API_VERSION_2);
   return 0;
}

static int
teardown (void **state)
{
   int status;
   (void) state;
   mongoc_client_destroy (g_client);
   mongoc_uri_destroy (g_uri);
   status = standin_stop (&g_standin);
   mongoc_cleanup ();
   return (WIFEXITED (status) && WEXITSTATUS (status) == 0) ? 0 : -1;
}

/* A resume token {_data: "<n>"}: the caller destroys it. */
static bson_t *
token (int n)
{
   char data[16];
   snprintf (data, sizeof data, "%08d", n);
   return BCON_NEW ("_data", BCON_UTF8 (data));
}

/* The stored lastProcessedToken's number, -1 when none. */
static int
stored (const char *stream)
{
   fw_checkpoint_t cp;
   fw_error_t err;
   bson_iter_t it;
   int n = -1;

   assert_true (fw_checkpoint_load (g_client, DB, stream, &cp, &err));
   if (cp.has_processed && bson_iter_init_find (&it, &cp.processed, "_data") &&
       BSON_ITER_HOLDS_UTF8 (&it)) {
      n = atoi (bson_iter_utf8 (&it, NULL));
   }
   fw_checkpoint_cleanup (&cp);
   return n;
}

static fw_checkpoint_saved_t
save (const char *stream, int n, int64_t epoch, const bson_oid_t *writer, int64_t seq,
      fw_error_t *err)
{
   bson_t *t = token (n);
   fw_checkpoint_saved_t saved = fw_checkpoint_save_ordered (g_client, DB, stream, t, t, "v", epoch,
                                                             0, writer, seq, err);
   bson_destroy (t);
   return saved;
}

/* Without a document (an upsert) and with one: a write of an earlier seq
 * that arrives after a later one changes nothing; the stored stamp is the
 * writer's and its seq. */
static void
an_earlier_seq_never_replaces_a_later_one (void **state)
{
   bson_oid_t w;
   fw_error_t err;
   mongoc_collection_t *coll;
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 ("order"));
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_iter_t it;
   (void) state;

   bson_oid_init (&w, NULL);
   assert_int_equal (save ("order", 2, 0, &w, 2, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save ("order", 1, 0, &w, 1, &err), FW_CHECKPOINT_SUPERSEDED);
   assert_int_equal (stored ("order"), 2);
   assert_int_equal (save ("order", 2, 0, &w, 2, &err), FW_CHECKPOINT_SUPERSEDED); /* a retry */
   assert_int_equal (save ("order", 3, 0, &w, 3, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("order"), 3);

   coll = mongoc_client_get_collection (g_client, DB, FW_CHECKPOINT_COLLECTION);
   cursor = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   assert_true (mongoc_cursor_next (cursor, &doc));
   assert_true (bson_iter_init_find (&it, doc, "writerId") && BSON_ITER_HOLDS_OID (&it));
   assert_true (bson_oid_equal (bson_iter_oid (&it), &w));
   assert_true (bson_iter_init_find (&it, doc, "writerSeq") && BSON_ITER_HOLDS_INT64 (&it));
   assert_int_equal (bson_iter_int64 (&it), 3);
   mongoc_cursor_destroy (cursor);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
}

/* A checkpoint without the stamp (seeded, or a synchronous save after the
 * writer's writes) is overwritten, and the writer's later seqs go on; a new
 * writer (a restart) overwrites the old one's stamp. */
static void
unstamped_and_other_writers_checkpoints_are_overwritten (void **state)
{
   bson_oid_t w1, w2;
   fw_error_t err;
   bson_t *t = token (10);
   (void) state;

   bson_oid_init (&w1, NULL);
   bson_oid_init (&w2, NULL);
   assert_true (fw_checkpoint_save (g_client, DB, "other", t, t, "v", &err));
   assert_int_equal (save ("other", 11, 0, &w1, 5, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("other"), 11);
   bson_destroy (t);
   t = token (12);
   assert_true (fw_checkpoint_save (g_client, DB, "other", t, t, "v", &err)); /* the final save */
   assert_int_equal (stored ("other"), 12);
   assert_int_equal (save ("other", 13, 0, &w1, 6, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save ("other", 14, 0, &w2, 1, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("other"), 14);
   bson_destroy (t);
}

/* The gap of the final save (issue 41): a write of the writer that timed out
 * on the client's side may reach the server after the stream's synchronous
 * save at shutdown; that save carries the writer's stamp past every hand-over
 * (fw_checkpoint_writer_stamp), so the late write changes nothing, with its
 * extra fields and with a fence too. */
static void
a_late_write_never_replaces_the_final_save (void **state)
{
   bson_oid_t w;
   fw_error_t err;
   bson_t *t = token (9);
   bson_t *also = BCON_NEW ("extra", BCON_INT32 (1));
   int64_t epoch;
   (void) state;

   bson_oid_init (&w, NULL);
   assert_int_equal (save ("final", 5, 0, &w, 5, &err), FW_CHECKPOINT_SAVED);
   /* seq 6 timed out on the client's side; the final save takes seq 7 */
   assert_int_equal (
      fw_checkpoint_save_ordered_with (g_client, DB, "final", t, t, "v", also, 0, 0, &w, 7, &err),
      FW_CHECKPOINT_SAVED);
   assert_int_equal (save ("final", 6, 0, &w, 6, &err), FW_CHECKPOINT_SUPERSEDED); /* lands late */
   assert_int_equal (stored ("final"), 9);

   bson_destroy (t);
   t = token (12);
   assert_true (fw_checkpoint_fence (g_client, DB, "final", 1, &epoch, &err));
   assert_int_equal (save ("final", 10, 1, &w, 8, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (
      fw_checkpoint_save_ordered_with (g_client, DB, "final", t, t, "v", also, 1, 0, &w, 10, &err),
      FW_CHECKPOINT_SAVED);
   assert_int_equal (save ("final", 11, 1, &w, 9, &err), FW_CHECKPOINT_SUPERSEDED);
   assert_int_equal (stored ("final"), 12);
   bson_destroy (also);
   bson_destroy (t);
}

/* Fenced: a later write of the same writer that came first makes the
 * earlier one superseded (not an error); a newer leader's fence makes it
 * refused, with the reason. */
static void
a_fenced_write_tells_superseded_from_fenced (void **state)
{
   bson_oid_t w;
   fw_error_t err;
   int64_t epoch;
   (void) state;

   bson_oid_init (&w, NULL);
   assert_true (fw_checkpoint_fence (g_client, DB, "fenced", 1, &epoch, &err));
   assert_int_equal (save ("fenced", 2, 1, &w, 2, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save ("fenced", 1, 1, &w, 1, &err), FW_CHECKPOINT_SUPERSEDED);
   assert_int_equal (stored ("fenced"), 2);
   assert_true (fw_checkpoint_fence (g_client, DB, "fenced", 2, &epoch, &err));
   assert_int_equal (save ("fenced", 3, 1, &w, 3, &err), FW_CHECKPOINT_NOT_SAVED);
   assert_non_null (strstr (err.message, "taken over by a newer leader"));
   assert_int_equal (stored ("fenced"), 2);
}

/* Whether message names a refusal by run newer, of run gen. */
static bool
refused_by (const char *message, int64_t newer, int64_t gen)
{
   char want[160];
   snprintf (want, sizeof want,
             "a newer run of the stream (writer generation %lld, this run's %lld)",
             (long long) newer, (long long) gen);
   return strstr (message, want) != NULL;
}

/* A save of run gen (writer w, NULL: a mode = "sync" save) of token n. */
static fw_checkpoint_saved_t
save_run (const char *stream, int n, int64_t gen, const bson_oid_t *w, int64_t seq, fw_error_t *err)
{
   bson_t *t = token (n);
   fw_checkpoint_saved_t saved = fw_checkpoint_save_ordered_with (g_client, DB, stream, t, t, "v",
                                                                  NULL, 0, gen, w, seq, err);
   bson_destroy (t);
   return saved;
}

/* Across runs (a process killed with kill -9, or hung and replaced): a write
 * of an older run that the server applies after a newer run's first write
 * changes nothing, whatever its seq (async) or without one (sync). The first
 * start (no document) claims the current time in milliseconds, each later
 * start one more; a document of an older version (no writerGen) gives the
 * time too. */
static void
an_older_runs_late_write_never_replaces_a_newer_runs (void **state)
{
   bson_oid_t a, b;
   fw_error_t err;
   int64_t ga, gb, gc;
   bson_t *t = token (1);
   (void) state;

   int64_t before = fw_now_ms ();

   bson_oid_init (&a, NULL);
   bson_oid_init (&b, NULL);
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "runs", &ga, &err));
   assert_in_range (ga, before, fw_now_ms ());
   assert_int_equal (save_run ("runs", 5, ga, &a, 5, &err), FW_CHECKPOINT_SAVED);
   /* run a is killed with its seq 6 (and a sync save) still in the server's queue */
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "runs", &gb, &err));
   assert_int_equal (gb, ga + 1);
   assert_int_equal (save_run ("runs", 7, gb, &b, 1, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save_run ("runs", 6, ga, &a, 6, &err), FW_CHECKPOINT_REFUSED);
   assert_true (refused_by (err.message, gb, ga));
   assert_int_equal (save_run ("runs", 6, ga, NULL, 0, &err), FW_CHECKPOINT_REFUSED);
   assert_int_equal (stored ("runs"), 7);
   /* a mode = "sync" run: the same, and it replaces the older run's stamp */
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "runs", &gc, &err));
   assert_int_equal (gc, ga + 2);
   assert_int_equal (save_run ("runs", 8, gc, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save_run ("runs", 7, gb, &b, 2, &err), FW_CHECKPOINT_REFUSED);
   assert_int_equal (stored ("runs"), 8);

   /* a checkpoint written before writerGen existed */
   assert_true (fw_checkpoint_save (g_client, DB, "upgraded", t, t, "v", &err));
   before = fw_now_ms ();
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "upgraded", &ga, &err));
   assert_in_range (ga, before, fw_now_ms ());
   assert_int_equal (stored ("upgraded"), 1);
   assert_int_equal (save_run ("upgraded", 2, ga, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("upgraded"), 2);
   bson_destroy (t);
}

/* An operator's reset by hand (tokens set and writerGen raised, as
 * docs/operations.md says) wins over the running run's writes and an older
 * run's late ones; the next start claims past it. */
static void
a_reset_by_hand_wins (void **state)
{
   bson_oid_t a;
   fw_error_t err;
   int64_t ga, gb;
   mongoc_collection_t *coll;
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 ("reset"));
   bson_t *update = BCON_NEW ("$set", "{", "lastProcessedToken", "{", "_data",
                              BCON_UTF8 ("00000003"), "}", "}", "$inc", "{", "writerGen",
                              BCON_INT64 (1), "}");
   bson_error_t berr;
   (void) state;

   bson_oid_init (&a, NULL);
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "reset", &ga, &err));
   assert_int_equal (save_run ("reset", 10, ga, &a, 1, &err), FW_CHECKPOINT_SAVED);
   coll = mongoc_client_get_collection (g_client, DB, FW_CHECKPOINT_COLLECTION);
   assert_true (mongoc_collection_update_one (coll, filter, update, NULL, NULL, &berr));
   assert_int_equal (save_run ("reset", 11, ga, &a, 2, &err), FW_CHECKPOINT_REFUSED);
   assert_int_equal (stored ("reset"), 3);
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "reset", &gb, &err));
   assert_int_equal (gb, ga + 2);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   bson_destroy (update);
}

/* A snapshot's progress of run gen with documents n. */
static bool
save_progress_of (const char *stream, int64_t gen, int64_t n, fw_error_t *err)
{
   fw_snapshot_progress_t p;
   bool ok;

   fw_snapshot_progress_init (&p);
   p.documents = n;
   ok = fw_checkpoint_snapshot_save (g_client, DB, stream, &p, 0, gen, err);
   fw_snapshot_progress_cleanup (&p);
   return ok;
}

static int64_t
stored_documents (const char *stream)
{
   fw_snapshot_progress_t p;
   fw_error_t err;
   int64_t n;

   fw_snapshot_progress_init (&p);
   assert_true (fw_checkpoint_snapshot_load (g_client, DB, stream, &p, &err));
   assert_true (p.present);
   n = p.documents;
   fw_snapshot_progress_cleanup (&p);
   return n;
}

/* The snapshot's progress carries the run's generation as the position
 * does: an older run's late progress write changes nothing once a newer
 * run has claimed (with a document, and when the claim made it). */
static void
an_older_runs_late_snapshot_progress_changes_nothing (void **state)
{
   fw_error_t err;
   int64_t ga, gb;
   (void) state;

   assert_true (fw_checkpoint_claim_generation (g_client, DB, "snap", &ga, &err));
   assert_true (save_progress_of ("snap", ga, 100, &err));
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "snap", &gb, &err));
   assert_true (save_progress_of ("snap", gb, 50, &err)); /* resumed from an earlier chunk */
   assert_false (save_progress_of ("snap", ga, 200, &err));
   assert_non_null (strstr (err.message, "the snapshot's progress of stream \"snap\" NOT saved: "));
   assert_true (refused_by (err.message, gb, ga));
   assert_int_equal (stored_documents ("snap"), 50);
   assert_true (save_progress_of ("snap", gb, 60, &err));
   assert_int_equal (stored_documents ("snap"), 60);

   /* the newer run claimed, the older run's first progress lands after */
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "snap2", &ga, &err));
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "snap2", &gb, &err));
   assert_true (save_progress_of ("snap2", gb, 5, &err));
   assert_false (save_progress_of ("snap2", ga, 7, &err));
   assert_int_equal (stored_documents ("snap2"), 5);
}

/* An open breaker's view with probes n. */
static fw_circuit_view_t
breaker (int probes)
{
   fw_circuit_view_t v;
   memset (&v, 0, sizeof v);
   v.state = FW_CIRCUIT_OPEN;
   snprintf (v.error_type, sizeof v.error_type, "Http.Connect");
   v.since_ms = 1000;
   v.open_for_ms = 500;
   v.next_probe_ms = 2000;
   v.probes = probes;
   return v;
}

/* The breaker's document carries the run's generation: an older run's late
 * save neither replaces a newer run's nor its delete removes it. */
static void
an_older_runs_late_breaker_write_changes_nothing (void **state)
{
   fw_error_t err;
   fw_circuit_view_t v = breaker (3), got;
   bool fenced, found;
   char bad[120];
   (void) state;

   assert_true (fw_circuit_doc_save (g_client, DB, "cb", &v, 0, 1, &fenced, &err));
   v = breaker (7);
   assert_true (fw_circuit_doc_save (g_client, DB, "cb", &v, 0, 2, &fenced, &err));
   assert_false (fenced);
   v = breaker (4);
   assert_false (fw_circuit_doc_save (g_client, DB, "cb", &v, 0, 1, &fenced, &err));
   assert_true (fenced);
   assert_non_null (strstr (err.message,
                            "the circuit breaker of stream \"cb\" NOT saved: a "
                            "newer run of the stream (writer generation 2, this "
                            "run's 1)"));
   assert_true (fw_circuit_doc_delete (g_client, DB, "cb", 0, 1, &err)); /* matches nothing */
   assert_true (fw_circuit_doc_load (g_client, DB, "cb", &got, &found, bad, sizeof bad, &err));
   assert_true (found);
   assert_int_equal (got.probes, 7);
   assert_true (fw_circuit_doc_delete (g_client, DB, "cb", 0, 2, &err));
   assert_true (fw_circuit_doc_load (g_client, DB, "cb", &got, &found, bad, sizeof bad, &err));
   assert_false (found);
}

/* exactly_once's position written in a transaction: with an older run's
 * generation (a hung run that resumes after a newer one started) the write
 * is refused (fenced, the error naming both generations) and nothing of the
 * transaction commits; the newer run's commits. */
static void
an_older_runs_transaction_commits_nothing (void **state)
{
   fw_error_t err;
   int64_t ga, gb;
   bson_t *t = token (20), reply;
   bson_error_t berr;
   mongoc_client_session_t *session;
   bool fenced;
   (void) state;

   assert_true (fw_checkpoint_claim_generation (g_client, DB, "txn", &ga, &err));
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "txn", &gb, &err));
   assert_int_equal (save_run ("txn", 10, gb, NULL, 0, &err), FW_CHECKPOINT_SAVED);

   session = mongoc_client_start_session (g_client, NULL, &berr);
   assert_non_null (session);
   assert_true (mongoc_client_session_start_transaction (session, NULL, &berr));
   assert_false (
      fw_checkpoint_save_in (g_client, session, DB, "txn", t, "v", 0, ga, &fenced, &reply, &err));
   assert_true (fenced);
   assert_true (refused_by (err.message, gb, ga));
   bson_destroy (&reply);
   (void) mongoc_client_session_abort_transaction (session, NULL);
   assert_int_equal (stored ("txn"), 10);

   assert_true (mongoc_client_session_start_transaction (session, NULL, &berr));
   assert_true (
      fw_checkpoint_save_in (g_client, session, DB, "txn", t, "v", 0, gb, &fenced, &reply, &err));
   assert_false (fenced);
   bson_destroy (&reply);
   assert_true (mongoc_client_session_commit_transaction (session, &reply, &berr));
   bson_destroy (&reply);
   assert_int_equal (stored ("txn"), 20);
   mongoc_client_session_destroy (session);
   bson_destroy (t);
}

/* A checkpoint deleted by hand (to start again from start_position) loses
 * its generation; the next run's claim is then the time, past the deleted
 * one, so a late write of a run from before the delete is still refused
 * once the next run has claimed. */
static void
a_deleted_checkpoint_still_refuses_an_earlier_runs_write (void **state)
{
   fw_error_t err;
   int64_t ga, gb;
   mongoc_collection_t *coll = mongoc_client_get_collection (g_client, DB,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 ("deleted"));
   bson_t *seed = BCON_NEW ("_id", BCON_UTF8 ("deleted"), "writerGen", BCON_INT64 (1));
   bson_error_t berr;
   (void) state;

   /* run a follows a run that claimed generation 1 (a version that counted
    * from 1) */
   assert_true (mongoc_collection_insert_one (coll, seed, NULL, NULL, &berr));
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "deleted", &ga, &err));
   assert_int_equal (ga, 2);
   assert_int_equal (save_run ("deleted", 5, ga, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   /* run a stops (a write of it still queued), the document is deleted */
   assert_true (mongoc_collection_delete_one (coll, filter, NULL, NULL, &berr));
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "deleted", &gb, &err));
   assert_true (gb > ga);
   assert_int_equal (save_run ("deleted", 1, gb, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (save_run ("deleted", 6, ga, NULL, 0, &err), FW_CHECKPOINT_REFUSED);
   assert_true (refused_by (err.message, gb, ga));
   assert_int_equal (stored ("deleted"), 1);
   bson_destroy (seed);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
}

/* exactly_once's sink: its checkpoint's generation is raised to the run's
 * ($max, upserted), and the raise says what is stored (a later run's: more
 * than asked). */
static void
raising_a_generation_says_what_is_stored (void **state)
{
   fw_error_t err;
   int64_t stored_gen;
   (void) state;

   assert_true (fw_checkpoint_raise_generation (g_client, DB, "elsewhere", 5, &stored_gen, &err));
   assert_int_equal (stored_gen, 5);
   assert_true (fw_checkpoint_raise_generation (g_client, DB, "elsewhere", 3, &stored_gen, &err));
   assert_int_equal (stored_gen, 5);
   assert_true (fw_checkpoint_raise_generation (g_client, DB, "elsewhere", 6, &stored_gen, &err));
   assert_int_equal (stored_gen, 6);
   assert_true (fw_checkpoint_stored_gen (g_client, DB, "elsewhere", &stored_gen, &err));
   assert_int_equal (stored_gen, 6);
}

/* The number in field of stream's checkpoint document, 0 when none. */
static int64_t
stored_number (const char *stream, const char *field)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (g_client, DB,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (stream));
   mongoc_cursor_t *cursor = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   const bson_t *doc;
   bson_iter_t it;
   int64_t n = 0;

   if (mongoc_cursor_next (cursor, &doc) && bson_iter_init_find (&it, doc, field) &&
       BSON_ITER_HOLDS_NUMBER (&it)) {
      n = bson_iter_as_int64 (&it);
   }
   mongoc_cursor_destroy (cursor);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   return n;
}

/* ha turned off, then on again: a start in either mode goes on from the
 * other mode's checkpoint (the stored epoch never refuses a run without ha,
 * nor the stored writer generation a leader), and fences the other mode's
 * earlier runs: a paused leader's late write after a run without ha has
 * started, and a paused run's without ha after a new leader's fence, change
 * nothing. The next leader's epoch is past the stored one (its floor). */
static void
turning_ha_off_and_on_fences_the_other_modes_earlier_runs (void **state)
{
   bson_oid_t w;
   fw_error_t err;
   int64_t epoch, next, ga, gb;
   bool fenced;
   bson_t *t = token (99);
   (void) state;

   bson_oid_init (&w, NULL);
   /* a leader (epoch 3) fences and saves; then it is paused */
   assert_true (fw_checkpoint_fence (g_client, DB, "modes", 3, &epoch, &err));
   assert_int_equal (epoch, 3);
   assert_int_equal (save ("modes", 1, 3, &w, 1, &err), FW_CHECKPOINT_SAVED);

   /* ha off: the next run claims, and saves over the leader's checkpoint */
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "modes", &ga, &err));
   assert_int_equal (save_run ("modes", 2, ga, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("modes"), 2);
   /* the paused leader resumes: its writes change nothing */
   assert_int_equal (save ("modes", 9, 3, &w, 2, &err), FW_CHECKPOINT_NOT_SAVED);
   assert_non_null (strstr (err.message, "or a run of the stream without ha"));
   assert_false (fw_checkpoint_save_fenced (g_client, DB, "modes", t, t, "v", 3, &fenced, &err));
   assert_true (fenced);
   assert_int_equal (stored ("modes"), 2);

   /* ha on again: the next leader's epoch is past the stored one */
   next = stored_number ("modes", "epoch") + 1;
   assert_true (next > 3);
   assert_true (fw_checkpoint_fence (g_client, DB, "modes", next, &epoch, &err));
   assert_int_equal (epoch, next);
   assert_int_equal (save ("modes", 3, next, &w, 3, &err), FW_CHECKPOINT_SAVED);
   /* the paused run without ha resumes: its writes change nothing */
   gb = stored_number ("modes", "writerGen");
   assert_true (gb > ga);
   assert_int_equal (save_run ("modes", 8, ga, NULL, 0, &err), FW_CHECKPOINT_REFUSED);
   assert_true (refused_by (err.message, gb, ga));
   assert_int_equal (stored ("modes"), 3);

   /* ha off again: the next run goes on from the leader's checkpoint */
   assert_true (fw_checkpoint_claim_generation (g_client, DB, "modes", &gb, &err));
   assert_int_equal (save_run ("modes", 4, gb, NULL, 0, &err), FW_CHECKPOINT_SAVED);
   assert_int_equal (stored ("modes"), 4);
   bson_destroy (t);
}

/* A leader fences a checkpoint no run without ha wrote: its writer
 * generation is the time (as a run's first claim), so a run without ha
 * from before a delete by hand is refused too. */
static void
a_leaders_fence_without_a_generation_takes_the_time (void **state)
{
   fw_error_t err;
   int64_t epoch, gen, stored_gen, before = fw_now_ms ();
   (void) state;

   assert_true (fw_checkpoint_fence (g_client, DB, "fresh", 1, &epoch, &err));
   assert_int_equal (epoch, 1);
   assert_in_range (stored_number ("fresh", "writerGen"), before, fw_now_ms ());
   assert_int_equal (stored_number ("fresh", "epoch"), 1);

   /* exactly_once's sink: a run without ha raising its generation there
    * fences the sink's leaders too */
   assert_true (fw_checkpoint_fence (g_client, DB, "sink", 4, &epoch, &err));
   gen = stored_number ("sink", "writerGen") + 1;
   assert_true (fw_checkpoint_raise_generation (g_client, DB, "sink", gen, &stored_gen, &err));
   assert_int_equal (stored_gen, gen);
   assert_int_equal (stored_number ("sink", "epoch"), 5);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (an_earlier_seq_never_replaces_a_later_one),
      cmocka_unit_test (unstamped_and_other_writers_checkpoints_are_overwritten),
      cmocka_unit_test (a_fenced_write_tells_superseded_from_fenced),
      cmocka_unit_test (a_late_write_never_replaces_the_final_save),
      cmocka_unit_test (an_older_runs_late_write_never_replaces_a_newer_runs),
      cmocka_unit_test (a_reset_by_hand_wins),
      cmocka_unit_test (an_older_runs_late_snapshot_progress_changes_nothing),
      cmocka_unit_test (an_older_runs_late_breaker_write_changes_nothing),
      cmocka_unit_test (an_older_runs_transaction_commits_nothing),
      cmocka_unit_test (raising_a_generation_says_what_is_stored),
      cmocka_unit_test (a_deleted_checkpoint_still_refuses_an_earlier_runs_write),
      cmocka_unit_test (turning_ha_off_and_on_fences_the_other_modes_earlier_runs),
      cmocka_unit_test (a_leaders_fence_without_a_generation_takes_the_time),
   };
   return cmocka_run_group_tests (tests, setup, teardown);
}
