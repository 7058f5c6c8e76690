/*
 * bson_arena.h - read-only copies of BSON documents carved from shared
 * blocks, all freed at once: for a batch of change events that live exactly
 * as long as the batch (no malloc, aligned bson_t and free per event).
 */
#ifndef FW_BSON_ARENA_H
#define FW_BSON_ARENA_H

#include <bson/bson.h>

/* Blocks are at least this large; a larger document gets a block of its own. */
#define FW_BSON_ARENA_BLOCK ((size_t) 64 * 1024)

typedef struct fw_bson_arena_block fw_bson_arena_block_t;

/* Zero-initialised (FW_BSON_ARENA_INIT) is an empty arena. */
typedef struct {
   fw_bson_arena_block_t *head; /* the block copies are carved from now */
} fw_bson_arena_t;

#define FW_BSON_ARENA_INIT \
   {                       \
      NULL                 \
   }

/* A read-only copy of doc (header and bytes in the arena, owned by it: valid
 * until fw_bson_arena_clear; never bson_destroy'd); NULL when out of memory. */
const bson_t *fw_bson_arena_copy (fw_bson_arena_t *a, const bson_t *doc);

/* Gives back copy, the arena's last one, for the next copy to reuse. */
void fw_bson_arena_drop_last (fw_bson_arena_t *a, const bson_t *copy);

/* Frees every copy; the arena stays usable, empty. */
void fw_bson_arena_clear (fw_bson_arena_t *a);

#endif
