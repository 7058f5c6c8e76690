/*
 * dlq_store_memory_claim.c - the in-memory store's claim methods
 * (dlq_store.h), with the MongoDB store's updates: an entry changes by
 * being rebuilt (fw_dlq__memory_rebuilt), under the store's lock. It keeps
 * deferred retries as the MongoDB store does (FW_DLQ_CAN_DEFER: claim_due,
 * scheduled, settle's FW_DLQ_RESCHEDULE), so that flowwarden test schedules
 * them as run does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/dlq/dlq_store_memory-private.h"

static bool
listed (const char *key, const bson_t *doc, const char *const *names)
{
   bson_iter_t it;
   for (int i = 0; names && names[i]; i++) {
      if (strcmp (key, names[i]) == 0) {
         return true;
      }
   }
   return doc && bson_iter_init_find (&it, doc, key);
}

/* history's items then item, the last FW_DLQ_HISTORY_MAX, as out's history. */
static void
append_history (bson_t *out, const bson_t *entry, const bson_t *item)
{
   bson_iter_t it, h;
   bson_t hist;
   uint32_t total = 1, skip, k = 0;
   bool has = bson_iter_init_find (&it, entry, "history") && BSON_ITER_HOLDS_ARRAY (&it);
   char key[16];
   const char *kk;

   for (bool ok = has && bson_iter_recurse (&it, &h); ok && bson_iter_next (&h);) {
      total++;
   }
   skip = total > FW_DLQ_HISTORY_MAX ? total - FW_DLQ_HISTORY_MAX : 0;
   BSON_APPEND_ARRAY_BEGIN (out, "history", &hist);
   for (bool ok = has && bson_iter_recurse (&it, &h); ok && bson_iter_next (&h);) {
      if (skip > 0) {
         skip--;
         continue;
      }
      bson_uint32_to_string (k++, &kk, key, sizeof key);
      bson_append_iter (&hist, kk, -1, &h);
   }
   bson_uint32_to_string (k, &kk, key, sizeof key);
   BSON_APPEND_DOCUMENT (&hist, kk, item);
   bson_append_array_end (out, &hist);
}

/* diagnostics' fields over entry's diagnostics, as out's. */
static void
append_diagnostics (bson_t *out, const bson_t *entry, const bson_t *diagnostics)
{
   bson_iter_t it, d;
   bson_t merged;

   BSON_APPEND_DOCUMENT_BEGIN (out, "diagnostics", &merged);
   if (bson_iter_init_find (&it, entry, "diagnostics") && BSON_ITER_HOLDS_DOCUMENT (&it) &&
       bson_iter_recurse (&it, &d)) {
      while (bson_iter_next (&d)) {
         if (!listed (bson_iter_key (&d), diagnostics, NULL)) {
            bson_append_iter (&merged, NULL, 0, &d);
         }
      }
   }
   bson_concat (&merged, diagnostics);
   bson_append_document_end (out, &merged);
}

bson_t *
fw_dlq__memory_rebuilt (const bson_t *entry, const bson_t *set, const char *const *removed,
                        bool inc_attempts, const bson_t *diagnostics, const bson_t *history_item)
{
   bson_t *out = bson_new ();
   bson_iter_t it;
   int64_t attempts = 0;
   bool wide = false;

   bson_iter_init (&it, entry);
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      if (inc_attempts && strcmp (key, "reprocessAttempts") == 0) {
         attempts = BSON_ITER_HOLDS_NUMBER (&it) ? bson_iter_as_int64 (&it) : 0;
         wide = !BSON_ITER_HOLDS_INT32 (&it);
      } else if (!listed (key, set, removed) && !(diagnostics && !strcmp (key, "diagnostics")) &&
                 !(history_item && !strcmp (key, "history"))) {
         bson_append_iter (out, key, -1, &it);
      }
   }
   bson_concat (out, set);
   if (inc_attempts && wide) {
      BSON_APPEND_INT64 (out, "reprocessAttempts", attempts + 1);
   } else if (inc_attempts) {
      BSON_APPEND_INT32 (out, "reprocessAttempts", (int32_t) (attempts + 1));
   }
   if (diagnostics) {
      append_diagnostics (out, entry, diagnostics);
   }
   if (history_item) {
      append_history (out, entry, history_item);
   }
   return out;
}

/* Whether entry's _id is id. */
static bool
has_id (const bson_t *entry, const bson_value_t *id)
{
   bson_iter_t it;
   char *a, *b;
   bool same;

   if (!bson_iter_init_find (&it, entry, "_id")) {
      return false;
   }
   if (id->value_type == BSON_TYPE_UTF8 && BSON_ITER_HOLDS_UTF8 (&it)) {
      return strcmp (bson_iter_utf8 (&it, NULL), id->value.v_utf8.str) == 0;
   }
   a = fw_dlq_sequence_id (bson_iter_value (&it));
   b = fw_dlq_sequence_id (id);
   same = a && b && strcmp (a, b) == 0;
   bson_free (a);
   bson_free (b);
   return same;
}

static bool
is (const bson_t *entry, const char *key, const char *value)
{
   const char *s = fw_dlq__utf8_field (entry, key);
   return s && strcmp (s, value) == 0;
}

static bool
claim_ended (const bson_t *entry, int64_t now_ms)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, entry, "claimedUntil") && BSON_ITER_HOLDS_DATE_TIME (&it) &&
          bson_iter_date_time (&it) < now_ms;
}

typedef bool (*when_fn) (const bson_t *entry, const void *ud);
typedef bson_t *(*change_fn) (const bson_t *entry, const void *ud);

/* Replaces the entry with _id id by change's, when when says so; *changed
 * says whether it did, and out (when not NULL, initialised here) gets it. */
static bool
change_one (fw_dlq_store_t *store, const bson_value_t *id, when_fn when, change_fn change,
            const void *ud, bson_t *out, bool *changed, fw_error_t *error)
{
   fw_memory_store_t *m = (fw_memory_store_t *) store;
   bool ok = true;

   *changed = false;
   if (out) {
      bson_init (out);
   }
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n && !*changed; i++) {
      bson_t *next;
      if (!has_id (m->entries[i], id) || !when (m->entries[i], ud)) {
         continue;
      }
      if (!(next = change (m->entries[i], ud))) {
         fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
         ok = false;
         break;
      }
      bson_destroy (m->entries[i]);
      m->entries[i] = next;
      *changed = true;
      if (out) {
         bson_concat (out, next);
      }
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

typedef struct {
   const char *stream;
   const char *actor;
   int64_t now_ms;
   int64_t until_ms;
   const fw_dlq_outcome_t *outcome;
} claim_args_t;

static bool
claimable_now (const bson_t *e, const void *ud)
{
   const claim_args_t *a = ud;
   return is (e, "streamName", a->stream) &&
          (is (e, "status", "PENDING") ||
           (is (e, "status", "REPROCESSING") && claim_ended (e, a->now_ms)));
}

static bson_t *
claimed (const bson_t *e, const void *ud)
{
   const claim_args_t *a = ud;
   bson_t *set = BCON_NEW ("status", BCON_UTF8 ("REPROCESSING"), "claimedBy", BCON_UTF8 (a->actor),
                           "claimedUntil", BCON_DATE_TIME (a->until_ms), "lastTouched",
                           BCON_DATE_TIME (a->now_ms));
   bson_t *out = fw_dlq__memory_rebuilt (e, set, NULL, false, NULL, NULL);
   bson_destroy (set);
   return out;
}

static bool
memory_claim (fw_dlq_store_t *store, const char *stream, const bson_value_t *id, const char *actor,
              int64_t now_ms, int64_t until_ms, bson_t *out, bool *got, fw_error_t *error)
{
   claim_args_t a = {stream, actor, now_ms, until_ms, NULL};
   return change_one (store, id, claimable_now, claimed, &a, out, got, error);
}

static bool
held_by (const bson_t *e, const void *ud)
{
   const claim_args_t *a = ud;
   return is (e, "status", "REPROCESSING") && is (e, "claimedBy", a->actor);
}

static bson_t *
extended (const bson_t *e, const void *ud)
{
   const claim_args_t *a = ud;
   bson_t *set = BCON_NEW ("claimedUntil", BCON_DATE_TIME (a->until_ms));
   bson_t *out = fw_dlq__memory_rebuilt (e, set, NULL, false, NULL, NULL);
   bson_destroy (set);
   return out;
}

static bool
memory_extend (fw_dlq_store_t *store, const bson_value_t *id, const char *actor, int64_t until_ms,
               bool *held, fw_error_t *error)
{
   claim_args_t a = {NULL, actor, 0, until_ms, NULL};
   return change_one (store, id, held_by, extended, &a, NULL, held, error);
}

static const char *const claim_fields[] = {"claimedBy", "claimedUntil", NULL};
static const char *const claim_and_next[] = {"claimedBy", "claimedUntil", "nextAttemptAt", NULL};

/* The integer at key of doc, or 0; *wide: not an int32. */
static int64_t
int_at (const bson_t *doc, const char *key, bool *wide)
{
   bson_iter_t it;
   bool found = bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_NUMBER (&it);
   *wide = found && !BSON_ITER_HOLDS_INT32 (&it);
   return found ? bson_iter_as_int64 (&it) : 0;
}

/* The entry as a failed deferred retry leaves it (the MongoDB store's
 * fw_dlq__mongo_reschedule_update): SCHEDULED again, or PENDING without
 * nextAttemptAt; with attempts made, attempts added and error.type,
 * error.message and lastAttemptAt replaced, a history item pushed. */
static bson_t *
rescheduled (const bson_t *e, const claim_args_t *a)
{
   const fw_dlq_outcome_t *o = a->outcome;
   bool again = o->next_attempt_ms > 0, wide;
   const char *type = o->error_type ? o->error_type : "?";
   const char *message = o->error_message ? o->error_message : "";
   bson_t set = BSON_INITIALIZER, err, *item = NULL, *out;
   bson_iter_t it, sub;
   char result[1200];

   BCON_APPEND (&set, "status", BCON_UTF8 (again ? "SCHEDULED" : "PENDING"), "lastTouched",
                BCON_DATE_TIME (o->now_ms));
   if (again) {
      BSON_APPEND_DATE_TIME (&set, "nextAttemptAt", o->next_attempt_ms);
   }
   if (o->attempts_added > 0) {
      int64_t attempts = int_at (e, "attempts", &wide) + o->attempts_added;
      BSON_APPEND_DATE_TIME (&set, "lastAttemptAt", o->now_ms);
      if (wide) {
         BSON_APPEND_INT64 (&set, "attempts", attempts);
      } else {
         BSON_APPEND_INT32 (&set, "attempts", (int32_t) attempts);
      }
      BSON_APPEND_DOCUMENT_BEGIN (&set, "error", &err); /* $set error.type, error.message */
      if (bson_iter_init_find (&it, e, "error") && BSON_ITER_HOLDS_DOCUMENT (&it) &&
          bson_iter_recurse (&it, &sub)) {
         while (bson_iter_next (&sub)) {
            if (strcmp (bson_iter_key (&sub), "type") && strcmp (bson_iter_key (&sub), "message")) {
               bson_append_iter (&err, NULL, 0, &sub);
            }
         }
      }
      BSON_APPEND_UTF8 (&err, "type", type);
      BSON_APPEND_UTF8 (&err, "message", message);
      bson_append_document_end (&set, &err);
      snprintf (result, sizeof result, "%s: %s", type, message);
      item = BCON_NEW ("at", BCON_DATE_TIME (o->now_ms), "action",
                       BCON_UTF8 (again ? "rescheduled" : "requeued"), "actor",
                       BCON_UTF8 (a->actor), "result", BCON_UTF8 (result));
   }
   out = fw_dlq__memory_rebuilt (e, &set, again ? claim_fields : claim_and_next, false, NULL, item);
   bson_destroy (&set);
   if (item) {
      bson_destroy (item);
   }
   return out;
}

/* The entry as settle leaves it (the MongoDB store's settle_update). */
static bson_t *
settled (const bson_t *e, const void *ud)
{
   const claim_args_t *a = ud;
   const fw_dlq_outcome_t *o = a->outcome;
   bool failed = o->kind == FW_DLQ_REQUEUE || o->kind == FW_DLQ_EVICT;
   bson_t set = BSON_INITIALIZER, *item = NULL, *out;
   char result[1200];

   if (o->kind == FW_DLQ_RESCHEDULE) {
      return rescheduled (e, a);
   }
   if (o->kind == FW_DLQ_RELEASE) {
      BCON_APPEND (&set, "status", BCON_UTF8 ("PENDING"), "lastTouched",
                   BCON_DATE_TIME (o->now_ms));
   } else if (o->kind == FW_DLQ_RESOLVE) {
      BCON_APPEND (&set, "status", BCON_UTF8 ("RESOLVED"), "resolution",
                   BCON_UTF8 (o->skipped ? "SKIPPED" : "REPLAYED"), "resolvedAt",
                   BCON_DATE_TIME (o->now_ms), "lastTouched", BCON_DATE_TIME (o->now_ms));
   } else {
      BCON_APPEND (&set, "status", BCON_UTF8 (o->kind == FW_DLQ_EVICT ? "DISCARDED" : "PENDING"),
                   "lastTouched", BCON_DATE_TIME (o->now_ms), "lastReprocessAt",
                   BCON_DATE_TIME (o->now_ms), "lastReprocessError", "{", "type",
                   BCON_UTF8 (o->error_type), "message", BCON_UTF8 (o->error_message), "}");
   }
   if (o->kind == FW_DLQ_EVICT) {
      BCON_APPEND (&set, "discardedAt", BCON_DATE_TIME (o->now_ms), "discardReason",
                   BCON_UTF8 ("evicted by enqueue policy"));
   }
   if (o->kind != FW_DLQ_RELEASE) {
      snprintf (result, sizeof result, "%s%s%s", failed ? o->error_type : "", failed ? ": " : "",
                failed       ? o->error_message
                : o->skipped ? "skipped"
                             : "ok");
      item = BCON_NEW ("at", BCON_DATE_TIME (o->now_ms), "action",
                       BCON_UTF8 (o->kind == FW_DLQ_RESOLVE ? "resolved"
                                  : o->kind == FW_DLQ_EVICT ? "discarded"
                                                            : "requeued"),
                       "actor", BCON_UTF8 (a->actor), "result", BCON_UTF8 (result));
   }
   out = fw_dlq__memory_rebuilt (e, &set, claim_fields, failed,
                                 o->kind == FW_DLQ_REQUEUE ? o->diagnostics : NULL, item);
   bson_destroy (&set);
   if (item) {
      bson_destroy (item);
   }
   return out;
}

static bool
memory_settle (fw_dlq_store_t *store, const bson_value_t *id, const char *actor,
               const fw_dlq_outcome_t *outcome, bool *held, fw_error_t *error)
{
   claim_args_t a = {NULL, actor, 0, 0, outcome};
   return change_one (store, id, held_by, settled, &a, NULL, held, error);
}

static bool
stale (const bson_t *e, const void *ud)
{
   return is (e, "status", "REPROCESSING") && claim_ended (e, ((const claim_args_t *) ud)->now_ms);
}

static bson_t *
released (const bson_t *e, const void *ud)
{
   bson_t *set = BCON_NEW ("status", BCON_UTF8 ("PENDING"));
   bson_t *out = fw_dlq__memory_rebuilt (e, set, claim_fields, false, NULL, NULL);
   (void) ud;
   bson_destroy (set);
   return out;
}

static bool
memory_release_stale (fw_dlq_store_t *store, const bson_value_t *id, int64_t now_ms,
                      fw_error_t *error)
{
   claim_args_t a = {NULL, NULL, now_ms, 0, NULL};
   bool changed;
   return change_one (store, id, stale, released, &a, NULL, &changed, error);
}

/* The date at key of e, or 0. */
static int64_t
date_at (const bson_t *e, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, e, key) && BSON_ITER_HOLDS_DATE_TIME (&it)
             ? bson_iter_date_time (&it)
             : 0;
}

/* A deferred retry of stream that may run at now_ms: SCHEDULED and due, or
 * left REPROCESSING by a claim that ended. */
static bool
due (const bson_t *e, const char *stream, int64_t now_ms)
{
   bson_iter_t it;
   bool has_next = bson_iter_init_find (&it, e, "nextAttemptAt") && BSON_ITER_HOLDS_DATE_TIME (&it);

   return has_next && is (e, "streamName", stream) &&
          ((is (e, "status", "SCHEDULED") && bson_iter_date_time (&it) <= now_ms) ||
           (is (e, "status", "REPROCESSING") && claim_ended (e, now_ms)));
}

static bool
memory_claim_due (fw_dlq_store_t *store, const char *stream, const char *actor, int64_t now_ms,
                  int64_t until_ms, bson_t *out, bool *got, fw_error_t *error)
{
   fw_memory_store_t *m = (fw_memory_store_t *) store;
   claim_args_t a = {stream, actor, now_ms, until_ms, NULL};
   size_t best = m->n;
   bool ok = true;

   *got = false;
   bson_init (out);
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) { /* the earliest nextAttemptAt first */
      if (due (m->entries[i], stream, now_ms) &&
          (best == m->n || date_at (m->entries[i], "nextAttemptAt") <
                              date_at (m->entries[best], "nextAttemptAt"))) {
         best = i;
      }
   }
   if (best < m->n) {
      bson_t *next = claimed (m->entries[best], &a);
      if (!next) {
         fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
         ok = false;
      } else {
         bson_destroy (m->entries[best]);
         m->entries[best] = next;
         *got = bson_concat (out, next);
      }
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_scheduled (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
                  int64_t *next_ms, fw_error_t *error)
{
   fw_memory_store_t *m = (fw_memory_store_t *) store;

   (void) error;
   *count = *oldest_ms = *next_ms = 0;
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) {
      const bson_t *e = m->entries[i];
      int64_t created = date_at (e, "createdAt"), next = date_at (e, "nextAttemptAt");
      if (!is (e, "streamName", stream) || !is (e, "status", "SCHEDULED")) {
         continue;
      }
      (*count)++;
      if (created && (!*oldest_ms || created < *oldest_ms)) {
         *oldest_ms = created;
      }
      if (next && (!*next_ms || next < *next_ms)) {
         *next_ms = next;
      }
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

void
fw_dlq__memory_claim_methods (fw_dlq_store_t *s)
{
   s->capabilities |= FW_DLQ_CAN_DEFER;
   s->claim_due = memory_claim_due;
   s->scheduled = memory_scheduled;
   s->claim = memory_claim;
   s->extend = memory_extend;
   s->settle = memory_settle;
   s->release_stale = memory_release_stale;
}
