/*
 * dlq_reprocess.c - run's automatic DLQ rounds (dlq.reprocess, seed 002's
 * roadmap): on the stream's own thread, between events, so one stream never
 * runs two handlers at once. When a round is due it replays up to
 * batch_size of the stream's own waiting entries through dlq_replay.c, then
 * asks flowwarden.dlq (Lua: every or cron) when the next one is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_alloc.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/replay/dlq_replay_store.h"

/* The entry's _id, as text for the log. */
static void
entry_id_text (const bson_t *entry, char *buf, size_t len)
{
   bson_iter_t it;
   if (bson_iter_init_find (&it, entry, "_id") && BSON_ITER_HOLDS_UTF8 (&it)) {
      snprintf (buf, len, "%s", bson_iter_utf8 (&it, NULL));
   } else {
      snprintf (buf, len, "(an _id that is not a string)");
   }
}

typedef struct {
   int64_t next_ms;
   int64_t batch_size;
   int64_t max_attempts;
   bool has;
} schedule_t;

static int
pschedule (lua_State *L)
{
   schedule_t *s = lua_touserdata (L, 1);
   fw_dispatcher_t *d = lua_touserdata (L, 2);
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.dlq");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "schedule");
   lua_rawgeti (L, LUA_REGISTRYINDEX, fw_dispatcher_spec_ref (d));
   lua_pushinteger (L, fw_now_ms ());
   lua_call (L, 2, 3);
   s->has = lua_isinteger (L, -3);
   s->next_ms = lua_tointeger (L, -3);
   s->batch_size = lua_tointeger (L, -2);
   s->max_attempts = lua_tointeger (L, -1);
   return 0;
}

static bool
read_schedule (fw_dispatcher_t *d, schedule_t *s)
{
   lua_State *L = fw_lua_host_state (fw_dispatcher_host (d));
   memset (s, 0, sizeof *s);
   if (!fw_dispatcher_config (d)->dlq.enabled) {
      return false;
   }
   lua_pushcfunction (L, pschedule);
   lua_pushlightuserdata (L, s);
   lua_pushlightuserdata (L, d);
   if (lua_pcall (L, 2, 0, 0) != LUA_OK) {
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "dlq.reprocess: cannot schedule a round: %s", lua_tostring (L, -1));
      lua_pop (L, 1);
      return false;
   }
   return s->has && s->batch_size > 0;
}

typedef struct {
   bson_t *docs;
   int n;
   int64_t cap;
} round_docs_t;

static bool
keep_entry (const bson_t *entry, void *ud, fw_error_t *error)
{
   round_docs_t *r = ud;

   (void) error;
   if (r->n < r->cap) {
      bson_copy_to (entry, &r->docs[r->n++]);
   }
   return true;
}

/* The round's entries: PENDING (or left REPROCESSING by a process that died:
 * its claim expired) with reprocessAttempts < max_attempts (missing counts
 * as 0), oldest clusterTime first, whole. */
static bool
round_entries (fw_dispatcher_t *d, fw_dlq_store_t *store, const schedule_t *s, bson_t **docs,
               int *n)
{
   fw_dlq_filter_t f = {.stream = fw_dispatcher_config (d)->name};
   fw_dlq_query_t q = {&f, "PENDING,REPROCESSING", NULL, s->batch_size, true};
   fw_dlq_claimable_t c = {NULL, false, s->max_attempts, fw_now_ms ()};
   round_docs_t r = {fw_bson_aligned_calloc ((size_t) s->batch_size * sizeof (bson_t)), 0,
                     s->batch_size};
   fw_error_t err;
   bool ok;

   if (!r.docs) {
      fw_error_set (&err, FW_ERROR_NOMEM, "out of memory");
      ok = false;
   } else {
      ok = store->claimable (store, &q, &c, keep_entry, &r, &err);
   }
   if (!ok) {
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "dlq.reprocess: cannot read the DLQ: %s", err.message);
   }
   *docs = r.docs;
   *n = r.n;
   return ok;
}

typedef struct {
   fw_dispatcher_t *d;
   int *counts;
   int done;
} round_t;

/* Logs one replayed entry (alone, or as part of its sequence). */
static void
report_entry (void *ud, const bson_t *entry, const fw_replay_result_t *r)
{
   round_t *round = ud;
   char id[128];

   round->counts[r->status]++;
   round->done++;
   entry_id_text (entry, id, sizeof id);
   fw_log (r->status == FW_REPLAY_RESOLVED || r->status == FW_REPLAY_SKIPPED ? FW_LOG_INFO
                                                                             : FW_LOG_WARN,
           fw_dispatcher_config (round->d)->name, "dlq.reprocess: entry %s %s%s%s%s", id, r->what,
           r->notes[0] ? " (" : "", r->notes, r->notes[0] ? ")" : "");
}

/* The sequence of entry, when the round replayed it already. */
static bool
sequence_done (fw_dlq_sequences_t *done, const bson_t *entry)
{
   bson_iter_t it;
   if (!done || !bson_iter_init_find (&it, entry, "sequenceId") || !BSON_ITER_HOLDS_UTF8 (&it)) {
      return false;
   }
   if (fw_dlq_sequences_has (done, bson_iter_utf8 (&it, NULL))) {
      return true;
   }
   fw_dlq_sequences_add (done, bson_iter_utf8 (&it, NULL));
   return false;
}

static void
run_round (fw_dispatcher_t *d, const schedule_t *s)
{
   fw_replay_options_t opts = {NULL, FW_DLQ_CLAIM_TTL_MS, false, false, false};
   int counts[FW_REPLAY_ERROR + 1] = {0};
   fw_dlq_store_t *store;
   bson_t *docs = NULL;
   fw_error_t err;
   char actor[300];
   int n = 0, done = 0;

   fw_dlq_actor (actor, sizeof actor);
   opts.actor = actor;
   if (!(store = fw_dlq_replay_store (d, &err))) {
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name, "dlq.reprocess: %s", err.message);
      return;
   }
   if (round_entries (d, store, s, &docs, &n)) {
      round_t round = {d, counts, 0};
      /* A sequenced DLQ: an entry of a sequence runs its whole sequence once. */
      fw_dlq_sequences_t *sequences = fw_dlq_sequences_new ();
      for (int i = 0; i < n && !fw_shutdown_requested (fw_dispatcher_shutdown (d)); i++) {
         if (sequence_done (sequences, &docs[i])) {
            continue;
         }
         if (fw_dlq_replay_select (d, store, &docs[i], &opts, report_entry, &round, &err) ==
             FW_SEQ_REPLAY_ERROR) {
            fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name, "dlq.reprocess: %s", err.message);
         }
      }
      fw_dlq_sequences_destroy (sequences);
      done = round.done;
   }
   for (int i = 0; i < n; i++) {
      bson_destroy (&docs[i]);
   }
   free (docs);
   fw_dlq_store_destroy (store);
   if (done > 0) {
      fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
              "dlq.reprocess round: %d entries: resolved=%d skipped=%d requeued=%d evicted=%d "
              "errors=%d",
              done, counts[FW_REPLAY_RESOLVED], counts[FW_REPLAY_SKIPPED],
              counts[FW_REPLAY_REQUEUED], counts[FW_REPLAY_EVICTED],
              counts[FW_REPLAY_UNHANDLED] + counts[FW_REPLAY_INVALID] + counts[FW_REPLAY_ERROR]);
   }
}

void
fw_dlq_reprocess_tick (fw_dispatcher_t *d, int64_t *next_ms)
{
   schedule_t s;
   int64_t now;

   if (*next_ms < 0) {
      return;
   }
   now = fw_now_ms ();
   if (*next_ms == 0) {
      *next_ms = read_schedule (d, &s) ? s.next_ms : -1;
      return;
   }
   if (now < *next_ms) {
      return;
   }
   if (read_schedule (d, &s)) {
      run_round (d, &s);
      *next_ms = read_schedule (d, &s) ? s.next_ms : -1;
   } else {
      *next_ms = -1;
   }
}
