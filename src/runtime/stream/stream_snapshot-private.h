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
 * chunks read ahead queued (on a thread of their own; else the next chunks
 * read here when no live event waits in rd, or in at most half the
 * thread's time), the due rows handed out (after SLICE_ROWS rows, until a
 * live event waits in rd), the last chunk's progress stored. FW_READ_REOPEN
 * once a snapshot the change stream was opened for finished. */
fw_read_end_t fw_stream_snapshot_between (fw_stream_worker_t *w, fw_position_t *p,
                                          fw_stream_reader_t *rd);

/* The change stream opens: true when a snapshot runs, whose chunks wait for
 * the stream's post-batch tokens (it asks for a short maxAwaitTimeMS); once
 * the snapshot finished, fw_stream_snapshot_between says FW_READ_REOPEN, so
 * the change stream re-opens with the usual one. */
bool fw_stream_snapshot_opening (fw_stream_worker_t *w);

/* True when the snapshot would read a chunk now (between's turn ended on
 * its time budget) or has due rows left: the loop reads on instead of
 * waiting for the stream. */
bool fw_stream_snapshot_reading (fw_stream_worker_t *w);

/* A live event, before it is handled: shown to the snapshot, which drops
 * the rows of its key not handed out yet from every chunk whose low
 * watermark it is after (the due rows are handed out between live events,
 * by fw_stream_snapshot_between). FW_READ_NEXT. */
fw_read_end_t fw_stream_snapshot_live (fw_stream_worker_t *w, fw_position_t *p,
                                       const fw_event_t *ev);

/* A live event read into a batch or a source transaction's group (after
 * the first, which went through fw_stream_snapshot_live): shown to the
 * snapshot as fw_stream_snapshot_live does. True: it may join (no row has
 * to come before it). */
bool fw_stream_snapshot_shown (fw_stream_worker_t *w, const fw_event_t *ev);

/* Idle, with the post-batch resume token: the chunks read ahead queued and
 * the token shown to the snapshot (the chunks it passed are due: handed out
 * by fw_stream_snapshot_between). FW_READ_NEXT. */
fw_read_end_t fw_stream_snapshot_idle (fw_stream_worker_t *w, fw_position_t *p,
                                       const bson_t *token);

/* The change stream (re)opened: an open chunk is read again. */
void fw_stream_snapshot_reopened (fw_stream_worker_t *w);

/* The thread ends: the snapshot state freed (its progress is stored). */
void fw_stream_snapshot_teardown (fw_stream_worker_t *w);

#endif
