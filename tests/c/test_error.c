/* The error record (src/base/error.c): a domain, the underlying code, a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/error.h"

static void
error_set_fills_the_domain_and_no_code (void **state)
{
   fw_error_t err;
   (void) state;
   memset (&err, 0x5a, sizeof err);
   fw_error_set (&err, FW_ERROR_INVALID, "bad %s at %d", "key", 3);
   assert_int_equal (err.domain, FW_ERROR_INVALID);
   assert_int_equal (err.code, 0);
   assert_string_equal (err.message, "bad key at 3");
}

static void
error_set_code_keeps_the_underlying_code (void **state)
{
   fw_error_t err;
   (void) state;
   fw_error_set_code (&err, FW_ERROR_MONGO, 11000, "duplicate key: %s", "x");
   assert_int_equal (err.domain, FW_ERROR_MONGO);
   assert_int_equal (err.code, 11000);
   assert_string_equal (err.message, "duplicate key: x");
}

static void
error_set_accepts_null_and_cuts_long_messages (void **state)
{
   static char big[FW_ERROR_MESSAGE_MAX * 2];
   fw_error_t err;
   (void) state;
   fw_error_set (NULL, FW_ERROR_IO, "ignored");
   fw_error_set_code (NULL, FW_ERROR_IO, 2, "ignored");
   memset (big, 'x', sizeof big - 1);
   fw_error_set (&err, FW_ERROR_LUA, "%s", big);
   assert_int_equal (strlen (err.message), FW_ERROR_MESSAGE_MAX - 1);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (error_set_fills_the_domain_and_no_code),
      cmocka_unit_test (error_set_code_keeps_the_underlying_code),
      cmocka_unit_test (error_set_accepts_null_and_cuts_long_messages),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
