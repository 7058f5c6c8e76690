/*
 * stream_lead.c - how a stream's thread gets to read: its checkpoint, and with
 * ha.mode = "leader" the stream's lease (lease.h) and the checkpoint fenced
 * with the lease's epoch. Called by worker_main (stream_worker.c) only.
 */
#include "flowwarden/log.h"
#include "runtime/stream/stream_circuit-private.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_shared-private.h"
#include "runtime/stream/stream_token-private.h"

/* exactly once into PostgreSQL: the position committed there wins. */
static bool
pg_wins (fw_stream_worker_t *w, fw_position_t *p, int *candidate, bool *from_checkpoint)
{
   fw_checkpoint_t pg = {0};
   bool found = false, ok;

   bson_init (&pg.processed);
   bson_init (&pg.seen);
   ok = fw_stream_exactly_once_pg_load (fw_stream_exactly_once (w), &pg, &found);
   if (ok && found) {
      fw_position_replace_stored (p, &pg, candidate, from_checkpoint);
   }
   fw_checkpoint_cleanup (&pg);
   return ok;
}

/* Reads the checkpoint into p (unless start_position = "latest" without
 * ha.mode = "shared"), retrying with the restart backoff. False only on
 * shutdown. */
bool
fw_stream_load_checkpoint (fw_stream_worker_t *w, fw_checkpoint_t *cp, fw_position_t *p,
                           int *candidate, bool *from_checkpoint)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_shutdown_t *shutdown = fw_stream_shutdown (w);
   mongoc_client_t *client = fw_stream_client (w);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   fw_error_t err;

   fw_stream_circuit_restore (fw_stream_circuit (w), d, client);
   /* "shared": the checkpoint is read, and dropped at the open when it is
    * older than the group's start (start_point, stream_worker.c). */
   if (cfg->start_latest && !cfg->ha_shared) {
      return pg_wins (w, p, candidate, from_checkpoint);
   }
   for (int tries = 1; !fw_checkpoint_load (client, cfg->database, cfg->name, cp, &err); tries++) {
      int64_t delay = fw_backoff_delay_ms (&cfg->restart, tries,
                                           fw_backoff_random (fw_stream_rng (w)));
      fw_log (FW_LOG_ERROR, cfg->name, "%s; retrying in %lld ms", err.message, (long long) delay);
      fw_checkpoint_cleanup (cp);
      if (fw_shutdown_wait_ms (shutdown, delay)) {
         return false;
      }
   }
   fw_position_from_stored (p, cp, candidate, from_checkpoint);
   /* exactly once into a MongoDB sink: the position committed there wins
    * (the handled events' transactions wrote it; the stream's own may trail
    * it, or be ahead only by events whose effects are not in the sink). */
   fw_checkpoint_t sink = {0};
   bool found;
   bson_init (&sink.processed);
   bson_init (&sink.seen);
   if (!fw_stream_exactly_once_load (fw_stream_exactly_once (w), &sink, &found)) {
      return false;
   }
   if (found) {
      fw_position_replace_stored (p, &sink, candidate, from_checkpoint);
   }
   fw_checkpoint_cleanup (&sink);
   return pg_wins (w, p, candidate, from_checkpoint);
}

void
fw_stream_set_role (fw_stream_worker_t *w, int role)
{
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);

   if (metrics) {
      fw_stream_metrics_set_role (metrics, role);
   }
}

/* ha.mode = "leader": waits as a standby until this instance holds the
 * stream's lease, then fences the checkpoint with the lease's epoch (after
 * which a deposed leader's checkpoint writes move nothing). False only on
 * shutdown. */
bool
fw_stream_wait_lead (fw_stream_worker_t *w)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);
   fw_shutdown_t *shutdown = fw_stream_shutdown (w);
   mongoc_client_t *client = fw_stream_client (w);
   fw_lease_t *lease = fw_stream_lease (w);
   fw_dispatcher_t *d = fw_stream_worker_dispatcher (w);
   bool said = false;

   fw_stream_set_lead_epoch (w, 0);
   fw_dispatcher_set_lead (d, lease, 0);
   fw_stream_set_role (w, FW_STREAM_ROLE_STANDBY);
   if (metrics) {
      fw_stream_metrics_set_state (metrics, FW_STREAM_STARTING,
                                   "starting: reading the unit's lease");
   }
   while (!fw_shutdown_requested (shutdown)) {
      int64_t epoch, stored;
      fw_error_t err;

      fw_stream_standby_observe (fw_stream_shared (w));
      if (!fw_lease_wait_leader (lease, 250, &epoch)) {
         if (!said) {
            fw_log (FW_LOG_INFO, cfg->name, "role: standby (waiting for the stream's lease)");
            said = true;
         }
         continue;
      }
      /* A holder killed inside its commit left the checkpoint's document
       * written in an open transaction: the fence below would wait for it
       * (up to transactionLifetimeLimitSeconds). */
      fw_stream_exactly_once_recover (fw_stream_exactly_once (w));
      if (!fw_checkpoint_fence (client, cfg->database, cfg->name, epoch, &stored, &err)) {
         fw_log (FW_LOG_WARN, cfg->name, "%s; trying again", err.message);
         fw_shutdown_wait_ms (shutdown, 250);
         continue;
      }
      /* exactly once into a sink deployment: its checkpoint, which the
       * transactions write, carries the lease's epoch too. */
      if (stored == epoch &&
          !fw_stream_exactly_once_fence (fw_stream_exactly_once (w), epoch, &stored, &err)) {
         fw_log (FW_LOG_WARN, cfg->name, "%s; trying again", err.message);
         fw_shutdown_wait_ms (shutdown, 250);
         continue;
      }
      if (stored != epoch) {
         fw_log (FW_LOG_ERROR, cfg->name,
                 "the checkpoint is fenced with epoch %lld, not this lease's %lld: waiting (a "
                 "lease document removed while a leader ran?)",
                 (long long) stored, (long long) epoch);
         fw_shutdown_wait_ms (shutdown, 1000);
         continue;
      }
      if (!fw_lease_is_leader (lease, NULL)) {
         continue;
      }
      fw_stream_set_lead_epoch (w, epoch);
      fw_dispatcher_set_lead (d, lease, epoch);
      fw_stream_set_role (w, FW_STREAM_ROLE_LEADER);
      if (metrics) {
         /* Named by its member id, as the other members name it (issue 38). */
         fw_stream_metrics_set_unit_view (metrics, fw_lease_owner_id (), 0, false);
      }
      fw_log (FW_LOG_INFO, cfg->name,
              "role: leader (epoch %lld): the checkpoint is fenced, opening the change stream",
              (long long) epoch);
      return true;
   }
   return false;
}
