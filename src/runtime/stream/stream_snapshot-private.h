/*
 * stream_snapshot-private.h - the incremental snapshot on the stream's thread (issue 28,
 * stream_snapshot.c; snapshot.h).
 */
#ifndef FLOWWARDEN_STREAM_SNAPSHOT_PRIVATE_H
#define FLOWWARDEN_STREAM_SNAPSHOT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_position fw_position_t;           /* stream_position-private.h */
typedef struct fw_stream_reader fw_stream_reader_t; /* stream_read-private.h */

/* After the checkpoint was read (cp): resumes a snapshot its progress says
 * is running, or starts one (start_position = "snapshot", no checkpoint),
 * storing it before the change stream opens. False only on shutdown. Sets
 * w->eo.row: with exactly_once a row's transaction writes the snapshot's
 * progress past the row (fenced with the lease's epoch under ha). */
bool fw_stream_snapshot_setup (fw_stream_worker_t *w, const fw_checkpoint_t *cp);

/* At the loop's top, between live events: an on-demand request taken, the
 * last chunk's progress stored, the next chunks read when due and no live
 * event waits in rd (else at most half the thread's time). */
fw_read_end_t fw_stream_snapshot_between (fw_stream_worker_t *w, fw_position_t *p,
                                          fw_stream_reader_t *rd);

/* True when the snapshot would read a chunk now (between's turn ended on
 * its time budget): the loop reads on instead of waiting for the stream. */
bool fw_stream_snapshot_reading (fw_stream_worker_t *w);

/* A live event, before it is handled: the open chunk's rows are handed out
 * first when the event is past the high watermark. */
fw_read_end_t fw_stream_snapshot_live (fw_stream_worker_t *w, fw_position_t *p,
                                       const fw_event_t *ev);

/* A live event read into a batch or a source transaction's group (after
 * the first, which went through fw_stream_snapshot_live): shown to the
 * snapshot, which drops the rows of its key; false when the open chunk's
 * rows are due before it (it must not join: it is taken next, through
 * fw_stream_snapshot_live). True without a snapshot. */
bool fw_stream_snapshot_shown (fw_stream_worker_t *w, const fw_event_t *ev);

/* Idle, with the post-batch resume token: as fw_stream_snapshot_live. */
fw_read_end_t fw_stream_snapshot_idle (fw_stream_worker_t *w, fw_position_t *p,
                                       const bson_t *token);

/* The change stream (re)opened: an open chunk is read again. */
void fw_stream_snapshot_reopened (fw_stream_worker_t *w);

/* The thread ends: the snapshot state freed (its progress is stored). */
void fw_stream_snapshot_teardown (fw_stream_worker_t *w);

#endif
