/*
 * stream_settle.c - what an event's outcome means for its stream
 * (stream_settle.h): the one place where a dispatcher's outcome becomes a
 * moved position, a count, or the stream's stop.
 */
#include "runtime/stream/stream_settle.h"
#include "flowwarden/check.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/host/lua_host.h"
#include "runtime/stream/event_settle.h"

#if FW_CHECKING
/* A DLQ outcome names its stored entry. */
static bool
names_entry (const fw_outcome_t *o)
{
   return o->kind != FW_OUTCOME_DEAD_LETTERED && o->kind != FW_OUTCOME_PARKED &&
                o->kind != FW_OUTCOME_DEFERRED
             ? true
             : o->entry_id && o->entry_id[0];
}
#endif

fw_read_end_t
fw_stream_settle (const fw_settle_place_t *place, const fw_outcome_t *o)
{
   FW_ASSERT ((unsigned) o->kind < FW_OUTCOME_KINDS);
   /* A yielded event runs again on the new program before it is settled
    * (fw_stream_dispatch); were one to get here, it comes back. */
   FW_ASSERT (o->kind != FW_OUTCOME_YIELDED);
   if (fw_outcome_comes_back (o->kind)) {
      return place->lease_lost && place->lease_lost (place->ud) ? FW_READ_LOST : FW_READ_STOP;
   }
   if (!fw_outcome_finished (o->kind)) { /* FAILED, NO_DLQ: the stream stops before it */
      place->fail (place->ud, o->kind == FW_OUTCOME_NO_DLQ && place->no_dlq_why ? place->no_dlq_why
                                                                                : o->error);
      return FW_READ_FAILED;
   }
   /* A replay's GAVE_UP is its replay's to settle, never a stream's. */
   FW_ASSERT (o->kind != FW_OUTCOME_GAVE_UP);
   FW_ASSERT (names_entry (o));
   if (place->metrics) { /* the dispatcher's figure (an on_batch call's outcome has none) */
      fw_stream_metrics_set_lua_memory (
         place->metrics,
         o->lua_memory ? o->lua_memory : fw_lua_host_memory_used (fw_dispatcher_host (place->d)));
   }
   return place->finished ? place->finished (place->ud, o) : FW_READ_NEXT;
}

/* The line an event's outcome is logged with (none for handled, no
 * handler, and outcomes the event comes back from). */
static void
log_outcome (const char *stream, const fw_event_t *ev, const fw_outcome_t *o)
{
   const fw_outcome_detail_t *x = o->detail;
   char more[1600], sid[1024];

   if (!x || (o->kind != FW_OUTCOME_DEAD_LETTERED && o->kind != FW_OUTCOME_PARKED &&
              o->kind != FW_OUTCOME_DEFERRED && o->kind != FW_OUTCOME_SKIPPED &&
              o->kind != FW_OUTCOME_LOST)) {
      return;
   }
   if (o->kind == FW_OUTCOME_LOST) { /* named whole: nothing else keeps it */
      fw_event_log_id (ev, sid, sizeof sid);
      fw_event_failure_context (ev, x->where, NULL, more, sizeof more);
      if (x->asked_dlq) {
         fw_log (FW_LOG_ERROR, stream,
                 "event %s LOST: on_error asked for the DLQ but the stream has none: %s: %s%s", sid,
                 o->error_type, o->error, more);
      } else {
         fw_log (FW_LOG_ERROR, stream,
                 "event %s LOST after %d attempt(s) (no dead-letter queue): %s: %s%s", sid,
                 o->attempts, o->error_type, o->error, more);
      }
      return;
   }
   /* Warn lines name the event by its short id; the entry has it whole. */
   fw_event_short_id (ev, sid, sizeof sid);
   switch (o->kind) {
   case FW_OUTCOME_SKIPPED:
      fw_log (FW_LOG_INFO, stream, "event %s skipped by on_error after attempt %d: %s: %s%s", sid,
              o->attempts, o->error_type, o->error,
              fw_event_failure_context (ev, x->where, NULL, more, sizeof more));
      break;
   case FW_OUTCOME_PARKED:
      fw_log (FW_LOG_WARN, stream,
              "event %s parked in %s behind DLQ sequence %.300s (index %lld): an earlier event "
              "of its key is dead-lettered",
              sid, x->dlq, x->sequence, (long long) x->sequence_index);
      break;
   case FW_OUTCOME_DEFERRED:
      fw_log (FW_LOG_WARN, stream,
              "event %s attempt %d failed: %s: %s; scheduled in %s for a deferred retry in "
              "%lld ms; the stream goes on%s",
              sid, o->attempts, o->error_type, o->error, x->dlq,
              (long long) (o->until_ms - o->finished_ms),
              fw_event_failure_context (ev, x->where, o->entry_id, more, sizeof more));
      break;
   default: /* FW_OUTCOME_DEAD_LETTERED */
      fw_log (FW_LOG_WARN, stream, "event %s dead-lettered to %s%s after %d attempt(s): %s: %s%s",
              sid, x->dlq, x->default_dlq ? " (the script's default DLQ)" : "", o->attempts,
              o->error_type, o->error,
              fw_event_failure_context (ev, x->where, o->entry_id, more, sizeof more));
      if (x->sequence[0]) {
         fw_log (FW_LOG_WARN, stream,
                 "DLQ sequence %.300s is open (index %lld): later events of its key are parked "
                 "until a replay resolves it",
                 x->sequence, (long long) x->sequence_index);
      }
      break;
   }
}

_Static_assert(FW_COUNT_NONE - 1 == (int) FW_METRICS_OUTCOME_NONE &&
                  FW_COUNT_PARKED - 1 == (int) FW_METRICS_OUTCOME_PARKED &&
                  FW_COUNT_OK - 1 == (int) FW_METRICS_OUTCOME_OK,
               "fw_outcome_count_t is fw_metrics_outcome_t plus 1");

static inline void
add (uint64_t *count, uint64_t n)
{
   __atomic_fetch_add (count, n, __ATOMIC_RELAXED);
}

/* What o adds to summary: its end, its failed attempts and its retries.
 * Once per event: a handled one pays one test and one atomic add. */
static void
count_summary (fw_stream_stats_t *summary, const fw_outcome_t *o)
{
   static const size_t end_at[] = {0, /* FW_SUMMARY_NOTHING: not counted */
                                   offsetof (fw_stream_stats_t, handled),
                                   offsetof (fw_stream_stats_t, skipped),
                                   offsetof (fw_stream_stats_t, dead_lettered),
                                   offsetof (fw_stream_stats_t, parked),
                                   offsetof (fw_stream_stats_t, lost)};
   _Static_assert(sizeof end_at / sizeof end_at[0] == FW_SUMMARY_LOST + 1,
                  "one place per fw_outcome_summary_t");

   if (o->summary != FW_SUMMARY_NOTHING) {
      add ((uint64_t *) ((char *) summary + end_at[o->summary]), 1);
   }
   if ((o->failed_attempts | o->retries) != 0) {
      add (&summary->handler_errors, (uint64_t) o->failed_attempts);
      add (&summary->retries, (uint64_t) o->retries);
   }
}

void
fw_stream_summary_read (const fw_stream_stats_t *summary, fw_stream_stats_t *out)
{
   out->handled = __atomic_load_n (&summary->handled, __ATOMIC_RELAXED);
   out->handler_errors = __atomic_load_n (&summary->handler_errors, __ATOMIC_RELAXED);
   out->retries = __atomic_load_n (&summary->retries, __ATOMIC_RELAXED);
   out->dead_lettered = __atomic_load_n (&summary->dead_lettered, __ATOMIC_RELAXED);
   out->skipped = __atomic_load_n (&summary->skipped, __ATOMIC_RELAXED);
   out->lost = __atomic_load_n (&summary->lost, __ATOMIC_RELAXED);
   out->parked = __atomic_load_n (&summary->parked, __ATOMIC_RELAXED);
   out->failed = summary->failed; /* its stream's thread's: safe once that thread ended */
}

void
fw_event_settle (fw_stream_metrics_t *metrics, fw_stream_stats_t *summary, const char *stream,
                 const fw_event_t *ev, const fw_outcome_t *o)
{
   FW_ASSERT ((unsigned) o->summary <= FW_SUMMARY_LOST);
   if (summary) {
      count_summary (summary, o);
   }
   if (!ev) { /* no change event: a batch's calls, a counted replay */
      return;
   }
   if (o->detail) {
      log_outcome (stream, ev, o);
   }
   if (!metrics) {
      return;
   }
   if (o->kind == FW_OUTCOME_DEAD_LETTERED || o->kind == FW_OUTCOME_PARKED) {
      fw_stream_metrics_dlq_write (metrics); /* stored PENDING (a deferred retry: SCHEDULED) */
   }
   if (o->count != FW_COUNT_NOTHING) {
      fw_stream_metrics_event_finished (metrics, (fw_metrics_outcome_t) (o->count - 1),
                                        o->finished_ms ? o->finished_ms : fw_now_ms ());
   }
}
