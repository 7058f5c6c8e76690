/* Unit tests for the Lua states' cache of small freed blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/host/block_cache.h"

static void
fill (void *p, size_t n, int seed)
{
   for (size_t i = 0; i < n; i++) {
      ((unsigned char *) p)[i] = (unsigned char) (seed + i);
   }
}

static void
assert_filled (const void *p, size_t n, int seed)
{
   for (size_t i = 0; i < n; i++) {
      assert_int_equal (((const unsigned char *) p)[i], (unsigned char) (seed + i));
   }
}

/* A freed block serves the next request of its size class, not another's. */
static void
block_cache_reuses_a_block_of_the_same_class (void **state)
{
   fw_block_cache_t c = {0};
   void *a = fw_block_cache_get (&c, 40), *b, *d;
   (void) state;

   assert_non_null (a);
   fill (a, 48, 1); /* the class's whole size (33..48) is the caller's */
   fw_block_cache_put (&c, a, 40);
   assert_int_equal (c.bytes, 48);
   b = fw_block_cache_get (&c, 20); /* another class: a new block */
   assert_non_null (b);
   assert_ptr_not_equal (b, a);
   d = fw_block_cache_get (&c, 33);
   assert_ptr_equal (d, a);
   assert_int_equal (c.bytes, 0);
   fw_block_cache_put (&c, b, 20);
   fw_block_cache_put (&c, d, 33);
   fw_block_cache_clear (&c);
   assert_int_equal (c.bytes, 0);
   assert_null (c.free[1]);
   assert_null (c.free[2]);
}

/* Resizing keeps the contents across classes and between small and large
 * blocks; within a class the block stays where it is. */
static void
block_cache_resize_keeps_the_contents (void **state)
{
   fw_block_cache_t c = {0};
   void *p = fw_block_cache_get (&c, 17), *q;
   (void) state;

   fill (p, 17, 7);
   q = fw_block_cache_resize (&c, p, 17, 32);
   assert_ptr_equal (q, p);
   fill (q, 32, 7);
   p = fw_block_cache_resize (&c, q, 32, 100);
   assert_non_null (p);
   assert_filled (p, 32, 7);
   assert_int_equal (c.bytes, 32); /* the old block went to the cache */
   fill (p, 100, 3);
   q = fw_block_cache_resize (&c, p, 100, 5000); /* small to large */
   assert_non_null (q);
   assert_filled (q, 100, 3);
   fill (q, 5000, 9);
   p = fw_block_cache_resize (&c, q, 5000, 9000); /* large to large */
   assert_non_null (p);
   assert_filled (p, 5000, 9);
   q = fw_block_cache_resize (&c, p, 9000, 10); /* large to small */
   assert_non_null (q);
   assert_filled (q, 10, 9);
   p = fw_block_cache_resize (&c, q, 10, 5); /* shrinking in the class */
   assert_ptr_equal (p, q);
   assert_filled (p, 5, 9);
   fw_block_cache_put (&c, p, 5);
   fw_block_cache_clear (&c);
   assert_int_equal (c.bytes, 0);
}

/* Past FW_BLOCK_CACHE_MAX_BYTES freed blocks go back to free(); large ones
 * are never kept. */
static void
block_cache_holds_at_most_its_limit (void **state)
{
   enum { N = FW_BLOCK_CACHE_MAX_BYTES / FW_BLOCK_CACHE_MAX_SIZE + 10 };
   static void *blocks[N];
   fw_block_cache_t c = {0};
   void *big;
   (void) state;

   for (size_t i = 0; i < N; i++) {
      blocks[i] = fw_block_cache_get (&c, FW_BLOCK_CACHE_MAX_SIZE);
      assert_non_null (blocks[i]);
   }
   for (size_t i = 0; i < N; i++) {
      fw_block_cache_put (&c, blocks[i], FW_BLOCK_CACHE_MAX_SIZE);
      assert_true (c.bytes <= FW_BLOCK_CACHE_MAX_BYTES);
   }
   assert_int_equal (c.bytes, FW_BLOCK_CACHE_MAX_BYTES);
   big = fw_block_cache_get (&c, FW_BLOCK_CACHE_MAX_SIZE + 1);
   assert_non_null (big);
   fw_block_cache_put (&c, big, FW_BLOCK_CACHE_MAX_SIZE + 1);
   assert_int_equal (c.bytes, FW_BLOCK_CACHE_MAX_BYTES);
   fw_block_cache_put (&c, NULL, 8); /* as free(NULL) */
   fw_block_cache_clear (&c);
   assert_int_equal (c.bytes, 0);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (block_cache_reuses_a_block_of_the_same_class),
      cmocka_unit_test (block_cache_resize_keeps_the_contents),
      cmocka_unit_test (block_cache_holds_at_most_its_limit),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
