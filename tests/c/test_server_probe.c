/* server_probe: what a URI points at, as the log names it, and a probe of a
 * port that refuses (127.0.0.1:1) answering at once with libmongoc's
 * server selection error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/clock.h"
#include "runtime/host/server_probe.h"

static void
describe (const char *uri_string, const char *want)
{
   char out[512];
   mongoc_uri_t *uri = mongoc_uri_new (uri_string);
   assert_non_null (uri);
   fw_server_describe (uri, out, sizeof out);
   assert_string_equal (out, want);
   mongoc_uri_destroy (uri);
}

static void
server_describe_names_hosts_and_replica_set_never_credentials (void **state)
{
   (void) state;
   describe ("mongodb://127.0.0.1:1/?replicaSet=rs0", "127.0.0.1:1 (replica set rs0)");
   describe ("mongodb://user:secret@a.example:27017,b.example/shop",
             "a.example:27017,b.example:27017");
   describe ("mongodb://127.0.0.1", "127.0.0.1:27017");
}

static void
server_probe_of_a_refusing_port_fails_at_once_with_the_reason (void **state)
{
   char why[1024] = "";
   mongoc_uri_t *uri = mongoc_uri_new ("mongodb://127.0.0.1:1/?replicaSet=rs0");
   int64_t t0 = fw_mono_ms ();
   (void) state;

   assert_non_null (uri);
   assert_false (fw_server_probe (uri, why, sizeof why));
   assert_true (fw_mono_ms () - t0 < 2000);
   assert_non_null (strstr (why, "No suitable servers found"));
   assert_non_null (strstr (why, "127.0.0.1:1"));
   mongoc_uri_destroy (uri);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (server_describe_names_hosts_and_replica_set_never_credentials),
      cmocka_unit_test (server_probe_of_a_refusing_port_fails_at_once_with_the_reason),
   };
   int rc;
   mongoc_init ();
   rc = cmocka_run_group_tests (tests, NULL, NULL);
   mongoc_cleanup ();
   return rc;
}
