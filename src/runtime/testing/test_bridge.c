/*
 * test_bridge.c - the script states' side of flowwarden.testing: fw.mongo
 * and fw.http reach the fakes of the spec's state through BSON, fw.date and
 * fw.state follow the app's virtual clock, fw.env reads the spec's env
 * table. Also the events file reader (fwt.events_from).
 *
 * Two Lua states never call each other directly: a call from a script state
 * packs its arguments as BSON, runs the spec's function in a protected call
 * on a thread of the spec's state, and brings the answer back as BSON. An
 * error on one side never unwinds the other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "lua_api/http_lua.h"
#include "lua_api/lua_call.h"
#include "runtime/testing/test_app-private.h"

const char fw_test_app_key = 'a';

#define MAKE_CURSOR_KEY "flowwarden.testing.make_cursor"

static fw_test_app_t *
app_of (lua_State *L)
{
   fw_test_app_t *app;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &fw_test_app_key);
   app = lua_touserdata (L, -1);
   lua_pop (L, 1);
   if (!app || !app->bridge) {
      luaL_error (L, "flowwarden.testing: this script's test app is closed");
   }
   return app;
}

/* --- the call into the spec's state -------------------------------------------- */

typedef struct {
   fw_test_app_t *app;
   const char *channel;
   const bson_t *args;
   bson_t *out;
   fw_error_t err;
   bool ok;
} spec_call_t;

/* Protected, on the app's thread of the spec's state: opts.bridge(channel,
 * args) -> a wrapper table, converted to BSON. */
static int
pspec_call (lua_State *B)
{
   spec_call_t *c = lua_touserdata (B, 1);

   lua_rawgeti (B, LUA_REGISTRYINDEX, c->app->dispatch_ref);
   lua_pushstring (B, c->channel);
   if (!fw_bson_lua_push_document (B, c->args, "args", &c->err)) {
      return luaL_error (B, "%s", c->err.message);
   }
   lua_call (B, 2, 1);
   if (!lua_istable (B, -1)) {
      return luaL_error (B, "the %s fake answered %s instead of a table", c->channel,
                         luaL_typename (B, -1));
   }
   c->ok = fw_bson_lua_to_bson (B, -1, "answer", c->out, &c->err);
   return 0;
}

typedef struct {
   const bson_t *doc;
   fw_error_t err;
   bool ok;
} push_t;

static int
ppush (lua_State *L)
{
   push_t *p = lua_touserdata (L, 1);
   p->ok = fw_bson_lua_push_document (L, p->doc, NULL, &p->err);
   return p->ok ? 1 : 0;
}

/* Pushes doc as a table, then destroys it, whatever happens. */
static void
push_and_destroy (lua_State *L, bson_t *doc)
{
   push_t p = {doc, {0}, false};
   int status;

   lua_pushcfunction (L, ppush);
   lua_pushlightuserdata (L, &p);
   status = lua_pcall (L, 1, 1, 0);
   bson_destroy (doc);
   if (status != LUA_OK) {
      lua_error (L);
   }
   if (!p.ok) {
      lua_pop (L, 1);
      luaL_error (L, "flowwarden.testing: %s", p.err.message);
   }
}

/* bridge(channel, ...) -> the fake's answer table. Arguments go as a
 * document { n = N, a1 = ..., a2 = ... } (a nil leaves its key out). */
static int
bridge_raw (lua_State *L)
{
   const char *channel = luaL_checkstring (L, 1);
   fw_test_app_t *app = app_of (L);
   int top = lua_gettop (L);
   bson_t args = BSON_INITIALIZER, *out;
   spec_call_t c;
   char msg[1100];
   int status, btop;

   if (strcmp (channel, "mongo") == 0) {
      (void) fw_lua_call_budget_ms (L, "fw.mongo"); /* raises outside handlers */
   }
   BSON_APPEND_INT32 (&args, "n", top - 1);
   for (int i = 2; i <= top; i++) {
      char key[16];
      fw_error_t err;
      if (lua_isnil (L, i)) {
         continue;
      }
      snprintf (key, sizeof key, "a%d", i - 1);
      if (!fw_bson_lua_append (L, i, &args, key, -1, NULL, &err)) {
         snprintf (msg, sizeof msg, "%.1000s", err.message);
         bson_destroy (&args);
         return fw_lua_raise_typed (L, "ArgumentError", 0, "%s", msg);
      }
   }
   if (!(out = bson_new ())) {
      bson_destroy (&args);
      return luaL_error (L, "not enough memory");
   }
   memset (&c, 0, sizeof c);
   c.app = app;
   c.channel = channel;
   c.args = &args;
   c.out = out;
   btop = lua_gettop (app->bridge);
   lua_pushcfunction (app->bridge, pspec_call);
   lua_pushlightuserdata (app->bridge, &c);
   status = lua_pcall (app->bridge, 1, 0, 0);
   if (status != LUA_OK) {
      const char *m = lua_tostring (app->bridge, -1);
      snprintf (msg, sizeof msg, "flowwarden.testing: the %s fake failed: %.1000s", channel,
                m ? m : "(error object is not a string)");
   } else if (!c.ok) {
      snprintf (msg, sizeof msg,
                "flowwarden.testing: the %s fake's answer has no BSON form: %.1000s", channel,
                c.err.message);
   }
   lua_settop (app->bridge, btop);
   bson_destroy (&args);
   if (status != LUA_OK || !c.ok) {
      bson_destroy (out);
      return luaL_error (L, "%s", msg);
   }
   push_and_destroy (L, out);
   return 1;
}

/* bridge_call(channel, ...): as bridge_raw, then the answer { ok = value },
 * { cursor = { doc, ... } } or { err = { type, message, fields } } becomes
 * the value, a cursor, or a typed error raised at the script's line. */
static int
bridge_call (lua_State *L)
{
   int answer;

   bridge_raw (L);
   answer = lua_gettop (L);
   if (lua_getfield (L, answer, "err") == LUA_TTABLE) {
      int e = lua_gettop (L);
      const char *type, *message;
      lua_getfield (L, e, "type");
      lua_getfield (L, e, "message");
      type = lua_tostring (L, -2);
      message = lua_tostring (L, -1);
      if (lua_getfield (L, e, "fields") != LUA_TTABLE) {
         lua_pop (L, 1);
         lua_newtable (L);
      }
      return fw_lua_raise_typed (L, type ? type : "RuntimeError", -1, "%s", message ? message : "");
   }
   lua_pop (L, 1);
   if (lua_getfield (L, answer, "cursor") == LUA_TTABLE) {
      lua_getfield (L, LUA_REGISTRYINDEX, MAKE_CURSOR_KEY);
      lua_insert (L, -2);
      lua_call (L, 1, 1);
      return 1;
   }
   lua_pop (L, 1);
   lua_getfield (L, answer, "ok");
   return 1;
}

static int
bridge_now_ms (lua_State *L)
{
   lua_pushinteger (L, app_of (L)->now_ms);
   return 1;
}

/* --- installing the fakes in a script state ------------------------------------ */

typedef struct {
   fw_test_app_t *app;
   lua_State *spec;
   int env_idx;
} install_t;

static int
pinstall (lua_State *L)
{
   install_t *a = lua_touserdata (L, 1);
   lua_State *S = a->spec;

   lua_pushlightuserdata (L, a->app);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &fw_test_app_key);

   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.testing.sandbox");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "install");
   lua_createtable (L, 0, 6);
   lua_pushcfunction (L, bridge_raw);
   lua_setfield (L, -2, "bridge_raw");
   lua_pushcfunction (L, bridge_call);
   lua_setfield (L, -2, "bridge_call");
   lua_pushcfunction (L, bridge_now_ms);
   lua_setfield (L, -2, "now_ms");
   lua_pushboolean (L, a->app->conns != NULL);
   lua_setfield (L, -2, "real_mongo");
   lua_pushliteral (L, MAKE_CURSOR_KEY);
   lua_setfield (L, -2, "make_cursor_key");
   lua_pushliteral (L, FW_HTTP_TRANSPORT_KEY);
   lua_setfield (L, -2, "http_transport_key");
   /* opts.env, strings only, copied across. */
   lua_newtable (L);
   if (a->env_idx) {
      lua_pushnil (S);
      while (lua_next (S, a->env_idx)) {
         if (lua_type (S, -2) != LUA_TSTRING || lua_type (S, -1) != LUA_TSTRING) {
            const char *bad = lua_type (S, -2) == LUA_TSTRING ? "value" : "name";
            const char *type = luaL_typename (S, lua_type (S, -2) == LUA_TSTRING ? -1 : -2);
            lua_pop (S, 2);
            return luaL_error (L, "fwt.load: opts.env: every %s must be a string, got %s", bad,
                               type);
         }
         lua_pushstring (L, lua_tostring (S, -2));
         lua_pushstring (L, lua_tostring (S, -1));
         lua_rawset (L, -3);
         lua_pop (S, 1);
      }
   }
   lua_setfield (L, -2, "env");
   lua_call (L, 1, 0);
   return 0;
}

bool
fw_test_bridge_install (fw_test_app_t *app, lua_State *S, int env_idx, fw_lua_host_t *host,
                        fw_error_t *error)
{
   lua_State *L = fw_lua_host_state (host);
   install_t a = {app, S, env_idx};

   lua_pushcfunction (L, pinstall);
   lua_pushlightuserdata (L, &a);
   if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "%s", lua_tostring (L, -1));
      lua_pop (L, 1);
      return false;
   }
   return true;
}

/* --- events files ---------------------------------------------------------------- */

typedef struct {
   FILE *f;
   char *line;
   bson_t *doc;
} reader_t;

static int
reader_gc (lua_State *L)
{
   reader_t *r = lua_touserdata (L, 1);
   if (r->f) {
      fclose (r->f);
   }
   free (r->line);
   bson_destroy (r->doc);
   memset (r, 0, sizeof *r);
   return 0;
}

/* events_from(path) -> { event, ... }: one Extended JSON document a line
 * (blank lines skipped), as `flowwarden record` writes them. */
int
fw_test_events_from (lua_State *L)
{
   const char *path = luaL_checkstring (L, 1);
   reader_t *r;
   size_t cap = 0;
   ssize_t len;
   int lineno = 0, n = 0;
   bson_error_t berr;
   fw_error_t err;

   r = lua_newuserdatauv (L, sizeof *r, 0);
   memset (r, 0, sizeof *r);
   lua_createtable (L, 0, 1);
   lua_pushcfunction (L, reader_gc);
   lua_setfield (L, -2, "__gc");
   lua_setmetatable (L, -2);
   if (!(r->f = fopen (path, "r"))) {
      return luaL_error (L, "events_from: cannot open %s: %s", path, strerror (errno));
   }
   lua_newtable (L);
   while ((len = getline (&r->line, &cap, r->f)) >= 0) {
      lineno++;
      while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) {
         r->line[--len] = '\0';
      }
      if (strspn (r->line, " \t") == (size_t) len) {
         continue;
      }
      r->doc = bson_new_from_json ((const uint8_t *) r->line, len, &berr);
      if (!r->doc) {
         return luaL_error (L, "%s:%d: not an Extended JSON document: %s", path, lineno,
                            berr.message);
      }
      if (!fw_bson_lua_push_document (L, r->doc, NULL, &err)) {
         return luaL_error (L, "%s:%d: %s", path, lineno, err.message);
      }
      bson_destroy (r->doc);
      r->doc = NULL;
      lua_rawseti (L, -2, ++n);
   }
   if (ferror (r->f)) {
      return luaL_error (L, "events_from: cannot read %s: %s", path, strerror (errno));
   }
   return 1;
}
