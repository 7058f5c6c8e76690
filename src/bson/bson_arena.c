/*
 * bson_arena.c - read-only copies of BSON documents carved from shared
 * blocks (see bson_arena.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_arena.h"

struct fw_bson_arena_block {
   fw_bson_arena_block_t *next; /* the blocks filled before */
   size_t size, used;           /* bytes of data, of which carved */
   uint8_t data[];
};

/* A bson_t asks for its own alignment (128 bytes with BSON_EXTRA_ALIGN). */
#define HEADER_ALIGN ((uintptr_t) _Alignof(bson_t))

const bson_t *
fw_bson_arena_copy (fw_bson_arena_t *a, const bson_t *doc)
{
   fw_bson_arena_block_t *b = a->head;
   size_t len = doc->len, need = HEADER_ALIGN - 1 + sizeof (bson_t) + len;
   uintptr_t at;
   bson_t *copy;
   uint8_t *bytes;

   if (!b || b->size - b->used < need) {
      size_t size = need > FW_BSON_ARENA_BLOCK ? need : FW_BSON_ARENA_BLOCK;

      if (!(b = malloc (sizeof *b + size))) {
         return NULL;
      }
      b->next = a->head;
      b->size = size;
      b->used = 0;
      a->head = b;
   }
   at = ((uintptr_t) (b->data + b->used) + HEADER_ALIGN - 1) & ~(HEADER_ALIGN - 1);
   copy = (bson_t *) at;
   bytes = (uint8_t *) (copy + 1);
   memcpy (bytes, bson_get_data (doc), len);
   if (!bson_init_static (copy, bytes, len)) {
      return NULL; /* not a document's bytes: nothing carved */
   }
   b->used = (size_t) (bytes + len - b->data);
   return copy;
}

void
fw_bson_arena_drop_last (fw_bson_arena_t *a, const bson_t *copy)
{
   fw_bson_arena_block_t *b = a->head;

   if (b && (const uint8_t *) copy >= b->data && (const uint8_t *) copy < b->data + b->used) {
      b->used = (size_t) ((const uint8_t *) copy - b->data);
   }
}

void
fw_bson_arena_clear (fw_bson_arena_t *a)
{
   fw_bson_arena_block_t *b = a->head, *next;

   while (b) {
      next = b->next;
      free (b);
      b = next;
   }
   a->head = NULL;
}
