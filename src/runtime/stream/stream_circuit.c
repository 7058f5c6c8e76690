/*
 * stream_circuit.c - a stream's circuit breaker kept across restarts (issue
 * 37): the dispatcher's hooks (fw_circuit_store_t) write and delete
 * "<checkpoint id>#circuit" (circuit_doc.h), and a start puts a kept breaker
 * back open. The hooks run on the thread of the event holding the breaker
 * (a lane's too): each pops a client of its own from the pool. A write that
 * fails is said once and the breaker goes on in memory; with ha.mode =
 * "leader" only the leader writes, fenced by its lease's epoch.
 */

#include "flowwarden/log.h"
#include "runtime/checkpoint/circuit_doc.h"
#include "runtime/stream/stream_circuit-private.h"
#include "runtime/stream/stream_worker-private.h"

/* The epoch to write with (0 without ha); false when this instance no
 * longer leads (it writes nothing). */
static bool
may_write (fw_stream_worker_t *w, int64_t *epoch)
{
   *epoch = 0;
   if (!w->pool) {
      return false; /* no server (flowwarden test, a replay's worker) */
   }
   return !w->lead.lease || fw_lease_is_leader (w->lead.lease, epoch);
}

static void
write_failed (fw_stream_worker_t *w, const char *what)
{
   if (__atomic_exchange_n (&w->circuit.warned, 1, __ATOMIC_RELAXED) == 0) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "%s; the breaker goes on in memory (a restart would start it closed)", what);
   }
}

static void
save (void *ud, const fw_circuit_view_t *v)
{
   fw_stream_worker_t *w = ud;
   mongoc_client_t *client;
   fw_error_t err;
   int64_t epoch;
   bool fenced;

   if (!may_write (w, &epoch) || !(client = mongoc_client_pool_pop (w->pool))) {
      return;
   }
   if (!fw_circuit_doc_save (client, w->cfg->database, w->cfg->name, v, epoch, &fenced, &err) &&
       !fenced) {
      write_failed (w, err.message);
   }
   mongoc_client_pool_push (w->pool, client);
}

static void
clear (void *ud)
{
   fw_stream_worker_t *w = ud;
   mongoc_client_t *client;
   fw_error_t err;
   int64_t epoch;

   if (!may_write (w, &epoch) || !(client = mongoc_client_pool_pop (w->pool))) {
      return;
   }
   if (!fw_circuit_doc_delete (client, w->cfg->database, w->cfg->name, epoch, &err)) {
      write_failed (w, err.message);
   }
   mongoc_client_pool_push (w->pool, client);
}

void
fw_stream_circuit_keep (fw_stream_worker_t *w)
{
   w->circuit.store = (fw_circuit_store_t){w, save, clear};
   fw_dispatcher_set_circuit_store (w->d, &w->circuit.store);
}

void
fw_stream_circuit_restore (fw_stream_worker_t *w)
{
   fw_circuit_view_t v;
   fw_error_t err;
   char bad[120];
   bool found;
   int64_t now = fw_now_ms ();

   if (!w->client) {
      return;
   }
   if (!fw_circuit_doc_load (w->client, w->cfg->database, w->cfg->name, &v, &found, bad, sizeof bad,
                             &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name, "%s; the breaker starts closed", err.message);
      return;
   }
   if (bad[0]) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "%s.%s \"%s#circuit\" is not a breaker's (%s): the breaker starts closed",
              w->cfg->database, FW_CHECKPOINT_COLLECTION, w->cfg->name, bad);
      return;
   }
   if (!found) {
      return;
   }
   if (!w->cfg->circuit.enabled) {
      fw_log (FW_LOG_INFO, w->cfg->name,
              "the breaker kept by the last run (open on %s) is dropped: the script has no "
              "circuit",
              v.error_type);
      clear (w);
      return;
   }
   if (w->cfg->circuit.give_up_after_ms > 0 &&
       now >= v.since_ms + w->cfg->circuit.give_up_after_ms) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "the breaker kept by the last run (open on %s) passed give_up_after while "
              "flowwarden was down: it starts closed, the held event gets its attempts again",
              v.error_type);
      clear (w);
      return;
   }
   if (fw_dispatcher_circuit_restore (w->d, &v)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "circuit OPEN (restored): the last run left it open on %s since %lld ms ago, "
              "after %d probe(s); the next probe in %lld ms, with the first event (no round "
              "of retries before it)",
              v.error_type, (long long) (now - v.since_ms), v.probes,
              (long long) (v.next_probe_ms > now ? v.next_probe_ms - now : 0));
   }
}
