/*
 * doctor_stores.c - `doctor`'s check of each Redis and PostgreSQL
 * connection the script declares: reachable and authenticated; and of each
 * MongoDB one a stream runs exactly once into (doctor_eo_mongo.c).
 */
#include <string.h>

#include <lauxlib.h>

#include "lua_api/pg_lua.h"
#include "lua_api/redis_lua.h"
#include "runtime/doctor/doctor_eo-private.h"

#define PROBE_TIMEOUT_MS 5000

/* Checks the connection table at the top of L. */
static void
check_one (lua_State *L, fw_doctor_report_t *r)
{
   const char *name, *kind;
   char why[512];
   bool redis, ok;

   lua_getfield (L, -1, "name");
   lua_getfield (L, -2, "kind");
   name = lua_tostring (L, -2);
   kind = lua_tostring (L, -1);
   if (name && kind && strcmp (kind, "mongodb") == 0) {
      lua_getfield (L, -3, "uri");
      if (lua_isstring (L, -1)) {
         fw_doctor_eo_mongo (L, r, name, lua_tostring (L, -1)); /* a sink of exactly_once */
      }
      lua_pop (L, 1);
   }
   if (name && kind && (strcmp (kind, "redis") == 0 || strcmp (kind, "postgresql") == 0)) {
      redis = strcmp (kind, "redis") == 0;
      ok = redis ? fw_redis_lua_probe (L, name, PROBE_TIMEOUT_MS, why, sizeof why)
                 : fw_pg_lua_probe (L, name, PROBE_TIMEOUT_MS, why, sizeof why);
      if (ok) {
         fw_doctor_add (r, NULL, "connection", FW_DOCTOR_OK, NULL,
                        "connection \"%s\" (%s): reachable and authenticated", name,
                        redis ? "Redis" : "PostgreSQL");
         if (!redis) {
            fw_doctor_eo_pg (L, r, name);
         }
      } else {
         fw_doctor_add (r, NULL, "connection", FW_DOCTOR_FAIL,
                        "check the URI's host, port, database and credentials, and that the "
                        "server accepts connections from this host",
                        "connection \"%s\" (%s): %s", name, redis ? "Redis" : "PostgreSQL", why);
      }
   }
   lua_pop (L, 2);
}

void
fw_doctor_stores (lua_State *L, fw_doctor_report_t *r)
{
   int top = lua_gettop (L);

   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.config") == LUA_TTABLE &&
       lua_getfield (L, -1, "effective") == LUA_TTABLE &&
       lua_getfield (L, -1, "connections") == LUA_TTABLE) {
      for (lua_Integer i = 1; lua_rawgeti (L, -1, i) == LUA_TTABLE; i++) {
         check_one (L, r);
         lua_pop (L, 1);
      }
   }
   lua_settop (L, top);
}
