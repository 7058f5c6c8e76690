/* fw_log_redact_uri: no password of a connection string reaches a log line or
 * an error message, however the string is (mis)written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/log.h"

static const char *
redact (const char *uri)
{
   static char buf[512];
   return fw_log_redact_uri (uri, buf, sizeof buf);
}

static void
redact_uri_hides_the_password_only (void **state)
{
   (void) state;
   assert_string_equal (redact ("mongodb://u:p%40ss@h/db"), "mongodb://u:***@h/db");
   assert_string_equal (redact ("mongodb://u:secret@h1:1,h2:2/db?replicaSet=rs0"),
                        "mongodb://u:***@h1:1,h2:2/db?replicaSet=rs0");
   assert_string_equal (redact ("mongodb://u@h/db"), "mongodb://u@h/db");
   assert_string_equal (redact ("mongodb://h:27017/?replicaSet=rs0"),
                        "mongodb://h:27017/?replicaSet=rs0");
   assert_string_equal (redact ("not a uri"), "not a uri");
   assert_string_equal (redact ("redis://:pw-x@h:6379/0"), "redis://:***@h:6379/0");
   assert_string_equal (redact ("postgresql://u@h/db?sslmode=require&password=pw-y"),
                        "postgresql://u@h/db?sslmode=require&password=***");
}

/* The regression: a password with a '/' not percent-encoded made libmongoc
 * reject the URI, and the error message showed the password in full. */
static void
redact_uri_hides_a_password_that_is_not_percent_encoded (void **state)
{
   (void) state;
   assert_string_equal (redact ("mongodb://writer:Pa/ss0rd@127.0.0.1:1/shop"),
                        "mongodb://writer:***@127.0.0.1:1/shop");
   assert_string_equal (redact ("mongodb://writer:Pa?ss@h/shop?replicaSet=rs0"),
                        "mongodb://writer:***@h/shop?replicaSet=rs0");
   assert_string_equal (redact ("mongodb://writer:a@b/c#d@h/shop"), "mongodb://writer:***@h/shop");
   assert_string_equal (redact ("mongodb+srv://writer:x/y@cluster.example.net/"),
                        "mongodb+srv://writer:***@cluster.example.net/");
}

static void
redact_uri_hides_secret_options (void **state)
{
   (void) state;
   assert_string_equal (
      redact ("mongodb://h/?tls=true&tlsCertificateKeyFilePassword=k3y&replicaSet=rs0"),
      "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=***&replicaSet=rs0");
   assert_string_equal (redact ("mongodb://u:p@h/?sslclientcertificatekeypassword=k3y"),
                        "mongodb://u:***@h/?sslclientcertificatekeypassword=***");
}

static void
redact_uri_truncates_safely (void **state)
{
   char small[16];
   (void) state;
   fw_log_redact_uri ("mongodb://writer:secret@host/db", small, sizeof small);
   assert_string_equal (small, "mongodb://write");
   fw_log_redact_uri ("mongodb://u:secret@h", small, 1);
   assert_string_equal (small, "");
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (redact_uri_hides_the_password_only),
      cmocka_unit_test (redact_uri_hides_a_password_that_is_not_percent_encoded),
      cmocka_unit_test (redact_uri_hides_secret_options),
      cmocka_unit_test (redact_uri_truncates_safely),
   };
   return cmocka_run_group_tests_name ("log", tests, NULL, NULL);
}
