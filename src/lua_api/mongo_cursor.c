/*
 * mongo_cursor.c - the cursors fw.mongo's find and aggregate return.
 *
 * A cursor is a full userdata owning its mongoc_cursor_t; its user values
 * are the database, collection and connection names. The native cursor is
 * bound to the client (and so the thread) that opened it: it is used and
 * destroyed there only. It is destroyed as soon as it is exhausted or fails,
 * by close(), by fw_mongo_lua_close_cursors after the handler call, or by
 * the collector when that is safe (see mongo_lua.h).
 */
#include <pthread.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/clock.h"
#include "flowwarden/io_deadline.h"
#include "flowwarden/log.h"
#include "lua_api/lua_call.h"
#include "mongo_lua-private.h"

#define CURSOR_MT "flowwarden.mongo.cursor"

/* How long closing a cursor may wait for killCursors outside a handler. */
#define KILL_TIMEOUT_NS 1000000000LL

static const char cursors_key = 'c'; /* registry: weak-keyed set of open cursors */

/* Which state of this thread registered cursors since its last
 * fw_mongo_lua_close_cursors: NULL for none (the close after every handler
 * call then returns at once), MANY_STATES once two states did (then every
 * close walks). The thread's own: no lock. */
#define MANY_STATES ((lua_State *) 1)
static __thread lua_State *registered_by;

typedef struct {
   mongoc_cursor_t *cursor; /* NULL once exhausted, failed or closed */
   mongoc_client_t *client;
   const fw_mongo_provider_t *provider;
   pthread_t thread;
   const char *method; /* "find" | "aggregate" (static) */
   bool closed;        /* closed before it was exhausted */
   bool counted;       /* its command (the first batch) is in the IO metrics */
} cursor_t;

/* Destroys c (which may send killCursors) within the thread's deadline, or a
 * short one when there is none. */
static void
destroy_bounded (mongoc_cursor_t *c)
{
   int64_t saved = fw_io_deadline_get ();
   int64_t limit = fw_mono_ns () + KILL_TIMEOUT_NS;

   if (!c) {
      return;
   }
   fw_io_deadline_set (saved && saved < limit ? saved : limit);
   mongoc_cursor_destroy (c);
   fw_io_deadline_set (saved);
}

/* Whether the native cursor may be used (or destroyed) now in L. */
static bool
owned_here (lua_State *L, const cursor_t *c)
{
   return pthread_equal (c->thread, pthread_self ()) && c->provider &&
          fw_mongo_provider (L) == c->provider;
}

/* Closes c's native cursor if it may be done safely here, else leaks it
 * (see mongo_lua.h). Never raises. */
static void
close_native (lua_State *L, cursor_t *c)
{
   if (!c->cursor) {
      return;
   }
   if (owned_here (L, c)) {
      destroy_bounded (c->cursor);
   } else {
      fw_log (FW_LOG_WARN, NULL,
              "fw.mongo: a %s cursor was left open and is collected away from its connection; "
              "its memory is leaked (close cursors on the handler's thread)",
              c->method);
   }
   c->cursor = NULL;
   c->closed = true;
}

static cursor_t *
check_cursor (lua_State *L, const char *method)
{
   cursor_t *c = luaL_testudata (L, 1, CURSOR_MT);
   if (!c) {
      fw_mongo_arg_error (L, "cursor:%s: call it as a method: cursor:%s()", method, method);
   }
   return c;
}

/*
 * Pushes the cursor's next document and returns true, or returns false
 * (pushing nothing) when it is exhausted. Raises typed errors, or a plain one
 * for a closed cursor. Uses stack slots above the top for the names.
 */
static bool
next_document (lua_State *L, cursor_t *c, int cursor_idx)
{
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   const bson_t *doc, *reply;
   bson_error_t error;
   fw_error_t err;
   bool got;

   lua_getiuservalue (L, cursor_idx, 1);
   lua_getiuservalue (L, cursor_idx, 2);
   lua_getiuservalue (L, cursor_idx, 3);
   if (!c->cursor) {
      if (c->closed) {
         fw_mongo_arg_error (
            L,
            "fw.mongo: %s cursor on %s.%s is closed (a cursor lasts for the handler "
            "call that opened it, or until cursor:close())",
            c->method, lua_tostring (L, -3), lua_tostring (L, -2));
      }
      lua_pop (L, 3);
      return false;
   }
   fw_mongo_ctx_budget (L, &ctx, c->method, lua_tostring (L, -3), lua_tostring (L, -2),
                        lua_tostring (L, -1));
   if (!owned_here (L, c)) {
      luaL_error (L,
                  "fw.mongo: %s cursor on %s.%s: a cursor can only be used on the thread "
                  "and connection that opened it",
                  c->method, ctx.db, ctx.coll);
   }
   fw_io_deadline_set (ctx.deadline_ns);
   got = mongoc_cursor_next (c->cursor, &doc);
   fw_io_deadline_set (0);
   if (!c->counted) {
      /* One IO request per find or aggregate: its command, which the first
       * next sends (a failure is counted where it is raised). */
      c->counted = true;
      if (got || !mongoc_cursor_error (c->cursor, NULL)) {
         fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
      }
   }
   if (got) {
      if (!fw_bson_lua_push_document (L, doc, NULL, &err)) {
         luaL_error (L, "fw.mongo: %s on %s.%s: %s", c->method, ctx.db, ctx.coll, err.message);
      }
      lua_replace (L, -4);
      lua_pop (L, 2);
      return true;
   }
   if (mongoc_cursor_error_document (c->cursor, &error, &reply)) {
      /* The reply lives in the cursor: keep a copy in a scratch, close the
       * cursor, then raise. */
      op = fw_mongo_op_new (L);
      bson_destroy (&op->reply);
      bson_copy_to (reply, &op->reply);
      /* Closing may do IO under a deadline of its own: note now whether
       * the operation's deadline is what failed it. */
      ctx.deadline_hit = fw_io_deadline_hit ();
      destroy_bounded (c->cursor);
      c->cursor = NULL;
      c->closed = true;
      fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   destroy_bounded (c->cursor); /* exhausted: the server closed it already */
   c->cursor = NULL;
   lua_pop (L, 3);
   return false;
}

/* cursor(), cursor:next() -> document or nil */
static int
cursor_next (lua_State *L)
{
   cursor_t *c = check_cursor (L, "next");
   lua_settop (L, 1);
   if (!next_document (L, c, 1)) {
      lua_pushnil (L);
   }
   return 1;
}

/* cursor:to_array() -> { documents left } */
static int
cursor_to_array (lua_State *L)
{
   cursor_t *c = check_cursor (L, "to_array");
   lua_Integer n = 0;

   lua_settop (L, 1);
   lua_newtable (L);
   while (next_document (L, c, 1)) {
      lua_rawseti (L, 2, ++n);
   }
   return 1;
}

/* cursor:close(): kills the server cursor now. Idempotent. */
static int
cursor_close (lua_State *L)
{
   cursor_t *c = check_cursor (L, "close");
   if (c->cursor && !owned_here (L, c)) {
      return luaL_error (L,
                         "fw.mongo: a cursor can only be closed on the thread and "
                         "connection that opened it");
   }
   close_native (L, c);
   return 0;
}

static int
cursor_gc (lua_State *L)
{
   close_native (L, luaL_checkudata (L, 1, CURSOR_MT));
   return 0;
}

static int
cursor_tostring (lua_State *L)
{
   cursor_t *c = luaL_checkudata (L, 1, CURSOR_MT);
   lua_getiuservalue (L, 1, 1);
   lua_getiuservalue (L, 1, 2);
   lua_pushfstring (L, "fw.mongo.cursor(%s on %s.%s%s)", c->method, lua_tostring (L, -2),
                    lua_tostring (L, -1), c->cursor ? "" : ", closed");
   return 1;
}

void
fw_mongo_cursor_open (lua_State *L)
{
   static const luaL_Reg methods[] = {
      {"next", cursor_next},
      {"to_array", cursor_to_array},
      {"close", cursor_close},
      {NULL, NULL},
   };

   if (luaL_newmetatable (L, CURSOR_MT)) {
      luaL_newlib (L, methods);
      lua_setfield (L, -2, "__index");
      lua_pushcfunction (L, cursor_next);
      lua_setfield (L, -2, "__call");
      lua_pushcfunction (L, cursor_gc);
      lua_setfield (L, -2, "__gc");
      lua_pushcfunction (L, cursor_close);
      lua_setfield (L, -2, "__close");
      lua_pushcfunction (L, cursor_tostring);
      lua_setfield (L, -2, "__tostring");
      lua_pushboolean (L, 0);
      lua_setfield (L, -2, "__metatable");
   }
   lua_pop (L, 1);
   lua_newtable (L);
   lua_createtable (L, 0, 1);
   lua_pushliteral (L, "k");
   lua_setfield (L, -2, "__mode");
   lua_setmetatable (L, -2);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &cursors_key);
}

void
fw_mongo_cursor_push (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx)
{
   cursor_t *c = lua_newuserdatauv (L, sizeof *c, 3);

   memset (c, 0, sizeof *c);
   luaL_setmetatable (L, CURSOR_MT);
   /* From here the userdata's __gc owns the native cursor. */
   c->cursor = op->cursor;
   op->cursor = NULL;
   c->client = ctx->client;
   c->provider = ctx->provider;
   c->thread = pthread_self ();
   c->method = ctx->method;
   lua_pushstring (L, ctx->db);
   lua_setiuservalue (L, -2, 1);
   lua_pushstring (L, ctx->coll);
   lua_setiuservalue (L, -2, 2);
   lua_pushstring (L, ctx->connection);
   lua_setiuservalue (L, -2, 3);
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &cursors_key) == LUA_TTABLE) {
      lua_pushvalue (L, -2);
      lua_pushboolean (L, 1);
      lua_rawset (L, -3);
      registered_by = registered_by == NULL || registered_by == L ? L : MANY_STATES;
   }
   lua_pop (L, 1);
}

void
fw_mongo_lua_close_cursors (lua_State *L)
{
   if (registered_by == NULL || !lua_checkstack (L, 4)) {
      return;
   }
   if (registered_by == L) {
      registered_by = NULL; /* the walk below empties L's set */
   }
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &cursors_key) != LUA_TTABLE) {
      lua_pop (L, 1);
      return;
   }
   lua_pushnil (L);
   while (lua_next (L, -2)) {
      cursor_t *c;
      lua_pop (L, 1);
      /* Only cursors are put in this set (luaL_testudata could raise). */
      if ((c = lua_touserdata (L, -1))) {
         close_native (L, c);
      }
      /* Clearing a field while traversing is allowed. */
      lua_pushvalue (L, -1);
      lua_pushnil (L);
      lua_rawset (L, -4);
   }
   lua_pop (L, 1);
}
