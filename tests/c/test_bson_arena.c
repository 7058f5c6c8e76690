/* Unit tests for the arena of read-only BSON copies (a batch's events). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bson/bson_arena.h"

static bson_t *
doc_of_size (int i, size_t pad)
{
   bson_t *d = bson_new ();
   char *s = bson_malloc (pad + 1);

   memset (s, 'a' + i % 26, pad);
   s[pad] = '\0';
   BSON_APPEND_INT32 (d, "i", i);
   BSON_APPEND_UTF8 (d, "s", s);
   bson_free (s);
   return d;
}

static void
assert_same (const bson_t *a, const bson_t *b)
{
   assert_int_equal (a->len, b->len);
   assert_memory_equal (bson_get_data (a), bson_get_data (b), a->len);
}

/* Copies hold the documents' bytes across blocks (one larger than a block),
 * each header aligned as a bson_t asks, until the arena is cleared. */
static void
bson_arena_copies_outlive_their_sources (void **state)
{
   enum { N = 300 };
   static const bson_t *copies[N];
   fw_bson_arena_t a = FW_BSON_ARENA_INIT;
   (void) state;

   for (int i = 0; i < N; i++) {
      bson_t *d = doc_of_size (i, i == 7 ? FW_BSON_ARENA_BLOCK + 10 : (size_t) (i * 3));
      copies[i] = fw_bson_arena_copy (&a, d);
      assert_non_null (copies[i]);
      assert_int_equal ((uintptr_t) copies[i] % _Alignof(bson_t), 0);
      assert_same (copies[i], d);
      bson_destroy (d);
   }
   for (int i = 0; i < N; i++) {
      bson_t *d = doc_of_size (i, i == 7 ? FW_BSON_ARENA_BLOCK + 10 : (size_t) (i * 3));
      bson_iter_t it;
      assert_same (copies[i], d);
      assert_true (bson_iter_init_find (&it, copies[i], "i"));
      assert_int_equal (bson_iter_int32 (&it), i);
      bson_destroy (d);
   }
   fw_bson_arena_clear (&a);
   assert_null (a.head);
}

/* The last copy given back: the next one takes its room. */
static void
bson_arena_drop_last_reuses_the_room (void **state)
{
   fw_bson_arena_t a = FW_BSON_ARENA_INIT;
   bson_t *d1 = doc_of_size (1, 10), *d2 = doc_of_size (2, 20);
   const bson_t *c1, *c2, *c3;
   (void) state;

   c1 = fw_bson_arena_copy (&a, d1);
   c2 = fw_bson_arena_copy (&a, d2);
   assert_non_null (c1);
   assert_non_null (c2);
   fw_bson_arena_drop_last (&a, c2);
   c3 = fw_bson_arena_copy (&a, d1);
   assert_ptr_equal (c3, c2);
   assert_same (c3, d1);
   assert_same (c1, d1);
   bson_destroy (d1);
   bson_destroy (d2);
   fw_bson_arena_clear (&a);
   fw_bson_arena_clear (&a); /* cleared twice: still empty */
   assert_null (a.head);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (bson_arena_copies_outlive_their_sources),
      cmocka_unit_test (bson_arena_drop_last_reuses_the_room),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
