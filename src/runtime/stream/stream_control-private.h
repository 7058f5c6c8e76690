/*
 * stream_control-private.h - what the admin endpoint asks of a stream's thread, its waits
 * and its counts (stream_control.c); its end, fw_stream_failed, is
 * declared with its state (stream_worker-private.h).
 */
#ifndef FLOWWARDEN_STREAM_CONTROL_PRIVATE_H
#define FLOWWARDEN_STREAM_CONTROL_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/dispatch/outcome.h"
#include "runtime/stream/stream_worker.h"

/* What the admin endpoint asked the stream's thread to do. */
enum { W_CONTROL_NONE = 0, W_CONTROL_PAUSE, W_CONTROL_RESUME, W_CONTROL_RESTART };

/* The pending request (W_CONTROL_*), cleared; fw_stream_control_peek
 * (stream_worker-private.h) leaves it in place. */
int fw_stream_control_take (fw_stream_worker_t *w);

/* Sleeps up to ms; returns true at once on shutdown, false early when the
 * admin endpoint asks something (or when the time is up). */
bool fw_stream_wait (fw_stream_worker_t *w, int64_t ms);

/* The stream is paused (checkpoint written, change stream closed): waits for
 * resume or restart (returned, as W_CONTROL_*) or a shutdown
 * (W_CONTROL_NONE). */
int fw_stream_paused (fw_stream_worker_t *w);

/* After an event (or a batch, o its outcome) was settled (its place's
 * finished): with a metrics block, the DLQ's pending entries counted when
 * that is due. */
void fw_stream_count_dispatched (fw_stream_worker_t *w, const fw_outcome_t *o);

/* Every 30 s (now_ms: the wall clock), counts the stream's pending DLQ
 * entries for the flowwarden_dlq_pending gauges. */
void fw_stream_dlq_count_tick (fw_stream_worker_t *w, int64_t now_ms);

#endif
