/*
 * metrics_outage.c - a stream's circuit breaker and rate limit in its
 * metrics block (issue 29): flowwarden_stream_circuit_state,
 * flowwarden_circuit_opened_total and
 * flowwarden_rate_limit_wait_seconds_total, and their part of status.
 */
#include <stdio.h>
#include <string.h>

#include "metrics-private.h"

static void
copy_text (char *dst, size_t len, const char *src)
{
   snprintf (dst, len, "%s", src ? src : "");
}

void
fw_stream_metrics_set_outage_config (fw_stream_metrics_t *b, bool circuit, const char *rate_limit)
{
   if (!b) {
      return;
   }
   pthread_mutex_lock (&b->mu);
   b->outage.circuit = circuit;
   copy_text (b->outage.rate_limit, sizeof b->outage.rate_limit, rate_limit);
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_set_circuit (fw_stream_metrics_t *b, int state, const char *type,
                               int64_t since_ms, int64_t next_probe_ms)
{
   if (!b) {
      return;
   }
   pthread_mutex_lock (&b->mu);
   b->outage.circuit_state = state;
   copy_text (b->outage.circuit_type, sizeof b->outage.circuit_type, type);
   b->outage.circuit_since_ms = since_ms;
   b->outage.circuit_next_probe_ms = next_probe_ms;
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_circuit_opened (fw_stream_metrics_t *b, const char *type)
{
   fw_outage_block_t *o;
   int i;

   if (!b) {
      return;
   }
   o = &b->outage;
   pthread_mutex_lock (&b->mu);
   for (i = 0; i < o->n_opened_types; i++) {
      if (strcmp (o->opened_types[i], type) == 0) {
         break;
      }
   }
   if (i == o->n_opened_types && i < FW_OUTAGE_MAX_TYPES) {
      copy_text (o->opened_types[i], sizeof o->opened_types[i], type);
      o->n_opened_types++;
   }
   o->opened[i]++;
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_rate_wait (fw_stream_metrics_t *b, int64_t ns)
{
   if (b && ns > 0) {
      count_add (&b->outage.rate_wait_ns, (uint64_t) ns);
   }
}

void
fw_metrics_outage_snapshot (fw_stream_metrics_t *b, fw_outage_snapshot_t *out)
{
   pthread_mutex_lock (&b->mu);
   out->circuit = b->outage.circuit;
   out->circuit_state = b->outage.circuit_state;
   memcpy (out->circuit_error_type, b->outage.circuit_type, sizeof out->circuit_error_type);
   out->circuit_since_ms = b->outage.circuit_since_ms;
   out->circuit_next_probe_ms = b->outage.circuit_next_probe_ms;
   memcpy (out->rate_limit, b->outage.rate_limit, sizeof out->rate_limit);
   pthread_mutex_unlock (&b->mu);
   out->rate_wait_seconds = (double) count_get (&b->outage.rate_wait_ns) / 1e9;
}

static void
series (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b, const char *type)
{
   fw_strbuf_printf (out, "%s{stream=\"", name);
   fw_strbuf_prom_label (out, b->name);
   if (type) {
      fw_strbuf_puts (out, "\",type=\"");
      fw_strbuf_prom_label (out, type);
   }
   fw_strbuf_puts (out, "\"}");
}

/* A breaker's counters, read under the block's lock. */
static void
render_opened (fw_stream_metrics_t *b, fw_strbuf_t *out)
{
   fw_outage_block_t *o = &b->outage;

   for (int i = 0; i < o->n_opened_types; i++) {
      series (out, "flowwarden_circuit_opened_total", b, o->opened_types[i]);
      fw_strbuf_printf (out, " %llu\n", (unsigned long long) o->opened[i]);
   }
   if (o->opened[FW_OUTAGE_MAX_TYPES]) {
      series (out, "flowwarden_circuit_opened_total", b, "other");
      fw_strbuf_printf (out, " %llu\n", (unsigned long long) o->opened[FW_OUTAGE_MAX_TYPES]);
   }
}

void
fw_metrics_render_outage (fw_stream_metrics_t *first, fw_strbuf_t *out)
{
   fw_strbuf_puts (out,
                   "# HELP flowwarden_stream_circuit_state The stream's circuit breaker: "
                   "0 closed, 1 open, 2 half-open (a probe runs); streams with circuit.\n"
                   "# TYPE flowwarden_stream_circuit_state gauge\n");
   FW_FOREACH_ACTIVE_STREAM (first, b)
   {
      pthread_mutex_lock (&b->mu);
      /* A standby's (ha) breaker is stale: the holder's is shown (issue 38). */
      if (b->outage.circuit && !fw_metrics_holder_only_hidden (b)) {
         series (out, "flowwarden_stream_circuit_state", b, NULL);
         fw_strbuf_printf (out, " %d\n", b->outage.circuit_state);
      }
      pthread_mutex_unlock (&b->mu);
   }
   fw_strbuf_puts (out,
                   "# HELP flowwarden_circuit_opened_total Times the stream's circuit "
                   "breaker opened, by the error type that opened it.\n"
                   "# TYPE flowwarden_circuit_opened_total counter\n");
   FW_FOREACH_ACTIVE_STREAM (first, b)
   {
      pthread_mutex_lock (&b->mu);
      render_opened (b, out);
      pthread_mutex_unlock (&b->mu);
   }
   fw_strbuf_puts (out,
                   "# HELP flowwarden_rate_limit_wait_seconds_total Time handler attempts "
                   "waited for the stream's rate_limit; streams with rate_limit.\n"
                   "# TYPE flowwarden_rate_limit_wait_seconds_total counter\n");
   FW_FOREACH_ACTIVE_STREAM (first, b)
   {
      pthread_mutex_lock (&b->mu);
      bool limited = b->outage.rate_limit[0] != '\0';
      pthread_mutex_unlock (&b->mu);
      if (limited) {
         series (out, "flowwarden_rate_limit_wait_seconds_total", b, NULL);
         fw_strbuf_printf (out, " %.6f\n", (double) count_get (&b->outage.rate_wait_ns) / 1e9);
      }
   }
}
