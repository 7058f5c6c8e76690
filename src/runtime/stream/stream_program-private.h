/*
 * stream_program-private.h - a worker's program (stream_program.c, the lowest stream
 * file) and the reload that replaces it (stream_reload.c).
 */
#ifndef FLOWWARDEN_STREAM_PROGRAM_PRIVATE_H
#define FLOWWARDEN_STREAM_PROGRAM_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "flowwarden/stream_worker.h"

/* Points w's Lua state (and its lane programs') at w's fw.state store, and
 * w's fw.mongo at w's clients. */
void fw_stream_state_attach (fw_stream_worker_t *w);

/* The lane programs' counts added to w's (and zeroed). */
void fw_stream_fold_lane_stats (fw_stream_worker_t *w);

/* Switches to the program a reload left pending (handlers, policies, Lua
 * state, lane programs), if any; the dispatcher calls it at attempt
 * boundaries. Never while lanes run (w->lanes): fw_stream_lanes_boundary
 * applies it then. Returns true when it switched. */
bool fw_stream_reload_apply (fw_stream_worker_t *w);

#endif
