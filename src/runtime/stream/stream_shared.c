/*
 * stream_shared.c - a unit's lease with ha.mode = "shared" (issue 31,
 * shared_units.h): made by its group, given up at an event boundary when
 * this instance holds more than its share (the final checkpoint saved
 * first, by stand_by in stream_restart.c). Called by the stream's thread.
 */
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
   if (!(w->shared = fw_shared_group_join (uri, w->cfg->database, w->cfg->ha_lease_ms, err))) {
      return NULL;
   }
   if (!(l = fw_shared_group_lease (w->shared, uri, w->cfg->name, err))) {
      fw_shared_group_leave (w->shared);
      w->shared = NULL;
   }
   return l;
}

bool
fw_stream_over_share (fw_stream_worker_t *w)
{
   return w->shared && w->lease && fw_shared_should_yield (w->shared, w->lease);
}

bool
fw_stream_yield_unit (fw_stream_worker_t *w)
{
   if (!fw_stream_over_share (w)) {
      return false;
   }
   fw_shared_yield (w->shared, w->lease, w->cfg->name);
   return true;
}

void
fw_stream_lease_destroy (fw_stream_worker_t *w)
{
   if (w->shared && w->lease) {
      fw_shared_group_remove (w->shared, w->lease);
   }
   fw_lease_destroy (w->lease);
   fw_shared_group_leave (w->shared);
   w->shared = NULL;
}
