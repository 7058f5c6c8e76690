/*
 * mongo_op.c - what every fw.mongo operation stands on: the provider of
 * clients attached to the state, the operation scratch (native resources a
 * raised error cannot leak), and the context with the handler's budget.
 * The lowest file of fw.mongo: it calls none of the others.
 */
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "lua_api/lua_call.h"
#include "lua_api/metrics_lua.h"
#include "mongo_lua-private.h"

#define OP_MT "flowwarden.mongo.op"

static const char provider_key = 'm';    /* registry key: its address */
static const char txn_key = 't';         /* exactly_once's transaction */
static const char txn_expires_key = 'e'; /* ... and when its lifetime ends */

void
fw_mongo_lua_join (lua_State *L, const fw_mongo_txn_t *txn)
{
   lua_pushlightuserdata (L, (void *) txn);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &txn_key);
}

void
fw_mongo_lua_txn_open (lua_State *L, int64_t expires_ns)
{
   lua_pushinteger (L, (lua_Integer) expires_ns);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &txn_expires_key);
}

int64_t
fw_mongo_txn_expires (lua_State *L)
{
   int64_t ns;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &txn_expires_key);
   ns = (int64_t) lua_tointeger (L, -1);
   lua_pop (L, 1);
   return ns;
}

const fw_mongo_txn_t *
fw_mongo_txn (lua_State *L)
{
   const fw_mongo_txn_t *t;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &txn_key);
   t = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return t;
}

void
fw_mongo_ctx_session (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx, bson_t *opts)
{
   const fw_mongo_txn_t *t = fw_mongo_txn (L);
   bson_error_t error;

   if (!t || t->client != ctx->client) {
      return;
   }
   if (!mongoc_client_session_append (t->session, opts, &error)) {
      fw_mongo_op_release (op);
      luaL_error (L, "fw.mongo: %s on %s.%s: cannot join the exactly-once transaction: %s",
                  ctx->method, ctx->db, ctx->coll, error.message);
   }
}

void
fw_mongo_set_provider (lua_State *L, const fw_mongo_provider_t *provider)
{
   lua_pushlightuserdata (L, (void *) provider);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &provider_key);
}

const fw_mongo_provider_t *
fw_mongo_provider (lua_State *L)
{
   const fw_mongo_provider_t *p;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &provider_key);
   p = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return p;
}

/* --- the operation scratch ----------------------------------------------- */

void
fw_mongo_op_release (fw_mongo_op_t *op)
{
   if (!op || op->released) {
      return;
   }
   op->released = true;
   bson_destroy (&op->filter);
   bson_destroy (&op->update);
   bson_destroy (&op->opts);
   bson_destroy (&op->reply);
   bson_destroy (&op->holder);
   bson_destroy (&op->sort);
   for (size_t i = 0; i < op->ndocs; i++) {
      bson_destroy (op->docs[i]);
   }
   bson_free (op->docs);
   op->docs = NULL;
   op->ndocs = 0;
   /* A find_one's cursor is exhausted or failed: no killCursors is sent. */
   mongoc_cursor_destroy (op->cursor);
   op->cursor = NULL;
   mongoc_bulk_operation_destroy (op->bulk);
   op->bulk = NULL;
   mongoc_find_and_modify_opts_destroy (op->fam);
   op->fam = NULL;
   mongoc_collection_destroy (op->coll);
   op->coll = NULL;
}

/* A bson_t asks for 128-byte alignment (libbson is built with
 * BSON_EXTRA_ALIGN), more than Lua gives a userdata block (16 bytes): the
 * block is over-allocated and the scratch placed at its first aligned
 * address. UBSan reported every access through a misaligned scratch. */
#define OP_ALIGN _Alignof(fw_mongo_op_t)

static fw_mongo_op_t *
op_in (void *block)
{
   return (fw_mongo_op_t *) (((uintptr_t) block + OP_ALIGN - 1) & ~(uintptr_t) (OP_ALIGN - 1));
}

static int
op_gc (lua_State *L)
{
   fw_mongo_op_release (op_in (luaL_checkudata (L, 1, OP_MT)));
   return 0;
}

fw_mongo_op_t *
fw_mongo_op_new (lua_State *L)
{
   fw_mongo_op_t *op = op_in (lua_newuserdatauv (L, sizeof *op + OP_ALIGN - 1, 0));

   memset (op, 0, sizeof *op);
   bson_init (&op->filter);
   bson_init (&op->update);
   bson_init (&op->opts);
   bson_init (&op->reply);
   bson_init (&op->holder);
   bson_init (&op->sort);
   /* Never fails: the metatable was registered when the module opened. */
   luaL_setmetatable (L, OP_MT);
   return op;
}

void
fw_mongo_op_open (lua_State *L)
{
   if (luaL_newmetatable (L, OP_MT)) {
      lua_pushcfunction (L, op_gc);
      lua_setfield (L, -2, "__gc");
   }
   lua_pop (L, 1);
}

/* --- the operation context ----------------------------------------------- */

/* Raises a Mongo.* error of type with empty labels and write_errors. */
int
fw_mongo_raise_plain (lua_State *L, const char *type, const char *msg)
{
   lua_createtable (L, 0, 2);
   lua_newtable (L);
   lua_setfield (L, -2, "labels");
   lua_newtable (L);
   lua_setfield (L, -2, "write_errors");
   return fw_lua_raise_typed (L, type, -1, "%s", msg);
}

void
fw_mongo_ctx_budget (lua_State *L, fw_mongo_ctx_t *ctx, const char *method, const char *db,
                     const char *coll, const char *connection)
{
   fw_lua_call_t *call;

   memset (ctx, 0, sizeof *ctx);
   ctx->method = method;
   ctx->db = db;
   ctx->coll = coll;
   ctx->connection = connection;
   ctx->budget_ms = fw_lua_call_budget_ms (L, "fw.mongo");
   if (ctx->budget_ms == 0) {
      lua_pushfstring (L, "fw.mongo: %s on %s.%s: the handler's time budget is spent", method, db,
                       coll);
      fw_mongo_raise_plain (L, "Mongo.Timeout", lua_tostring (L, -1));
   }
   if (ctx->budget_ms > 0 && (call = fw_lua_call_get (L))) {
      int64_t margin = fw_lua_call_io_margin_ms (ctx->budget_ms);
      ctx->deadline_ns = __atomic_load_n (&call->deadline_ns, __ATOMIC_ACQUIRE);
      if (ctx->deadline_ns) {
         ctx->deadline_ns -= margin * 1000000;
      }
      ctx->budget_ms -= margin;
   }
   ctx->provider = fw_mongo_provider (L);
   if (!ctx->provider || !ctx->provider->client_for) {
      luaL_error (L, "fw.mongo: no MongoDB connection is available in this state");
   }
   if ((ctx->metrics = fw_metrics_lua_stream (L))) {
      ctx->started_ns = fw_mono_ns ();
   }
}

void
fw_mongo_ctx_done (const fw_mongo_ctx_t *ctx, fw_metrics_io_result_t result)
{
   if (ctx->metrics) {
      fw_stream_metrics_io (ctx->metrics, FW_METRICS_IO_MONGO, result,
                            fw_mono_ns () - ctx->started_ns);
   }
}

void
fw_mongo_ctx_collection (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx, bool max_time)
{
   op->coll = mongoc_client_get_collection (ctx->client, ctx->db, ctx->coll);
   if (!op->coll) {
      fw_mongo_op_release (op);
      luaL_error (L, "fw.mongo: %s on %s.%s: cannot open the collection", ctx->method, ctx->db,
                  ctx->coll);
   }
   if (max_time && ctx->budget_ms > 0 &&
       !BSON_APPEND_INT64 (&op->opts, "maxTimeMS", ctx->budget_ms)) {
      fw_mongo_op_release (op);
      luaL_error (L, "fw.mongo: %s: cannot build the command options", ctx->method);
   }
   fw_mongo_ctx_session (L, op, ctx, &op->opts);
}
