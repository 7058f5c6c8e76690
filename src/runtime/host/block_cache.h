/*
 * block_cache.h - the small blocks a Lua state freed, kept for its next
 * allocations.
 *
 * A handler makes and drops many small objects per event (tables, their
 * hash parts, views): with malloc, a batch of them freed by one collection
 * is merged into the heap's free lists and split again for the next batch
 * (~100 instructions a block in an on_batch handler). The cache keeps freed
 * blocks of up to FW_BLOCK_CACHE_MAX_SIZE bytes on one free list per size
 * class (16 bytes apart), up to FW_BLOCK_CACHE_MAX_BYTES in all; past that a
 * block goes back to free(). Not thread-safe: one cache per Lua state, which
 * only one thread runs at a time.
 *
 * A block's size class is worked out from the size it was asked for, which
 * Lua passes back on every resize and free (lua_Alloc's osize): small blocks
 * are malloc'd with their class's whole size, so any block of a class serves
 * any request of that class.
 */
#ifndef FW_BLOCK_CACHE_H
#define FW_BLOCK_CACHE_H

#include <stddef.h>

#define FW_BLOCK_CACHE_GRAIN 16
#define FW_BLOCK_CACHE_CLASSES 64 /* 16, 32, ..., 1024 bytes */
#define FW_BLOCK_CACHE_MAX_SIZE (FW_BLOCK_CACHE_GRAIN * FW_BLOCK_CACHE_CLASSES)
#define FW_BLOCK_CACHE_MAX_BYTES ((size_t) 1024 * 1024)

typedef struct {
   void *free[FW_BLOCK_CACHE_CLASSES]; /* each block's first word links the next */
   size_t bytes;                       /* held on the lists */
} fw_block_cache_t;

/* A block of at least size bytes (size > 0), from the cache when it holds
 * one of that class; NULL when malloc fails. The caller owns it and gives it
 * back with fw_block_cache_put or fw_block_cache_resize with the same size. */
void *fw_block_cache_get (fw_block_cache_t *c, size_t size);

/* Takes back a block that fw_block_cache_get(size) or fw_block_cache_resize
 * (..., size) returned: kept for reuse or freed. */
void fw_block_cache_put (fw_block_cache_t *c, void *block, size_t size);

/* realloc for the cache's blocks: block (of osize bytes, not NULL) resized
 * to nsize > 0 bytes, its first min(osize, nsize) bytes kept. NULL when
 * growing fails (block untouched); shrinking never fails. */
void *fw_block_cache_resize (fw_block_cache_t *c, void *block, size_t osize, size_t nsize);

/* Frees every block on the lists (the cache stays usable, empty). */
void fw_block_cache_clear (fw_block_cache_t *c);

#endif
