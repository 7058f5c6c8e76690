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
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_reload-private.h"

void
fw_stream_worker_take_state (fw_stream_worker_t *w, fw_stream_worker_t *from)
{
   fw_dispatcher_swap_state (fw_stream_worker_dispatcher (w), fw_stream_worker_dispatcher (from));
   fw_stream_state_attach (from);
   fw_stream_state_attach (w);
}

static bool
same_string (const char *a, const char *b)
{
   return (!a && !b) || (a && b && strcmp (a, b) == 0);
}

/* Both read w's settings on the reload's thread while w's thread may swap
 * them in fw_stream_reload_apply (a previous reload's program): under the
 * pending lock. */
bool
fw_stream_worker_same_source (fw_stream_worker_t *w, const fw_stream_worker_t *next)
{
   fw_stream_pending_t *r = fw_stream_pending (w);
   const fw_stream_config_t *cfg = r->cfg, *ncfg = fw_stream_cfg (next);
   bool same;

   pthread_mutex_lock (&r->mu);
   same = same_string (cfg->database, ncfg->database) &&
          same_string (cfg->collection, ncfg->collection) &&
          same_string (cfg->full_document, ncfg->full_document) &&
          same_string (cfg->full_document_before_change, ncfg->full_document_before_change) &&
          bson_equal (cfg->pipeline, ncfg->pipeline) &&
          /* exactly_once switched on or off: a new stream (its final
           * checkpoint, then its transactions or async saves from there). */
          cfg->exactly_once == ncfg->exactly_once &&
          same_string (cfg->exactly_once_pg, ncfg->exactly_once_pg) &&
          same_string (cfg->exactly_once_connection, ncfg->exactly_once_connection);
   pthread_mutex_unlock (&r->mu);
   return same;
}

bool
fw_stream_worker_is_named (fw_stream_worker_t *w, const char *name)
{
   fw_stream_pending_t *r = fw_stream_pending (w);
   bool same;

   pthread_mutex_lock (&r->mu);
   same = strcmp (r->cfg->name, name) == 0;
   pthread_mutex_unlock (&r->mu);
   return same;
}

void
fw_stream_worker_replace_program (fw_stream_worker_t *w, fw_stream_worker_t *next)
{
   fw_stream_pending_t *r = fw_stream_pending (w);
   fw_stream_worker_t *dropped;

   pthread_mutex_lock (&r->mu);
   dropped = r->next;
   r->next = next;
   __atomic_store_n (&r->has, 1, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&r->mu);
   fw_stream_worker_destroy (dropped);
}

bool
fw_stream_reload_apply (fw_stream_pending_t *r)
{
   fw_stream_worker_t *next;

   /* With lanes running, the lanes' boundary (stream_lanes.c) applies it
    * after the lanes drained, for all of them at once. */
   if (!__atomic_load_n (&r->has, __ATOMIC_ACQUIRE) || *r->lanes) {
      return false;
   }
   pthread_mutex_lock (&r->mu);
   next = r->next;
   r->next = NULL;
   __atomic_store_n (&r->has, 0, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&r->mu);
   if (!next) {
      return false;
   }
   pthread_mutex_lock (&r->mu); /* see fw_stream_worker_same_source */
   fw_dispatcher_take_program (r->d, fw_stream_worker_dispatcher (next));
   pthread_mutex_unlock (&r->mu);
   fw_stream_program_switched (r->w, next);
   return true;
}

fw_outcome_t
fw_stream_dispatch (fw_stream_pending_t *r, const fw_event_t *ev)
{
   fw_dispatch_run_t run = {0, NULL};
   fw_outcome_t o;

   if (__atomic_load_n (&r->has, __ATOMIC_ACQUIRE)) {
      fw_stream_reload_apply (r); /* one that came while the read waited for ev */
   }
   o = fw_event_dispatch (r->d, ev);
   while (o.kind == FW_OUTCOME_YIELDED) {
      run.attempt_base = o.attempts;
      fw_stream_reload_apply (r);
      o = fw_event_dispatch_run (r->d, ev, &run);
   }
   return o;
}
