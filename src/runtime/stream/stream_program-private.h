/*
 * stream_program-private.h - a worker's program (stream_program.c, the lowest stream
 * file) and the reload that replaces it (stream_reload.c).
 */
#ifndef FLOWWARDEN_STREAM_PROGRAM_PRIVATE_H
#define FLOWWARDEN_STREAM_PROGRAM_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "bson/event.h"
#include "runtime/dispatch/outcome.h"
#include "runtime/stream/stream_worker.h"

struct fw_stream_pending; /* stream_reload-private.h */

/* Points w's Lua state (and its lane programs') at w's fw.state store, and
 * w's fw.mongo at w's clients. */
void fw_stream_state_attach (fw_stream_worker_t *w);

/* Copies the version of w's program's script into w->ckpt.version, which
 * every checkpoint save carries: as the program is built and as a reload
 * switches it (a rebuilt Lua state keeps its version). */
void fw_stream_program_version (fw_stream_worker_t *w);

/* The lane programs' counts added to w's (and zeroed). */
void fw_stream_fold_lane_stats (fw_stream_worker_t *w);

/* Switches to the program a reload left pending (handlers, policies, Lua
 * state, lane programs), if any: at an event boundary of the stream's
 * thread, never inside fw_event_dispatch (w->cfg points into the program).
 * Never while lanes run (w->lane.run): fw_stream_lanes_boundary applies it
 * then. r: the stream's w->pending. Returns true when it switched. */
bool fw_stream_reload_apply (struct fw_stream_pending *r);

/* stream_reload.c: the stream's thread runs ev on its dispatcher (r: the
 * stream's w->pending), switching first to a
 * reload's program left pending: when ev gives way to a reload between two
 * attempts (FW_OUTCOME_YIELDED), the new program is switched to here, at the
 * event's boundary, and ev runs again on it, its attempts carrying on. */
fw_outcome_t fw_stream_dispatch (struct fw_stream_pending *r, const fw_event_t *ev);

/* stream_reload.c's switch, once w's dispatcher took next's program (under
 * the pending lock): the version checkpoints carry, next's lane programs
 * (the old ones, folded into w's counts, are destroyed with next), the DLQ
 * reprocess schedule, the shared fw.state; logged and counted. Destroys
 * next. */
void fw_stream_program_switched (fw_stream_worker_t *w, fw_stream_worker_t *next);

/* The stream's dispatchers' outcome sink (fw_dispatcher_set_outcome_sink,
 * ud: the worker): each event's log line and counts in its metrics block
 * (fw_event_settle). On the thread that ran the event (a lane's). */
void fw_stream_event_settled (void *ud, const char *stream, const fw_event_t *ev,
                              const fw_outcome_t *o);

#endif
