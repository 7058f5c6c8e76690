/*
 * stream_parts-private.h - what a file of the stream's thread reads of the
 * stream without the layout of its state (stream_worker-private.h): its
 * settings, stop, client, jitter, lease and epoch, kept breaker, ha, exactly_once, checkpoint and reload state, and how it
 * says that the stream stops for good. Defined in stream_control.c.
 */
#ifndef FLOWWARDEN_STREAM_PARTS_PRIVATE_H
#define FLOWWARDEN_STREAM_PARTS_PRIVATE_H

#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/config/stream_config.h"
#include "runtime/ha/lease.h"
#include "runtime/stream/stream_worker.h"

/* The stream's settings (its program's: they follow a reload). */
const fw_stream_config_t *fw_stream_cfg (const fw_stream_worker_t *w);

/* The stream's stop (SIGTERM, or a reload removing it). */
fw_shutdown_t *fw_stream_shutdown (const fw_stream_worker_t *w);

/* The client the stream's thread popped (NULL outside a run). */
mongoc_client_t *fw_stream_client (const fw_stream_worker_t *w);

/* The restart backoff's jitter state (w's; the stream's thread only). */
uint64_t *fw_stream_rng (fw_stream_worker_t *w);

/* ha.mode = "leader": the epoch the thread leads with; 0: not leading.
 * _set: stream_lead.c's, as it leads or stands by. */
int64_t fw_stream_lead_epoch (const fw_stream_worker_t *w);
void fw_stream_set_lead_epoch (fw_stream_worker_t *w, int64_t epoch);

/* The stream's lease (ha; NULL: none), owned by w. */
fw_lease_t *fw_stream_lease (const fw_stream_worker_t *w);

/* The stream's breaker kept across restarts (stream_circuit-private.h). */
struct fw_stream_circuit *fw_stream_circuit (fw_stream_worker_t *w);

/* The stream's ha state besides its lease (stream_shared-private.h). */
struct fw_stream_shared *fw_stream_shared (fw_stream_worker_t *w);

/* The stream's exactly_once state (stream_exactly_once-private.h). */
struct fw_stream_eo *fw_stream_exactly_once (fw_stream_worker_t *w);

/* The stream's checkpoint state, for its saves (stream_position-private.h). */
struct fw_stream_ckpt *fw_stream_checkpoint (fw_stream_worker_t *w);

/* A reload's hand-over to the stream's thread (stream_reload-private.h). */
struct fw_stream_pending *fw_stream_pending (fw_stream_worker_t *w);

/* The admin endpoint's pending request (W_CONTROL_*), left in place: as
 * fw_stream_control_peek, for the files off the per-event path. */
int fw_stream_control_pending (fw_stream_worker_t *w);

/* stream_control.c: the stream stops for good (w->failed); what says why
 * (w->failure, status, metrics, log). */
void fw_stream_failed (fw_stream_worker_t *w, const char *what);

#endif
