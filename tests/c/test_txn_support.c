/* txn_support: whether a deployment's hello says it runs transactions
 * (exactly_once's start check and doctor): a replica set member from
 * MongoDB 4.0 (wire 7), a mongos from 4.2 (wire 8), a load balancer; not a
 * standalone mongod, an older server, or one without sessions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/host/txn_support.h"

static fw_txn_support_t
judge (const char *json, char *why, size_t len)
{
   bson_error_t berr;
   bson_t *hello = bson_new_from_json ((const uint8_t *) json, -1, &berr);
   fw_txn_support_t got;

   assert_non_null (hello);
   why[0] = '\0';
   got = fw_txn_support_of_hello (hello, why, len);
   bson_destroy (hello);
   return got;
}

static void
replica_sets_from_4_0_and_mongos_from_4_2_have_transactions (void **state)
{
   char why[400];
   (void) state;
   assert_int_equal (judge ("{\"setName\": \"rs0\", \"maxWireVersion\": 7, "
                            "\"logicalSessionTimeoutMinutes\": 30}",
                            why, sizeof why),
                     FW_TXN_SUPPORTED);
   assert_int_equal (judge ("{\"msg\": \"isdbgrid\", \"maxWireVersion\": 8, "
                            "\"logicalSessionTimeoutMinutes\": 30}",
                            why, sizeof why),
                     FW_TXN_SUPPORTED);
   assert_int_equal (judge ("{\"serviceId\": {\"$oid\": \"000000000000000000000001\"}, "
                            "\"maxWireVersion\": 13}",
                            why, sizeof why),
                     FW_TXN_SUPPORTED);
}

static void
a_standalone_has_none_and_is_named (void **state)
{
   char why[400];
   (void) state;
   assert_int_equal (judge ("{\"isWritablePrimary\": true, \"maxWireVersion\": 21, "
                            "\"logicalSessionTimeoutMinutes\": 30}",
                            why, sizeof why),
                     FW_TXN_UNSUPPORTED);
   assert_non_null (strstr (why, "standalone mongod"));
}

static void
older_servers_and_servers_without_sessions_have_none (void **state)
{
   char why[400];
   (void) state;
   assert_int_equal (judge ("{\"setName\": \"rs0\", \"maxWireVersion\": 6, "
                            "\"logicalSessionTimeoutMinutes\": 30}",
                            why, sizeof why),
                     FW_TXN_UNSUPPORTED);
   assert_non_null (strstr (why, "4.0 on a replica set"));
   assert_int_equal (judge ("{\"msg\": \"isdbgrid\", \"maxWireVersion\": 7, "
                            "\"logicalSessionTimeoutMinutes\": 30}",
                            why, sizeof why),
                     FW_TXN_UNSUPPORTED);
   assert_non_null (strstr (why, "4.2 through mongos"));
   assert_int_equal (judge ("{\"setName\": \"rs0\", \"maxWireVersion\": 17}", why, sizeof why),
                     FW_TXN_UNSUPPORTED);
   assert_non_null (strstr (why, "logicalSessionTimeoutMinutes"));
}

static void
a_probe_of_a_refusing_port_cannot_tell (void **state)
{
   char why[1024] = "";
   mongoc_uri_t *uri = mongoc_uri_new ("mongodb://127.0.0.1:1/?connectTimeoutMS=500");
   (void) state;
   assert_non_null (uri);
   assert_int_equal (fw_txn_support_probe (uri, why, sizeof why), FW_TXN_UNKNOWN);
   assert_true (why[0] != '\0');
   mongoc_uri_destroy (uri);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (replica_sets_from_4_0_and_mongos_from_4_2_have_transactions),
      cmocka_unit_test (a_standalone_has_none_and_is_named),
      cmocka_unit_test (older_servers_and_servers_without_sessions_have_none),
      cmocka_unit_test (a_probe_of_a_refusing_port_cannot_tell),
   };
   mongoc_init ();
   int rc = cmocka_run_group_tests (tests, NULL, NULL);
   mongoc_cleanup ();
   return rc;
}
