/*
 * admin_history.c - what the console's chart draws: each stream's lag and
 * events/s over the last 15 minutes, sampled from the streams' snapshots
 * every FW_ADMIN_HISTORY_STEP_MS by a thread of the admin endpoint.
 *
 * Memory is bounded: one ring of FW_ADMIN_HISTORY_SAMPLES samples (24 bytes
 * each) per stream, at most FW_ADMIN_HISTORY_STREAMS streams; a stream that
 * no longer exists (a reload removed it) is dropped once its ring holds
 * nothing newer than the window.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "admin-private.h"

typedef struct {
   int64_t at_ms;
   double lag_seconds;
   double events_per_second;
} sample_t;

typedef struct {
   char name[FW_METRICS_NAME_MAX];
   sample_t ring[FW_ADMIN_HISTORY_SAMPLES];
   int head;  /* next slot written */
   int count; /* samples held */
} series_t;

struct fw_admin_history {
   pthread_mutex_t mu;
   series_t *series[FW_ADMIN_HISTORY_STREAMS];
   int n;
};

fw_admin_history_t *
fw_admin_history_new (void)
{
   fw_admin_history_t *h = calloc (1, sizeof *h);

   if (h && pthread_mutex_init (&h->mu, NULL) != 0) {
      free (h);
      h = NULL;
   }
   return h;
}

void
fw_admin_history_destroy (fw_admin_history_t *h)
{
   if (!h) {
      return;
   }
   for (int i = 0; i < h->n; i++) {
      free (h->series[i]);
   }
   pthread_mutex_destroy (&h->mu);
   free (h);
}

/* The series of name, created when missing; NULL when full or out of
 * memory (that stream is then not charted). Called with h->mu held. */
static series_t *
series_of (fw_admin_history_t *h, const char *name)
{
   series_t *s;

   for (int i = 0; i < h->n; i++) {
      if (strcmp (h->series[i]->name, name) == 0) {
         return h->series[i];
      }
   }
   if (h->n == FW_ADMIN_HISTORY_STREAMS || !(s = calloc (1, sizeof *s))) {
      return NULL;
   }
   strncpy (s->name, name, sizeof s->name - 1);
   h->series[h->n++] = s;
   return s;
}

/* Drops the series whose newest sample left the window. */
static void
drop_stale (fw_admin_history_t *h, int64_t now_ms)
{
   int kept = 0;

   for (int i = 0; i < h->n; i++) {
      series_t *s = h->series[i];
      int newest = (s->head + FW_ADMIN_HISTORY_SAMPLES - 1) % FW_ADMIN_HISTORY_SAMPLES;
      if (s->count > 0 && now_ms - s->ring[newest].at_ms > FW_ADMIN_HISTORY_WINDOW_MS) {
         free (s);
         continue;
      }
      h->series[kept++] = s;
   }
   h->n = kept;
}

void
fw_admin_history_record (fw_admin_history_t *h, const fw_stream_snapshot_t *snaps, int n,
                         int64_t now_ms)
{
   pthread_mutex_lock (&h->mu);
   drop_stale (h, now_ms);
   for (int i = 0; i < n; i++) {
      series_t *s = series_of (h, snaps[i].name);
      if (!s) {
         continue;
      }
      s->ring[s->head] = (sample_t){now_ms, snaps[i].lag_seconds, snaps[i].events_per_second};
      s->head = (s->head + 1) % FW_ADMIN_HISTORY_SAMPLES;
      if (s->count < FW_ADMIN_HISTORY_SAMPLES) {
         s->count++;
      }
   }
   pthread_mutex_unlock (&h->mu);
}

void
fw_admin_history_json (fw_admin_history_t *h, fw_strbuf_t *out, int64_t now_ms)
{
   fw_strbuf_printf (out, "{\"step_seconds\":%d,\"window_seconds\":%d,\"now\":%lld,\"streams\":{",
                     FW_ADMIN_HISTORY_STEP_MS / 1000, FW_ADMIN_HISTORY_WINDOW_MS / 1000,
                     (long long) now_ms);
   pthread_mutex_lock (&h->mu);
   for (int i = 0; i < h->n; i++) {
      series_t *s = h->series[i];
      int first = (s->head + FW_ADMIN_HISTORY_SAMPLES - s->count) % FW_ADMIN_HISTORY_SAMPLES;
      fw_strbuf_puts (out, i ? "," : "");
      fw_strbuf_json_string (out, s->name);
      /* Columns, so the page reads three arrays: time (ms), lag, rate. */
      fw_strbuf_puts (out, ":{\"t\":[");
      for (int k = 0; k < s->count; k++) {
         fw_strbuf_printf (out, "%s%lld", k ? "," : "",
                           (long long) s->ring[(first + k) % FW_ADMIN_HISTORY_SAMPLES].at_ms);
      }
      fw_strbuf_puts (out, "],\"lag_seconds\":[");
      for (int k = 0; k < s->count; k++) {
         fw_strbuf_puts (out, k ? "," : "");
         fw_strbuf_json_double (out, s->ring[(first + k) % FW_ADMIN_HISTORY_SAMPLES].lag_seconds);
      }
      fw_strbuf_puts (out, "],\"events_per_second\":[");
      for (int k = 0; k < s->count; k++) {
         fw_strbuf_puts (out, k ? "," : "");
         fw_strbuf_json_double (out,
                                s->ring[(first + k) % FW_ADMIN_HISTORY_SAMPLES].events_per_second);
      }
      fw_strbuf_puts (out, "]}");
   }
   pthread_mutex_unlock (&h->mu);
   fw_strbuf_puts (out, "}}\n");
}
