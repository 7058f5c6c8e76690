/*
 * doctor_partitions.c - doctor's check of a partitioned stream (issue 31):
 * partitions = N > 1 hashes keys with $toHashedIndexKey, which MongoDB has
 * from 7.0 (maxWireVersion 21). Reported once per stream, by its unit 0.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/doctor/doctor-private.h"

#define WIRE_7_0 21 /* maxWireVersion of MongoDB 7.0 (src/mongo/db/wire_version.h) */

void
fw_doctor_partitions (const fw_stream_config_t *cfgs, size_t n, const fw_doctor_server_t *srv,
                      fw_doctor_report_t *r)
{
   for (size_t i = 0; i < n; i++) {
      const fw_stream_config_t *c = &cfgs[i];
      const char *hash = strrchr (c->name, '#');
      char stream[512];

      if (c->partitions < 2 || c->partition != 0 || !hash) {
         continue;
      }
      snprintf (stream, sizeof stream, "%.*s", (int) (hash - c->name), c->name);
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
