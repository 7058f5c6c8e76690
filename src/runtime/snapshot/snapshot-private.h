/*
 * snapshot-private.h - the incremental snapshot engine's state, shared by
 * its two halves: snapshot.c (the live events, the hand-out, the progress)
 * and snapshot_read.c (reading a chunk between its watermarks).
 */
#ifndef FLOWWARDEN_SNAPSHOT_PRIVATE_H
#define FLOWWARDEN_SNAPSHOT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "runtime/snapshot/snapshot.h"

typedef struct {
   bson_t *doc;   /* the row, owned */
   bson_t key;    /* { "": _id }: compared with a live event's documentKey._id */
   uint64_t hash; /* of key's bytes */
   bool dropped;  /* a live change between the watermarks */
} row_t;

/* One chunk read between its watermarks, waiting for the stream to pass
 * high. */
typedef struct {
   row_t *rows;
   int n_rows;
   int next; /* the next row to hand out */
   uint64_t low, high;
} chunk_t;

/* Chunks read ahead at most: on an idle collection the stream passes a
 * high watermark only with its next post-batch resume token (a getMore waits
 * up to maxAwaitTimeMS, and writes to other collections do not end the wait),
 * so several chunks wait together and are handed out at once. */
#define FW_SNAPSHOT_MAX_CHUNKS 16

struct fw_snapshot {
   struct {
      char *name, *database, *collection;
      int64_t chunk_size;
      int read_mode;
      int partition, partitions;          /* a unit of a partitioned stream: only its keys */
   } cfg;                                 /* copied: a reload frees the stream's settings */
   fw_snapshot_progress_t progress;       /* after: the last row handed out of a whole chunk */
   bson_t read_after;                     /* { _id: the last row read }; empty: from the start */
   chunk_t chunk[FW_SNAPSHOT_MAX_CHUNKS]; /* a queue, oldest first */
   int n_chunks;
   bool jump;       /* a read found no row after read_after of its type: the next
                        * one reads the types MongoDB orders after it */
   bool exhausted;  /* no row is left after read_after */
   uint64_t passed; /* the stream has read everything before this time */
   /* A run of reads (fw_snapshot_end_reads ends it): the session they share
    * and the high watermark of the last one, the next chunk's low. */
   mongoc_client_session_t *cs;
   uint64_t last_high;
   bson_t event; /* the snapshot event handed out last */
   int64_t read, dropped, chunks;
};

/* The key of an _id value at it: { "": value } (initialized here; the
 * caller destroys it) and its hash. False when out of memory. */
bool fw_snapshot_key_of (bson_iter_t *it, bson_t *key, uint64_t *hash);

/* Frees c's rows and zeroes it. */
void fw_snapshot_chunk_clear (chunk_t *c);

#endif
