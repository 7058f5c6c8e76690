/*
 * bson_alloc.c - memory aligned for bson_t (see bson_alloc.h).
 */
#include <stdlib.h>
#include <string.h>

#include <bson/bson.h>

#include "bson/bson_alloc.h"

void *
fw_bson_aligned_calloc (size_t size)
{
   void *p = NULL;

   if (posix_memalign (&p, BSON_ALIGNOF (bson_t), size ? size : 1) != 0) {
      return NULL;
   }
   memset (p, 0, size);
   return p;
}
