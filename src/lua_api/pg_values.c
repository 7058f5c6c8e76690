/*
 * pg_values.c - Lua values to PostgreSQL parameters (text format) and
 * result columns to Lua values, by type OID (see pg_lua-private.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua5.4/lua-cjson.h>

#include "bson/bson_values.h"
#include "lua_api/lua_call.h"
#include "pg_lua-private.h"

/* Type OIDs (PostgreSQL's pg_type.dat; stable across versions). */
enum {
   OID_BOOL = 16,
   OID_BYTEA = 17,
   OID_INT8 = 20,
   OID_INT2 = 21,
   OID_INT4 = 23,
   OID_OID = 26,
   OID_JSON = 114,
   OID_FLOAT4 = 700,
   OID_FLOAT8 = 701,
   OID_JSONB = 3802,
};

/* Pushes cjson's function name. */
static void
push_cjson (lua_State *L, const char *name)
{
   luaL_requiref (L, "cjson", luaopen_cjson, 0);
   lua_getfield (L, -1, name);
   lua_remove (L, -2);
}

/* Pushes the text of the value at idx for parameter $i, or nil for NULL. */
static void
push_param_text (lua_State *L, int idx, int i)
{
   switch (lua_type (L, idx)) {
   case LUA_TNIL:
      lua_pushnil (L);
      return;
   case LUA_TBOOLEAN:
      lua_pushstring (L, lua_toboolean (L, idx) ? "true" : "false");
      return;
   case LUA_TNUMBER:
      if (lua_isinteger (L, idx)) {
         lua_pushfstring (L, "%I", lua_tointeger (L, idx));
      } else {
         double d = lua_tonumber (L, idx);
         char buf[64];
         if (isnan (d)) {
            lua_pushliteral (L, "NaN");
         } else if (isinf (d)) {
            lua_pushstring (L, d > 0 ? "Infinity" : "-Infinity");
         } else {
            snprintf (buf, sizeof buf, "%.17g", d);
            lua_pushstring (L, buf);
         }
      }
      return;
   case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring (L, idx, &n);
      if (memchr (s, '\0', n)) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.pg: parameter $%d: a string holding a zero byte cannot be sent as "
                             "text (send bytea as hex: '\\x' .. hex)",
                             i);
      }
      lua_pushvalue (L, idx);
      return;
   }
   case LUA_TTABLE:
      push_cjson (L, "encode");
      lua_pushvalue (L, idx);
      if (lua_pcall (L, 1, 1, 0) != LUA_OK) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.pg: parameter $%d: a table is sent as JSON and this one cannot "
                             "be: %s",
                             i, lua_tostring (L, -1));
      }
      return;
   default:
      if (fw_bson_values_is_null (L, idx)) {
         lua_pushnil (L);
         return;
      }
      if (luaL_getmetafield (L, idx, "__tostring") != LUA_TNIL) {
         lua_pop (L, 1);
         luaL_tolstring (L, idx, NULL);
         return;
      }
      fw_lua_raise_typed (L, "ArgumentError", 0,
                          "fw.pg: parameter $%d: expected a string, number, boolean, table (JSON) "
                          "or fw.null, got %s",
                          i, luaL_typename (L, idx));
   }
}

int
fw_pg_push_params (lua_State *L, int params_idx, const char ***values)
{
   lua_Integer n = 0;
   const char **v;

   if (!lua_isnoneornil (L, params_idx)) {
      if (!lua_istable (L, params_idx)) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.pg: parameters: expected a table such as { id, name }, got %s",
                             luaL_typename (L, params_idx));
      }
      /* The highest integer key: nil holes are NULLs. */
      lua_pushnil (L);
      while (lua_next (L, params_idx)) {
         lua_pop (L, 1);
         if (lua_isinteger (L, -1) && lua_tointeger (L, -1) > n) {
            n = lua_tointeger (L, -1);
         }
      }
      if (n > 65535) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.pg: parameters: %d of them, PostgreSQL takes at most 65535",
                             (int) n);
      }
   }
   lua_createtable (L, (int) n, 0);
   v = lua_newuserdatauv (L, (size_t) (n ? n : 1) * sizeof *v, 0);
   for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti (L, params_idx, i);
      push_param_text (L, lua_gettop (L), (int) i);
      v[i - 1] = lua_tostring (L, -1); /* NULL for nil */
      lua_rawseti (L, -4, i);
      lua_pop (L, 1);
   }
   *values = v;
   return (int) n;
}

/* Pushes bytea's text form ("\x" then hex) as raw bytes. */
static void
push_bytea (lua_State *L, const char *s, size_t n)
{
   luaL_Buffer b;

   if (n < 2 || s[0] != '\\' || s[1] != 'x') {
      lua_pushlstring (L, s, n); /* bytea_output = escape: left as the server sent it */
      return;
   }
   luaL_buffinit (L, &b);
   for (size_t i = 2; i + 1 < n; i += 2) {
      char hex[3] = {s[i], s[i + 1], 0};
      luaL_addchar (&b, (char) strtol (hex, NULL, 16));
   }
   luaL_pushresult (&b);
}

/* Pushes the value of row r, column c of res. */
static void
push_value (lua_State *L, const PGresult *res, int r, int c)
{
   const char *s = PQgetvalue (res, r, c);
   size_t n = (size_t) PQgetlength (res, r, c);

   if (PQgetisnull (res, r, c)) {
      fw_bson_values_push_null (L);
      return;
   }
   switch (PQftype (res, c)) {
   case OID_BOOL:
      lua_pushboolean (L, s[0] == 't');
      return;
   case OID_INT2:
   case OID_INT4:
   case OID_INT8:
   case OID_OID:
   case OID_FLOAT4:
   case OID_FLOAT8:
      if (lua_stringtonumber (L, s) == 0) {
         /* "Infinity", "-Infinity", "NaN" */
         lua_pushnumber (L, strcmp (s, "NaN") == 0 ? NAN : s[0] == '-' ? -INFINITY : INFINITY);
      }
      return;
   case OID_JSON:
   case OID_JSONB:
      push_cjson (L, "decode");
      lua_pushlstring (L, s, n);
      if (lua_pcall (L, 1, 1, 0) != LUA_OK) {
         lua_pop (L, 1);
         lua_pushlstring (L, s, n); /* cjson refused it (depth): the text */
      }
      return;
   case OID_BYTEA:
      push_bytea (L, s, n);
      return;
   default:
      /* numeric (every digit kept), text, timestamps (ISO), arrays ("{1,2}")... */
      lua_pushlstring (L, s, n);
      return;
   }
}

void
fw_pg_push_rows (lua_State *L, const PGresult *res)
{
   int rows = PQntuples (res), cols = PQnfields (res);

   luaL_checkstack (L, 4, "fw.pg: rows");
   lua_createtable (L, rows, 0);
   for (int r = 0; r < rows; r++) {
      lua_createtable (L, 0, cols);
      for (int c = 0; c < cols; c++) {
         push_value (L, res, r, c);
         lua_setfield (L, -2, PQfname (res, c));
      }
      lua_rawseti (L, -2, r + 1);
   }
}
