/*
 * stream_circuit-private.h - the breaker kept across restarts (issue 37,
 * stream_circuit.c).
 */
#ifndef FLOWWARDEN_STREAM_CIRCUIT_PRIVATE_H
#define FLOWWARDEN_STREAM_CIRCUIT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "runtime/config/stream_config.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/ha/lease.h"

struct fw_stream_ckpt; /* stream_checkpoint-private.h */

/* A stream's breaker kept across restarts: the dispatcher's hooks and what
 * they read of the stream (its fields, so that a reload's settings and a
 * lease made later are seen). Part of the stream's state; the hooks run on
 * the thread of the event holding the breaker (a lane's too). */
typedef struct fw_stream_circuit {
   fw_circuit_store_t store;             /* the dispatcher's hooks (ud: this) */
   int warned;                           /* a write failed and was said (atomic) */
   mongoc_client_pool_t *pool;           /* the stream's; NULL: no server */
   fw_lease_t *const *lease;             /* the stream's lease (ha), NULL in it: none */
   const fw_stream_config_t *const *cfg; /* the stream's settings (follow reloads) */
   struct fw_stream_ckpt *ckpt;          /* the stream's checkpoint: the run's writer generation */
} fw_stream_circuit_t;

/* Gives d (and so its lanes) the hooks keeping its breaker in "<the
 * stream's checkpoint id>#circuit" (circuit_doc.h); c keeps pool and the
 * stream's lease, settings and checkpoint (borrowed, outliving d). Without
 * ha the hooks' writes carry the run's writer generation (claimed by the
 * first of them when no checkpoint save came first), so that a killed
 * run's late write never replaces or deletes a newer run's breaker. */
void fw_stream_circuit_keep (fw_stream_circuit_t *c, fw_dispatcher_t *d, mongoc_client_pool_t *pool,
                             fw_lease_t *const *lease, const fw_stream_config_t *const *cfg,
                             struct fw_stream_ckpt *ckpt);

/* At a start: a breaker kept by the last run is put back open on d
 * (logged); none, a read error (logged) or circuit off (the document is
 * deleted) leaves it closed. On the stream's thread, with its client (NULL:
 * nothing done). */
void fw_stream_circuit_restore (fw_stream_circuit_t *c, fw_dispatcher_t *d,
                                mongoc_client_t *client);

#endif
