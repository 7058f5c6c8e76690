/*
 * stream_shared.c - a unit's lease with ha.mode = "shared" (issue 31,
 * shared_units.h): made by its group, given up at an event boundary when
 * this instance holds more than its share (the final checkpoint saved
 * first, by stand_by in stream_restart.c). Called by the stream's thread.
 */
#include <stdio.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/shared_units.h"
#include "runtime/stream/stream_worker-private.h"

fw_lease_t *
fw_stream_lease_new (fw_stream_worker_t *w, fw_error_t *err)
{
   const mongoc_uri_t *uri = mongoc_client_get_uri (w->client);
   fw_lease_t *l;

   if (!w->cfg->ha_shared) {
      return fw_lease_new (uri, w->cfg->database, w->cfg->name, w->cfg->ha_lease_ms, NULL, err);
   }
   if (!(w->shared.group = fw_shared_group_join (uri, w->cfg->database, w->cfg->ha_lease_ms, err))) {
      return NULL;
   }
   if (!(l = fw_shared_group_lease (w->shared.group, uri, w->cfg->name, err))) {
      fw_shared_group_leave (w->shared.group);
      w->shared.group = NULL;
   }
   return l;
}

bool
fw_stream_over_share (fw_stream_worker_t *w)
{
   return w->shared.group && w->lead.lease && fw_shared_should_yield (w->shared.group, w->lead.lease);
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
      "flowwarden_units_held", "1 while this instance leads the unit (ha.mode = \"shared\"): "
      "sum() is the units it holds", FW_METRIC_GAUGE, NULL, 0, NULL, 0};
   static const fw_metric_spec_t members = {
      "flowwarden_members", "Live members (instances) counted in the unit's database's "
      "_fw_members (ha.mode = \"shared\")", FW_METRIC_GAUGE, NULL, 0, NULL, 0};
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

void
fw_stream_shared_observe (fw_stream_worker_t *w)
{
   int64_t now, seen = __atomic_load_n (&w->shared.seen_ms, __ATOMIC_RELAXED);
   fw_shared_figures_t f;
   fw_lease_status_t st;
   bool leading;

   if (!w->shared.group || !w->lead.lease || (now = fw_mono_ms ()) - seen < 500 ||
       !__atomic_compare_exchange_n (&w->shared.seen_ms, &seen, now, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED)) {
      return;
   }
   fw_shared_group_figures (w->shared.group, &f);
   leading = fw_lease_is_leader (w->lead.lease, NULL);
   if (w->shared.held) {
      fw_metric_series_set (w->shared.held, leading ? 1.0 : 0.0);
   }
   if (w->shared.members) {
      fw_metric_series_set (w->shared.members, (double) f.members);
   }
   if (!leading && w->metrics) {
      char msg[400];
      fw_lease_status (w->lead.lease, &st);
      snprintf (msg, sizeof msg,
                "standby (shared): unit held by %s; %d member%s, this instance holds %d of %d "
                "units (share %d)", st.holder[0] ? st.holder : "nobody (free)", f.members,
                f.members == 1 ? "" : "s", f.held, f.units, f.share);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_STARTING, msg);
   }
}
