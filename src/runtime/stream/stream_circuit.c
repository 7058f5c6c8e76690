/*
 * stream_circuit.c - a stream's circuit breaker kept across restarts (issue
 * 37): the dispatcher's hooks (fw_circuit_store_t) write and delete
 * "<checkpoint id>#circuit" (circuit_doc.h), and a start puts a kept breaker
 * back open. The hooks run on the thread of the event holding the breaker
 * (a lane's too): each pops a client of its own from the pool. A write that
 * fails is said once and the breaker goes on in memory; with ha.mode =
 * "leader" only the leader writes, fenced by its lease's epoch.
 */

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/checkpoint/circuit_doc.h"
#include "runtime/stream/stream_circuit-private.h"
#include "runtime/stream/stream_position-private.h"

/* The epoch to write with (0 without ha); false when this instance no
 * longer leads (it writes nothing). */
static bool
may_write (const fw_stream_circuit_t *c, int64_t *epoch)
{
   *epoch = 0;
   if (!c->pool) {
      return false; /* no server (flowwarden test, a replay's worker) */
   }
   return !*c->lease || fw_lease_is_leader (*c->lease, epoch);
}

/* Without ha: the run's writer generation (claimed now when no write of
 * the run came first: fw_position_claim); under ha 0. False (err set) when
 * it cannot be claimed. */
static bool
run_gen (fw_stream_circuit_t *c, mongoc_client_t *client, int64_t epoch, int64_t *gen,
         fw_error_t *err)
{
   *gen = 0;
   return epoch > 0 || !c->ckpt || fw_position_claim (c->ckpt, client, gen, err);
}

static void
write_failed (fw_stream_circuit_t *c, const char *what)
{
   if (__atomic_exchange_n (&c->warned, 1, __ATOMIC_RELAXED) == 0) {
      fw_log (FW_LOG_WARN, (*c->cfg)->name,
              "%s; the breaker goes on in memory (a restart would start it closed)", what);
   }
}

static void
save (void *ud, const fw_circuit_view_t *v)
{
   fw_stream_circuit_t *c = ud;
   const fw_stream_config_t *cfg = *c->cfg;
   mongoc_client_t *client;
   fw_error_t err;
   int64_t epoch, gen;
   bool fenced = false;

   if (!may_write (c, &epoch) || !(client = mongoc_client_pool_pop (c->pool))) {
      return;
   }
   if (!run_gen (c, client, epoch, &gen, &err) ||
       (!fw_circuit_doc_save (client, cfg->database, cfg->name, v, epoch, gen, &fenced, &err) &&
        !fenced)) {
      write_failed (c, err.message);
   } else if (fenced && gen > 0) {
      fw_log (FW_LOG_WARN, cfg->name, "%s", err.message); /* a newer run's breaker stays */
   }
   mongoc_client_pool_push (c->pool, client);
}

/* Deletes the breaker's document; claim: with the run's writer generation
 * (claimed now when no write of the run came first), else (a start dropping
 * a kept breaker, before it knows the run will write) without. */
static void
drop (fw_stream_circuit_t *c, bool claim)
{
   const fw_stream_config_t *cfg = *c->cfg;
   mongoc_client_t *client;
   fw_error_t err;
   int64_t epoch, gen = 0;

   if (!may_write (c, &epoch) || !(client = mongoc_client_pool_pop (c->pool))) {
      return;
   }
   if ((claim && !run_gen (c, client, epoch, &gen, &err)) ||
       !fw_circuit_doc_delete (client, cfg->database, cfg->name, epoch, gen, &err)) {
      write_failed (c, err.message);
   }
   mongoc_client_pool_push (c->pool, client);
}

static void
clear (void *ud)
{
   drop (ud, true);
}

void
fw_stream_circuit_keep (fw_stream_circuit_t *c, fw_dispatcher_t *d, mongoc_client_pool_t *pool,
                        fw_lease_t *const *lease, const fw_stream_config_t *const *cfg,
                        struct fw_stream_ckpt *ckpt)
{
   c->pool = pool;
   c->lease = lease;
   c->cfg = cfg;
   c->ckpt = ckpt;
   c->store = (fw_circuit_store_t){c, save, clear};
   fw_dispatcher_set_circuit_store (d, &c->store);
}

void
fw_stream_circuit_restore (fw_stream_circuit_t *c, fw_dispatcher_t *d, mongoc_client_t *client)
{
   const fw_stream_config_t *cfg = *c->cfg;
   fw_circuit_view_t v;
   fw_error_t err;
   char bad[120];
   bool found;
   int64_t now = fw_now_ms ();

   if (!client) {
      return;
   }
   if (!fw_circuit_doc_load (client, cfg->database, cfg->name, &v, &found, bad, sizeof bad, &err)) {
      fw_log (FW_LOG_WARN, cfg->name, "%s; the breaker starts closed", err.message);
      return;
   }
   if (bad[0]) {
      fw_log (FW_LOG_WARN, cfg->name,
              "%s.%s \"%s#circuit\" is not a breaker's (%s): the breaker starts closed",
              cfg->database, FW_CHECKPOINT_COLLECTION, cfg->name, bad);
      return;
   }
   if (!found) {
      return;
   }
   if (!cfg->circuit.enabled) {
      fw_log (FW_LOG_INFO, cfg->name,
              "the breaker kept by the last run (open on %s) is dropped: the script has no "
              "circuit",
              v.error_type);
      drop (c, false);
      return;
   }
   if (cfg->circuit.give_up_after_ms > 0 && now >= v.since_ms + cfg->circuit.give_up_after_ms) {
      fw_log (FW_LOG_WARN, cfg->name,
              "the breaker kept by the last run (open on %s) passed give_up_after while "
              "flowwarden was down: it starts closed, the held event gets its attempts again",
              v.error_type);
      drop (c, false);
      return;
   }
   if (fw_dispatcher_circuit_restore (d, &v)) {
      fw_log (FW_LOG_WARN, cfg->name,
              "circuit OPEN (restored): the last run left it open on %s since %lld ms ago, "
              "after %d probe(s); the next probe in %lld ms, with the first event (no round "
              "of retries before it)",
              v.error_type, (long long) (now - v.since_ms), v.probes,
              (long long) (v.next_probe_ms > now ? v.next_probe_ms - now : 0));
   }
}
