/*
 * stream_shared.c - a unit's lease with ha.mode = "shared" (issue 31,
 * shared_units.h): made by its group, given up at an event boundary when
 * this instance holds more than its share (the final checkpoint saved
 * first, by stand_by in stream_restart.c). Called by the stream's thread.
 */
#include <stdio.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/ha/group_start.h"
#include "runtime/ha/shared_units.h"
#include "runtime/stream/stream_partition-private.h"
#include "runtime/stream/stream_shared-private.h"

void
fw_stream_shared_link (fw_stream_shared_t *s, const fw_stream_config_t *cfg,
                       mongoc_client_t *const *client, fw_lease_t *const *lease)
{
   s->cfg = cfg;
   s->client = client;
   s->lease = lease;
}

/* The stream's start record's _id: <stream>#start, of the script's stream
 * (a partitioned stream's base name: its units share one). */
static bool
start_id (const fw_stream_config_t *cfg, char *out, size_t len)
{
   return fw_group_start_id (cfg->name, fw_stream_partition_base_len (cfg), out, len);
}

fw_lease_t *
fw_stream_lease_new (fw_stream_shared_t *s, fw_error_t *err)
{
   const mongoc_uri_t *uri = mongoc_client_get_uri (*s->client);
   fw_lease_t *l;
   char id[600];

   if (s->metrics) {
      fw_stream_metrics_set_lease (s->metrics, s->cfg->ha_lease_ms);
   }
   if (!s->cfg->ha_shared) {
      return fw_lease_new (uri, s->cfg->database, s->cfg->name, s->cfg->ha_lease_ms, NULL, err);
   }
   if (!(s->group = fw_shared_group_join (uri, s->cfg->database, s->cfg->ha_lease_ms, err))) {
      return NULL;
   }
   if (!start_id (s->cfg, id, sizeof id)) {
      fw_error_set (err, FW_ERROR_INVALID, "stream name too long for its start record");
      fw_shared_group_leave (s->group);
      s->group = NULL;
      return NULL;
   }
   s->start_at = 0;
   if (!(l = fw_shared_group_lease (s->group, uri, s->cfg->name, id, err))) {
      fw_shared_group_leave (s->group);
      s->group = NULL;
   }
   return l;
}

bool
fw_stream_group_start (fw_stream_shared_t *s, mongoc_client_t *client, uint64_t *at, char *why,
                       size_t len)
{
   fw_group_start_t got;
   fw_error_t err;
   char id[600];

   *at = 0;
   if (!s->cfg->ha_shared) {
      return true;
   }
   if (s->start_at) {
      *at = s->start_at;
      return true;
   }
   if (!start_id (s->cfg, id, sizeof id)) {
      snprintf (why, len, "stream name too long for its start record");
      return false;
   }
   if (!fw_group_start_take (client, s->cfg->database, id, s->cfg->ha_lease_ms, &got, &err)) {
      snprintf (why, len, "cannot read or record the stream's start in its group: %s", err.message);
      return false;
   }
   if (got.began) {
      fw_log (FW_LOG_INFO, s->cfg->name,
              "shared: the group starts here: units without a checkpoint start at "
              "Timestamp(%u, %u) (%s.%s \"%s\")",
              (unsigned) (got.at >> 32), (unsigned) (got.at & 0xffffffffu), s->cfg->database,
              FW_CHECKPOINT_COLLECTION, id);
   }
   if (s->group && *s->lease) {
      fw_shared_group_started (s->group, *s->lease, got.at);
   }
   *at = s->start_at = got.at;
   return true;
}

bool
fw_stream_over_share (fw_stream_shared_t *s)
{
   return s->group && *s->lease && fw_shared_should_yield (s->group, *s->lease);
}

bool
fw_stream_yield_unit (fw_stream_shared_t *s)
{
   if (!fw_stream_over_share (s)) {
      return false;
   }
   fw_shared_yield (s->group, *s->lease, s->cfg->name);
   return true;
}

void
fw_stream_lease_destroy (fw_stream_shared_t *s)
{
   if (s->group && *s->lease) {
      fw_shared_group_remove (s->group, *s->lease);
   }
   fw_lease_destroy (*s->lease);
   fw_shared_group_leave (s->group);
   s->group = NULL;
}

void
fw_stream_shared_set_metrics (fw_stream_shared_t *s, fw_metrics_t *registry,
                              fw_stream_metrics_t *metrics)
{
   static const fw_metric_spec_t held = {
      "flowwarden_units_held",
      "1 while this instance leads the unit (ha.mode = \"shared\"): "
      "sum() is the units it holds",
      FW_METRIC_GAUGE,
      NULL,
      0,
      NULL,
      0};
   static const fw_metric_spec_t members = {
      "flowwarden_members",
      "Live members (instances) counted in the unit's database's "
      "_fw_members (ha.mode = \"shared\")",
      FW_METRIC_GAUGE,
      NULL,
      0,
      NULL,
      0};
   fw_metric_t *h, *m;
   fw_error_t err;

   s->metrics = metrics;
   s->held = s->members = NULL;
   if (!s->cfg->ha_shared || !registry || !s->metrics) {
      return;
   }
   if ((h = fw_metrics_define_own (registry, &held, &err)) &&
       (m = fw_metrics_define_own (registry, &members, &err))) {
      s->held = fw_metric_series_get (h, s->metrics, NULL);
      s->members = fw_metric_series_get (m, s->metrics, NULL);
   }
}

/* Whether the unit has had no live holder, and since when (wall clock):
 * its lease is free or expired, or (shared) its holder was missing from a
 * count of the members sent after one of its lease renewals. */
static bool
unit_orphaned (fw_stream_shared_t *s, const fw_lease_status_t *st, int64_t *since)
{
   int64_t counted, renewed, now = fw_mono_ms ();

   if (st->free_ms >= 0) {
      *since = fw_now_ms () - st->free_ms;
      s->standby.orphan_seen_ms = 0;
      return true;
   }
   if (st->live_holder && s->group &&
       fw_shared_group_member_live (s->group, st->holder, &counted) == 0) {
      renewed = now + st->expires_in_ms - s->cfg->ha_lease_ms;
      if (counted > renewed + 100) {
         if (!s->standby.orphan_seen_ms) {
            s->standby.orphan_seen_ms = fw_now_ms () - (now - counted);
         }
         *since = s->standby.orphan_seen_ms;
         return true;
      }
   }
   s->standby.orphan_seen_ms = 0;
   return false;
}

/* A unit this instance does not hold: standby, or orphaned. */
static void
observe_standby (fw_stream_shared_t *s, const fw_shared_figures_t *f)
{
   char msg[600], share[200] = "";
   fw_lease_status_t st;
   int64_t since = 0;
   bool orphaned, short_of_share;

   fw_lease_status (*s->lease, &st);
   if (st.role == FW_LEASE_RELEASED) {
      return; /* stopping: the thread's own state stands */
   }
   orphaned = unit_orphaned (s, &st, &since);
   /* "leader": every standby takes a free lease; "shared": below the share
    * (or before the first count of the members, when it holds nothing yet). */
   short_of_share = !s->group || f->members == 0 || f->held < f->share;
   if (s->group) {
      snprintf (share, sizeof share, "; %d member%s, this instance holds %d of %d units (share %d)",
                f->members, f->members == 1 ? "" : "s", f->held, f->units, f->share);
   }
   if (orphaned) {
      char why[300];
      if (st.free_ms < 0) {
         snprintf (why, sizeof why, "its holder %.200s is no longer a member", st.holder);
      } else if (st.holder[0]) {
         snprintf (why, sizeof why, "the lease of %.200s expired", st.holder);
      } else {
         snprintf (why, sizeof why, "its lease is free (given up)");
      }
      snprintf (msg, sizeof msg, "orphaned for %.1f s: no live holder (%s)%s%s",
                (double) (fw_now_ms () - since) / 1000.0, why, share,
                short_of_share ? "; this instance takes it at its next look"
                               : "; this instance holds its share");
      fw_stream_metrics_set_unit_view (s->metrics, st.holder, since, short_of_share);
      fw_stream_metrics_set_state (s->metrics, FW_STREAM_ORPHANED, msg);
      return;
   }
   if (!st.live_holder) {
      /* Not read yet since this instance stopped holding it (or started). */
      fw_stream_metrics_set_unit_view (s->metrics, NULL, 0, short_of_share);
      fw_stream_metrics_set_state (s->metrics, FW_STREAM_STARTING,
                                   "starting: reading the unit's lease");
      return;
   }
   snprintf (msg, sizeof msg, "standby%s: unit held by %.200s%s", s->group ? " (shared)" : "",
             st.holder, share);
   fw_stream_metrics_set_unit_view (s->metrics, st.holder, 0, short_of_share);
   fw_stream_metrics_set_state (s->metrics, FW_STREAM_STANDBY, msg);
}

void
fw_stream_shared_observe (fw_stream_shared_t *s)
{
   int64_t now, seen = __atomic_load_n (&s->seen_ms, __ATOMIC_RELAXED);
   fw_shared_figures_t f;
   bool leading;

   if (!s->group || !*s->lease || (now = fw_mono_ms ()) - seen < 500 ||
       !__atomic_compare_exchange_n (&s->seen_ms, &seen, now, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED)) {
      return;
   }
   leading = fw_lease_is_leader (*s->lease, NULL);
   fw_shared_group_figures (s->group, &f);
   if (s->held) {
      fw_metric_series_set (s->held, leading ? 1.0 : 0.0);
   }
   if (s->members) {
      fw_metric_series_set (s->members, (double) f.members);
   }
}

void
fw_stream_standby_observe (fw_stream_shared_t *s)
{
   fw_shared_figures_t f = {0};
   int64_t now = fw_mono_ms ();

   fw_stream_shared_observe (s);
   if (!*s->lease || !s->metrics || now - s->standby.seen_ms < 250 ||
       fw_lease_is_leader (*s->lease, NULL)) {
      return;
   }
   s->standby.seen_ms = now;
   if (s->group) {
      fw_shared_group_figures (s->group, &f);
   }
   observe_standby (s, &f);
}
