/*
 * admin_json.c - the JSON the admin endpoint answers with: stream status,
 * readiness, errors.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "admin-private.h"
#include "flowwarden/clock.h"

/* "2026-11-22T02:09:22.867Z", or null for 0. */
static void
json_time (fw_strbuf_t *out, int64_t ms)
{
   struct tm tm;
   time_t secs;
   char buf[40];

   if (ms <= 0) {
      fw_strbuf_puts (out, "null");
      return;
   }
   secs = (time_t) (ms / 1000);
   gmtime_r (&secs, &tm);
   strftime (buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
   fw_strbuf_printf (out, "\"%s.%03dZ\"", buf, (int) (ms % 1000));
}

static const char *
empty_to_null (const char *s)
{
   return s && *s ? s : NULL;
}

/* "oplog_window_seconds" and "headroom_seconds" (the window less how far
 * behind the stream is: how much further it may fall before its history is
 * lost), both null when the window is unknown, and then
 * "oplog_window_unknown" says why ("empty oplog", ...). A stream that does not read
 * (paused, restarting, failed) is behind by its lag or, when more, its
 * checkpoint's age. */
static void
json_headroom (fw_strbuf_t *out, const fw_stream_snapshot_t *s)
{
   double behind = s->lag_seconds;

   if (s->role == FW_STREAM_ROLE_STANDBY) {
      /* Another member reads the unit: its headroom is that member's (issue 38). */
      fw_strbuf_puts (out, ",\"oplog_window_seconds\":");
      if (s->has_oplog_window) {
         fw_strbuf_json_double (out, s->oplog_window_seconds);
      } else {
         fw_strbuf_puts (out, "null");
      }
      fw_strbuf_puts (out, ",\"headroom_seconds\":null");
      return;
   }
   if (!fw_stream_state_ready (s->state) && s->checkpoint_ms > 0 &&
       (double) (fw_now_ms () - s->checkpoint_ms) / 1000.0 > behind) {
      behind = (double) (fw_now_ms () - s->checkpoint_ms) / 1000.0;
   }
   if (!s->has_oplog_window) {
      fw_strbuf_puts (out,
                      ",\"oplog_window_seconds\":null,\"headroom_seconds\":null,"
                      "\"oplog_window_unknown\":");
      fw_strbuf_json_string (out, fw_oplog_unknown_text (s->oplog_window_unknown));
      return;
   }
   fw_strbuf_puts (out, ",\"oplog_window_seconds\":");
   fw_strbuf_json_double (out, s->oplog_window_seconds);
   fw_strbuf_puts (out, ",\"headroom_seconds\":");
   fw_strbuf_json_double (out, s->oplog_window_seconds - behind);
}

/* Issue 29: "circuit" (streams with a breaker) and "rate_limit" (streams
 * with one); absent otherwise. */
static void
json_outage (fw_strbuf_t *out, const fw_outage_snapshot_t *o)
{
   static const char *const states[] = {"closed", "open", "half-open"};

   if (o->circuit) {
      fw_strbuf_printf (out, ",\"circuit\":{\"state\":\"%s\",\"error_type\":",
                        (unsigned) o->circuit_state < 3 ? states[o->circuit_state] : "closed");
      fw_strbuf_json_string (out, empty_to_null (o->circuit_error_type));
      fw_strbuf_puts (out, ",\"since\":");
      json_time (out, o->circuit_since_ms);
      fw_strbuf_puts (out, ",\"next_probe\":");
      json_time (out, o->circuit_next_probe_ms);
      fw_strbuf_puts (out, "}");
   }
   if (o->rate_limit[0]) {
      fw_strbuf_puts (out, ",\"rate_limit\":{\"rate\":");
      fw_strbuf_json_string (out, o->rate_limit);
      fw_strbuf_puts (out, ",\"wait_seconds\":");
      fw_strbuf_json_double (out, o->rate_wait_seconds);
      fw_strbuf_puts (out, "}");
   }
}

/* ha: the stream's role and (issue 38) the unit's holder as this member
 * sees it, how long it has had none, and the lease; absent without ha. */
static void
json_role (fw_strbuf_t *out, const fw_stream_snapshot_t *s)
{
   if (s->role == FW_STREAM_ROLE_NONE) {
      return;
   }
   fw_strbuf_puts (out, ",\"role\":");
   fw_strbuf_json_string (out, s->role == FW_STREAM_ROLE_LEADER ? "leader" : "standby");
   fw_strbuf_puts (out, ",\"holder\":");
   fw_strbuf_json_string (out, empty_to_null (s->holder));
   fw_strbuf_puts (out, ",\"orphaned_seconds\":");
   if (s->orphaned_seconds >= 0) {
      fw_strbuf_json_double (out, s->orphaned_seconds);
   } else {
      fw_strbuf_puts (out, "null");
   }
   fw_strbuf_puts (out, ",\"lease_seconds\":");
   fw_strbuf_json_double (out, s->lease_seconds);
}

/* "events": {total, by operation}, "handled": {by outcome, ... (left open). */
static void
json_counts (fw_strbuf_t *out, const fw_stream_snapshot_t *s)
{
   fw_strbuf_printf (out, ",\"events\":{\"total\":%llu", (unsigned long long) s->events);
   for (int i = 0; i < FW_METRICS_OP_COUNT; i++) {
      fw_strbuf_printf (out, ",\"%s\":%llu", fw_metrics_op_name ((fw_metrics_op_t) i),
                        (unsigned long long) s->events_by_op[i]);
   }
   fw_strbuf_puts (out, "},\"handled\":{");
   for (int i = 0; i < FW_METRICS_OUTCOME_COUNT; i++) {
      fw_strbuf_printf (out, "%s\"%s\":%llu", i ? "," : "",
                        fw_metrics_outcome_name ((fw_metrics_outcome_t) i),
                        (unsigned long long) s->handled[i]);
   }
}

void
fw_admin_json_stream (fw_strbuf_t *out, const fw_stream_snapshot_t *s)
{
   fw_strbuf_puts (out, "{\"name\":");
   fw_strbuf_json_string (out, s->name);
   fw_strbuf_printf (out,
                     ",\"state\":\"%s\",\"ready\":%s,\"reason\":", fw_stream_state_name (s->state),
                     fw_stream_snapshot_ready (s) ? "true" : "false");
   fw_strbuf_json_string (out, empty_to_null (s->reason));
   fw_strbuf_puts (out, ",\"script_version\":");
   fw_strbuf_json_string (out, empty_to_null (s->script_version));
   json_role (out, s);
   fw_strbuf_puts (out, ",\"last_event_time\":");
   json_time (out, s->last_event_ms);
   fw_strbuf_puts (out, ",\"lag_seconds\":");
   if (s->role == FW_STREAM_ROLE_STANDBY) {
      fw_strbuf_puts (out, "null"); /* the holder's to say (issue 38) */
   } else {
      fw_strbuf_json_double (out, s->lag_seconds);
   }
   json_headroom (out, s);
   fw_strbuf_puts (out, ",\"events_per_second\":");
   fw_strbuf_json_double (out, s->events_per_second);
   json_counts (out, s);
   fw_strbuf_printf (out,
                     "},\"handler_errors\":%llu,\"retries\":%llu,\"restarts\":%llu,"
                     "\"attempt\":%d,\"last_error_type\":",
                     (unsigned long long) s->handler_errors, (unsigned long long) s->retries,
                     (unsigned long long) s->restarts, s->attempt);
   fw_strbuf_json_string (out, empty_to_null (s->last_error_type));
   fw_strbuf_puts (out, ",\"last_error_time\":");
   json_time (out, s->last_error_ms);
   fw_strbuf_puts (out, ",\"last_error_age_seconds\":");
   if (s->last_error_age_seconds >= 0) {
      fw_strbuf_json_double (out, s->last_error_age_seconds);
   } else {
      fw_strbuf_puts (out, "null");
   }
   fw_strbuf_puts (out, ",\"checkpoint_time\":");
   json_time (out, s->checkpoint_ms);
   fw_strbuf_printf (out,
                     ",\"checkpoint_writes\":%llu,\"checkpoint_errors\":%llu,"
                     "\"dlq_writes\":%llu,\"dlq_pending\":",
                     (unsigned long long) s->checkpoint_writes,
                     (unsigned long long) s->checkpoint_errors, (unsigned long long) s->dlq_writes);
   if (s->dlq_pending >= 0 && s->role != FW_STREAM_ROLE_STANDBY) { /* the holder's (ha) */
      fw_strbuf_printf (out,
                        "%lld,\"dlq_oldest_pending_age_seconds\":", (long long) s->dlq_pending);
      fw_strbuf_json_double (out, s->dlq_oldest_age_seconds);
   } else {
      fw_strbuf_puts (out, "null,\"dlq_oldest_pending_age_seconds\":null");
   }
   json_outage (out, &s->outage);
   fw_strbuf_printf (
      out, ",\"lua_memory_bytes\":%llu,\"snapshot\":", (unsigned long long) s->lua_memory_bytes);
   if (s->snapshot_state == 0) {
      fw_strbuf_puts (out, "null}");
   } else {
      fw_strbuf_printf (out, "{\"state\":\"%s\",\"documents\":%lld,\"chunks\":%lld}}",
                        s->snapshot_state == 1 ? "running" : "finished",
                        (long long) s->snapshot_documents, (long long) s->snapshot_chunks);
   }
}

/* "last_reload": null, or its result, time, age and message. */
static void
json_last_reload (fw_strbuf_t *out, const fw_reload_result_t *reload, int64_t now_ms)
{
   fw_strbuf_puts (out, ",\"last_reload\":");
   if (!reload || !reload->happened) {
      fw_strbuf_puts (out, "null");
      return;
   }
   fw_strbuf_printf (out, "{\"result\":\"%s\",\"time\":", reload->ok ? "success" : "failure");
   json_time (out, reload->at_ms);
   fw_strbuf_puts (out, ",\"age_seconds\":");
   fw_strbuf_json_double (out, now_ms > reload->at_ms ? (double) (now_ms - reload->at_ms) / 1000.0
                                                      : 0.0);
   fw_strbuf_puts (out, ",\"message\":");
   fw_strbuf_json_string (out, reload->message);
   fw_strbuf_puts (out, "}");
}

void
fw_admin_json_streams (fw_strbuf_t *out, const fw_stream_snapshot_t *s, int n,
                       const fw_reload_result_t *reload, int64_t now_ms)
{
   fw_strbuf_puts (out, "{\"streams\":[");
   for (int i = 0; i < n; i++) {
      if (i) {
         fw_strbuf_puts (out, ",");
      }
      fw_admin_json_stream (out, &s[i]);
   }
   fw_strbuf_puts (out, "]");
   json_last_reload (out, reload, now_ms);
   fw_strbuf_puts (out, "}\n");
}

bool
fw_admin_json_ready (fw_strbuf_t *out, const fw_stream_snapshot_t *s, int n)
{
   bool ready = n > 0;
   bool first = true;

   for (int i = 0; i < n; i++) {
      ready = ready && fw_stream_snapshot_ready (&s[i]);
   }
   fw_strbuf_printf (out, "{\"ready\":%s,\"streams\":%d,\"not_ready\":[", ready ? "true" : "false",
                     n);
   for (int i = 0; i < n; i++) {
      if (fw_stream_snapshot_ready (&s[i])) {
         continue;
      }
      fw_strbuf_puts (out, first ? "{\"stream\":" : ",{\"stream\":");
      first = false;
      fw_strbuf_json_string (out, s[i].name);
      fw_strbuf_printf (out, ",\"state\":\"%s\",\"reason\":", fw_stream_state_name (s[i].state));
      fw_strbuf_json_string (out, empty_to_null (s[i].reason));
      fw_strbuf_puts (out, "}");
   }
   fw_strbuf_puts (out, "]");
   if (n == 0) {
      fw_strbuf_puts (out, ",\"reason\":\"no stream is running\"");
   }
   fw_strbuf_puts (out, "}\n");
   return ready;
}

void
fw_admin_json_error (fw_strbuf_t *out, int status, const char *message)
{
   fw_strbuf_puts (out, "{\"error\":");
   fw_strbuf_json_string (out, message);
   fw_strbuf_printf (out, ",\"status\":%d}\n", status);
}
