/*
 * http_lua.c - fw.http's Lua functions (see http_lua.h): the options come
 * checked from lua/flowwarden/http.lua, the exchange runs in
 * http_transfer.c, and failures become typed errors here.
 *
 * Every Lua API call may longjmp, so the C memory of a request (the
 * transfer) and of the state (the session) is owned by userdata with a __gc:
 * nothing malloc'd is ever held only by a C local across a call that can
 * raise.
 */
#include <ctype.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/http_lua.h"
#include "lua_api/http_transfer.h"
#include "lua_api/lua_call.h"
#include "lua_api/metrics_lua.h"

#define SESSION_MT "flowwarden.http.session"
#define TRANSFER_MT "flowwarden.http.transfer"
#define STREAM_KEY "flowwarden.stream_name" /* lua_core.c sets it */
#define STATUS_BODY_MAX 4096

static const char session_key = 'h'; /* registry key: its address */

static int
session_gc (lua_State *L)
{
   fw_http_session_t **s = luaL_checkudata (L, 1, SESSION_MT);
   fw_http_session_destroy (*s);
   *s = NULL;
   return 0;
}

static int
transfer_gc (lua_State *L)
{
   fw_http_transfer_t **t = luaL_checkudata (L, 1, TRANSFER_MT);
   fw_http_transfer_destroy (*t);
   *t = NULL;
   return 0;
}

/* The state's session, created on first use and kept in the registry: one
 * connection cache per Lua state, that is per stream. */
static fw_http_session_t *
get_session (lua_State *L)
{
   fw_http_session_t **s;

   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &session_key) == LUA_TUSERDATA) {
      s = lua_touserdata (L, -1);
      lua_pop (L, 1);
      return *s;
   }
   lua_pop (L, 1);
   s = lua_newuserdatauv (L, sizeof *s, 0);
   *s = NULL;
   luaL_setmetatable (L, SESSION_MT);
   if (!(*s = fw_http_session_new ())) {
      luaL_error (L, "fw.http: cannot start libcurl (out of memory, or its initialization failed)");
   }
   lua_rawsetp (L, LUA_REGISTRYINDEX, &session_key);
   return *s;
}

static int
raise_failure (lua_State *L, const fw_http_failure_t *f)
{
   if (!f->type) {
      lua_pushliteral (L, "not enough memory");
      return lua_error (L);
   }
   return fw_lua_raise_typed (L, f->type, 0, "%s", f->message);
}

static void
log_debug (lua_State *L, const char *target, const char *outcome)
{
   const char *stream;

   if (!fw_log_enabled (FW_LOG_DEBUG)) {
      return;
   }
   lua_getfield (L, LUA_REGISTRYINDEX, STREAM_KEY);
   stream = lua_touserdata (L, -1);
   lua_pop (L, 1);
   fw_log (FW_LOG_DEBUG, stream, "fw.http: %s %s", target, outcome);
}

/* Fields of the table prepare() returned. Strings stay alive: the table
 * stays on the stack for the whole call. */
static const char *
field_string (lua_State *L, int idx, const char *name, size_t *len)
{
   const char *s;
   lua_getfield (L, idx, name);
   s = lua_type (L, -1) == LUA_TSTRING ? lua_tolstring (L, -1, len) : NULL;
   lua_pop (L, 1);
   return s;
}

static lua_Integer
field_integer (lua_State *L, int idx, const char *name)
{
   lua_Integer v;
   lua_getfield (L, idx, name);
   v = lua_tointeger (L, -1);
   lua_pop (L, 1);
   return v;
}

static bool
field_boolean (lua_State *L, int idx, const char *name)
{
   bool v;
   lua_getfield (L, idx, name);
   v = lua_toboolean (L, -1);
   lua_pop (L, 1);
   return v;
}

/* Pushes the response headers: lower-case names, repeated ones joined with
 * ", ". */
static void
push_headers (lua_State *L, fw_http_transfer_t *t)
{
   void *iter = NULL;
   const char *name, *value;

   lua_newtable (L);
   while (fw_http_transfer_next_header (t, &iter, &name, &value)) {
      size_t n = strlen (name);
      luaL_Buffer b;
      char *p = luaL_buffinitsize (L, &b, n);
      for (size_t i = 0; i < n; i++) {
         p[i] = (char) tolower ((unsigned char) name[i]);
      }
      luaL_pushresultsize (&b, n);
      lua_pushvalue (L, -1);
      if (lua_rawget (L, -3) == LUA_TSTRING) {
         lua_pushliteral (L, ", ");
         lua_pushstring (L, value);
         lua_concat (L, 3);
      } else {
         lua_pop (L, 1);
         lua_pushstring (L, value);
      }
      lua_rawset (L, -3);
   }
}

/* With raise_for_status: the response at idx raises Http.Status.Transient
 * (408, 425, 429, 5xx) or Http.Status.Permanent (other 4xx). */
static void
raise_for_status (lua_State *L, int idx, long status, const char *target)
{
   bool transient = status == 408 || status == 425 || status == 429 || status >= 500;

   lua_createtable (L, 0, 2);
   lua_pushinteger (L, status);
   lua_setfield (L, -2, "status");
   lua_getfield (L, idx, "body");
   if (lua_rawlen (L, -1) > STATUS_BODY_MAX) {
      lua_pushlstring (L, lua_tostring (L, -1), STATUS_BODY_MAX);
      lua_remove (L, -2);
   }
   lua_setfield (L, -2, "body");
   fw_lua_raise_typed (L, transient ? "Http.Status.Transient" : "Http.Status.Permanent", -1,
                       "fw.http: %s: HTTP %ld", target, status);
}

/*
 * flowwarden.testing's stand-in for the network: a function in the registry
 * under FW_HTTP_TRANSPORT_KEY takes the prepared request table at req_idx
 * and returns a response { status, headers, body } or nil, error type,
 * message. Pushes the response (with RESPONSE_MT, upvalue 2) or raises. In
 * run the key is never set.
 */
static int
fake_exchange (lua_State *L, int req_idx, fw_http_transfer_t *t)
{
   lua_pushvalue (L, req_idx);
   lua_call (L, 1, 3);
   if (!lua_istable (L, -3)) {
      const char *type = lua_tostring (L, -2);
      return fw_lua_raise_typed (L, type ? type : "Http.Connect", 0, "fw.http: %s: %s",
                                 fw_http_transfer_target (t),
                                 lua_tostring (L, -1) ? lua_tostring (L, -1) : "no response");
   }
   lua_pop (L, 2);
   log_debug (L, fw_http_transfer_target (t), "-> (flowwarden.testing's stub)");
   lua_pushvalue (L, lua_upvalueindex (2));
   lua_setmetatable (L, -2);
   lua_getfield (L, -1, "status");
   if (field_boolean (L, req_idx, "raise_for_status") && lua_tointeger (L, -1) >= 400) {
      raise_for_status (L, lua_gettop (L) - 1, (long) lua_tointeger (L, -1),
                        fw_http_transfer_target (t));
   }
   lua_pop (L, 1);
   return 1;
}

/* One request in the stream's flowwarden_io_* metrics (none outside a
 * stream). */
static void
count_io (lua_State *L, fw_metrics_io_result_t result, int64_t started_ns)
{
   fw_stream_metrics_t *metrics = fw_metrics_lua_stream (L);
   if (metrics) {
      fw_stream_metrics_io (metrics, FW_METRICS_IO_HTTP, result, fw_mono_ns () - started_ns);
   }
}

/* Calls prepare() (upvalue 1) with the public name, the method and the
 * arguments at 1 and 2; pushes the request table it returns (stack index 3)
 * or raises, an ArgumentError when prepare() worded the problem. */
static int
push_prepared_request (lua_State *L)
{
   lua_pushvalue (L, lua_upvalueindex (1));
   lua_pushvalue (L, lua_upvalueindex (3));
   lua_pushvalue (L, lua_upvalueindex (4));
   lua_pushvalue (L, 1);
   lua_pushvalue (L, 2);
   switch (lua_pcall (L, 4, 1, 0)) {
   case LUA_OK:
      return 1;
   case LUA_ERRRUN:
      if (lua_type (L, -1) == LUA_TSTRING) { /* bad input, worded by prepare() */
         return fw_lua_raise_typed (L, "ArgumentError", 0, "%s", lua_tostring (L, -1));
      }
      /* fallthrough */
   default:
      return lua_error (L);
   }
}

/* The request table at 3 as a transfer's request (its strings live as long
 * as the table) and its timeout; raises when the table is malformed. */
static void
read_request (lua_State *L, const char *call, fw_http_request_t *rq, long *timeout_ms)
{
   const char *body;
   size_t body_len;

   memset (rq, 0, sizeof *rq);
   rq->method = field_string (L, 3, "method", NULL);
   rq->url = field_string (L, 3, "url", NULL);
   body = field_string (L, 3, "body", &body_len);
   rq->body = body;
   rq->body_len = body ? body_len : 0;
   rq->ca_file = field_string (L, 3, "ca_file", NULL);
   rq->connect_timeout_ms = field_integer (L, 3, "connect_timeout_ms");
   rq->max_body = (size_t) field_integer (L, 3, "max_body");
   rq->follow_redirects = field_boolean (L, 3, "follow_redirects");
   rq->verify_tls = field_boolean (L, 3, "verify_tls");
   *timeout_ms = (long) field_integer (L, 3, "timeout_ms");
   if (!rq->method || !rq->url || *timeout_ms <= 0 || rq->max_body == 0) {
      luaL_error (L, "%s: flowwarden.http returned a malformed request (a bug)", call);
   }
}

/* Pushes a new transfer, owned by its userdata (stack index 4). */
static fw_http_transfer_t *
push_transfer (lua_State *L)
{
   fw_http_transfer_t **t = lua_newuserdatauv (L, sizeof *t, 0);

   *t = NULL;
   luaL_setmetatable (L, TRANSFER_MT);
   if (!(*t = fw_http_transfer_new ())) {
      luaL_error (L, "not enough memory");
   }
   return *t;
}

/* Pushes the request's allow_hosts (stack index 5) and, when it is a list,
 * the array of its hosts that policy then points to (a userdata, index 6;
 * the strings stay alive in the list). */
static void
push_allow_hosts (lua_State *L, fw_http_policy_t *policy)
{
   const char **hosts;

   if (lua_getfield (L, 3, "allow_hosts") != LUA_TTABLE) {
      return;
   }
   policy->n_hosts = lua_rawlen (L, 5);
   hosts = lua_newuserdatauv (L, (policy->n_hosts + 1) * sizeof *hosts, 0);
   for (size_t i = 0; i < policy->n_hosts; i++) {
      lua_rawgeti (L, 5, (lua_Integer) i + 1);
      hosts[i] = lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "";
      lua_pop (L, 1); /* the allow_hosts table keeps it */
   }
   policy->hosts = hosts;
}

/* Shortens *timeout_ms to the handler's remaining time budget (less the IO
 * margin), setting *budget_bound when it does; raises Http.Timeout when the
 * budget is spent. */
static void
apply_budget (lua_State *L, fw_http_transfer_t *t, long *timeout_ms, bool *budget_bound)
{
   int64_t budget = fw_lua_call_budget_ms (L, "fw.http");

   if (budget == 0) {
      fw_lua_raise_typed (L, "Http.Timeout", 0, "fw.http: %s: the handler's time budget is spent",
                          fw_http_transfer_target (t));
   }
   if (budget > 0) {
      budget -= fw_lua_call_io_margin_ms (budget);
   }
   if (budget > 0 && budget < *timeout_ms) {
      *timeout_ms = (long) budget;
      *budget_bound = true;
   }
}

/* Adds the request table's headers (a list of "Name: value") to t. */
static void
add_headers (lua_State *L, fw_http_transfer_t *t)
{
   lua_getfield (L, 3, "headers");
   for (lua_Integer i = 1; lua_rawgeti (L, -1, i) == LUA_TSTRING; i++) {
      if (!fw_http_transfer_add_header (t, lua_tostring (L, -1))) {
         luaL_error (L, "not enough memory");
      }
      lua_pop (L, 1);
   }
   lua_pop (L, 2);
}

/* Runs the exchange over the network, counted in the metrics and logged at
 * debug level; raises its failure. */
static void
perform_exchange (lua_State *L, fw_http_transfer_t *t, long timeout_ms, bool budget_bound)
{
   fw_http_failure_t failure;
   int64_t started = fw_mono_ns ();
   char outcome[64];

   if (!fw_http_transfer_perform (t, get_session (L), timeout_ms, budget_bound, &failure)) {
      count_io (L,
                failure.type && strcmp (failure.type, "Http.Timeout") == 0 ? FW_METRICS_IO_TIMEOUT
                                                                           : FW_METRICS_IO_ERROR,
                started);
      snprintf (outcome, sizeof outcome, "failed (%s)",
                failure.type ? failure.type : "out of memory");
      log_debug (L, fw_http_transfer_target (t), outcome);
      if (budget_bound && failure.type && strcmp (failure.type, "Http.Timeout") == 0) {
         fw_lua_call_io_timed_out (L); /* the handler's deadline: this wait's type wins */
      }
      raise_failure (L, &failure);
   }
   /* A response is an error for the metrics when its status says so. */
   count_io (L, fw_http_transfer_status (t) < 400 ? FW_METRICS_IO_OK : FW_METRICS_IO_ERROR,
             started);
   snprintf (outcome, sizeof outcome, "-> %ld in %lld ms", fw_http_transfer_status (t),
             (long long) ((fw_mono_ns () - started) / 1000000));
   log_debug (L, fw_http_transfer_target (t), outcome);
}

/* Pushes t's response { status, headers, body } with the response metatable
 * (upvalue 2); raises for its status when the request asked to. */
static void
push_response (lua_State *L, fw_http_transfer_t *t)
{
   const char *body;
   size_t body_len;

   lua_createtable (L, 0, 3);
   lua_pushinteger (L, fw_http_transfer_status (t));
   lua_setfield (L, -2, "status");
   push_headers (L, t);
   lua_setfield (L, -2, "headers");
   body = fw_http_transfer_body (t, &body_len);
   lua_pushlstring (L, body, body_len);
   lua_setfield (L, -2, "body");
   fw_http_transfer_drop_body (t); /* now a Lua string: no need to wait for the GC */
   lua_pushvalue (L, lua_upvalueindex (2));
   lua_setmetatable (L, -2);
   if (field_boolean (L, 3, "raise_for_status") && fw_http_transfer_status (t) >= 400) {
      raise_for_status (L, lua_gettop (L), fw_http_transfer_status (t),
                        fw_http_transfer_target (t));
   }
}

/*
 * fw.http.request / get / post / ... Upvalues: 1 prepare (flowwarden.http),
 * 2 the response metatable, 3 the public name, 4 the method (nil for
 * request). Stack: 1, 2 the arguments, 3 the request table, 4 the transfer,
 * 5 allow_hosts, 6 the policy's array (when there is a list).
 */
static int
http_call (lua_State *L)
{
   const char *call = lua_tostring (L, lua_upvalueindex (3));
   fw_http_request_t rq;
   fw_http_policy_t policy = {NULL, 0};
   fw_http_failure_t failure;
   fw_http_transfer_t *t;
   long timeout_ms;
   bool budget_bound = false;

   (void) fw_lua_call_budget_ms (L, "fw.http"); /* raises outside handlers */
   lua_settop (L, 2);
   luaL_checkstack (L, 12, call);
   push_prepared_request (L);
   read_request (L, call, &rq, &timeout_ms);
   t = push_transfer (L);
   push_allow_hosts (L, &policy);
   if (!fw_http_transfer_prepare (t, call, &rq, &policy, &failure)) {
      return raise_failure (L, &failure);
   }
   /* The budget is read after prepare(), which may have encoded JSON. */
   apply_budget (L, t, &timeout_ms, &budget_bound);
   add_headers (L, t);
   if (lua_getfield (L, LUA_REGISTRYINDEX, FW_HTTP_TRANSPORT_KEY) == LUA_TFUNCTION) {
      return fake_exchange (L, 3, t);
   }
   lua_pop (L, 1);
   perform_exchange (L, t, timeout_ms, budget_bound);
   push_response (L, t);
   return 1;
}

void
fw_http_lua_open (lua_State *L, int module_idx)
{
   static const char *const names[] = {"request", "get", "post", "put", "patch", "delete"};
   static const char *const methods[] = {NULL, "GET", "POST", "PUT", "PATCH", "DELETE"};

   module_idx = lua_absindex (L, module_idx);
   luaL_newmetatable (L, SESSION_MT);
   lua_pushcfunction (L, session_gc);
   lua_setfield (L, -2, "__gc");
   luaL_newmetatable (L, TRANSFER_MT);
   lua_pushcfunction (L, transfer_gc);
   lua_setfield (L, -2, "__gc");
   lua_pop (L, 2);

   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.http");
   lua_call (L, 1, 1);
   lua_createtable (L, 0, 6);
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      lua_getfield (L, -2, "prepare");
      lua_getfield (L, -3, "RESPONSE_MT");
      lua_pushfstring (L, "fw.http.%s", names[i]);
      if (methods[i]) {
         lua_pushstring (L, methods[i]);
      } else {
         lua_pushnil (L);
      }
      lua_pushcclosure (L, http_call, 4);
      lua_setfield (L, -2, names[i]);
   }
   lua_setfield (L, module_idx, "http");
   lua_pop (L, 1);
}
