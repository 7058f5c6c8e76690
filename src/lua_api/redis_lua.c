/*
 * redis_lua.c - fw.redis over hiredis (see redis_lua.h).
 *
 * No malloc'd memory may be live when a typed error is raised (it
 * longjmps): hiredis replies are converted to Lua values and freed first,
 * and argument vectors live in Lua userdata.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <lauxlib.h>

#include "bson/bson_values.h"
#include "flowwarden/clock.h"
#include "host_lookup.h"
#include "lua_api/lua_call.h"
#include "lua_api/redis_lua.h"

#define CONN_MT "flowwarden.redis_conn"
/* Without a handler deadline (on_error of a call without timeout): bound
 * each wait anyway, so a silent server cannot hold the stream forever. */
#define NO_DEADLINE_WAIT_MS 30000

static const char conns_key = 0; /* registry: name -> conn_t userdata */

typedef struct {
   redisContext *ctx; /* NULL: closed (never opened, or dropped after a failure) */
   char *uri;         /* the URI ctx was opened with; a reload changing it reopens */
} conn_t;

typedef struct {
   const char *name; /* the connection's name (a string on the Lua stack) */
   int64_t wait_ms;  /* this call's bound on every wait */
   bool bounded;     /* wait_ms comes from the handler's deadline */
   int64_t started;  /* fw_mono_ns at the start of the call */
} call_t;

static void
conn_close (conn_t *c)
{
   if (c->ctx) {
      redisFree (c->ctx);
      c->ctx = NULL;
   }
}

static int
conn_gc (lua_State *L)
{
   conn_t *c = luaL_checkudata (L, 1, CONN_MT);
   conn_close (c);
   free (c->uri);
   c->uri = NULL;
   return 0;
}

static struct timeval
to_timeval (int64_t ms)
{
   struct timeval tv = {.tv_sec = (time_t) (ms / 1000),
                        .tv_usec = (suseconds_t) (ms % 1000) * 1000};
   return tv;
}

/* Raises type with fields { connection = name [, prefix] } and message
 * "fw.redis: connection \"name\": <why>" (why at the stack top, popped). */
static int
raise_redis (lua_State *L, const call_t *call, const char *type, const char *prefix)
{
   int why = lua_gettop (L);
   lua_createtable (L, 0, 2);
   lua_pushstring (L, call->name);
   lua_setfield (L, -2, "connection");
   if (prefix) {
      lua_pushstring (L, prefix);
      lua_setfield (L, -2, "prefix");
   }
   if (strcmp (type, "Redis.Timeout") == 0 && call->bounded) {
      fw_lua_call_io_timed_out (L); /* the handler's deadline: this wait's type wins */
   }
   return fw_lua_raise_typed (L, type, lua_gettop (L), "fw.redis: connection \"%s\": %s",
                              call->name, lua_tostring (L, why));
}

/* After hiredis failed on c (c->ctx->err set): closes c and raises
 * Redis.Timeout when the wait ran out, else Redis.Connection. */
static int
raise_io (lua_State *L, const call_t *call, conn_t *c, const char *doing)
{
   int saved = errno;
   bool timed_out = (c->ctx->err == REDIS_ERR_IO && (saved == EAGAIN || saved == EWOULDBLOCK)) ||
                    (fw_mono_ns () - call->started) / 1000000 >= call->wait_ms;
   lua_pushfstring (L, "%s: %s", doing, timed_out ? "no reply in time" : c->ctx->errstr);
   conn_close (c);
   return raise_redis (L, call, timed_out ? "Redis.Timeout" : "Redis.Connection", NULL);
}

/* The type of an error reply whose first word is prefix. */
static const char *
error_type (const char *prefix)
{
   if (strcmp (prefix, "READONLY") == 0) {
      return "Redis.ReadOnly"; /* a replica, e.g. the old primary after a failover */
   }
   if (strcmp (prefix, "LOADING") == 0 || strcmp (prefix, "MASTERDOWN") == 0) {
      return "Redis.Connection"; /* the server is not ready yet */
   }
   return "Redis.Error";
}

/* Raises the error reply whose text is at the stack top. index > 0: its
 * place in a pipeline. */
static int
raise_reply_error (lua_State *L, const call_t *call, lua_Integer index)
{
   const char *text = lua_tostring (L, -1);
   size_t n = strcspn (text, " ");
   char prefix[64];

   snprintf (prefix, sizeof prefix, "%.*s", (int) (n < sizeof prefix - 1 ? n : sizeof prefix - 1),
             text);
   if (index > 0) {
      lua_pushfstring (L, "command #%d of the pipeline: %s", (int) index, text);
   } else {
      lua_pushvalue (L, -1);
   }
   return raise_redis (L, call, error_type (prefix), prefix);
}

/*
 * Pushes r as a Lua value: integers, strings (bulk and status), tables for
 * arrays (nil elements as fw.null), nil for nil. The first error reply met
 * (at any depth) is stored, as its text, in the stack slot err_slot (left
 * alone when it already holds one); it is pushed as false in the value.
 */
static void
push_reply (lua_State *L, const redisReply *r, int err_slot)
{
   luaL_checkstack (L, 4, "fw.redis: reply nested too deep");
   switch (r->type) {
   case REDIS_REPLY_INTEGER:
      lua_pushinteger (L, (lua_Integer) r->integer);
      break;
   case REDIS_REPLY_STRING:
   case REDIS_REPLY_STATUS:
      lua_pushlstring (L, r->str, r->len);
      break;
   case REDIS_REPLY_ARRAY:
      lua_createtable (L, (int) (r->elements < INT32_MAX ? r->elements : 0), 0);
      for (size_t i = 0; i < r->elements; i++) {
         if (r->element[i]->type == REDIS_REPLY_NIL) {
            fw_bson_values_push_null (L);
         } else {
            push_reply (L, r->element[i], err_slot);
         }
         lua_rawseti (L, -2, (lua_Integer) i + 1);
      }
      break;
   case REDIS_REPLY_ERROR:
      if (lua_isnil (L, err_slot)) {
         lua_pushlstring (L, r->str, r->len);
         lua_replace (L, err_slot);
      }
      lua_pushboolean (L, 0);
      break;
   default:
      lua_pushnil (L);
      break;
   }
}

/* Sends argv and reads its reply on c->ctx, a pushed Lua value; raises on
 * failure (closing c after a network failure, and after an error reply too
 * when doing names a step of the handshake: a connection whose AUTH or
 * SELECT failed must not serve the next call). */
static void
run_simple (lua_State *L, const call_t *call, conn_t *c, int argc, const char **argv,
            const size_t *lens, const char *doing)
{
   bool handshake = strcmp (doing, "authenticating") == 0 ||
                    strcmp (doing, "selecting the database") == 0;
   redisReply *r = redisCommandArgv (c->ctx, argc, argv, lens);
   int err_slot;

   if (!r) {
      raise_io (L, call, c, doing);
   }
   lua_pushnil (L);
   err_slot = lua_gettop (L);
   push_reply (L, r, err_slot);
   freeReplyObject (r);
   if (!lua_isnil (L, err_slot)) {
      if (handshake) {
         conn_close (c);
      }
      lua_pushvalue (L, err_slot);
      raise_reply_error (L, call, 0);
   }
   lua_remove (L, err_slot);
}

/* AUTH and SELECT on a new connection, from the parts table at parts_idx. */
static void
handshake (lua_State *L, const call_t *call, conn_t *c, int parts_idx)
{
   const char *argv[3];
   size_t lens[3];
   int argc = 0;
   int top = lua_gettop (L);

   lua_getfield (L, parts_idx, "password");
   if (lua_type (L, -1) == LUA_TSTRING) {
      argv[argc] = "AUTH";
      lens[argc++] = 4;
      lua_getfield (L, parts_idx, "user");
      if (lua_type (L, -1) == LUA_TSTRING) {
         argv[argc] = lua_tolstring (L, -1, &lens[argc]);
         argc++;
      }
      argv[argc] = lua_tolstring (L, -2, &lens[argc]);
      argc++;
      run_simple (L, call, c, argc, argv, lens, "authenticating");
   }
   lua_settop (L, top);
   lua_getfield (L, parts_idx, "db");
   if (lua_tointeger (L, -1) != 0) {
      argv[0] = "SELECT";
      lens[0] = 6;
      argv[1] = lua_tolstring (L, -1, &lens[1]);
      run_simple (L, call, c, 2, argv, lens, "selecting the database");
   }
   lua_settop (L, top);
}

/* The time left of call's wait, at least 1 ms. */
static int64_t
left_ms (const call_t *call)
{
   int64_t left = call->wait_ms - (fw_mono_ns () - call->started) / 1000000;
   return left > 0 ? left : 1;
}

/*
 * Connects to host:port within call's wait: a host name is looked up first
 * against the same bound (hiredis's own lookup blocks without one), then
 * each of its addresses is tried in turn. Raises Redis.Timeout when the
 * lookup outlasts the wait, Redis.Connection when the name does not
 * resolve; NULL: out of memory.
 */
static redisContext *
connect_addresses (lua_State *L, const call_t *call, const char *host, int port)
{
   fw_host_addrs_t addrs;
   fw_host_lookup_t r;
   redisContext *ctx = NULL;
   char why[300];

   if (fw_host_is_address (host)) {
      return redisConnectWithTimeout (host, port, to_timeval (call->wait_ms));
   }
   r = fw_host_lookup (host, call->started + call->wait_ms * 1000000, &addrs, why, sizeof why);
   if (r != FW_HOST_FOUND) {
      lua_pushfstring (L, "cannot connect to %s:%d: %s", host, port, why);
      raise_redis (L, call, r == FW_HOST_TIMEOUT ? "Redis.Timeout" : "Redis.Connection", NULL);
   }
   for (int i = 0; i < addrs.n; i++) {
      if (ctx) {
         redisFree (ctx);
      }
      ctx = redisConnectWithTimeout (addrs.addrs[i], port, to_timeval (left_ms (call)));
      if (!ctx || !ctx->err) {
         break;
      }
   }
   return ctx;
}

/* Opens c->ctx to the server the parts table at parts_idx names. */
static void
connect_to (lua_State *L, const call_t *call, conn_t *c, int parts_idx)
{
   const char *host;
   int port;

   lua_getfield (L, parts_idx, "host");
   lua_getfield (L, parts_idx, "port");
   host = lua_tostring (L, -2);
   port = (int) lua_tointeger (L, -1);
   c->ctx = connect_addresses (L, call, host, port);
   if (!c->ctx) {
      luaL_error (L, "fw.redis: out of memory");
   }
   if (c->ctx->err) {
      bool timed_out = (fw_mono_ns () - call->started) / 1000000 >= call->wait_ms;
      lua_pushfstring (L, "cannot connect to %s:%d: %s", host, port,
                       timed_out ? "no answer in time" : c->ctx->errstr);
      conn_close (c);
      raise_redis (L, call, timed_out ? "Redis.Timeout" : "Redis.Connection", NULL);
   }
   lua_pop (L, 2);
   handshake (L, call, c, parts_idx);
}

/* The open connection of call->name, opened when needed; its wait bound set
 * to this call's. */
static conn_t *
get_conn (lua_State *L, const call_t *call)
{
   conn_t *c;
   int parts;
   const char *uri;

   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   lua_getfield (L, -1, "flowwarden.config");
   if (!lua_istable (L, -1) || lua_getfield (L, -1, "store_connection") != LUA_TFUNCTION) {
      luaL_error (L, "fw.redis: no script loaded in this state");
   }
   lua_pushstring (L, call->name);
   lua_pushliteral (L, "redis");
   lua_call (L, 2, 2);
   if (lua_isnil (L, -2)) {
      fw_lua_raise_typed (L, "ArgumentError", 0, "fw.redis: %s", lua_tostring (L, -1));
   }
   lua_pop (L, 1);
   parts = lua_gettop (L);
   lua_getfield (L, parts, "uri");
   uri = lua_tostring (L, -1);

   c = fw_lua_named_userdata (L, &conns_key, call->name, sizeof *c, CONN_MT);
   if (!c->uri || strcmp (c->uri, uri) != 0) {
      conn_close (c); /* a reload changed the URI */
      free (c->uri);
      if (!(c->uri = strdup (uri))) {
         luaL_error (L, "fw.redis: out of memory");
      }
   }
   if (!c->ctx) {
      connect_to (L, call, c, parts);
   }
   if (redisSetTimeout (c->ctx, to_timeval (call->wait_ms)) != REDIS_OK) {
      lua_pushliteral (L, "cannot set the socket timeout");
      conn_close (c);
      raise_redis (L, call, "Redis.Connection", NULL);
   }
   lua_settop (L, parts - 3); /* the loaded table, config, parts and the rest */
   return c;
}

/* The call's bounds, from the handler's budget; raises Redis.Timeout when it
 * is spent. name_idx: the connection name's argument. */
static call_t
begin_call (lua_State *L, int name_idx)
{
   call_t call = {0};
   int64_t budget = fw_lua_call_budget_ms (L, "fw.redis");

   call.name = luaL_checkstring (L, name_idx);
   call.started = fw_mono_ns ();
   call.bounded = budget >= 0;
   if (budget < 0) {
      call.wait_ms = NO_DEADLINE_WAIT_MS;
   } else {
      call.wait_ms = budget - fw_lua_call_io_margin_ms (budget);
      if (budget == 0 || call.wait_ms <= 0) {
         lua_pushliteral (L, "the handler's time budget is spent");
         raise_redis (L, &call, "Redis.Timeout", NULL);
      }
   }
   return call;
}

/* Fills argv/lens from the n values from index first; what names the
 * caller for messages. Numbers are sent as their decimal text. */
static void
collect_args (lua_State *L, int first, int n, const char **argv, size_t *lens, const char *what)
{
   for (int i = 0; i < n; i++) {
      int t = lua_type (L, first + i);
      if (t != LUA_TSTRING && t != LUA_TNUMBER) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "%s: argument #%d: expected a string or a number, got %s", what, i + 1,
                             lua_typename (L, t));
      }
      argv[i] = lua_tolstring (L, first + i, &lens[i]);
   }
}

/* fw.redis.call(conn, command, args...) -> the reply */
static int
redis_call (lua_State *L)
{
   int n = lua_gettop (L) - 1;
   call_t call;
   conn_t *c;
   const char **argv;
   size_t *lens;

   luaL_checkstring (L, 2);
   call = begin_call (L, 1);
   argv = lua_newuserdatauv (L, (size_t) n * (sizeof *argv + sizeof *lens), 0);
   lens = (size_t *) (argv + n);
   collect_args (L, 2, n, argv, lens, "fw.redis.call");
   c = get_conn (L, &call);
   run_simple (L, &call, c, n, argv, lens, "command");
   return 1;
}

/* fw.redis.pipeline(conn, { {command, args...}, ... }) -> { reply, ... } */
static int
redis_pipeline (lua_State *L)
{
   call_t call;
   conn_t *c;
   lua_Integer count;
   int err_slot, results;
   lua_Integer err_index = 0;

   luaL_checktype (L, 2, LUA_TTABLE);
   lua_settop (L, 2);
   call = begin_call (L, 1);
   count = (lua_Integer) lua_rawlen (L, 2);
   /* Every argument is checked before anything is queued: a raise halfway
    * would leave commands in the connection's buffer. */
   for (lua_Integer i = 1; i <= count; i++) {
      if (lua_rawgeti (L, 2, i) != LUA_TTABLE || lua_rawlen (L, -1) == 0) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.redis.pipeline: command #%d: expected a table such as "
                             "{ \"SET\", key, value }, got %s",
                             (int) i, luaL_typename (L, -1));
      }
      for (lua_Integer k = 1; k <= (lua_Integer) lua_rawlen (L, -1); k++) {
         int t = lua_rawgeti (L, -1, k);
         if (t != LUA_TSTRING && t != LUA_TNUMBER) {
            fw_lua_raise_typed (L, "ArgumentError", 0,
                                "fw.redis.pipeline: command #%d, argument #%d: expected a string "
                                "or a number, got %s",
                                (int) i, (int) k, lua_typename (L, t));
         }
         lua_pop (L, 1);
      }
      lua_pop (L, 1);
   }
   c = get_conn (L, &call);
   for (lua_Integer i = 1; i <= count; i++) {
      int base = lua_gettop (L);
      int n;
      const char **argv;
      size_t *lens;

      lua_rawgeti (L, 2, i);
      n = (int) lua_rawlen (L, -1);
      luaL_checkstack (L, n + 2, "fw.redis.pipeline: too many arguments");
      for (int k = 1; k <= n; k++) {
         lua_rawgeti (L, base + 1, k);
      }
      argv = lua_newuserdatauv (L, (size_t) n * (sizeof *argv + sizeof *lens), 0);
      lens = (size_t *) (argv + n);
      collect_args (L, base + 2, n, argv, lens, "fw.redis.pipeline");
      if (redisAppendCommandArgv (c->ctx, n, argv, lens) != REDIS_OK) {
         luaL_error (L, "fw.redis: out of memory");
      }
      lua_settop (L, base);
   }
   lua_pushnil (L);
   err_slot = lua_gettop (L);
   lua_createtable (L, (int) (count < INT32_MAX ? count : 0), 0);
   results = lua_gettop (L);
   for (lua_Integer i = 1; i <= count; i++) {
      void *r = NULL;
      if (redisGetReply (c->ctx, &r) != REDIS_OK || !r) {
         raise_io (L, &call, c, "pipeline");
      }
      push_reply (L, r, err_slot);
      freeReplyObject (r);
      if (!err_index && !lua_isnil (L, err_slot)) {
         err_index = i;
      }
      lua_rawseti (L, results, i);
   }
   if (err_index) {
      lua_pushvalue (L, err_slot);
      raise_reply_error (L, &call, err_index);
   }
   return 1;
}

typedef struct {
   const char *name;
   int64_t timeout_ms;
} probe_t;

/* Protected: connects (AUTH, SELECT) and sends PING. */
static int
probe (lua_State *L)
{
   probe_t *p = lua_touserdata (L, 1);
   call_t call = {.name = p->name, .wait_ms = p->timeout_ms, .started = fw_mono_ns ()};
   const char *argv[] = {"PING"};
   size_t lens[] = {4};

   run_simple (L, &call, get_conn (L, &call), 1, argv, lens, "PING");
   return 0;
}

bool
fw_redis_lua_probe (lua_State *L, const char *name, int64_t timeout_ms, char *why, size_t len)
{
   probe_t p = {name, timeout_ms};

   return fw_lua_call_protected (L, probe, &p, why, len);
}

static const luaL_Reg redis_functions[] = {
   {"call", redis_call},
   {"pipeline", redis_pipeline},
   {NULL, NULL},
};

void
fw_redis_lua_open (lua_State *L, int module_idx)
{
   module_idx = lua_absindex (L, module_idx);
   if (luaL_newmetatable (L, CONN_MT)) {
      lua_pushcfunction (L, conn_gc);
      lua_setfield (L, -2, "__gc");
   }
   lua_pop (L, 1);
   luaL_newlib (L, redis_functions);
   lua_setfield (L, module_idx, "redis");
}
