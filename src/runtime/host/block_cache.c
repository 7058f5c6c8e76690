/*
 * block_cache.c - the small blocks a Lua state freed, kept for its next
 * allocations (see block_cache.h).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/host/block_cache.h"

/* Under AddressSanitizer a kept block is poisoned past its link word, so a
 * use after Lua freed it is still reported; the link stays readable, as
 * LeakSanitizer does not follow pointers held in poisoned memory and would
 * report every block after a list's first as leaked at exit. */
#if defined(__SANITIZE_ADDRESS__)
#define FW_BLOCK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FW_BLOCK_ASAN 1
#endif
#endif
#ifdef FW_BLOCK_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) \
   ASAN_POISON_MEMORY_REGION ((char *) (p) + sizeof (void *), (n) - sizeof (void *))
#define UNPOISON(p, n) \
   ASAN_UNPOISON_MEMORY_REGION ((char *) (p) + sizeof (void *), (n) - sizeof (void *))
#else
#define POISON(p, n) ((void) (p), (void) (n))
#define UNPOISON(p, n) ((void) (p), (void) (n))
#endif

/* The class of a small size (1..MAX_SIZE): 0 for 1..16 bytes, 1 for 17..32... */
static size_t
class_of (size_t size)
{
   return (size - 1) / FW_BLOCK_CACHE_GRAIN;
}

static size_t
class_size (size_t cls)
{
   return (cls + 1) * FW_BLOCK_CACHE_GRAIN;
}

void *
fw_block_cache_get (fw_block_cache_t *c, size_t size)
{
   size_t cls;
   void *block;

   if (size > FW_BLOCK_CACHE_MAX_SIZE) {
      return malloc (size);
   }
   cls = class_of (size);
   if ((block = c->free[cls])) {
      UNPOISON (block, class_size (cls));
      memcpy (&c->free[cls], block, sizeof (void *));
      c->bytes -= class_size (cls);
      return block;
   }
   return malloc (class_size (cls));
}

void
fw_block_cache_put (fw_block_cache_t *c, void *block, size_t size)
{
   size_t cls;

   if (!block) {
      return;
   }
   if (size > FW_BLOCK_CACHE_MAX_SIZE ||
       c->bytes + class_size (cls = class_of (size)) > FW_BLOCK_CACHE_MAX_BYTES) {
      free (block);
      return;
   }
   memcpy (block, &c->free[cls], sizeof (void *));
   POISON (block, class_size (cls));
   c->free[cls] = block;
   c->bytes += class_size (cls);
}

void *
fw_block_cache_resize (fw_block_cache_t *c, void *block, size_t osize, size_t nsize)
{
   bool small_o = osize <= FW_BLOCK_CACHE_MAX_SIZE, small_n = nsize <= FW_BLOCK_CACHE_MAX_SIZE;
   void *p;

   if (small_o && small_n && class_of (osize) == class_of (nsize)) {
      return block; /* the class's whole size was allocated */
   }
   if (!small_o && !small_n) {
      p = realloc (block, nsize);
      return p || nsize > osize ? p : block;
   }
   if (!(p = fw_block_cache_get (c, nsize))) {
      /* Shrinking: the block is large enough; the next put or resize files
       * it under nsize's class, smaller than what it holds. */
      return nsize < osize ? block : NULL;
   }
   memcpy (p, block, osize < nsize ? osize : nsize);
   fw_block_cache_put (c, block, osize);
   return p;
}

void
fw_block_cache_clear (fw_block_cache_t *c)
{
   for (size_t cls = 0; cls < FW_BLOCK_CACHE_CLASSES; cls++) {
      void *block = c->free[cls], *next;

      while (block) {
         UNPOISON (block, class_size (cls));
         memcpy (&next, block, sizeof next);
         free (block);
         block = next;
      }
      c->free[cls] = NULL;
   }
   c->bytes = 0;
}
