/*
 * stream_read-private.h - what a stream's thread reads with, below the
 * stream itself: the reader (read-ahead), the change stream it opens, and
 * what the server can take. None of it knows the stream worker or the
 * dispatcher. Split and oversize events have their own header
 * (event_oversize-private.h).
 */
#ifndef FLOWWARDEN_STREAM_READ_PRIVATE_H
#define FLOWWARDEN_STREAM_READ_PRIVATE_H

#include <mongoc/mongoc.h>

#include "bson/event.h"
#include "flowwarden/error.h"
#include "runtime/config/stream_config.h"

/* --- stream_reader.c --------------------------------------------------- */

/* Read-ahead: a thread reading a change stream ahead of the stream's thread,
 * which calls the functions below in place of libmongoc's, with the same
 * results in the same order. */
typedef struct fw_stream_reader fw_stream_reader_t;

/* Starts reading cs (created on a client that only the reader uses from now
 * on) into a queue of at most max_events events and, past one event, at most
 * max_bytes bytes counting what the caller took (the events it was handed
 * in one go and the event in hand, the last next's: a large event is copied
 * out of libmongoc's batch only once the one before it is done).
 * While hold(hold_ud) (called on the reader's thread) is true, the reader
 * asks for nothing more and hands over one idle mark: the
 * caller is about to stop it. Without a thread (it could not start) the
 * calls go to cs on the caller's thread. NULL when out of memory. */
fw_stream_reader_t *fw_stream_reader_start (mongoc_change_stream_t *cs, int max_events,
                                            size_t max_bytes, bool (*hold) (void *ud),
                                            void *hold_ud);

/* As mongoc_change_stream_next: the next event (*doc valid until the next
 * call), or false when idle or after the error. Waits for the reader. */
bool fw_stream_reader_next (fw_stream_reader_t *r, const bson_t **doc);

/* Whether next would return at once (an event, an idle mark or the error
 * is there), waiting for one until deadline_ms (CLOCK_MONOTONIC, as
 * fw_mono_ms) at most; a caller that waits has copied the event in hand (it
 * stops counting against max_bytes). Without a thread: true (next reads cs
 * itself). */
bool fw_stream_reader_ready (fw_stream_reader_t *r, int64_t deadline_ms);

/* As mongoc_change_stream_error_document, after a false next. */
bool fw_stream_reader_error (fw_stream_reader_t *r, bson_error_t *error);

/* As mongoc_change_stream_get_resume_token, as it was after what next
 * returned (empty, never NULL). Valid until the next call to next. */
const bson_t *fw_stream_reader_resume_token (fw_stream_reader_t *r);

/* Stops and joins the thread (after its getMore in flight: at most
 * maxAwaitTimeMS when the stream is idle), frees what it read ahead; cs is
 * the caller's again. NULL is a no-op. */
void fw_stream_reader_stop (fw_stream_reader_t *r);

/* --- stream_server.c: what the stream's server can take ------------------ */

/* False when the stream (cfg) asks for a change stream option the server
 * (selected with client) is too old for, by its maxWireVersion: the
 * reason, naming the option, the stream and the server's version, is written
 * to what[len]. True when it can, or its version is not known yet. */
bool fw_stream_server_supports (const fw_stream_config_t *cfg, mongoc_client_t *client, char *what,
                                size_t len);

/* --- change_stream.c: opening a change stream, its errors ------------- */

/* Events per batch the change stream asks for; 0: no batchSize. A server
 * caps every batch at 16 MiB whatever the batchSize (the manual's getMore:
 * "If batchSize is set, getMore returns the lesser of batchSize documents or
 * 16 MiB"), so large events come in fewer per batch, and a caught-up stream
 * gets each event as soon as the server has it (an awaitData getMore waits
 * maxAwaitTimeMS only while it has nothing to return). One batch costs a
 * round trip plus the server's time to build it: with 1,000 events a
 * stream that fell behind caught up at about 1,000 events per round trip
 * (43% of its own rate at 5 ms); 4,096 small events are ~2 MiB. Without a
 * batchSize (16 MiB batches) the stand-in measured less (it builds a batch
 * holding its one lock, so the checkpoint writer waited behind it) and the
 * stream's peak RSS went from 21 to 68 MB (docs/performance.md). What a
 * stream holds to read ahead is at most: the batch libmongoc is on, plus
 * what the reader copied out of it for the handler: */
#define FW_CHANGE_BATCH_SIZE 4096

/* ... at most this many bytes of events (one event always fits, whatever
 * its size; copied into 32 KiB blocks, of which up to two more are held
 * while partly used: stream_reader.c) ... */
#define FW_READ_AHEAD_BYTES ((size_t) 4 * 1024 * 1024)
/* ... and at most this many events (the ring's slots, 24 bytes each; it
 * starts at 1,024 and grows only while the stream is behind). */
#define FW_READ_AHEAD_EVENTS 65536

/* Opens the change stream of cfg (its options, its pipeline with the split
 * stage when split, else with oversize = "skip"'s) on client, after
 * start_after (startAfter), else at start_at (startAtOperationTime, a
 * Timestamp as (t << 32) | i), else (NULL, 0) from now; with a snapshot
 * running, a shorter maxAwaitTimeMS; first_stage (may be NULL, borrowed):
 * a stage before the pipeline's (a switched generation's, issue 31). NULL only when
 * libmongoc could not allocate it; an error of the open is the change
 * stream's own (mongoc_change_stream_error_document). The caller owns it. */
mongoc_change_stream_t *fw_change_stream_open (const fw_stream_config_t *cfg,
                                               mongoc_client_t *client, const bson_t *start_after,
                                               uint64_t start_at, bool split, bool snapshot,
                                               const bson_t *first_stage);

/* What an error of a change stream (at its open or while reading) is. */
typedef enum {
   FW_CHANGE_HISTORY_LOST,          /* ChangeStreamHistoryLost: the position left the oplog */
   FW_CHANGE_FATAL,                 /* ChangeStreamFatalError: re-opening fails the same way */
   FW_CHANGE_OVERSIZE,              /* an event over 16 MiB (fw_oversize_error) */
   FW_CHANGE_FULL_DOCUMENT_REFUSED, /* a server before 6.0 refuses the fullDocument asked */
   FW_CHANGE_IMAGE_MISSING,         /* "required" pre- or post-image the server has not */
   FW_CHANGE_CLOSED,                /* closed at an invalidate the pipeline filtered out */
   FW_CHANGE_NO_RESUME_TOKEN,       /* an event without _id: neither handled nor resumable */
   FW_CHANGE_OTHER                  /* anything else: re-open with backoff */
} fw_change_error_t;

fw_change_error_t fw_change_error_kind (const bson_error_t *berr);

#endif
