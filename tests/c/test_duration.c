/* The command line's duration parser (fw_duration_parse) against the cases
 * of tests/data/durations.txt, which tests/lua/duration_spec.lua holds a
 * script's parser to: one grammar, two parsers that must agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/duration.h"

static void
duration_parse_agrees_with_the_shared_cases (void **state)
{
   char line[512];
   int cases = 0;
   FILE *f = fopen (FW_SOURCE_DIR "/tests/data/durations.txt", "r");

   (void) state;
   assert_non_null (f);
   while (fgets (line, sizeof line, f)) {
      char *tab = strchr (line, '\t'), *want, *end;
      fw_error_t err;
      int64_t ms = -1;
      long long n;
      bool ok;

      if (line[0] == '#') {
         continue;
      }
      assert_non_null (tab);
      *tab = '\0';
      want = tab + 1;
      want[strcspn (want, "\n")] = '\0';
      memset (&err, 0, sizeof err);
      ok = fw_duration_parse (line, &ms, &err);
      n = strtoll (want, &end, 10);
      if (*want && *end == '\0') {
         if (!ok) {
            fail_msg ("\"%s\": refused (%s), want %lld ms", line, err.message, n);
         }
         assert_int_equal (ms, n);
      } else {
         if (ok) {
            fail_msg ("\"%s\": parsed as %lld ms, want: %s", line, (long long) ms, want);
         }
         assert_string_equal (err.message, want);
      }
      cases++;
   }
   fclose (f);
   assert_true (cases > 30);
}

static void
duration_parse_accepts_a_null_error (void **state)
{
   int64_t ms = 7;
   (void) state;
   assert_false (fw_duration_parse ("soon", &ms, NULL));
   assert_int_equal (ms, 7);
   assert_true (fw_duration_parse ("2d", &ms, NULL));
   assert_int_equal (ms, 172800000);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (duration_parse_agrees_with_the_shared_cases),
      cmocka_unit_test (duration_parse_accepts_a_null_error),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
