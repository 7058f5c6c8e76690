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
#include "standin_process.h"

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

/* The URI names replica set rs0 but the server is not one of its members: libmongoc's
 * selection error alone ("No suitable servers found") does not say why; the probe adds what
 * the server's own hello says, naming it and the remedy. */
static void
probe_of_a_server_outside_the_uri_replica_set (const char *opt1, const char *opt2,
                                               const char *want1, const char *want2)
{
   standin_t s = {0};
   char why[2048] = "";
   mongoc_uri_t *uri;
   char host[320];

   assert_true (standin_start_with (&s, opt1, opt2));
   uri = mongoc_uri_new (s.uri);
   assert_non_null (uri);
   snprintf (host, sizeof host, "%s is a", mongoc_uri_get_hosts (uri)->host_and_port);
   assert_false (fw_server_probe (uri, why, sizeof why));
   mongoc_uri_destroy (uri);
   standin_stop (&s);
   if (!strstr (why, "No suitable servers found") || !strstr (why, host) || !strstr (why, want1) ||
       !strstr (why, want2)) {
      fail_msg ("unexpected probe error: %s", why);
   }
}

static void
server_probe_of_a_standalone_with_replica_set_in_the_uri_says_so (void **state)
{
   (void) state;
   /* A standalone mongod's hello has no setName (jstests/core/ismaster.js). */
   probe_of_a_server_outside_the_uri_replica_set (
      "--standalone", NULL, "standalone mongod (its hello has no setName)",
      "restart it with --replSet rs0 and run rs.initiate() once");
}

static void
server_probe_of_another_replica_set_names_it (void **state)
{
   (void) state;
   probe_of_a_server_outside_the_uri_replica_set ("--replset", "other",
                                                  "member of replica set \"other\", not \"rs0\"",
                                                  "set replicaSet=other in the URI");
}

static void
server_probe_of_the_uri_replica_set_succeeds (void **state)
{
   standin_t s = {0};
   char why[2048] = "";
   mongoc_uri_t *uri;
   (void) state;

   assert_true (standin_start (&s));
   uri = mongoc_uri_new (s.uri);
   assert_non_null (uri);
   if (!fw_server_probe (uri, why, sizeof why)) {
      fail_msg ("probe failed: %s", why);
   }
   mongoc_uri_destroy (uri);
   standin_stop (&s);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (server_describe_names_hosts_and_replica_set_never_credentials),
      cmocka_unit_test (server_probe_of_a_refusing_port_fails_at_once_with_the_reason),
      cmocka_unit_test (server_probe_of_a_standalone_with_replica_set_in_the_uri_says_so),
      cmocka_unit_test (server_probe_of_another_replica_set_names_it),
      cmocka_unit_test (server_probe_of_the_uri_replica_set_succeeds),
   };
   int rc;
   mongoc_init ();
   rc = cmocka_run_group_tests (tests, NULL, NULL);
   mongoc_cleanup ();
   return rc;
}
