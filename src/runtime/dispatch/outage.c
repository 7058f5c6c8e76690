/*
 * outage.c - a dispatcher's guards against a dependency outage (issue 29):
 * the circuit breaker that holds an event instead of dead-lettering it
 * while the dependency is down (circuit.h), and the rate limit every
 * handler attempt takes a token from (rate_limit.h).
 *
 * The breaker's times are on the dispatcher's clock (the wall clock, or
 * flowwarden test's virtual one): status shows them as they are. Waits are
 * cut into slices so a `flowwarden resume` (a probe at once) and a
 * shutdown are seen within one.
 */
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/outage-private.h"

#define SLICE_MS 100

bool
fw_outage_init (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   guard->circuit = fw_circuit_new ();
   guard->rate = fw_rate_limit_new (&fw_dispatcher_config (d)->rate_limit, fw_mono_ns ());
   return guard->circuit && guard->rate;
}

void
fw_outage_cleanup (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   if (!guard->shared) {
      fw_circuit_destroy (guard->circuit);
      fw_rate_limit_destroy (guard->rate);
   }
   guard->circuit = NULL;
   guard->rate = NULL;
}

void
fw_outage_show_config (fw_dispatcher_t *d)
{
   char rate[32] = "";
   const fw_rate_limit_config_t *r = &fw_dispatcher_config (d)->rate_limit;

   if (!fw_dispatcher_metrics (d)) {
      return;
   }
   if (r->count > 0) {
      snprintf (rate, sizeof rate, "%lld/%s", (long long) r->count, r->per_ms == 1000 ? "s" : "m");
   }
   fw_stream_metrics_set_outage_config (fw_dispatcher_metrics (d),
                                        fw_dispatcher_config (d)->circuit.enabled, rate);
}

void
fw_dispatcher_share_outage (fw_dispatcher_t *d, fw_dispatcher_t *from)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   fw_outage_t *from_guard = fw_dispatcher_outage (from);

   guard->store = from_guard->store;
   if (guard->circuit == from_guard->circuit) {
      return;
   }
   fw_outage_cleanup (d);
   guard->circuit = from_guard->circuit;
   guard->rate = from_guard->rate;
   guard->shared = true;
}

bool
fw_dispatcher_circuit_probe_now (fw_dispatcher_t *d)
{
   return d && fw_dispatcher_outage (d)->circuit &&
          fw_circuit_probe_now (fw_dispatcher_outage (d)->circuit);
}

void
fw_dispatcher_set_circuit_store (fw_dispatcher_t *d, const fw_circuit_store_t *store)
{
   fw_dispatcher_outage (d)->store = store;
}

/* Issue 37: the breaker as it is now, kept for a restart. */
static void
persist (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   fw_circuit_view_t v;

   if (guard->store && guard->store->save) {
      fw_circuit_view (guard->circuit, &v);
      guard->store->save (guard->store->ud, &v);
   }
}

/* Issue 37: the breaker closed for good; a restart starts closed. */
static void
forget (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   if (guard->store && guard->store->clear) {
      guard->store->clear (guard->store->ud);
   }
}

/* Shows the breaker as it is now in status and metrics. */
static void
show (fw_dispatcher_t *d)
{
   fw_circuit_view_t v;

   if (!fw_dispatcher_metrics (d)) {
      return;
   }
   fw_circuit_view (fw_dispatcher_outage (d)->circuit, &v);
   fw_stream_metrics_set_circuit (fw_dispatcher_metrics (d), (int) v.state, v.error_type,
                                  v.since_ms, v.next_probe_ms);
   if (v.state == FW_CIRCUIT_CLOSED) {
      fw_stream_metrics_set_state (fw_dispatcher_metrics (d), FW_STREAM_RUNNING, NULL);
   } else {
      char why[200];
      snprintf (why, sizeof why, "circuit open on %s", v.error_type);
      fw_stream_metrics_set_state (fw_dispatcher_metrics (d), FW_STREAM_RETRYING, why);
   }
}

/* Waits up to ms on d's clock, in slices, ending early when stop (checked
 * between slices) says so. True: a shutdown came first. A virtual clock
 * (flowwarden test) moves at once by ms. */
static bool
wait_sliced (fw_dispatcher_t *d, int64_t ms, bool (*stop) (fw_dispatcher_t *d))
{
   if (fw_dispatcher_clock_virtual (d)) {
      return fw_dispatcher_wait_ms (d, ms); /* flowwarden test: nobody resumes */
   }
   while (ms > 0) {
      int64_t slice = ms < SLICE_MS ? ms : SLICE_MS;
      if (fw_dispatcher_wait_ms (d, slice)) {
         return true;
      }
      if (stop && stop (d)) {
         return false;
      }
      ms -= slice;
   }
   return false;
}

static bool
circuit_closed (fw_dispatcher_t *d)
{
   return fw_circuit_state (fw_dispatcher_outage (d)->circuit) == FW_CIRCUIT_CLOSED;
}

/* A rate-limit token, waited for; false: a shutdown came first. */
static bool
take_token (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   fw_rate_limit_set (guard->rate, &fw_dispatcher_config (d)->rate_limit, fw_mono_ns ());
   for (;;) {
      int64_t now_ns = fw_dispatcher_clock_virtual (d) ? fw_dispatcher_now_ms (d) * 1000000
                                                       : fw_mono_ns ();
      int64_t wait_ns = fw_rate_limit_take (guard->rate, now_ns);
      if (wait_ns <= 0) {
         return true;
      }
      if (fw_dispatcher_metrics (d)) {
         fw_stream_metrics_rate_wait (fw_dispatcher_metrics (d), wait_ns);
      }
      if (fw_dispatcher_wait_ms (d, (wait_ns + 999999) / 1000000)) {
         return false;
      }
   }
}

static fw_hold_t wait_for_probe (fw_dispatcher_t *d, const char *id, int attempt);

/* Issue 37: the breaker was restored open after a restart and nobody holds
 * it: this event does, and is attempted when the probe is due. False: a
 * stop came first. */
static bool
adopt (fw_dispatcher_t *d, const fw_event_t *ev, int attempt)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   char id[1024];

   if (!ev) {
      /* A batch's call has no probe of its own: the breaker closes and the
       * batch follows its policy. */
      fw_circuit_close (guard->circuit);
      forget (d);
      show (d); /* before the line: whoever reads it finds status saying so */
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "circuit closed: the breaker restored at the "
              "start is not held by a batch's call; the batch follows its policy");
      return true;
   }
   fw_event_log_id (ev, id, sizeof id);
   guard->holder = true;
   fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
           "circuit open (restored): event %s holds it and is the next probe", id);
   return wait_for_probe (d, id, attempt - 1) != FW_HOLD_STOPPED;
}

bool
fw_outage_admit (fw_dispatcher_t *d, const fw_event_t *ev, int attempt)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   /* One lock when it is closed, as before issue 37. */
   if (fw_dispatcher_config (d)->circuit.enabled && !guard->holder && !circuit_closed (d) &&
       fw_circuit_adopt (guard->circuit) && !adopt (d, ev, attempt)) {
      return false;
   }
   /* Another lane's event holds the breaker open: this lane pauses too
    * (they share the dependency). Without circuit: no lock, no wait. */
   while (fw_dispatcher_config (d)->circuit.enabled && !guard->holder && !circuit_closed (d)) {
      if (wait_sliced (d, SLICE_MS, circuit_closed)) {
         return false;
      }
   }
   return fw_dispatcher_config (d)->rate_limit.count == 0 || take_token (d);
}

static bool
probe_asked_or_due (fw_dispatcher_t *d)
{
   fw_circuit_view_t v;

   fw_circuit_view (fw_dispatcher_outage (d)->circuit, &v);
   return v.state != FW_CIRCUIT_OPEN || v.probe_asked ||
          fw_dispatcher_now_ms (d) >= v.next_probe_ms;
}

/* The breaker is open and this dispatcher holds it: waits for the next
 * probe (or give_up_after). */
static fw_hold_t
wait_for_probe (fw_dispatcher_t *d, const char *id, int attempt)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   const fw_circuit_config_t *cfg = &fw_dispatcher_config (d)->circuit;

   for (;;) {
      int64_t wait;
      switch (fw_circuit_next (guard->circuit, cfg, fw_dispatcher_now_ms (d), &wait)) {
      case FW_CIRCUIT_PROBE:
         show (d); /* before the line: whoever reads it finds status saying so */
         fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
                 "circuit half-open: probing with event %s "
                 "(attempt %d)",
                 id, attempt + 1);
         return FW_HOLD_PROBE;
      case FW_CIRCUIT_GIVE_UP:
         fw_circuit_close (guard->circuit);
         guard->holder = false;
         forget (d);
         show (d); /* before the line, as above */
         fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
                 "circuit closed: give_up_after (%lld ms) passed; event %s follows the DLQ "
                 "policy and the stream goes on",
                 (long long) cfg->give_up_after_ms, id);
         return FW_HOLD_NONE;
      default:
         break;
      }
      if (wait_sliced (d, wait, probe_asked_or_due)) {
         /* A stop: the held event comes back (from the checkpoint before
          * it) and opens the breaker again if its dependency is still down. */
         fw_circuit_close (guard->circuit);
         guard->holder = false;
         show (d);
         return FW_HOLD_STOPPED;
      }
      /* fw_circuit_next sees a probe asked by `flowwarden resume` */
   }
}

/* Another lane holds the breaker: waits until it closes, then the event
 * gets one more attempt. */
static fw_hold_t
wait_for_holder (fw_dispatcher_t *d)
{
   while (!circuit_closed (d)) {
      if (wait_sliced (d, SLICE_MS, circuit_closed)) {
         return FW_HOLD_STOPPED;
      }
   }
   return FW_HOLD_PROBE;
}

fw_hold_t
fw_outage_hold (fw_dispatcher_t *d, const char *id, int attempt, const char *type,
                const char *message, bool giving_up)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   const fw_circuit_config_t *cfg = &fw_dispatcher_config (d)->circuit;
   bool outage = giving_up && fw_circuit_config_matches (cfg, type);
   int64_t now;
   fw_circuit_view_t v;

   if (guard->holder && !outage) {
      fw_circuit_close (guard->circuit);
      guard->holder = false;
      forget (d);
      show (d); /* before the line: whoever reads it finds status saying so */
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "circuit closed: the probe with event %s failed with %s, not an outage type "
              "(circuit.on): the event follows the normal policy",
              id, type);
      return FW_HOLD_NONE;
   }
   if (!outage) {
      return FW_HOLD_NONE;
   }
   now = fw_dispatcher_now_ms (d);
   /* Each line comes after show: whoever reads it finds status and metrics saying so. */
   if (guard->holder) {
      fw_circuit_probe_failed (guard->circuit, cfg, type, now);
      fw_circuit_view (guard->circuit, &v);
      show (d);
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "circuit open again: the probe with event %s failed with %s: %s; next probe in "
              "%lld ms",
              id, type, message, (long long) v.open_for_ms);
   } else if (fw_circuit_open (guard->circuit, cfg, type, now)) {
      guard->holder = true;
      if (fw_dispatcher_metrics (d)) {
         fw_stream_metrics_circuit_opened (fw_dispatcher_metrics (d), type);
      }
      show (d);
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "circuit OPEN: event %s failed %d attempt(s) with %s: %s; the event is held (not "
              "dead-lettered), no handler runs, first probe in %lld ms",
              id, attempt, type, message, (long long) cfg->open_for_ms);
   } else {
      return wait_for_holder (d);
   }
   persist (d); /* after show: status does not wait for the write */
   return wait_for_probe (d, id, attempt);
}

void
fw_outage_handled (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);
   fw_circuit_view_t v;

   if (!guard->holder) {
      return;
   }
   fw_circuit_view (guard->circuit, &v);
   fw_circuit_close (guard->circuit);
   guard->holder = false;
   forget (d);
   show (d); /* before the line: whoever reads it finds status saying so */
   fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
           "circuit closed: the probe succeeded after %d probe(s); the stream goes on", v.probes);
}

void
fw_outage_event_end (fw_dispatcher_t *d)
{
   fw_outage_t *guard = fw_dispatcher_outage (d);

   if (!guard->holder) {
      return;
   }
   fw_circuit_close (guard->circuit);
   guard->holder = false;
   show (d); /* before the line, as above */
   fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
           "circuit closed: the held event left the stream without a probe's outcome");
}

bool
fw_dispatcher_circuit_restore (fw_dispatcher_t *d, const fw_circuit_view_t *saved)
{
   if (!fw_dispatcher_config (d)->circuit.enabled ||
       !fw_circuit_restore (fw_dispatcher_outage (d)->circuit, saved)) {
      return false;
   }
   show (d); /* open from the start (the count of openings is this run's) */
   return true;
}
