/*
 * stream_program.c - a stream worker's making and unmaking: its dispatcher
 * (the program: settings, handlers, Lua state, fw.state, clients) and its
 * lanes' dispatchers sharing its fw.state, its metrics block, its counts,
 * and a reload's switch once the new program is taken (its lanes, version).
 * The lowest of the stream files: stream_reload.c swaps programs,
 * stream_lanes.c runs several, stream_worker.c runs the thread; none of
 * them is called from here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_checkpoint-private.h"
#include "runtime/stream/stream_circuit-private.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_reload-private.h"
#include "runtime/stream/stream_shared-private.h"
#include "runtime/stream/stream_worker-private.h"

/* The blocks of w's state kept by other files: what each reads of the
 * stream (stream_shared-, stream_exactly_once-, stream_checkpoint-,
 * stream_reload-private.h). */
static void
link_blocks (fw_stream_worker_t *w)
{
   fw_stream_shared_link (&w->shared, w->cfg, &w->client, &w->lead.lease);
   w->eo = (fw_stream_eo_t){.w = w,
                            .d = w->d,
                            .cfg = w->cfg,
                            .shutdown = w->shutdown,
                            .rng = &w->rng,
                            .client = &w->client,
                            .lease = &w->lead.lease,
                            .epoch = &w->lead.epoch};
   w->ckpt.cfg = w->cfg;
   w->ckpt.pool = w->pool;
   w->ckpt.client = &w->client;
   w->ckpt.metrics = &w->metrics;
   w->ckpt.lease = &w->lead.lease;
   w->ckpt.lead_epoch = &w->lead.epoch;
   w->ckpt.eo = &w->eo;
   w->ckpt.committed = &w->eo.committed;
   w->ckpt.advance = &w->eo.advance;
   w->pending.w = w;
   w->pending.d = w->d;
   w->pending.cfg = w->cfg;
   w->pending.lanes = &w->lane.run;
}

/* w's own shutdown flag and locks: 0, or the pthread error code with none of
 * them left set up. */
static int
init_locks (fw_stream_worker_t *w)
{
   int rc;

   if ((rc = fw_shutdown_init (&w->own_shutdown)) != 0) {
      return rc;
   }
   if ((rc = pthread_mutex_init (&w->pending.mu, NULL)) != 0) {
      fw_shutdown_cleanup (&w->own_shutdown);
      return rc;
   }
   if ((rc = pthread_mutex_init (&w->ckpt.gen_mu, NULL)) != 0) {
      pthread_mutex_destroy (&w->pending.mu);
      fw_shutdown_cleanup (&w->own_shutdown);
      return rc;
   }
   return 0;
}

fw_stream_worker_t *
fw_stream_worker_new (fw_lua_host_t *host, int index, mongoc_client_pool_t *pool,
                      fw_connections_t *conns, fw_error_t *error)
{
   fw_stream_worker_t *w = calloc (1, sizeof *w);
   int rc;

   if (!w) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      fw_lua_host_destroy (host);
      return NULL;
   }
   w->pool = pool;
   w->script.index = index;
   w->script.conns = conns;
   if ((rc = init_locks (w)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot set up a stream worker: %s", strerror (rc));
      fw_lua_host_destroy (host);
      free (w);
      return NULL;
   }
   w->shutdown = &w->own_shutdown;
   if (!(w->d = fw_dispatcher_new (host, index, conns, w->shutdown, error))) {
      fw_stream_worker_destroy (w);
      return NULL;
   }
   w->cfg = fw_dispatcher_config (w->d);
   fw_stream_program_version (w);
   fw_dispatcher_set_outcome_sink (w->d, fw_stream_event_settled, w);
   fw_stream_circuit_keep (&w->circuit, w->d, w->pool, &w->lead.lease, &w->cfg, &w->ckpt);
   link_blocks (w);
   w->rng = (uint64_t) fw_now_ms () ^ ((uint64_t) (uintptr_t) w << 16) ^ (uint64_t) getpid ();
   return w;
}

void
fw_stream_program_version (fw_stream_worker_t *w)
{
   snprintf (w->ckpt.version, sizeof w->ckpt.version, "%s",
             fw_lua_host_version (fw_dispatcher_host (w->d)));
}

fw_dispatcher_t *
fw_stream_worker_dispatcher (fw_stream_worker_t *w)
{
   return w->d;
}

fw_dispatcher_t *
fw_stream_worker_lane (fw_stream_worker_t *w, int i)
{
   return i >= 0 && i < w->lane.n ? w->lane.d[i] : NULL;
}

void
fw_stream_worker_bind (fw_stream_worker_t *w)
{
   w->client = w->pool ? mongoc_client_pool_pop (w->pool) : NULL;
   fw_dispatcher_bind (w->d, w->client);
}

void
fw_stream_worker_unbind (fw_stream_worker_t *w)
{
   fw_dispatcher_release (w->d);
   if (w->client) {
      mongoc_client_pool_push (w->pool, w->client);
   }
   w->client = NULL;
}

void
fw_stream_state_attach (fw_stream_worker_t *w)
{
   fw_dispatcher_attach (w->d);
   for (int i = 0; i < w->lane.n; i++) {
      fw_dispatcher_share_state (w->lane.d[i], fw_dispatcher_state (w->d));
      fw_dispatcher_share_outage (w->lane.d[i], w->d); /* one breaker, one bucket */
      /* w's settle (a reload's lanes were built for the worker it drops) */
      fw_dispatcher_set_outcome_sink (w->lane.d[i], fw_stream_event_settled, w);
   }
}

#define SWAP(a, b)                 \
   do {                            \
      __typeof__ (a) swap_tmp = a; \
      a = b;                       \
      b = swap_tmp;                \
   } while (0)

void
fw_stream_program_switched (fw_stream_worker_t *w, fw_stream_worker_t *next)
{
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
}

void
fw_stream_event_settled (void *ud, const char *stream, const fw_event_t *ev, const fw_outcome_t *o)
{
   fw_stream_worker_t *w = ud;

   fw_event_settle (w->metrics, &w->summary, stream, ev, o);
}

void
fw_stream_worker_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry)
{
   w->metrics = registry ? fw_metrics_stream (registry, w->cfg->name) : NULL;
   fw_dispatcher_set_metrics (w->d, w->metrics);
   for (int i = 0; i < w->lane.n; i++) {
      fw_dispatcher_set_metrics (w->lane.d[i], w->metrics); /* one block: the stream's */
   }
   fw_stream_shared_set_metrics (&w->shared, registry,
                                 w->metrics); /* ha.mode = "shared" (stream_shared.c) */
}

fw_stream_metrics_t *
fw_stream_worker_metrics (const fw_stream_worker_t *w)
{
   return w->metrics;
}

void
fw_stream_worker_join (fw_stream_worker_t *w)
{
   if (w->thread.started && !w->thread.joined) {
      pthread_join (w->thread.id, NULL);
      w->thread.joined = true;
   }
}

void
fw_stream_worker_stats (const fw_stream_worker_t *w, fw_stream_stats_t *out)
{
   fw_stream_summary_read (&w->summary, out);
}

void
fw_stream_worker_destroy (fw_stream_worker_t *w)
{
   if (!w) {
      return;
   }
   fw_stream_worker_join (w);
   fw_stream_worker_destroy (w->pending.next);
   for (int i = 0; i < w->lane.n; i++) {
      fw_dispatcher_destroy (w->lane.d[i]); /* before w->d: they share its fw.state */
   }
   free (w->lane.d);
   fw_dispatcher_destroy (w->d);
   fw_stream_exactly_once_pg_free (&w->eo); /* after its dispatcher released the sink */
   bson_destroy (w->eo.written);
   bson_destroy (w->eo.committed);
   pthread_mutex_destroy (&w->pending.mu);
   pthread_mutex_destroy (&w->ckpt.gen_mu);
   fw_shutdown_cleanup (&w->own_shutdown);
   free (w);
}
