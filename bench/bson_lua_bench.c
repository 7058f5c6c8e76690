/*
 * bson_lua_bench.c - how many change events per second become Lua tables.
 *
 * Converts a ~350-byte insert event (the shape handlers see most) with
 * fw_bson_lua_push_document, and the same table back with fw_bson_lua_to_bson,
 * N times each (default 1,000,000; first argument overrides); then the
 * plain Lua tables of one S6b operation (a bulk_write update: small tables,
 * keys sorted), N times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bson/bson_lua.h"

static const char *event_json =
   "{\"_id\": {\"_data\": \"8265A1B2C3000000012B022C0100296E5A1004A1B2C3D4E5F6071829304\"},"
   " \"operationType\": \"insert\","
   " \"clusterTime\": {\"$timestamp\": {\"t\": 1705000000, \"i\": 1}},"
   " \"wallTime\": {\"$date\": {\"$numberLong\": \"1705000000123\"}},"
   " \"fullDocument\": {\"_id\": {\"$oid\": \"65a1b2c3d4e5f60718293000\"},"
   "   \"customer\": \"alice\", \"total\": 42.5,"
   "   \"items\": [{\"sku\": \"A1\", \"qty\": 2, \"price\": 9.99}]},"
   " \"ns\": {\"db\": \"shop\", \"coll\": \"orders\"},"
   " \"documentKey\": {\"_id\": {\"$oid\": \"65a1b2c3d4e5f60718293000\"}}}";

static double
now (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int
main (int argc, char **argv)
{
   long n = argc > 1 ? atol (argv[1]) : 1000000, i;
   lua_State *L = luaL_newstate ();
   bson_error_t berr;
   fw_error_t err;
   bson_t *event = bson_new_from_json ((const uint8_t *) event_json, -1, &berr);
   bson_t out;
   double t0, t1;

   if (!event) {
      fprintf (stderr, "bad event JSON: %s\n", berr.message);
      return 1;
   }
   luaL_openlibs (L);
   t0 = now ();
   for (i = 0; i < n; i++) {
      if (!fw_bson_lua_push_document (L, event, "event", &err)) {
         fprintf (stderr, "%s\n", err.message);
         return 1;
      }
      lua_pop (L, 1);
   }
   t1 = now ();
   printf ("BSON -> Lua: %u-byte event, %ld conversions, %.0f events/s (%.2f us each)\n",
           event->len, n, (double) n / (t1 - t0), (t1 - t0) * 1e6 / (double) n);

   fw_bson_lua_push_document (L, event, "event", &err);
   t0 = now ();
   for (i = 0; i < n; i++) {
      bson_init (&out);
      if (!fw_bson_lua_to_bson (L, -1, "event", &out, &err)) {
         fprintf (stderr, "%s\n", err.message);
         return 1;
      }
      bson_destroy (&out);
   }
   t1 = now ();
   printf ("Lua -> BSON: %ld conversions, %.0f events/s (%.2f us each)\n", n,
           (double) n / (t1 - t0), (t1 - t0) * 1e6 / (double) n);
   lua_pop (L, 1);

   if (luaL_dostring (L,
                      "return { filter = { _id = 'g17' }, upsert = true,"
                      " update = { ['$inc'] = { n = 1 } } }") != LUA_OK) {
      fprintf (stderr, "%s\n", lua_tostring (L, -1));
      return 1;
   }
   t0 = now ();
   for (i = 0; i < n; i++) {
      bson_init (&out);
      if (!fw_bson_lua_to_bson (L, -1, "op", &out, &err)) {
         fprintf (stderr, "%s\n", err.message);
         return 1;
      }
      bson_destroy (&out);
   }
   t1 = now ();
   printf (
      "Lua -> BSON: S6b's update op (3 plain tables), %ld conversions, %.0f ops/s "
      "(%.2f us each)\n",
      n, (double) n / (t1 - t0), (t1 - t0) * 1e6 / (double) n);
   bson_destroy (event);
   lua_close (L);
   return 0;
}
