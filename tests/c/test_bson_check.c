/* Unit tests for the keys-and-strings check of documents to write
 * (bson_check.h): what it refuses, where it says the problem is, and that it
 * agrees with libmongoc's own validation (the one it replaces) on keys. On
 * strings it is stricter than Debian's libbson 1.23, whose bson_validate lets
 * a string that is not UTF-8 through (CDRIVER-4448, fixed upstream by
 * CDRIVER-6017): bson_utf8_validate is the reference there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bson/bson_check.h"

/* libmongoc's default for inserts, updates and replacements. */
#define MONGOC_FLAGS                                                              \
   ((bson_validate_flags_t) (BSON_VALIDATE_UTF8 | BSON_VALIDATE_UTF8_ALLOW_NULL | \
                             BSON_VALIDATE_EMPTY_KEYS))

static fw_bson_text_t
check (const bson_t *doc, char *where, size_t size)
{
   fw_bson_text_t t = fw_bson_check_text (doc, "update", where, size);
   /* Keys: the same verdict as bson_validate_with_error with libmongoc's flags. */
   if (t != FW_BSON_TEXT_BAD_STRING) {
      assert_int_equal (t == FW_BSON_TEXT_OK, bson_validate_with_error (doc, MONGOC_FLAGS, NULL));
   }
   return t;
}

static void
bson_check_accepts_utf8_nul_bytes_and_nesting (void **state)
{
   char where[256] = "";
   bson_t *doc = BCON_NEW ("$set", "{", "s", BCON_UTF8 ("h\xc3\xa9 \xe2\x82\xac"), "l", "[",
                           BCON_INT32 (1), "{", "k", BCON_UTF8 ("x"), "}", "]", "}");
   (void) state;

   bson_append_utf8 (doc, "nul", 3, "a\0b", 3);
   assert_int_equal (check (doc, where, sizeof where), FW_BSON_TEXT_OK);
   assert_string_equal (where, ""); /* untouched */
   bson_destroy (doc);
}

static void
bson_check_names_the_bad_string_or_the_document_with_the_bad_key (void **state)
{
   char where[256];
   bson_t *doc;
   bson_t sub, arr, inner;
   (void) state;

   /* A string in an array in a document: [i] is 1-based. */
   doc = bson_new ();
   bson_append_document_begin (doc, "$set", 4, &sub);
   bson_append_array_begin (&sub, "l", 1, &arr);
   bson_append_utf8 (&arr, "0", 1, "ok", 2);
   bson_append_document_begin (&arr, "1", 1, &inner);
   bson_append_utf8 (&inner, "s", 1, "\xc3\x28", 2);
   assert_false (bson_utf8_validate ("\xc3\x28", 2, true));
   bson_append_document_end (&arr, &inner);
   bson_append_array_end (&sub, &arr);
   bson_append_document_end (doc, &sub);
   assert_int_equal (check (doc, where, sizeof where), FW_BSON_TEXT_BAD_STRING);
   assert_string_equal (where, "update.$set.l[2].s");
   assert_string_equal (fw_bson_text_problem (FW_BSON_TEXT_BAD_STRING), "is not valid UTF-8");
   bson_destroy (doc);

   /* An empty key: the path is the document holding it. */
   doc = BCON_NEW ("$set", "{", "a", "{", "", BCON_INT32 (1), "}", "}");
   assert_int_equal (check (doc, where, sizeof where), FW_BSON_TEXT_EMPTY_KEY);
   assert_string_equal (where, "update.$set.a");
   bson_destroy (doc);

   /* A key that is not UTF-8: not printed, its document named. */
   doc = bson_new ();
   bson_append_document_begin (doc, "$inc", 4, &sub);
   bson_append_int32 (&sub, "k\xff", 2, 1);
   bson_append_document_end (doc, &sub);
   assert_int_equal (check (doc, where, sizeof where), FW_BSON_TEXT_BAD_KEY);
   assert_string_equal (where, "update.$inc");
   bson_destroy (doc);
}

static void
bson_check_walks_code_with_scope_and_deep_documents (void **state)
{
   char where[4096];
   bson_t *scope = BCON_NEW ("v", BCON_UTF8 ("ok"));
   bson_t doc = BSON_INITIALIZER, levels[200];
   (void) state;

   bson_append_utf8 (scope, "bad", 3, "\xff", 1);
   bson_append_code_with_scope (&doc, "f", 1, "return v", scope);
   assert_int_equal (check (&doc, where, sizeof where), FW_BSON_TEXT_BAD_STRING);
   assert_string_equal (where, "update.f.bad");
   bson_destroy (&doc);
   bson_destroy (scope);

   /* 200 levels (deeper than the path keeps): the string at the bottom is
    * still found, and the path is cut rather than overrun. */
   bson_init (&levels[0]);
   for (int i = 1; i < 200; i++) {
      bson_append_document_begin (&levels[i - 1], "d", 1, &levels[i]);
   }
   bson_append_utf8 (&levels[199], "s", 1, "\xfe", 1);
   for (int i = 199; i >= 1; i--) {
      bson_append_document_end (&levels[i - 1], &levels[i]);
   }
   assert_int_equal (check (&levels[0], where, sizeof where), FW_BSON_TEXT_BAD_STRING);
   assert_non_null (strstr (where, "update.d.d"));
   bson_destroy (&levels[0]);
}

static void
bson_check_reports_corrupt_bytes (void **state)
{
   /* A document whose only element claims a string longer than the
    * document: bson_iter stops on it. */
   static const uint8_t bytes[] = {0x12, 0, 0,   0,   0x02, 's', 0, 0x40, 0,
                                   0,    0, 'a', 'b', 'c',  0,   0, 0,    0};
   bson_t doc;
   char where[64];
   (void) state;

   assert_true (bson_init_static (&doc, bytes, sizeof bytes));
   assert_int_equal (fw_bson_check_text (&doc, "update", where, sizeof where),
                     FW_BSON_TEXT_CORRUPT);
   assert_string_equal (fw_bson_text_problem (FW_BSON_TEXT_CORRUPT), "is not valid BSON");
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (bson_check_accepts_utf8_nul_bytes_and_nesting),
      cmocka_unit_test (bson_check_names_the_bad_string_or_the_document_with_the_bad_key),
      cmocka_unit_test (bson_check_walks_code_with_scope_and_deep_documents),
      cmocka_unit_test (bson_check_reports_corrupt_bytes),
   };
   return cmocka_run_group_tests_name ("bson_check", tests, NULL, NULL);
}
