/*
 * txn_support.c - can a deployment run transactions (txn_support.h).
 */
#include <stdio.h>
#include <string.h>

#include "runtime/host/server_probe.h"
#include "runtime/host/txn_support.h"

static const char *
utf8_of (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

fw_txn_support_t
fw_txn_support_of_hello (const bson_t *hello, char *why, size_t len)
{
   bson_iter_t it;
   int64_t wire = -1;
   const char *msg = utf8_of (hello, "msg"), *set = utf8_of (hello, "setName");
   bool mongos = msg && strcmp (msg, "isdbgrid") == 0;

   if (bson_iter_init_find (&it, hello, "maxWireVersion") && BSON_ITER_HOLDS_NUMBER (&it)) {
      wire = bson_iter_as_int64 (&it);
   }
   if (bson_iter_init_find (&it, hello, "serviceId")) {
      return FW_TXN_SUPPORTED; /* behind a load balancer: 5.0+ */
   }
   if (!set && !mongos) {
      snprintf (why, len,
                "it is a standalone mongod (its hello has no setName and it is no mongos), "
                "which refuses transactions (20 IllegalOperation)");
      return FW_TXN_UNSUPPORTED;
   }
   if (!bson_iter_init_find (&it, hello, "logicalSessionTimeoutMinutes")) {
      snprintf (why, len, "it has no sessions (its hello has no logicalSessionTimeoutMinutes)");
      return FW_TXN_UNSUPPORTED;
   }
   if (wire >= 0 && wire < (mongos ? FW_WIRE_TXN_MONGOS : FW_WIRE_TXN_REPLSET)) {
      snprintf (why, len,
                "it is a %s with maxWireVersion %lld: transactions need MongoDB %s (wire "
                "version %d)",
                mongos ? "mongos" : "replica set member", (long long) wire,
                mongos ? "4.2 through mongos" : "4.0 on a replica set",
                mongos ? FW_WIRE_TXN_MONGOS : FW_WIRE_TXN_REPLSET);
      return FW_TXN_UNSUPPORTED;
   }
   return FW_TXN_SUPPORTED;
}

fw_txn_support_t
fw_txn_support_probe (const mongoc_uri_t *uri, char *why, size_t len)
{
   mongoc_server_description_t *sd = fw_server_probe_select (uri, why, len);
   const bson_t *hello;
   fw_txn_support_t got = FW_TXN_UNKNOWN;

   if (!sd) {
      return FW_TXN_UNKNOWN;
   }
   if (!(hello = mongoc_server_description_hello_response (sd))) {
      snprintf (why, len, "the server sent no hello");
   } else {
      got = fw_txn_support_of_hello (hello, why, len);
   }
   mongoc_server_description_destroy (sd);
   return got;
}
