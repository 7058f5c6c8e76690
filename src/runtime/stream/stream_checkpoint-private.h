/*
 * stream_checkpoint-private.h - the stream's checkpoint state (stream_position.c):
 * the checkpoint writer, the script version and epoch its saves carry, and
 * what they read of the stream.
 */
#ifndef FLOWWARDEN_STREAM_CHECKPOINT_PRIVATE_H
#define FLOWWARDEN_STREAM_CHECKPOINT_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "ops/metrics.h"
#include "runtime/checkpoint/checkpoint_writer.h"
#include "runtime/config/stream_config.h"
#include "runtime/ha/lease.h"

struct fw_stream_eo; /* stream_exactly_once-private.h */

/* The stream's checkpoint: part of the stream's state (w->ckpt), on the
 * stream's thread. What it reads of the stream is set as the stream is
 * made (stream_program.c): the settings follow reloads in place, the fields
 * linked to change with each run (the client, the lease and its epoch) or
 * are set later (the metrics block, exactly_once's hook and position). */
typedef struct fw_stream_ckpt {
   /* checkpoint.mode = "async": started on first use by the stream's
    * thread, destroyed as it ends */
   fw_checkpoint_writer_t *writer;
   bool unavailable; /* the writer could not start: checkpoints are synchronous */
   /* when the run began (fw_mono_ns), before it handled any event past the
    * checkpoint it started from, then when the last synchronous save was
    * stored: the position the writer starts from was handed over then
    * (fw_checkpoint_writer_set_origin); 0: not known */
   int64_t origin_ns;
   int64_t epoch; /* the epoch the writer fences with */
   /* without ha: the run's writer generation, claimed before the run's
    * first write (fw_position_claim), carried by every save; 0: none.
    * Under gen_mu: the breaker's hooks (a lane's thread) claim it too. */
   int64_t gen;
   pthread_mutex_t gen_mu;
   /* without ha: a newer run of the stream refused a checkpoint write of
    * this run (FW_CHECKPOINT_REFUSED), which then writes none and stops
    * (fw_position_refused); refusal says why. Reset with gen. */
   bool refused;
   fw_error_t refusal;
   /* the script version a checkpoint carries: the program's, copied as it
    * is built and as a reload switches (a rebuild keeps it) */
   char version[17];
   const fw_stream_config_t *cfg;       /* the stream's settings */
   mongoc_client_pool_t *pool;          /* the stream's pool (the writer's client) */
   mongoc_client_t *const *client;      /* the stream's client (NULL in it outside a run) */
   fw_stream_metrics_t *const *metrics; /* the stream's metrics block (NULL in it: none) */
   fw_lease_t *const *lease;            /* the stream's lease (ha), NULL in it: none */
   const int64_t *lead_epoch;           /* the epoch the stream leads with; 0: not leading */
   struct fw_stream_eo *eo;             /* exactly_once's state (the hook's argument) */
   /* exactly_once: the position its last transaction committed (NULL in
    * it: none) */
   bson_t *const *committed;
   /* exactly_once into a sink: its save at each checkpoint save (NULL in
    * it: none), given the handled and seen tokens (each NULL: none). */
   void (*const *advance) (struct fw_stream_eo *e, const bson_t *processed, const bson_t *seen);
} fw_stream_ckpt_t;

#endif
