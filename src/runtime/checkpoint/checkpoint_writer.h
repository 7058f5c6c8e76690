/*
 * checkpoint_writer.h - a stream's checkpoint writes off the handler's path
 * (checkpoint.mode = "async", issue 16).
 *
 * One writer per stream: a thread with its own client (popped from the
 * stream's pool) that writes the positions the stream hands it with
 * fw_checkpoint_save, one write in flight at a time. A position handed over
 * while a write is in flight waits in a one-slot queue, where a newer one
 * replaces it (coalescing). Positions are written in the order they were
 * handed over, so the stored checkpoint never moves backwards; a failed
 * write is tried again (after RETRY_MS, or at once when a newer position
 * arrives), so no later position is lost.
 */
#ifndef FLOWWARDEN_CHECKPOINT_WRITER_H
#define FLOWWARDEN_CHECKPOINT_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"

typedef struct fw_checkpoint_writer fw_checkpoint_writer_t;

/* Where a writer stores its positions: the checkpoint store on MongoDB
 * (fw_checkpoint_writer_new), or a test's fake. Every call is on the
 * writer's thread: open once as it starts, write per position (processed
 * and seen may be NULL; epoch > 0: fenced with it), close as it ends. */
typedef struct {
   void (*open) (void *ud);
   bool (*write) (void *ud, const bson_t *processed, const bson_t *seen, const char *version,
                  int64_t epoch, fw_error_t *error);
   void (*close) (void *ud);
   void *ud;
} fw_checkpoint_sink_t;

/* A writer over sink (copied; its ud must outlive the writer) for the log
 * lines of stream (copied). retry_ms: how long a failed write waits for
 * its retry unless a newer position comes first. NULL (error set) when
 * its thread cannot start. */
fw_checkpoint_writer_t *fw_checkpoint_writer_start (const fw_checkpoint_sink_t *sink,
                                                    const char *stream, int64_t retry_ms,
                                                    fw_error_t *error);

/* Starts the writer of stream's checkpoint in database (both copied). Its
 * thread pops a client from pool and pushes it back when destroyed. NULL
 * (error set) when the thread cannot start. */
fw_checkpoint_writer_t *fw_checkpoint_writer_new (mongoc_client_pool_t *pool, const char *database,
                                                  const char *stream, fw_error_t *error);

/* Hands over a position (copied; processed, seen and script_version may be
 * NULL as for fw_checkpoint_save). With max_behind > 0, first waits while
 * max_behind hand-overs or more are not yet tried (written, failed or
 * superseded), so that (while writes succeed) the stored checkpoint is at
 * most max_behind hand-overs behind the one just made; with 0, never waits.
 * The write of each hand-over starts as soon as the one in flight ends. */
void fw_checkpoint_writer_submit (fw_checkpoint_writer_t *cw, const bson_t *processed,
                                  const bson_t *seen, const char *script_version, int max_behind);

/* Drops the position waiting to be written (the caller's synchronous save,
 * which follows, supersedes it) and waits for the write in flight to end.
 * Afterwards the writer writes nothing until the next submit. */
void fw_checkpoint_writer_quiesce (fw_checkpoint_writer_t *cw);

/* ha.mode = "leader": the writes that start from now on are fenced with
 * epoch (fw_checkpoint_save_fenced); 0 (the default): plain saves. Quiesce
 * first so that no write of the old epoch is left. */
void fw_checkpoint_writer_set_epoch (fw_checkpoint_writer_t *cw, int64_t epoch);

/* Outcomes since the last call: *ok writes done, *failed writes failed, and
 * when *ok > 0, *last_ok_ms the wall-clock time (ms) of the last one. */
void fw_checkpoint_writer_take_results (fw_checkpoint_writer_t *cw, int *ok, int *failed,
                                        int64_t *last_ok_ms);

/* Quiesces, stops and joins the thread. NULL is a no-op. */
void fw_checkpoint_writer_destroy (fw_checkpoint_writer_t *cw);

#endif
