/*
 * stream_lanes-private.h - per-key lanes (issue 16, stream_lanes.c).
 */
#ifndef FLOWWARDEN_STREAM_LANES_PRIVATE_H
#define FLOWWARDEN_STREAM_LANES_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "bson/event.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_position fw_position_t; /* stream_position-private.h */

/* --- stream_lanes.c: per-key lanes (issue 16) ------------------------------
 *
 * With cfg.lanes = N > 1 the stream's thread reads, parses and routes: each
 * event goes to the lane of hash(its sequence key) (the sequenced DLQ's key:
 * dlq.sequence_key, else the documentKey; events without one go to lane 0),
 * where a thread with a Lua state of its own handles the lane's events in
 * order. The checkpoint is the watermark: the newest event that, with every
 * earlier one, is handled or dead-lettered.
 */
typedef struct fw_stream_lanes fw_stream_lanes_t;

typedef enum {
   FW_LANES_NEXT,        /* read on */
   FW_LANES_INVALIDATED, /* an invalidate, handled: checkpoint written */
   FW_LANES_STOPPED,     /* shutdown */
   FW_LANES_FAILED       /* the stream must stop (w->failure says why) */
} fw_lanes_step_t;

/* At an event boundary of the stream's thread, instead of
 * fw_stream_reload_apply when the stream has (or had) lanes: a pending
 * reload waits for the lanes to finish what they hold, stops them, switches
 * every program and starts the lanes again, so all lanes run the new
 * version after the same event; lanes not running yet are started. False
 * when the stream must stop (shutdown, or w->failure says why). */
bool fw_stream_lanes_boundary (fw_stream_worker_t *w, fw_position_t *p);

/* Takes one event read (ev: fw_event_parse's result, to_lane: handled by a
 * lane, else already dead-lettered on this thread), token: the change
 * stream's resume token after it; moves p up to the watermark and saves
 * every save_every events. */
fw_lanes_step_t fw_stream_lanes_take (fw_stream_worker_t *w, fw_position_t *p, const fw_event_t *ev,
                                      bool to_lane, const bson_t *token);

/* Moves p up to the watermark; true when nothing is in flight. */
bool fw_stream_lanes_advance (fw_stream_worker_t *w, fw_position_t *p);

/* Waits for the lanes to finish what they hold (not on shutdown, nor after
 * a lane failed), stops and joins them, moves p to the watermark and adds
 * the lanes' counts to w's. NULL lanes: a no-op. */
void fw_stream_lanes_stop (fw_stream_worker_t *w, fw_position_t *p);

/* Waits for the lanes to finish what they hold and moves p to the
 * watermark; the lanes go on. False on shutdown or when a lane failed
 * (w->failure says why). NULL lanes: true. */
bool fw_stream_lanes_settle (fw_stream_worker_t *w, fw_position_t *p);

#endif
