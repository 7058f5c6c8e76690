/*
 * stream_position-private.h - where the stream's thread has read to and what it has
 * handled (stream_position.c): the position and its checkpoint saves.
 */
#ifndef FLOWWARDEN_STREAM_POSITION_PRIVATE_H
#define FLOWWARDEN_STREAM_POSITION_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/stream/event_oversize-private.h"
#include "runtime/stream/stream_checkpoint-private.h"
#include "runtime/stream/stream_token-private.h"

/* Where the stream's thread has read to and what it has handled. */
struct fw_position {
   bson_t resume; /* where the stream has read to (event or post-batch token) */
   bool has_resume;
   bson_t processed; /* last event handled */
   bool has_processed;
   int since_save;
   int64_t last_save_ms;
   bool dirty;
   bool invalidated;        /* the last event was an invalidate: re-open with startAfter */
   char error[600];         /* why the change stream last failed, for the stream's status */
   fw_split_buffer_t split; /* fragments of a split event, not yet handled */
   bool split_rejected;     /* the server refused $changeStreamSplitLargeEvent */
   bool unsplittable;       /* the server could not split the next event (7182500):
                         * read without the stage until oversize = "skip" has
                         * dead-lettered it */
};

/* Whether p's handled and seen positions are both committed (a token, or
 * NULL: never). */
static inline bool
fw_position_is (const fw_position_t *p, const bson_t *committed)
{
   return fw_position_tokens_are (p->has_processed ? &p->processed : NULL,
                                  p->has_resume ? &p->resume : NULL, committed);
}

/* Saves p as the checkpoint on the stream's thread, after the checkpoint
 * writer's write in flight (if any): mode = "sync", and in async mode the
 * final save (shutdown, pause, restart) and the rare ones (start,
 * invalidate). A failure is logged and counted (why names the occasion). */
void fw_position_save (fw_stream_ckpt_t *c, fw_position_t *p, const char *why);

/* What fw_position_save_with did. */
typedef enum {
   FW_POSITION_SAVED,  /* the position (and also) written */
   FW_POSITION_NONE,   /* nothing to save (no position yet, a standby): nothing written */
   FW_POSITION_FAILED, /* the write failed (logged, counted): nothing written */
   /* a newer run of the stream holds the checkpoint (without ha): nothing
    * written, now or later; the stream stops (fw_position_refused) */
   FW_POSITION_REFUSED,
} fw_position_saved_t;

/* fw_position_save, with also's fields (borrowed; NULL: none) set in the
 * same update of the checkpoint document: a snapshot's progress stored with
 * the position, both or neither. */
fw_position_saved_t fw_position_save_with (fw_stream_ckpt_t *c, fw_position_t *p, const char *why,
                                           const bson_t *also);

/* checkpoint.mode = "async": hands p to the stream's checkpoint writer
 * (started on first use) and goes on; as fw_position_save with mode = "sync"
 * or when the writer cannot start. */
fw_position_saved_t fw_position_save_async (fw_stream_ckpt_t *c, fw_position_t *p, const char *why);

/* ev (handled, or dead-lettered, on the stream's thread) is passed: p's
 * processed token is ev's, its resume token token (the change stream's after
 * ev), and p is saved (fw_position_save_async) every save_every events. */
void fw_position_passed (fw_stream_ckpt_t *c, fw_position_t *p, const fw_event_t *ev,
                         const bson_t *token);

/* Without ha (where the fencing epochs order the runs): the run's writer
 * generation in *gen, claimed on client (the caller's, on the stream's
 * deployment) the first time (fw_checkpoint_claim_generation), just before
 * the run's first write, so that a run that never writes (a refused switch
 * of partitions) leaves nothing; every write of the run to _fw_checkpoints
 * carries it. Under ha *gen is 0. Any thread
 * (the breaker's hooks run on a lane's). False (err set) when it cannot be
 * claimed: the next write tries again. */
bool fw_position_claim (fw_stream_ckpt_t *c, mongoc_client_t *client, int64_t *gen,
                        fw_error_t *err);

/* Counts the checkpoint writer's outcomes in the stream's metrics. */
void fw_position_writer_results (fw_stream_ckpt_t *c);

/* Why the stream is to stop because a newer run of it holds its checkpoint
 * (a write of this run was refused, on the stream's thread or by its
 * checkpoint writer: "checkpoint of stream ... NOT saved: a newer run ..."),
 * or NULL. Owned by c, valid until the run ends. */
const char *fw_position_refused (fw_stream_ckpt_t *c);

#endif
