/*
 * snapshot_config.c - the stream spec's snapshot table (flowwarden.config
 * validated it) copied into fw_stream_config_t.
 */
#include <string.h>

#include <mongoc/mongoc.h>

#include "runtime/snapshot/snapshot.h"

static int
read_mode_of (const char *name)
{
   static const struct {
      const char *name;
      mongoc_read_mode_t mode;
   } modes[] = {
      {"primary", MONGOC_READ_PRIMARY},     {"primaryPreferred", MONGOC_READ_PRIMARY_PREFERRED},
      {"secondary", MONGOC_READ_SECONDARY}, {"secondaryPreferred", MONGOC_READ_SECONDARY_PREFERRED},
      {"nearest", MONGOC_READ_NEAREST},
   };
   for (size_t i = 0; name && i < sizeof modes / sizeof modes[0]; i++) {
      if (strcmp (name, modes[i].name) == 0) {
         return (int) modes[i].mode;
      }
   }
   return (int) MONGOC_READ_PRIMARY;
}

void
fw_stream_config_read_snapshot (lua_State *L, int t, fw_stream_config_t *cfg)
{
   cfg->snapshot.chunk_size = 1000;
   cfg->snapshot.pause_ms = 0;
   cfg->snapshot.read_mode = (int) MONGOC_READ_PRIMARY;
   if (lua_getfield (L, t, "snapshot") == LUA_TTABLE) {
      int s = lua_gettop (L);
      if (lua_getfield (L, s, "chunk_size") == LUA_TNUMBER && lua_isinteger (L, -1) &&
          lua_tointeger (L, -1) >= 1) {
         cfg->snapshot.chunk_size = (int64_t) lua_tointeger (L, -1);
      }
      lua_pop (L, 1);
      if (lua_getfield (L, s, "pause_ms") == LUA_TNUMBER && lua_isinteger (L, -1) &&
          lua_tointeger (L, -1) >= 0) {
         cfg->snapshot.pause_ms = (int64_t) lua_tointeger (L, -1);
      }
      lua_pop (L, 1);
      if (lua_getfield (L, s, "read_preference") == LUA_TSTRING) {
         cfg->snapshot.read_mode = read_mode_of (lua_tostring (L, -1));
      }
      lua_pop (L, 1);
   }
   lua_pop (L, 1);
}
