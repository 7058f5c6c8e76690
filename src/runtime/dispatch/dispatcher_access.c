/*
 * dispatcher_access.c - a dispatcher's narrow accessors (dispatcher.h,
 * dispatcher_access-private.h, outage-private.h): each reads or sets one
 * piece of its state and calls nothing of dispatch/ above it, so the files
 * that use them (replay/, testing/, the DLQ opener, the breaker) need not
 * see the whole fw_dispatcher_t.
 */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/dispatch/backoff.h"
#include "runtime/dispatch/dispatcher-private.h"

const fw_stream_config_t *
fw_dispatcher_config (const fw_dispatcher_t *d)
{
   return &d->prog.cfg;
}

fw_shutdown_t *
fw_dispatcher_shutdown (const fw_dispatcher_t *d)
{
   return d->shutdown;
}

void
fw_dispatcher_sequence_closed (fw_dispatcher_t *d, const char *seq)
{
   fw_dlq_sequences_remove (d->park.open_seqs, seq);
}

fw_lua_host_t *
fw_dispatcher_host (const fw_dispatcher_t *d)
{
   return d->prog.host;
}

fw_state_store_t *
fw_dispatcher_state (const fw_dispatcher_t *d)
{
   return d->state.store;
}

const char *
fw_dispatcher_failure (const fw_dispatcher_t *d)
{
   return d->out.failure;
}

void
fw_dispatcher_set_clock (fw_dispatcher_t *d, const fw_stream_clock_t *clock)
{
   d->clock = *clock;
}

void
fw_dispatcher_set_hooks (fw_dispatcher_t *d, const fw_dispatch_hooks_t *hooks)
{
   d->hooks = hooks;
}

void
fw_dispatcher_set_dlq_store (fw_dispatcher_t *d, fw_dlq_store_t *store)
{
   d->dlq = store;
}

void
fw_dispatcher_set_seed (fw_dispatcher_t *d, uint64_t seed, bool jitter)
{
   d->prog.cfg.retry.jitter = d->prog.cfg.retry.jitter && jitter;
   d->rng = seed;
}

fw_dlq_store_t *
fw_dispatcher_dlq_store (const fw_dispatcher_t *d)
{
   return d->dlq;
}

int64_t
fw_dispatcher_now_ms (const fw_dispatcher_t *d)
{
   return d->clock.now_ms (d->clock.ud);
}

bool
fw_dispatcher_wait_ms (fw_dispatcher_t *d, int64_t ms)
{
   return d->clock.wait_ms (d->clock.ud, ms);
}

double
fw_dispatcher_random (fw_dispatcher_t *d)
{
   return fw_backoff_random (&d->rng);
}

mongoc_client_t *
fw_dispatcher_client (const fw_dispatcher_t *d)
{
   return d->client;
}

fw_connection_clients_t *
fw_dispatcher_clients (const fw_dispatcher_t *d)
{
   return d->clients;
}

fw_stream_metrics_t *
fw_dispatcher_metrics (const fw_dispatcher_t *d)
{
   return d->metrics;
}

int
fw_dispatcher_spec_ref (const fw_dispatcher_t *d)
{
   return d->prog.spec_ref;
}

bool
fw_dispatcher_handles (const fw_dispatcher_t *d, fw_op_t op)
{
   return fw_program_handler_for (&d->prog, op) != LUA_NOREF;
}

fw_dispatch_t *
fw_dispatcher_view (fw_dispatcher_t *d)
{
   return &d->dispatch;
}

bool
fw_dispatcher_sequences_loaded (const fw_dispatcher_t *d)
{
   return d->park.open_seqs != NULL;
}

int64_t
fw_dispatcher_deferred_check_at (const fw_dispatcher_t *d)
{
   return d->deferred.check_at_ms;
}

void
fw_dispatcher_set_deferred_check_at (fw_dispatcher_t *d, int64_t at_ms)
{
   d->deferred.check_at_ms = at_ms;
}

fw_outage_t *
fw_dispatcher_outage (fw_dispatcher_t *d)
{
   return &d->outage;
}

bool
fw_dispatcher_clock_virtual (const fw_dispatcher_t *d)
{
   return d->clock.is_virtual;
}

fw_state_rebuild_t *
fw_dispatcher_rebuild (fw_dispatcher_t *d)
{
   return &d->rebuild;
}

void
fw_dispatcher_set_failure (fw_dispatcher_t *d, const char *fmt, ...)
{
   va_list ap;

   va_start (ap, fmt);
   vsnprintf (d->out.failure, sizeof d->out.failure, fmt, ap);
   va_end (ap);
}

void
fw_dispatcher_count_handler_error (fw_dispatcher_t *d, const char *type)
{
   if (d->metrics) {
      fw_stream_metrics_handler_error (d->metrics, type);
   }
}

bool
fw_dispatcher_recording (const fw_dispatcher_t *d)
{
   return d->hooks != NULL;
}

void
fw_dispatcher_attempt_failed (fw_dispatcher_t *d, int attempt, const char *type,
                              const char *message, const char *traceback, const char *action)
{
   if (d->hooks) {
      d->hooks->attempt_failed (d->hooks->ud, attempt, type, message, traceback, action);
   }
}

bool
fw_state_over_mark (const fw_dispatcher_t *d)
{
   return fw_state_past_mark (d, fw_lua_host_memory_used (d->prog.host));
}
