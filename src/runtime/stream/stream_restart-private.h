/*
 * stream_restart-private.h - what follows the end of a read (stream_restart.c) and
 * checkpoint.start_at's lost history (stream_start_at.c).
 */
#ifndef FLOWWARDEN_STREAM_RESTART_PRIVATE_H
#define FLOWWARDEN_STREAM_RESTART_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/metrics.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/config/stream_config.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_position fw_position_t; /* stream_position-private.h */

/* fw_read_end_t: how a read of the change stream ended (stream_settle.h). */

/* What the stream's thread keeps from one change stream to the next. */
typedef struct fw_stream_run {
   fw_checkpoint_t cp; /* the checkpoint it started from */
   fw_position_t *p;   /* the position (worker_main's) */
   int restarts;       /* failed reads in a row, for the restart backoff */
   int candidate;      /* 0: processed token, 1: seen token, 2: from now */
   bool from_checkpoint;
   bool start_at_lost; /* checkpoint.start_at was older than the oplog: from now on */
   bool at_group;      /* the last open started at the stream's start in its group
                        * (ha.mode = "shared", fw_stream_group_start) ... */
   uint64_t group_at;  /* ... that start: (t << 32) | i */
} fw_stream_run_t;

/* A stream (cfg, its metrics block or NULL) without a checkpoint opened at
 * checkpoint.start_at, or at its start in its group (run->at_group, at
 * that Timestamp), and the server said that history is gone
 * (stream_start_at.c): on_history_lost decides (fail, or from now). False
 * when the stream stops, why[len] saying why. */
bool fw_stream_start_at_lost (const fw_stream_config_t *cfg, fw_stream_metrics_t *metrics,
                              fw_stream_run_t *run, uint64_t at, char *why, size_t len);

/* Where an open without a position of its own starts (*at,
 * startAtOperationTime; 0: from now): a switched generation's start, else
 * checkpoint.start_at, else with ha.mode = "shared" the stream's start in its
 * group (so a unit's first open misses nothing written since the group
 * started), until a lost history made it "from now". With start_position =
 * "latest" under "shared", a checkpoint older than the group's start (an
 * earlier run of the group) is dropped first: the group starts after it.
 * False (run->p->error set) when the group's start cannot be had. cfg,
 * shared (the stream's, stream_shared-private.h), client (the reader's):
 * borrowed; gen_start: a switched generation's start (0: none). */
struct fw_stream_shared;
bool fw_stream_start_point (const fw_stream_config_t *cfg, struct fw_stream_shared *shared,
                            mongoc_client_t *client, fw_stream_run_t *run, uint64_t gen_start,
                            uint64_t *at);

/* The admin endpoint paused the stream: takes the request (saving the
 * position first when save), waits for resume or restart (an admin restart
 * is counted) and resets the restart backoff. False on shutdown. */
bool fw_stream_pause (fw_stream_worker_t *w, fw_stream_run_t *run, bool save);

/* After a read ended with end (not FW_READ_NEXT): a pause waited out, a
 * restart counted, after a lost lease the wait to lead again, after lost
 * history its fallback, else the restart backoff. True: open the change
 * stream again; false: the stream's thread ends. */
bool fw_stream_read_ended (fw_stream_worker_t *w, fw_stream_run_t *run, fw_read_end_t end);

#endif
