/* fw_secrets: the values of fw.env are replaced in any text, wherever they
 * sit, overlapping or not, and the log hides them too. The set is
 * process-wide and only grows, so the cases run in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bson/bson_redact.h"
#include "flowwarden/log.h"
#include "flowwarden/secrets.h"

/* The redaction of s, copied to a static buffer. */
static const char *
redacted (const char *s)
{
   static char buf[1024];
   char *owned;
   const char *out = fw_secrets_redact (s, strlen (s), &owned, NULL);
   snprintf (buf, sizeof buf, "%s", out);
   free (owned);
   return buf;
}

static void
add (const char *s)
{
   assert_true (fw_secrets_add (s, strlen (s)));
}

static void
nothing_registered_returns_the_text_itself (void **state)
{
   char *owned;
   const char *s = "token=abcdef";
   (void) state;
   assert_false (fw_secrets_any ());
   assert_ptr_equal (fw_secrets_redact (s, strlen (s), &owned, NULL), s);
   assert_null (owned);
}

static void
values_under_four_bytes_are_exempt (void **state)
{
   (void) state;
   add ("abc");
   add ("");
   assert_false (fw_secrets_any ());
   assert_string_equal (redacted ("abc abc"), "abc abc");
}

static void
every_occurrence_of_every_secret_is_replaced (void **state)
{
   char *owned;
   const char *s = "nothing to hide here";
   (void) state;
   add ("tok-s3cr3t");
   add ("Pw-2f1e");
   assert_true (fw_secrets_any ());
   assert_string_equal (
      redacted ("cannot reach https://svc/?token=tok-s3cr3t (tok-s3cr3t, Pw-2f1e)"),
      "cannot reach https://svc/?token=[redacted] ([redacted], [redacted])");
   /* At either edge of the text, and the whole text. */
   assert_string_equal (redacted ("tok-s3cr3t"), "[redacted]");
   assert_string_equal (redacted ("tok-s3cr3t: refused by Pw-2f1e"),
                        "[redacted]: refused by [redacted]");
   /* A prefix of a secret is not the secret. */
   assert_string_equal (redacted ("tok-s3cr"), "tok-s3cr");
   /* No match: the text itself, no copy. */
   assert_ptr_equal (fw_secrets_redact (s, strlen (s), &owned, NULL), s);
   assert_null (owned);
}

static void
overlapping_and_adjacent_secrets_become_one_marker (void **state)
{
   (void) state;
   add ("abcdefgh");
   add ("efghijkl");
   add ("xxxx");
   assert_string_equal (redacted ("<abcdefghijkl>"), "<[redacted]>");
   assert_string_equal (redacted ("<abcdefghefghijkl>"), "<[redacted]>");
   assert_string_equal (redacted ("xxxxxx"), "[redacted]");
   assert_string_equal (redacted ("a xxxxx b"), "a [redacted] b");
}

static void
the_percent_encoded_form_is_a_secret_too (void **state)
{
   (void) state;
   add ("Sl/sh@9e1d");
   assert_string_equal (redacted ("u=Sl/sh@9e1d&v=Sl%2Fsh%409e1d"), "u=[redacted]&v=[redacted]");
}

/* A URI's user name without a password (postgresql://flowwarden@host): hidden as the
 * URI's userinfo, before "@" or its percent-encoded "%40", and nowhere else. */
static void
a_user_name_is_hidden_only_as_a_uri_s_userinfo (void **state)
{
   (void) state;
   assert_true (fw_secrets_add_userinfo ("fwuser", strlen ("fwuser")));
   assert_string_equal (redacted ("postgresql://fwuser@127.0.0.1:5432"),
                        "postgresql://[redacted]@127.0.0.1:5432");
   assert_string_equal (redacted ("uri=postgresql%3A%2F%2Ffwuser%40h"),
                        "uri=postgresql%3A%2F%2F[redacted]%40h");
   assert_string_equal (redacted ("stream \"fwuser-orders\": role fwuser; fwuser"),
                        "stream \"fwuser-orders\": role fwuser; fwuser");
   assert_string_equal (redacted ("a@fwuser@b fwuser%4"), "a@[redacted]@b fwuser%4");
}

static void
a_value_not_registered_stays (void **state)
{
   /* fw.env(name, { secret = false }) never calls fw_secrets_add: its
    * value is shown; the registered ones around it are not. */
   (void) state;
   assert_string_equal (redacted ("region eu-west-1 token tok-s3cr3t"),
                        "region eu-west-1 token [redacted]");
}

static void
copy_redacts_before_it_cuts (void **state)
{
   char buf[16];
   const char *s = "token=tok-s3cr3t";
   (void) state;
   /* Cut first, "token=tok-s3cr3" would show most of the secret. */
   assert_int_equal (fw_secrets_copy (buf, sizeof buf, s, strlen (s)), 15);
   assert_string_equal (buf, "token=[redacted");
   assert_int_equal (fw_secrets_copy (buf, 8, s, 3), 3);
   assert_string_equal (buf, "tok");
   strcpy (buf, "x tok-s3cr3t");
   assert_true (fw_secrets_redact_in_place (buf, sizeof buf));
   assert_string_equal (buf, "x [redacted]");
   assert_false (fw_secrets_redact_in_place (buf, sizeof buf));
}

static char logged[4096];

static void
sink (void *ud, fw_log_level_t level, const char *stream, const char *message)
{
   (void) ud;
   (void) level;
   (void) stream;
   snprintf (logged, sizeof logged, "%s", message);
}

static void
the_log_hides_secrets_even_across_its_cut (void **state)
{
   char pad[2100];
   (void) state;
   fw_log_set_sink (sink, NULL);
   fw_log (FW_LOG_WARN, "s", "event 1 dead-lettered: %s", "token=tok-s3cr3t");
   assert_string_equal (logged, "event 1 dead-lettered: token=[redacted]");
   /* The message buffer holds 2,047 bytes: the secret starts 4 before. */
   memset (pad, 'p', sizeof pad);
   pad[2043] = '\0';
   fw_log (FW_LOG_WARN, "s", "%stok-s3cr3t", pad);
   assert_null (strstr (logged, "tok-"));
   assert_int_equal (strlen (logged), 2047);
   assert_memory_equal (logged + 2043, "[red", 4);
   fw_log_set_sink (NULL, NULL);
}

/* A document a script built (an enqueue policy's diagnostics): secrets in
 * its strings and keys, at any depth, are replaced; other values stay. */
static void
a_bson_document_hides_secrets_in_strings_and_keys (void **state)
{
   bson_t *doc;
   char *json;
   (void) state;

   add ("bs0n-s3cret");
   doc = BCON_NEW ("a", BCON_UTF8 ("x bs0n-s3cret y"), "n", "{", "b", "[",
                   BCON_UTF8 ("bs0n-s3cret"), BCON_INT32 (7), "]", "}", "k-bs0n-s3cret",
                   BCON_INT32 (1), "plain", BCON_UTF8 ("stays"));
   assert_true (fw_bson_redact (doc));
   json = bson_as_relaxed_extended_json (doc, NULL);
   assert_string_equal (json,
                        "{ \"a\" : \"x [redacted] y\", \"n\" : { \"b\" : [ "
                        "\"[redacted]\", 7 ] }, \"k-[redacted]\" : 1, \"plain\" : "
                        "\"stays\" }");
   bson_free (json);
   bson_destroy (doc);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (nothing_registered_returns_the_text_itself),
      cmocka_unit_test (values_under_four_bytes_are_exempt),
      cmocka_unit_test (every_occurrence_of_every_secret_is_replaced),
      cmocka_unit_test (overlapping_and_adjacent_secrets_become_one_marker),
      cmocka_unit_test (the_percent_encoded_form_is_a_secret_too),
      cmocka_unit_test (a_user_name_is_hidden_only_as_a_uri_s_userinfo),
      cmocka_unit_test (a_value_not_registered_stays),
      cmocka_unit_test (copy_redacts_before_it_cuts),
      cmocka_unit_test (the_log_hides_secrets_even_across_its_cut),
      cmocka_unit_test (a_bson_document_hides_secrets_in_strings_and_keys),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
