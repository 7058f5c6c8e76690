/*
 * snapshot.h - incremental snapshots (issue 28): a collection read in
 * chunks ordered by _id between a stream's live events, by DBLog's
 * watermark method, so that the stream never stops for it.
 *
 * Each chunk is read between two watermarks: flowwarden writes a mark
 * document into <database>._fw_snapshot_marks before (low, L) and after
 * (high, H) the chunk's find, on one causally consistent session, and takes
 * each write's operationTime. A collection's change stream does not see the
 * marks collection, so the watermarks are compared with the live events'
 * clusterTime (the order the change stream delivers them in): every live
 * event between L and H drops the chunk's row of its key, and the remaining
 * rows are handed out as snapshot events once the stream has read past H
 * (an event after H, or a post-batch resume token at or after H), between
 * live events: a live event after H handled before some of them drops
 * their row of its key too. The chunks stop at the largest _id the
 * collection had when the snapshot began (documents inserted later reach
 * the stream as inserts). Per key,
 * a snapshot event is never handled after a newer live change of that key;
 * a key may be handled twice (snapshot then live), never stale.
 *
 * The engine knows neither the stream nor its dispatcher: the stream's
 * thread (stream/stream_snapshot.c) has it read chunks ahead on a thread
 * of its own (or asks it for chunks), shows it the live events and hands
 * its snapshot events to the dispatcher.
 */
#ifndef FLOWWARDEN_SNAPSHOT_H
#define FLOWWARDEN_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>
#include <mongoc/mongoc.h>

#include "bson/event.h"
#include "flowwarden/collection_names.h"
#include "flowwarden/error.h"
#include "runtime/config/stream_config.h"

typedef struct fw_snapshot fw_snapshot_t;

/* Where a snapshot stands, as the checkpoint keeps it (field "snapshot" of
 * the stream's checkpoint document). */
typedef struct {
   bool present;   /* the checkpoint has a snapshot field */
   bool done;      /* finished: never taken again */
   bool has_after; /* after: { _id: <last row of the last finished chunk> } */
   bson_t after;
   bool has_filter; /* an on-demand snapshot's filter */
   bson_t filter;
   bool has_until;    /* until: { _id: <the largest _id when the snapshot began> }: */
   bson_t until;      /* later documents come as live inserts, not chunks */
   int64_t documents; /* snapshot events handed out so far */
} fw_snapshot_progress_t;

/* Initializes p (empty). */
void fw_snapshot_progress_init (fw_snapshot_progress_t *p);
void fw_snapshot_progress_cleanup (fw_snapshot_progress_t *p);

/* config/: reads the spec's snapshot table (at stack index t) into cfg;
 * leaves the stack as it found it. */
void fw_stream_config_read_snapshot (lua_State *L, int t, fw_stream_config_t *cfg);

/* A snapshot of cfg's collection (what it needs of cfg is copied), from
 * progress (its after and filter copied; NULL: from the
 * start, whole). NULL when out of memory. */
fw_snapshot_t *fw_snapshot_new (const fw_stream_config_t *cfg,
                                const fw_snapshot_progress_t *progress);

/* NULL is a no-op. */
void fw_snapshot_destroy (fw_snapshot_t *s);

/* Reads the next chunk between its watermarks on client, when
 * fw_snapshot_wants_chunk and not reading ahead (else a no-op); the first
 * read also finds the upper bound. A chunk with no row marks the
 * collection read to its end. False on an error (error says which step
 * failed); the snapshot stays where it was. Reads follow each other in a
 * run, on one session s keeps (a chunk's high watermark is the next one's
 * low), until fw_snapshot_end_reads: the caller ends the run before it
 * handles a live event or lets time pass, and before client goes. */
bool fw_snapshot_read_chunk (fw_snapshot_t *s, mongoc_client_t *client, fw_error_t *error);

/* Ends the run of reads: the next chunk writes its own low watermark on a
 * new session. Also after an error, a discard and once exhausted. */
void fw_snapshot_end_reads (fw_snapshot_t *s);

/* True while rows may be left to read: the chunks may be read ahead
 * (fw_snapshot_ahead_start); false for good once the live events kept for
 * the reads ahead overflowed (a busy stream while a read was held up). */
bool fw_snapshot_may_read_ahead (const fw_snapshot_t *s);

/* Reads the next chunks on a thread of its own, with a client of pool
 * (taken for the thread's life, back when the reads end), a run of reads
 * at a time while fewer than 16 chunks are held; pause_ms between two
 * chunks, retry_ms after a failed read. The caller's thread queues them
 * (fw_snapshot_ahead_collect) and goes on showing the engine every live
 * event (fw_snapshot_live): a chunk that joins the queue drops its rows of
 * the events shown since its run began (their clusterTime after its low
 * watermark). A no-op when already reading ahead or not
 * fw_snapshot_may_read_ahead. False when the thread or its client cannot
 * be had (the reads stay on the caller's thread: fw_snapshot_read_chunk). */
bool fw_snapshot_ahead_start (fw_snapshot_t *s, mongoc_client_pool_t *pool, int64_t pause_ms,
                              int64_t retry_ms, fw_error_t *error);

/* True while the chunks are read ahead (fw_snapshot_read_chunk is then a
 * no-op). */
bool fw_snapshot_reading_ahead (const fw_snapshot_t *s);

/* Queues the chunks read ahead since the last call; once every row is
 * read the thread ends. False when a read failed since the last call
 * (error says which step; the thread tries again after retry_ms). The
 * thread also ends when a live event could not be kept for its chunks:
 * those it had not handed over are read again, by fw_snapshot_read_chunk. */
bool fw_snapshot_ahead_collect (fw_snapshot_t *s, fw_error_t *error);

/* True while a chunk read waits for the stream to pass its high watermark. */
bool fw_snapshot_chunk_open (const fw_snapshot_t *s);

/* True while the collection has rows left to read and fewer than 16 chunks
 * wait: on an idle collection the stream passes a high watermark only with
 * a getMore's post-batch resume token (up to maxAwaitTimeMS later), so
 * chunks are read ahead and handed out together. */
bool fw_snapshot_wants_chunk (const fw_snapshot_t *s);

/* True once every row was read and handed out. */
bool fw_snapshot_finished (const fw_snapshot_t *s);

/* A live event the stream read, in the stream's order, before it is
 * handled: a row of its key is dropped from every chunk whose low
 * watermark its clusterTime is after (inside the window the event is at
 * least as new as the row; after it, the event is handled before the rows
 * not handed out yet, which the stream hands out between live events).
 * True when the oldest chunk is due now (the event is past its high
 * watermark). */
bool fw_snapshot_live (fw_snapshot_t *s, const fw_event_t *ev);

/* True when token (a post-batch resume token) says the stream has read
 * everything up to the high watermark: the chunk's rows are due. */
bool fw_snapshot_token_past (fw_snapshot_t *s, const bson_t *token);

/* True when the oldest chunk is due: the stream passed its high watermark. */
bool fw_snapshot_due (const fw_snapshot_t *s);

/* The next row of the oldest due chunk that no live event dropped, as a
 * snapshot event (*ev borrows the snapshot's buffer: valid until the next
 * call). False when none is left in it (the chunk is closed, its last row
 * becomes the boundary the progress names: store it, then call again for
 * the next due chunk) or no chunk is due. */
bool fw_snapshot_next_event (fw_snapshot_t *s, fw_event_t *ev);

/* Drops the chunks read and not handed out (a thread reading ahead ends
 * first): they are read again, after the progress's boundary. */
void fw_snapshot_discard (fw_snapshot_t *s);

/* The progress to store (borrowed, valid until the next call on s). */
const fw_snapshot_progress_t *fw_snapshot_progress (const fw_snapshot_t *s);

/* The progress past row, the snapshot event handed out last (exactly_once:
 * committed with the row's handler call): as fw_snapshot_progress, with
 * after { _id: the row's _id }, so a restart reads the rest of its chunk
 * again, in a new chunk, between new watermarks. out (initialized) is
 * overwritten. False when row has no documentKey._id or out of memory. */
bool fw_snapshot_progress_past (const fw_snapshot_t *s, const fw_event_t *row,
                                fw_snapshot_progress_t *out);

/* Counts: rows read, dropped by live events, and chunks. */
void fw_snapshot_counts (const fw_snapshot_t *s, int64_t *read, int64_t *dropped, int64_t *chunks);

/* The clusterTime in a resume token ({_data: "82<16 hex digits>..."}), as
 * (t << 32 | i); 0 when it is not such a token. */
uint64_t fw_snapshot_token_time (const bson_t *token);

/* checkpoint/: the snapshot field of stream's checkpoint document. */
bool fw_checkpoint_snapshot_load (mongoc_client_t *client, const char *database, const char *stream,
                                  fw_snapshot_progress_t *out, fw_error_t *error);

/* Stores p as the snapshot field (upsert; epoch > 0: only while the
 * checkpoint's epoch is still epoch, as fw_checkpoint_save_fenced; gen > 0,
 * the run's writer generation without ha: only while no later run's is
 * stored, and stamps it, as the checkpoint's saves do). */
bool fw_checkpoint_snapshot_save (mongoc_client_t *client, const char *database, const char *stream,
                                  const fw_snapshot_progress_t *p, int64_t epoch, int64_t gen,
                                  fw_error_t *error);

/* Appends p as the checkpoint's snapshot field ("snapshot": {...}) to out,
 * a $set's fields: stored with the position in one write
 * (fw_checkpoint_save_with). False when out of memory. */
bool fw_checkpoint_snapshot_fields (const fw_snapshot_progress_t *p, bson_t *out);

/* exactly_once (issue 39): stores p as fw_checkpoint_snapshot_save does,
 * inside session's transaction (started by the caller, who commits it).
 * epoch > 0: only while the checkpoint's epoch is still epoch (*fenced true
 * when a newer leader holds it), else an upsert, ordered by gen as
 * fw_checkpoint_save_in (*fenced true when a later run's is stored). *reply
 * (initialised here, the caller destroys it) is the server's, for the error
 * labels. */
bool fw_checkpoint_snapshot_save_in (mongoc_client_t *client, mongoc_client_session_t *session,
                                     const char *database, const char *stream,
                                     const fw_snapshot_progress_t *p, int64_t epoch, int64_t gen,
                                     bool *fenced, bson_t *reply, fw_error_t *error);

#endif
