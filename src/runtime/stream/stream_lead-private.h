/*
 * stream_lead-private.h - the checkpoint and leadership a stream reads with
 * (stream_lead.c; fw_stream_lease_lost: stream_control.c).
 */
#ifndef FLOWWARDEN_STREAM_LEAD_PRIVATE_H
#define FLOWWARDEN_STREAM_LEAD_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_position fw_position_t; /* stream_position-private.h */

/* Reads the checkpoint into p (unless start_position = "latest" without
 * ha.mode = "shared"), retrying
 * with the restart backoff (exactly once into PostgreSQL: the position there
 * wins). False on shutdown, or when the stream failed. */
bool fw_stream_load_checkpoint (fw_stream_worker_t *w, fw_checkpoint_t *cp, fw_position_t *p,
                                int *candidate, bool *from_checkpoint);

/* With metrics: the stream's role (FW_STREAM_ROLE_*). */
void fw_stream_set_role (fw_stream_worker_t *w, int role);

/* ha.mode = "leader": waits as a standby until this instance holds the
 * lease, then fences the checkpoint with its epoch. False only on shutdown. */
bool fw_stream_wait_lead (fw_stream_worker_t *w);

/* ha.mode = "leader": whether this thread may no longer call handlers
 * (stream_control.c; the share it reads: stream_shared.c). */
bool fw_stream_lease_lost (fw_stream_worker_t *w);

#endif
