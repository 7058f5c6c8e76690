/*
 * stream_batch-private.h - on_batch without lanes (issue 30, stream_batch.c).
 */
#ifndef FLOWWARDEN_STREAM_BATCH_PRIVATE_H
#define FLOWWARDEN_STREAM_BATCH_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_position fw_position_t;           /* stream_position-private.h */
typedef struct fw_stream_reader fw_stream_reader_t; /* stream_read-private.h */

/* ev (parsed from the reader's current event, not a fragment, stub or
 * invalidate) is the first of a batch: takes up to batch.max_events events
 * within batch.max_wait, hands them to the dispatcher as one batch and
 * moves the position past them. An event read that cannot join the batch
 * is left in w->batch_held. FW_READ_NEXT: read on. */
fw_read_end_t fw_stream_batch_take (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p,
                                    const fw_event_t *ev);

/* Whether doc (a change event read) may join a batch. */
bool fw_stream_batch_joins (const bson_t *doc, const fw_event_t *ev);

/* exactly_once (issue 39), per-event handlers: whether ev (doc) is an event
 * of a source transaction (lsid and txnNumber) that starts a group. */
bool fw_stream_group_wanted (const fw_stream_worker_t *w, const bson_t *doc, const fw_event_t *ev);

/* ev and the events read after it of the same source transaction, up to an
 * event of another one (left in w->batch_held) or a getMore that returns
 * nothing, handed to the dispatcher as one group (fw_group_dispatch: one
 * transaction); the position moves past them once every one is finished
 * with. FW_READ_NEXT: read on. */
fw_read_end_t fw_stream_group_take (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p,
                                    const fw_event_t *ev);

#endif
