/*
 * outage_config.c - spec.circuit and spec.rate_limit into C
 * (outage_config.h).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/config/outage_config.h"

static int64_t
ms_field (lua_State *L, int t, const char *key)
{
   int64_t v = 0;
   if (lua_getfield (L, t, key) == LUA_TNUMBER) {
      v = (int64_t) lua_tointeger (L, -1);
   }
   lua_pop (L, 1);
   return v;
}

/* spec.circuit.on: the error types, copied. */
static bool
read_types (lua_State *L, int t, fw_circuit_config_t *c, fw_error_t *error)
{
   bool ok = true;

   if (lua_getfield (L, t, "on") == LUA_TTABLE) {
      int n = (int) lua_rawlen (L, -1);
      c->on = n > 0 ? calloc ((size_t) n, sizeof *c->on) : NULL;
      ok = n == 0 || c->on;
      for (int i = 1; ok && i <= n; i++) {
         if (lua_rawgeti (L, -1, i) == LUA_TSTRING) {
            ok = (c->on[c->n_on] = strdup (lua_tostring (L, -1))) != NULL;
            c->n_on += ok;
         }
         lua_pop (L, 1);
      }
   }
   lua_pop (L, 1);
   if (!ok) {
      fw_error_set (error, FW_ERROR_INVALID, "out of memory reading circuit.on");
   }
   return ok;
}

bool
fw_outage_config_read (lua_State *L, int t, fw_stream_config_t *cfg, fw_error_t *error)
{
   bool ok = true;

   if (lua_getfield (L, t, "circuit") == LUA_TTABLE) {
      int s = lua_gettop (L);
      fw_circuit_config_t *c = &cfg->circuit;
      c->enabled = true;
      c->open_for_ms = ms_field (L, s, "open_for_ms");
      c->max_open_for_ms = ms_field (L, s, "max_open_for_ms");
      c->give_up_after_ms = ms_field (L, s, "give_up_after_ms");
      ok = read_types (L, s, c, error);
   }
   lua_pop (L, 1);
   if (lua_getfield (L, t, "rate_limit") == LUA_TSTRING && ok) {
      ok = fw_rate_limit_parse (lua_tostring (L, -1), &cfg->rate_limit, error);
   }
   lua_pop (L, 1);
   /* Validated in Lua (flowwarden.config.outage): an integer 0..1e9. */
   if (lua_getfield (L, t, "rate_burst") == LUA_TNUMBER && ok) {
      cfg->rate_limit.has_burst = true;
      cfg->rate_limit.burst = (int64_t) lua_tointeger (L, -1);
   }
   lua_pop (L, 1);
   return ok;
}
