/*
 * stream_reload.c - a reload's side of a stream worker: whether a new
 * program reads the same change stream, handing it over (pending), and the
 * switch at an event boundary (the dispatcher's program, the lanes'
 * dispatchers); fw.state's store outlives every switch.
 *
 * Called on the stream's thread (fw_stream_reload_apply) except
 * replace_program, same_source and is_named (the reload's thread, under the
 * pending lock) and take_state (the reload's thread, the worker not started).
 */
#include <string.h>

#include "flowwarden/log.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_worker-private.h"

void
fw_stream_worker_take_state (fw_stream_worker_t *w, fw_stream_worker_t *from)
{
   fw_dispatcher_swap_state (w->d, from->d);
   fw_stream_state_attach (from);
   fw_stream_state_attach (w);
}

static bool
same_string (const char *a, const char *b)
{
   return (!a && !b) || (a && b && strcmp (a, b) == 0);
}

/* Both read w->cfg on the reload's thread while w's thread may swap it in
 * fw_stream_reload_apply (a previous reload's program): under pending_mu. */
bool
fw_stream_worker_same_source (fw_stream_worker_t *w, const fw_stream_worker_t *next)
{
   bool same;

   pthread_mutex_lock (&w->pending.mu);
   same = same_string (w->cfg->database, next->cfg->database) &&
          same_string (w->cfg->collection, next->cfg->collection) &&
          same_string (w->cfg->full_document, next->cfg->full_document) &&
          same_string (w->cfg->full_document_before_change,
                       next->cfg->full_document_before_change) &&
          bson_equal (w->cfg->pipeline, next->cfg->pipeline) &&
          /* exactly_once switched on or off: a new stream (its final
           * checkpoint, then its transactions or async saves from there). */
          w->cfg->exactly_once == next->cfg->exactly_once &&
          same_string (w->cfg->exactly_once_pg, next->cfg->exactly_once_pg) &&
          same_string (w->cfg->exactly_once_connection, next->cfg->exactly_once_connection);
   pthread_mutex_unlock (&w->pending.mu);
   return same;
}

bool
fw_stream_worker_is_named (fw_stream_worker_t *w, const char *name)
{
   bool same;

   pthread_mutex_lock (&w->pending.mu);
   same = strcmp (w->cfg->name, name) == 0;
   pthread_mutex_unlock (&w->pending.mu);
   return same;
}

void
fw_stream_worker_replace_program (fw_stream_worker_t *w, fw_stream_worker_t *next)
{
   fw_stream_worker_t *dropped;

   pthread_mutex_lock (&w->pending.mu);
   dropped = w->pending.next;
   w->pending.next = next;
   __atomic_store_n (&w->pending.has, 1, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&w->pending.mu);
   fw_stream_worker_destroy (dropped);
}

#define SWAP(a, b)                 \
   do {                            \
      __typeof__ (a) swap_tmp = a; \
      a = b;                       \
      b = swap_tmp;                \
   } while (0)

bool
fw_stream_reload_apply (fw_stream_worker_t *w)
{
   fw_stream_worker_t *next;

   /* With lanes running, the lanes' boundary (stream_lanes.c) applies it
    * after the lanes drained, for all of them at once. */
   if (!__atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE) || w->lane.run) {
      return false;
   }
   pthread_mutex_lock (&w->pending.mu);
   next = w->pending.next;
   w->pending.next = NULL;
   __atomic_store_n (&w->pending.has, 0, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&w->pending.mu);
   if (!next) {
      return false;
   }
   pthread_mutex_lock (&w->pending.mu); /* see fw_stream_worker_same_source */
   fw_dispatcher_take_program (w->d, next->d);
   pthread_mutex_unlock (&w->pending.mu);
   fw_stream_program_version (w);
   /* The lanes are stopped: their dispatchers go with the rest (the old
    * ones are destroyed with next; what they settled is in w's summary). */
   SWAP (w->lane.d, next->lane.d);
   SWAP (w->lane.n, next->lane.n);
   w->dlq.reprocess_at_ms = 0; /* dlq.reprocess as the new script says */
   fw_stream_state_attach (w); /* the new lanes share w's fw.state */
   fw_stream_worker_destroy (next);
   if (w->metrics) {
      fw_stream_metrics_set_script_version (w->metrics, w->ckpt.version);
   }
   fw_log (FW_LOG_INFO, w->cfg->name, "now running script version %s", w->ckpt.version);
   return true;
}

fw_outcome_t
fw_stream_dispatch (fw_stream_worker_t *w, const fw_event_t *ev)
{
   fw_dispatch_run_t run = {0, NULL};
   fw_outcome_t o;

   if (__atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE)) {
      fw_stream_reload_apply (w); /* one that came while the read waited for ev */
   }
   o = fw_event_dispatch (w->d, ev);
   while (o.kind == FW_OUTCOME_YIELDED) {
      run.attempt_base = o.attempts;
      fw_stream_reload_apply (w);
      o = fw_event_dispatch_run (w->d, ev, &run);
   }
   return o;
}
