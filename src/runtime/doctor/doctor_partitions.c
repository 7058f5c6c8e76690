/*
 * doctor_partitions.c - doctor's check of a partitioned stream (issue 31):
 * partitions = N > 1 hashes keys with $toHashedIndexKey, which MongoDB has
 * from 7.0 (maxWireVersion 21). Reported once per stream, by its unit 0.
 * And whether a stream's stored checkpoints are of another generation (another
 * number of partitions, or none): the next start switches generations.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/doctor/doctor-private.h"
#include "runtime/stream/stream_partition-private.h"

#define WIRE_7_0 21 /* maxWireVersion of MongoDB 7.0 (src/mongo/db/wire_version.h) */

/* True (reported) when the stream's checkpoints are of another generation,
 * which the next start switches from (stream_generation.c). */
static bool
other_generation (mongoc_client_t *client, const fw_stream_config_t *c, const char *stream,
                  fw_doctor_report_t *r)
{
   char why[1024];

   if (fw_stream_partition_same_generation (c, client, why, sizeof why)) {
      return false;
   }
   fw_doctor_add (r, stream, "partitions", FW_DOCTOR_WARN,
                  "nothing, if the new number is meant; else set partitions back to the stored "
                  "number",
                  "%s", why);
   return true;
}

void
fw_doctor_partitions (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
                      const fw_doctor_server_t *srv, fw_doctor_report_t *r)
{
   for (size_t i = 0; i < n; i++) {
      const fw_stream_config_t *c = &cfgs[i];
      const char *hash = c->partitions > 0 ? strrchr (c->name, '#') : NULL;
      char stream[512];

      if ((c->partitions > 0 && (c->partition != 0 || !hash))) {
         continue;
      }
      snprintf (stream, sizeof stream, "%.*s",
                (int) (hash ? (size_t) (hash - c->name) : strlen (c->name)), c->name);
      if (other_generation (client, c, stream, r) || c->partitions < 2) {
         continue;
      }
      if (srv->max_wire >= WIRE_7_0) {
         fw_doctor_add (r, stream, "partitions", FW_DOCTOR_OK, NULL,
                        "%d partitions: the server has $toHashedIndexKey (7.0+)", c->partitions);
      } else {
         fw_doctor_add (r, stream, "partitions", FW_DOCTOR_FAIL,
                        "upgrade to MongoDB 7.0 or later, or remove partitions",
                        "partitions = %d needs $toHashedIndexKey (MongoDB 7.0+); the server has "
                        "maxWireVersion %d: every partition stops at start",
                        c->partitions, (int) srv->max_wire);
      }
   }
}
