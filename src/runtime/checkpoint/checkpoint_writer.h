/*
 * checkpoint_writer.h - a stream's checkpoint writes off the handler's path
 * (checkpoint.mode = "async", issue 16).
 *
 * One writer per stream, with up to max_in_flight writes at once, each on a
 * connection of its own (a thread each, the first one's started with the
 * writer, the others' the first time they are needed): the first connection
 * is the writer's for its life (popped from the stream's pool), the others are
 * borrowed from the pool for one write at a time, only when one is free
 * (never waiting), and only while the writer falls behind (issue 41: on a
 * network with latency one write in flight let the stored checkpoint trail
 * by two round trips). A position handed over with fw_checkpoint_save waits
 * in a one-slot queue, where a newer one replaces it (coalescing), until a
 * connection takes it: the first one whenever it is free, another only while
 * the writer lags by half the handler's bound (max_behind hand-overs and
 * max_unsaved in time, both) and the position is some hand-overs and some
 * time past the last one started, so that the writes in flight start spread
 * over the bound. Each write carries its
 * hand-over's number (seq) and the store keeps no position over a later seq
 * (fw_checkpoint_save_ordered), so writes that end out of order never move
 * the stored checkpoint backwards; a failed write is tried again (after
 * RETRY_MS, or at once when a newer position arrives) unless a newer one is
 * in flight or stored, so no later position is lost; a write refused by a
 * newer run of the stream is never tried again (fw_checkpoint_writer_refused).
 */
#ifndef FLOWWARDEN_CHECKPOINT_WRITER_H
#define FLOWWARDEN_CHECKPOINT_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/checkpoint/checkpoint_store.h"

/* The most writes one writer keeps in flight (fw_checkpoint_writer_start). */
#define FW_CHECKPOINT_MAX_IN_FLIGHT 8

typedef struct fw_checkpoint_writer fw_checkpoint_writer_t;

/* One write: a position (processed, seen and version may be NULL) and how to
 * store it. */
typedef struct {
   const bson_t *processed;
   const bson_t *seen;
   const char *version;
   int64_t epoch; /* > 0: fenced with it (fw_checkpoint_save_fenced); 0: plain */
   uint64_t seq;  /* its hand-over, 1, 2, ...: nothing is stored over a later seq */
} fw_checkpoint_write_t;

/* Where a writer stores its positions: the checkpoint store on MongoDB
 * (fw_checkpoint_writer_new), or a test's fake. conn is the connection, 0 ..
 * max_in_flight - 1; the calls of one conn never overlap. open gives conn a
 * connection: conn 0 once on its thread as the writer starts (wait true; its
 * answer is not used: a write without one fails), the others just before each
 * of their writes, under the writer's lock, without waiting (wait false;
 * false: none free, the write goes to another conn). close gives it back:
 * conn 0 as the writer ends, the others after each write, on conn's thread.
 * write stores w and says how it ended (error set when not saved). */
typedef struct {
   bool (*open) (void *ud, int conn, bool wait);
   fw_checkpoint_saved_t (*write) (void *ud, int conn, const fw_checkpoint_write_t *w,
                                   fw_error_t *error);
   void (*close) (void *ud, int conn);
   void *ud;
} fw_checkpoint_sink_t;

/* A writer over sink (copied; its ud must outlive the writer) for the log
 * lines of stream (copied). retry_ms: how long a failed write waits for
 * its retry unless a newer position comes first; max_in_flight (1 ..
 * FW_CHECKPOINT_MAX_IN_FLIGHT): how many writes it keeps in flight at most.
 * NULL (error set) when its threads cannot start. */
fw_checkpoint_writer_t *fw_checkpoint_writer_start (const fw_checkpoint_sink_t *sink,
                                                    const char *stream, int64_t retry_ms,
                                                    int max_in_flight, fw_error_t *error);

/* Starts the writer of stream's checkpoint in database (both copied), its
 * writes carrying the run's writer generation gen (0: none, as under ha;
 * fw_checkpoint_claim_generation), with
 * up to FW_CHECKPOINT_WRITES_IN_FLIGHT (checkpoint_writer.c) writes in
 * flight. Its first connection pops a client from pool and pushes it back
 * when destroyed; the others borrow one per write (mongoc_client_pool_try_pop:
 * never waiting). NULL (error set) when its threads cannot start. */
fw_checkpoint_writer_t *fw_checkpoint_writer_new (mongoc_client_pool_t *pool, const char *database,
                                                  const char *stream, int64_t gen,
                                                  fw_error_t *error);

/* Hands over a position (copied; processed, seen and script_version may be
 * NULL as for fw_checkpoint_save). With max_behind > 0, first waits while
 * both hold: max_behind hand-overs or more are past the newest one tried
 * (written, failed or found superseded), and that one was handed over
 * max_unsaved_ms or longer before this call (monotonic clock; <= 0: always,
 * the count alone; the position the writer started from counts as long
 * ago). So (while writes succeed) the positions past the stored checkpoint
 * are at most max_behind hand-overs, or those reached within max_unsaved_ms
 * of its hand-over; with max_behind 0, never waits. The hand-over is written
 * as soon as a connection takes it (see above); the bound also sets when
 * more than one write may be in flight (half of it used: max_behind / 2
 * hand-overs and max_unsaved_ms / 2 past the newest tried; none with 0) and
 * how far apart they start (max_behind / (max_in_flight + 1) hand-overs, at
 * least 1, and max_unsaved_ms / (max_in_flight + 1) between hand-overs). */
void fw_checkpoint_writer_submit (fw_checkpoint_writer_t *cw, const bson_t *processed,
                                  const bson_t *seen, const char *script_version, int max_behind,
                                  int64_t max_unsaved_ms);

/* The hand-over time (fw_mono_ns) of the position the store holds as the
 * writer starts: a time before any event past it was handled. Unset, that
 * position counts as handed over long ago (max_behind alone holds the
 * handler back until the first write ends). Before the first submit. */
void fw_checkpoint_writer_set_origin (fw_checkpoint_writer_t *cw, int64_t handed_ns);

/* Drops the position waiting to be written (the caller's synchronous save,
 * which follows, supersedes it) and waits for every write in flight to end.
 * Afterwards the writer writes nothing until the next submit. */
void fw_checkpoint_writer_quiesce (fw_checkpoint_writer_t *cw);

/* After fw_checkpoint_writer_quiesce: the stamp of the caller's own
 * synchronous save (fw_checkpoint_save_ordered_with), *seq a hand-over's
 * number past every one handed over so far (reserved: later hand-overs come
 * after it) and *writer this writer's id. A write of this writer that the
 * server applies after that save (one that timed out on the client's side,
 * which quiesce does not wait for) then changes nothing. False (*seq
 * reserved all the same) when the writer's sink is not MongoDB's: no id. */
bool fw_checkpoint_writer_stamp (fw_checkpoint_writer_t *cw, bson_oid_t *writer, int64_t *seq);

/* ha.mode = "leader": the writes that start from now on are fenced with
 * epoch (fw_checkpoint_save_fenced); 0 (the default): plain saves. Quiesce
 * first so that no write of the old epoch is left. */
void fw_checkpoint_writer_set_epoch (fw_checkpoint_writer_t *cw, int64_t epoch);

/* Whether a newer run of the stream refused one of the writer's writes
 * (FW_CHECKPOINT_REFUSED; *why, may be NULL, says so, naming both
 * generations): the writer then writes nothing more (the positions handed
 * over are dropped, none is tried again, submit never waits), and the
 * stream is to stop: its events are the newer run's. */
bool fw_checkpoint_writer_refused (fw_checkpoint_writer_t *cw, fw_error_t *why);

/* Outcomes since the last call: *ok writes done, *failed writes failed, and
 * when *ok > 0, *last_ok_ms the wall-clock time (ms) of the last one. */
void fw_checkpoint_writer_take_results (fw_checkpoint_writer_t *cw, int *ok, int *failed,
                                        int64_t *last_ok_ms);

/* Quiesces, stops and joins the thread. NULL is a no-op. */
void fw_checkpoint_writer_destroy (fw_checkpoint_writer_t *cw);

#endif
