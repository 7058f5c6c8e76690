/*
 * stream_shared.c - a unit's lease with ha.mode = "shared" (issue 31,
 * shared_units.h): made by its group, given up at an event boundary when
 * this instance holds more than its share (the final checkpoint saved
 * first, by stand_by in stream_restart.c). Called by the stream's thread.
 */
#include <stdio.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/ha/shared_units.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_shared-private.h"
#include "runtime/stream/stream_worker-private.h"

fw_lease_t *
fw_stream_lease_new (fw_stream_worker_t *w, fw_error_t *err)
{
   const mongoc_uri_t *uri = mongoc_client_get_uri (w->client);
   fw_lease_t *l;

   if (w->metrics) {
      fw_stream_metrics_set_lease (w->metrics, w->cfg->ha_lease_ms);
   }
   if (!w->cfg->ha_shared) {
      return fw_lease_new (uri, w->cfg->database, w->cfg->name, w->cfg->ha_lease_ms, NULL, err);
   }
   if (!(w->shared.group = fw_shared_group_join (uri, w->cfg->database, w->cfg->ha_lease_ms,
                                                 err))) {
      return NULL;
   }
   if (!(l = fw_shared_group_lease (w->shared.group, uri, w->cfg->name, err))) {
      fw_shared_group_leave (w->shared.group);
      w->shared.group = NULL;
   }
   return l;
}

/* ha.mode = "leader": whether this thread may still call handlers (here
 * beside the share it reads; declared in stream_lead-private.h). */
bool
fw_stream_lease_lost (fw_stream_worker_t *w)
{
   fw_stream_shared_observe (w); /* ha.mode = "shared" only */
   return w->lead.lease && (!fw_lease_is_leader (w->lead.lease, NULL) || fw_stream_over_share (w));
}

bool
fw_stream_over_share (fw_stream_worker_t *w)
{
   return w->shared.group && w->lead.lease &&
          fw_shared_should_yield (w->shared.group, w->lead.lease);
}

bool
fw_stream_yield_unit (fw_stream_worker_t *w)
{
   if (!fw_stream_over_share (w)) {
      return false;
   }
   fw_shared_yield (w->shared.group, w->lead.lease, w->cfg->name);
   return true;
}

void
fw_stream_lease_destroy (fw_stream_worker_t *w)
{
   if (w->shared.group && w->lead.lease) {
      fw_shared_group_remove (w->shared.group, w->lead.lease);
   }
   fw_lease_destroy (w->lead.lease);
   fw_shared_group_leave (w->shared.group);
   w->shared.group = NULL;
}

void
fw_stream_shared_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry)
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

   w->shared.held = w->shared.members = NULL;
   if (!w->cfg->ha_shared || !registry || !w->metrics) {
      return;
   }
   if ((h = fw_metrics_define_own (registry, &held, &err)) &&
       (m = fw_metrics_define_own (registry, &members, &err))) {
      w->shared.held = fw_metric_series_get (h, w->metrics, NULL);
      w->shared.members = fw_metric_series_get (m, w->metrics, NULL);
   }
}

/* Whether the unit has had no live holder, and since when (wall clock):
 * its lease is free or expired, or (shared) its holder was missing from a
 * count of the members sent after one of its lease renewals. */
static bool
unit_orphaned (fw_stream_worker_t *w, const fw_lease_status_t *st, int64_t *since)
{
   int64_t counted, renewed, now = fw_mono_ms ();

   if (st->free_ms >= 0) {
      *since = fw_now_ms () - st->free_ms;
      w->standby.orphan_seen_ms = 0;
      return true;
   }
   if (st->live_holder && w->shared.group &&
       fw_shared_group_member_live (w->shared.group, st->holder, &counted) == 0) {
      renewed = now + st->expires_in_ms - w->cfg->ha_lease_ms;
      if (counted > renewed + 100) {
         if (!w->standby.orphan_seen_ms) {
            w->standby.orphan_seen_ms = fw_now_ms () - (now - counted);
         }
         *since = w->standby.orphan_seen_ms;
         return true;
      }
   }
   w->standby.orphan_seen_ms = 0;
   return false;
}

/* A unit this instance does not hold: standby, or orphaned. */
static void
observe_standby (fw_stream_worker_t *w, const fw_shared_figures_t *f)
{
   char msg[600], share[200] = "";
   fw_lease_status_t st;
   int64_t since = 0;
   bool orphaned, short_of_share;

   fw_lease_status (w->lead.lease, &st);
   if (st.role == FW_LEASE_RELEASED) {
      return; /* stopping: the thread's own state stands */
   }
   orphaned = unit_orphaned (w, &st, &since);
   /* "leader": every standby takes a free lease; "shared": below the share
    * (or before the first count of the members, when it holds nothing yet). */
   short_of_share = !w->shared.group || f->members == 0 || f->held < f->share;
   if (w->shared.group) {
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
      fw_stream_metrics_set_unit_view (w->metrics, st.holder, since, short_of_share);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_ORPHANED, msg);
      return;
   }
   if (!st.live_holder) {
      /* Not read yet since this instance stopped holding it (or started). */
      fw_stream_metrics_set_unit_view (w->metrics, NULL, 0, short_of_share);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_STARTING,
                                   "starting: reading the unit's lease");
      return;
   }
   snprintf (msg, sizeof msg, "standby%s: unit held by %.200s%s",
             w->shared.group ? " (shared)" : "", st.holder, share);
   fw_stream_metrics_set_unit_view (w->metrics, st.holder, 0, short_of_share);
   fw_stream_metrics_set_state (w->metrics, FW_STREAM_STANDBY, msg);
}

void
fw_stream_shared_observe (fw_stream_worker_t *w)
{
   int64_t now, seen = __atomic_load_n (&w->shared.seen_ms, __ATOMIC_RELAXED);
   fw_shared_figures_t f;
   bool leading;

   if (!w->shared.group || !w->lead.lease || (now = fw_mono_ms ()) - seen < 500 ||
       !__atomic_compare_exchange_n (&w->shared.seen_ms, &seen, now, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED)) {
      return;
   }
   leading = fw_lease_is_leader (w->lead.lease, NULL);
   fw_shared_group_figures (w->shared.group, &f);
   if (w->shared.held) {
      fw_metric_series_set (w->shared.held, leading ? 1.0 : 0.0);
   }
   if (w->shared.members) {
      fw_metric_series_set (w->shared.members, (double) f.members);
   }
}

void
fw_stream_standby_observe (fw_stream_worker_t *w)
{
   fw_shared_figures_t f = {0};
   int64_t now = fw_mono_ms ();

   fw_stream_shared_observe (w);
   if (!w->lead.lease || !w->metrics || now - w->standby.seen_ms < 250 ||
       fw_lease_is_leader (w->lead.lease, NULL)) {
      return;
   }
   w->standby.seen_ms = now;
   if (w->shared.group) {
      fw_shared_group_figures (w->shared.group, &f);
   }
   observe_standby (w, &f);
}
