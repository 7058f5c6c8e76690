/*
 * lua_core.c - "flowwarden.core", merged into the flowwarden module by
 * lua/flowwarden/init.lua.
 */
#include <string.h>

#include <lauxlib.h>
#include <lua5.4/lua-cjson.h>
#include <mongoc/mongoc.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "flowwarden/log.h"
#include "flowwarden/secrets.h"
#include "lua_api/http_lua.h"
#include "lua_api/lua_core.h"
#include "lua_api/metrics_lua.h"
#include "lua_api/mongo_lua.h"
#include "lua_api/pg_lua.h"
#include "lua_api/redis_lua.h"
#include "lua_api/state_lua.h"
#include "ops/admin.h"

#define STREAM_KEY "flowwarden.stream_name"

static int
core_log_sink (lua_State *L)
{
   const char *level = luaL_checkstring (L, 1);
   const char *msg = luaL_checkstring (L, 2);
   const char *stream;
   fw_log_level_t lv;

   if (!fw_log_level_parse (level, &lv)) {
      lv = FW_LOG_INFO;
   }
   lua_getfield (L, LUA_REGISTRYINDEX, STREAM_KEY);
   stream = lua_touserdata (L, -1);
   fw_log (lv, stream, "%s", msg);
   lua_pop (L, 1);
   return 0;
}

/* Pushes the typed value at the iterator (a light userdata), then whether it
 * was one. The value copies what it needs. */
static int
push_value_p (lua_State *L)
{
   bool ok = fw_bson_values_push (L, lua_touserdata (L, 1));
   if (!ok) {
      lua_pushboolean (L, 0);
   }
   lua_pushboolean (L, ok);
   return 2;
}

/*
 * code_w_scope(code, scope): a CodeWScope value (fw.json decodes Extended
 * JSON's {"$code", "$scope"} with it). Built as BSON and read back through
 * the typed-value reader, so it is the same value a document would give.
 */
static int
core_code_w_scope (lua_State *L)
{
   size_t len;
   const char *code = lua_tolstring (L, 1, &len);
   bson_t scope = BSON_INITIALIZER, holder = BSON_INITIALIZER;
   bson_iter_t it;
   fw_error_t err;
   bool ok;
   int status = LUA_OK;

   err.domain = 0;
   if (lua_type (L, 1) != LUA_TSTRING || memchr (code, '\0', len)) {
      return luaL_error (L, "code_w_scope: code must be a string without NUL bytes");
   }
   if (!lua_istable (L, 2)) {
      return luaL_error (L, "code_w_scope: scope must be a table, got %s", luaL_typename (L, 2));
   }
   luaL_checkstack (L, 4, "code_w_scope");
   ok = fw_bson_lua_to_bson (L, 2, "scope", &scope, &err) &&
        bson_append_code_with_scope (&holder, "v", 1, code, &scope) &&
        bson_iter_init_find (&it, &holder, "v");
   bson_destroy (&scope);
   if (ok) {
      /* Protected: holder may be on the heap, and pushing may raise. */
      lua_pushcfunction (L, push_value_p);
      lua_pushlightuserdata (L, &it);
      status = lua_pcall (L, 1, 2, 0); /* value, true | false, nil */
      if (status == LUA_OK) {
         ok = lua_toboolean (L, -1);
         lua_pop (L, ok ? 1 : 2);
      }
   }
   bson_destroy (&holder);
   if (status != LUA_OK) {
      return lua_error (L);
   }
   if (!ok) {
      return luaL_error (L, "code_w_scope: %s",
                         err.domain ? err.message : "the scope does not fit in a BSON document");
   }
   return 1;
}

/*
 * uri_check(uri) -> true | false, why: whether libmongoc accepts the URI, so
 * that fw.connection and fw.defaults { uri } fail at load time (and in
 * `check`) rather than when a handler first connects. Never connects.
 */
static int
core_uri_check (lua_State *L)
{
   const char *text = luaL_checkstring (L, 1);
   bson_error_t berr;
   mongoc_uri_t *uri = mongoc_uri_new_with_error (text, &berr);

   if (uri) {
      mongoc_uri_destroy (uri);
      lua_pushboolean (L, 1);
      return 1;
   }
   char why[512];
   lua_pushboolean (L, 0);
   lua_pushstring (L, fw_log_redact_uri_error (text, berr.message, why, sizeof why));
   return 2;
}

/*
 * admin_check(listen, token) -> true | false, why: whether the admin
 * endpoint could serve on listen with token (fw.defaults { admin = ... }),
 * so `check` reports what `run` would refuse.
 */
static int
core_admin_check (lua_State *L)
{
   const char *listen = luaL_checkstring (L, 1);
   const char *token = luaL_optstring (L, 2, NULL);
   fw_error_t err;

   if (fw_admin_check_options (listen, token, "admin.listen", &err)) {
      lua_pushboolean (L, 1);
      return 1;
   }
   lua_pushboolean (L, 0);
   lua_pushstring (L, err.message);
   return 2;
}

/* core.secret(value [, "userinfo"]): flowwarden.env registers each value
 * fw.env returns (secrets.h), a URI's user name as "userinfo" (hidden before
 * "@" only); never the script's. */
static int
core_secret (lua_State *L)
{
   size_t n;
   const char *value = luaL_checklstring (L, 1, &n);
   bool userinfo = strcmp (luaL_optstring (L, 2, ""), "userinfo") == 0;
   if (!(userinfo ? fw_secrets_add_userinfo (value, n) : fw_secrets_add (value, n))) {
      return luaL_error (L, "fw.env: out of memory remembering a secret");
   }
   return 0;
}

int
fw_lua_core_open (lua_State *L)
{
   lua_newtable (L);
   fw_bson_lua_open (L, lua_gettop (L));
   fw_bson_view_open (L, lua_gettop (L));
   fw_state_lua_open (L, -1);
   fw_http_lua_open (L, -1);
   fw_mongo_lua_open (L, -1);
   fw_redis_lua_open (L, -1);
   fw_pg_lua_open (L, -1);
   fw_metrics_lua_open (L, -1);
   lua_pushcfunction (L, core_code_w_scope);
   lua_setfield (L, -2, "code_w_scope");
   lua_pushcfunction (L, core_uri_check);
   lua_setfield (L, -2, "uri_check");
   lua_pushcfunction (L, core_admin_check);
   lua_setfield (L, -2, "admin_check");
   lua_pushcfunction (L, core_secret);
   lua_setfield (L, -2, "secret");
   /* fw.json encodes through lua-cjson, linked into the binary: a cjson.so
    * found on package.cpath would bring its own copy of Lua. */
   luaL_getsubtable (L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
   if (lua_getfield (L, -1, "cjson") == LUA_TNIL) {
      lua_pushcfunction (L, luaopen_cjson);
      lua_setfield (L, -3, "cjson");
   }
   lua_pop (L, 2);
   lua_pushcfunction (L, core_log_sink);
   lua_setfield (L, -2, "log_sink");
   lua_pushstring (L, fw_log_enabled (FW_LOG_DEBUG)  ? "debug"
                      : fw_log_enabled (FW_LOG_INFO) ? "info"
                      : fw_log_enabled (FW_LOG_WARN) ? "warn"
                                                     : "error");
   lua_setfield (L, -2, "log_level");
   return 1;
}

void
fw_lua_core_set_stream (lua_State *L, const char *stream)
{
   lua_pushlightuserdata (L, (void *) stream);
   lua_setfield (L, LUA_REGISTRYINDEX, STREAM_KEY);
}
