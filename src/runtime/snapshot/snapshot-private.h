/*
 * snapshot-private.h - the incremental snapshot engine's state, shared by
 * parts: snapshot.c (the live events, the hand-out, the progress),
 * snapshot_read.c (reading a chunk between its watermarks) and
 * snapshot_ahead.c (those reads on a thread of their own).
 */
#ifndef FLOWWARDEN_SNAPSHOT_PRIVATE_H
#define FLOWWARDEN_SNAPSHOT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "runtime/snapshot/snapshot.h"

/* A row: its document and its key { _id } (compared with a live event's
 * documentKey, its snapshot event's documentKey) in its chunk's data, one
 * after the other: no allocation of its own (two per row, and their frees
 * on the stream's thread, were most of a chunk's read after the find). */
typedef struct {
   size_t off; /* the document at data + off, len bytes; the key right after it */
   uint32_t len, key_len;
   uint64_t hash; /* of the key's bytes */
   bool dropped;  /* a live change between the watermarks */
} row_t;

/* One chunk read between its watermarks, waiting for the stream to pass
 * high. */
typedef struct {
   row_t *rows;
   uint8_t *data; /* the rows' documents and keys, owned */
   size_t data_len, data_cap;
   int n_rows;
   int next; /* the next row to hand out */
   uint64_t low, high;
   uint64_t run; /* read ahead: the run of reads it was read in (snapshot_ahead.c) */
} chunk_t;

/* Where the reads stand: the engine's own (reads on the stream's thread),
 * or the read-ahead thread's while it runs. */
typedef struct {
   bson_t read_after; /* { _id: the last row read }; empty: from the start */
   bool jump;         /* a read found no row after read_after of its type: the next
                       * one reads the types MongoDB orders after it */
   bool ended;        /* no row is left after read_after */
   bool needs_until;  /* the first read finds the upper bound first */
   bool has_until;    /* until: { _id: the largest _id when the snapshot began } */
   bson_t until;
   /* A run of reads (fw_snapshot_cursor_end ends it): the session they
    * share and the high watermark of the last one, the next chunk's low. */
   mongoc_client_session_t *cs;
   uint64_t last_high;
} fw_snapshot_cursor_t;

/* A live event shown while chunks were being read ahead: their rows of its
 * key are dropped when they join the queue. */
typedef struct {
   uint64_t ts;   /* its clusterTime; 0: none (drops the key from every chunk) */
   uint64_t hash; /* of key */
   uint64_t run;  /* the run of reads when it was shown */
   uint8_t *key;  /* { _id }'s bytes, owned */
   uint32_t len;
} live_t;

typedef struct fw_snapshot_ahead fw_snapshot_ahead_t; /* snapshot_ahead.c */

/* Chunks read ahead at most: on an idle collection the stream passes a
 * high watermark only with its next post-batch resume token (a getMore waits
 * up to maxAwaitTimeMS, and writes to other collections do not end the wait),
 * so several chunks wait together and are handed out at once. */
#define FW_SNAPSHOT_MAX_CHUNKS 16

/* Live events kept for the chunks being read ahead at most (a read held up
 * while a busy stream goes on): past it the reads ahead stop, and the
 * chunks are read on the stream's thread, between live events. */
#define FW_SNAPSHOT_MAX_LOG 65536

struct fw_snapshot {
   struct {
      char *name, *database, *collection;
      int64_t chunk_size;
      int read_mode;
      int partition, partitions;          /* a unit of a partitioned stream: only its keys */
   } cfg;                                 /* copied: a reload frees the stream's settings */
   fw_snapshot_progress_t progress;       /* after: the last row handed out of a whole chunk */
   fw_snapshot_cursor_t cur;              /* the reads on the stream's thread */
   chunk_t chunk[FW_SNAPSHOT_MAX_CHUNKS]; /* a queue, oldest first */
   int n_chunks;
   bool exhausted;             /* every row was read (and queued) */
   uint64_t passed;            /* the stream has read everything before this time */
   fw_snapshot_ahead_t *ahead; /* reads on a thread of their own; NULL: none */
   live_t *log;                /* live events kept while a run of reads ahead is not queued */
   int n_log, cap_log;
   bool log_full;        /* an event could not be kept: the reads ahead stop */
   bool ahead_off;       /* ... for good: the chunks are read on the stream's thread */
   uint64_t logged_upto; /* every run up to this one is queued whole: no event kept for it */
   bson_t event;         /* the snapshot event handed out last: a view of ev_buf */
   uint8_t *ev_buf;      /* its bytes, owned */
   size_t ev_cap;
   bson_t ns; /* its ns: { db, coll }, built once */
   int64_t read, dropped, chunks;
};

/* The key of an _id value at it: { _id: value } (initialized here; the
 * caller destroys it) and its hash. False when out of memory. */
bool fw_snapshot_key_of (bson_iter_t *it, bson_t *key, uint64_t *hash);

/* Frees c's rows and zeroes it. */
void fw_snapshot_chunk_clear (chunk_t *c);

/* Row i of c's document and key, as read-only views of c's data (valid
 * while c is). */
void fw_snapshot_row_doc (const chunk_t *c, int i, bson_t *view);
void fw_snapshot_row_key (const chunk_t *c, int i, bson_t *view);

/* cur from s's progress (after its boundary, up to its bound), or when
 * after is not NULL ({ _id: v }) after it; no run. */
void fw_snapshot_cursor_init (fw_snapshot_cursor_t *cur, const fw_snapshot_t *s,
                              const bson_t *after);
/* Ends cur's run of reads (its session). */
void fw_snapshot_cursor_end (fw_snapshot_cursor_t *cur);
void fw_snapshot_cursor_cleanup (fw_snapshot_cursor_t *cur);

/* The next chunk after cur into ch (zeroed), between its watermarks on
 * client (the first read finds cur's upper bound first): rows
 * (ch->n_rows > 0) to queue, or none (cur moved to the next type of _id,
 * or ended). Reads only s's settings and filter, which do not change: runs
 * on the read-ahead thread too. False on an error (cur's run ended, ch
 * empty). */
bool fw_snapshot_cursor_read (const fw_snapshot_t *s, fw_snapshot_cursor_t *cur,
                              mongoc_client_t *client, chunk_t *ch, fw_error_t *error);

/* The upper bound cur found (its first read), kept in s's progress. */
void fw_snapshot_bound_found (fw_snapshot_t *s, const fw_snapshot_cursor_t *cur);

/* Queues ch (with rows; taken over) behind the others. */
void fw_snapshot_queue (fw_snapshot_t *s, chunk_t *ch);

/* Drops the rows of ch not handed out yet whose key is key (len bytes,
 * hash), when ts (a live event's clusterTime) is after ch's low watermark:
 * inside the window the event is at least as new as the row, and after it
 * the event is handled before the rows left (the stream hands them out
 * between live events). */
void fw_snapshot_drop_rows (fw_snapshot_t *s, chunk_t *ch, uint64_t ts, const uint8_t *key,
                            uint32_t len, uint64_t hash);

/* snapshot_ahead.c: the run of reads the thread is in (0: none began);
 * the engine logs a live event while this is above logged_upto. */
uint64_t fw_snapshot_ahead_run (const fw_snapshot_ahead_t *a);

/* snapshot_ahead.c: the queue has room again (a chunk closed). */
void fw_snapshot_ahead_room (fw_snapshot_t *s);

/* snapshot_ahead.c: stops the thread (after its read in flight) and frees
 * the chunks it read that were not queued. */
void fw_snapshot_ahead_stop (fw_snapshot_t *s);

#endif
