/*
 * stream_generation-private.h - a change of a stream's number of partitions
 * (issue 31): the new generation of units starts where the old one's
 * checkpoints are, switched once by a conditional write of the generation
 * document "<stream>#generation" in _fw_checkpoints.
 */
#ifndef FLOWWARDEN_STREAM_GENERATION_PRIVATE_H
#define FLOWWARDEN_STREAM_GENERATION_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "runtime/config/stream_config.h"

/* What a unit of a switched generation opens with. */
typedef struct {
   bson_t stage; /* a $match stage, first in the pipeline; valid when has_stage */
   bool has_stage;
   uint64_t start_at; /* startAtOperationTime without a checkpoint of its own; 0: none */
} fw_generation_t;

void fw_generation_init (fw_generation_t *g);
void fw_generation_cleanup (fw_generation_t *g);

typedef enum {
   FW_GENERATION_OPEN,  /* open (g filled when switched) */
   FW_GENERATION_LATER, /* an old unit still runs: try again at the next re-open */
   FW_GENERATION_STOP,  /* cannot switch: the unit stops */
} fw_generation_open_t;

/* Before a unit of cfg opens: when the stream's checkpoints are of another
 * number of partitions M (or the generation document names M), switches the
 * stream to cfg's number once (a conditional write: one instance or unit
 * wins, the others read what it wrote), and fills g: a $match keeping, for
 * each key, only the events after the checkpoint of the old unit that held
 * it, and the clusterTime to start at (the oldest of those checkpoints).
 * Nothing to do (g left empty) when there is no other generation. LATER
 * (why in what[len]) while a unit of the old generation is held by a live
 * member (a lease in _fw_leases): switching would run two generations at
 * once. STOP (why in what) when it cannot switch (old checkpoints without a
 * position, several old generations, a read or write error). cfg, client:
 * borrowed; g: initialised by the caller, owned by it. */
fw_generation_open_t fw_stream_generation_open (const fw_stream_config_t *cfg,
                                                mongoc_client_t *client, fw_generation_t *g,
                                                char *what, size_t len);

/* Whether the stream has a generation document or checkpoints of another
 * number of partitions than cfg's (or they cannot be read): a unit without
 * a checkpoint of its own then starts from the old generation's positions
 * (fw_stream_generation_open), not with a snapshot. cfg, client: borrowed. */
bool fw_stream_generation_has_past (const fw_stream_config_t *cfg, mongoc_client_t *client);

/* Whether resume (a unit's own position) is older than the switch's start:
 * a checkpoint of an earlier run with this number of partitions (N to M and
 * back to N), from before the old generation's positions; the unit then
 * starts at g->start_at instead (the events between were the old
 * generation's). g, resume: borrowed. */
bool fw_stream_generation_stale (const fw_generation_t *g, const bson_t *resume);

#endif
