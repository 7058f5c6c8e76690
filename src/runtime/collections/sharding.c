/*
 * sharding.c - the hint a failure gives when one of flowwarden's own
 * collections is sharded on a key its writes cannot use.
 */
#include <stdio.h>

#include "runtime/collections/sharding.h"

#define FW_ERR_SHARD_KEY_NOT_FOUND 61
#define FW_ERR_CANNOT_CREATE_INDEX 67

const char *
fw_sharding_hint (const bson_error_t *berr, const char *collection, const char *shard_key,
                  char *buf, size_t len)
{
   if (!berr || !buf || len == 0 ||
       (berr->code != FW_ERR_SHARD_KEY_NOT_FOUND && berr->code != FW_ERR_CANNOT_CREATE_INDEX) ||
       (berr->domain != MONGOC_ERROR_SERVER && berr->domain != MONGOC_ERROR_QUERY)) {
      return "";
   }
   snprintf (buf, len,
             " (%s is sharded on a key flowwarden's %s cannot name: shard it on %s or leave it "
             "unsharded; see docs/compatibility.md)",
             collection ? collection : "the collection",
             berr->code == FW_ERR_CANNOT_CREATE_INDEX ? "unique index" : "writes", shard_key);
   return buf;
}
