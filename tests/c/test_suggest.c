/* "Did you mean": fw_edit_distance and fw_suggest (src/base/suggest.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/suggest.h"

static void
edit_distance_counts_each_kind_of_edit_once (void **state)
{
   (void) state;
   assert_int_equal (fw_edit_distance ("list", "list"), 0);
   assert_int_equal (fw_edit_distance ("lst", "list"), 1);   /* insertion */
   assert_int_equal (fw_edit_distance ("lisst", "list"), 1); /* deletion */
   assert_int_equal (fw_edit_distance ("lest", "list"), 1);  /* substitution */
   assert_int_equal (fw_edit_distance ("lsit", "list"), 1);  /* swap of neighbours */
   assert_int_equal (fw_edit_distance ("", "abc"), 3);
   assert_int_equal (fw_edit_distance ("abc", ""), 3);
   assert_int_equal (fw_edit_distance ("upsret", "upsert"), 1);
   assert_int_equal (fw_edit_distance ("kitten", "sitting"), 3);
}

static void
edit_distance_of_long_words_is_far (void **state)
{
   char word[65];
   (void) state;
   memset (word, 'a', 64);
   word[64] = '\0';
   assert_int_equal (fw_edit_distance (word, "a"), SIZE_MAX);
   word[63] = '\0';
   assert_int_equal (fw_edit_distance (word, word), 0);
}

static void
suggest_offers_only_likely_typos (void **state)
{
   const char *const verbs[] = {"list", "show", "stats", "discard", NULL};
   (void) state;
   assert_string_equal (fw_suggest ("lsit", verbs), "list");
   assert_string_equal (fw_suggest ("stast", verbs), "stats");
   assert_string_equal (fw_suggest ("dicsard", verbs), "discard");
   assert_null (fw_suggest ("frobnicate", verbs));
   assert_null (fw_suggest ("x", verbs)); /* 1 edit, but not fewer than half of 1 */
   assert_null (fw_suggest ("ab", verbs));
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (edit_distance_counts_each_kind_of_edit_once),
      cmocka_unit_test (edit_distance_of_long_words_is_far),
      cmocka_unit_test (suggest_offers_only_likely_typos),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
