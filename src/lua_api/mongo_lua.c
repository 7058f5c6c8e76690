/*
 * mongo_lua.c - fw.mongo: the module, collection handles, the client an
 * operation starts with, and argument and option checking. The operation
 * scratch and its budget are in mongo_op.c. Reads are in mongo_read.c, writes in
 * mongo_write.c, cursors in mongo_cursor.c, error typing in mongo_errors.c.
 */
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/io_deadline.h"
#include "flowwarden/suggest.h"
#include "lua_api/lua_call.h"
#include "lua_api/metrics_lua.h"
#include "mongo_lua-private.h"

#define HANDLE_MT "flowwarden.mongo.collection"

/* --- provider ------------------------------------------------------------ */

void
fw_mongo_lua_attach (lua_State *L, const fw_mongo_provider_t *provider)
{
   if (provider != fw_mongo_provider (L)) {
      /* The clients go with the provider: close what still uses them. */
      fw_mongo_lua_close_cursors (L);
   }
   fw_mongo_set_provider (L, provider);
}

/* --- the operation's client ------------------------------------------------ */

void
fw_mongo_ctx_begin (lua_State *L, fw_mongo_ctx_t *ctx, const char *method, const char *db,
                    const char *coll, const char *connection)
{
   fw_error_t err;

   fw_mongo_ctx_budget (L, ctx, method, db, coll, connection);
   err.domain = 0;
   err.message[0] = '\0';
   ctx->client = ctx->provider->client_for (ctx->provider->ud, connection, &err);
   if (!ctx->client) {
      if (err.domain == FW_ERROR_INVALID || !err.domain) {
         fw_mongo_arg_error (L, "%s: %s", method,
                             err.message[0] ? err.message : "unknown connection");
      }
      lua_pushfstring (L, "fw.mongo: %s on %s.%s: connection \"%s\": %s", method, db, coll,
                       connection, err.message);
      fw_mongo_raise_plain (L, "Mongo.Network", lua_tostring (L, -1));
   }
   const fw_mongo_txn_t *txn = fw_mongo_txn (L);
   if (txn && txn->sink) {
      /* exactly once into PostgreSQL: a read changes nothing, a write could
       * not commit with the SQL transaction. */
      static const char *const reads[] = {"find_one", "find", "aggregate", "count", NULL};
      for (int i = 0; reads[i]; i++) {
         if (strcmp (method, reads[i]) == 0) {
            return;
         }
      }
      fw_mongo_arg_error (L,
                          "fw.mongo: %s on %s.%s: stream \"%s\" has exactly_once = { "
                          "connection = \"%s\" }, and a MongoDB write cannot join its "
                          "PostgreSQL transaction: write there from another stream, or drop "
                          "exactly_once",
                          method, db, coll, txn->stream ? txn->stream : "?", txn->sink);
   }
   if (txn && ctx->client != txn->client && txn->connection) {
      fw_mongo_arg_error (L,
                          "fw.mongo: %s on %s.%s: stream \"%s\" has exactly_once = { "
                          "connection = \"%s\" }, and connection \"%s\" cannot join its "
                          "transaction (only connection \"%s\" can): write there from another "
                          "stream, or drop exactly_once",
                          method, db, coll, txn->stream ? txn->stream : "?", txn->connection,
                          connection, txn->connection);
   }
   if (txn && ctx->client != txn->client) {
      fw_mongo_arg_error (L,
                          "fw.mongo: %s on %s.%s: stream \"%s\" has exactly_once = true, and "
                          "connection \"%s\" cannot join its transaction (only the stream's own "
                          "MongoDB client can): write there from another stream, or drop "
                          "exactly_once",
                          method, db, coll, txn->stream ? txn->stream : "?", connection);
   }
}

/* --- collection handles --------------------------------------------------- */

static const char *const collection_opts[] = {"connection", NULL};

/* fw.mongo.collection(database, name [, { connection = "..." }]) */
static int
mongo_collection (lua_State *L)
{
   size_t len;

   lua_settop (L, 3);
   if (lua_type (L, 1) != LUA_TSTRING) {
      return fw_mongo_arg_error (L, "fw.mongo.collection: database must be a string, got %s",
                                 luaL_typename (L, 1));
   }
   if (lua_type (L, 2) != LUA_TSTRING) {
      return fw_mongo_arg_error (L, "fw.mongo.collection: name must be a string, got %s",
                                 luaL_typename (L, 2));
   }
   if (lua_rawlen (L, 1) == 0 || strlen (lua_tostring (L, 1)) != lua_rawlen (L, 1) ||
       strchr (lua_tostring (L, 1), '.')) {
      return fw_mongo_arg_error (L,
                                 "fw.mongo.collection: database must be a non-empty name without "
                                 "dots or NUL bytes");
   }
   if (lua_rawlen (L, 2) == 0 || strlen (lua_tostring (L, 2)) != lua_rawlen (L, 2)) {
      return fw_mongo_arg_error (L,
                                 "fw.mongo.collection: name must be a non-empty string without NUL "
                                 "bytes");
   }
   fw_mongo_check_opts (L, 3, "fw.mongo.collection", collection_opts);
   if (lua_istable (L, 3) && lua_getfield (L, 3, "connection") != LUA_TNIL) {
      if (lua_type (L, -1) != LUA_TSTRING || !lua_tolstring (L, -1, &len) || len == 0) {
         return fw_mongo_arg_error (L,
                                    "fw.mongo.collection: connection must be a non-empty string, "
                                    "got %s",
                                    luaL_typename (L, -1));
      }
   } else {
      lua_settop (L, 3);
      lua_pushliteral (L, "default");
   }
   lua_newuserdatauv (L, 0, 3);
   lua_pushvalue (L, 1);
   lua_setiuservalue (L, -2, 1);
   lua_pushvalue (L, 2);
   lua_setiuservalue (L, -2, 2);
   lua_pushvalue (L, -2);
   lua_setiuservalue (L, -2, 3);
   luaL_setmetatable (L, HANDLE_MT);
   return 1;
}

void
fw_mongo_check_handle (lua_State *L, const char *method, int nargs, const char **db,
                       const char **coll, const char **connection)
{
   if (!luaL_testudata (L, 1, HANDLE_MT)) {
      fw_mongo_arg_error (L, "%s: call it as a method: coll:%s(...)", method, method);
   }
   lua_settop (L, nargs + 1);
   lua_getiuservalue (L, 1, 1);
   lua_getiuservalue (L, 1, 2);
   lua_getiuservalue (L, 1, 3);
   *db = lua_tostring (L, -3);
   *coll = lua_tostring (L, -2);
   *connection = lua_tostring (L, -1);
}

static int
handle_tostring (lua_State *L)
{
   luaL_checkudata (L, 1, HANDLE_MT);
   lua_getiuservalue (L, 1, 1);
   lua_getiuservalue (L, 1, 2);
   lua_getiuservalue (L, 1, 3);
   lua_pushfstring (L, "fw.mongo.collection(%s.%s, connection %s)", lua_tostring (L, -3),
                    lua_tostring (L, -2), lua_tostring (L, -1));
   return 1;
}

/* --- arguments and options ------------------------------------------------ */

bson_type_t
fw_mongo_arg_value (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, const char *path,
                    bson_iter_t *iter)
{
   fw_error_t err;
   int t = lua_type (L, idx);

   if (t != LUA_TTABLE && t != LUA_TUSERDATA) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must be a table, got %s", method, path,
                          luaL_typename (L, idx));
   }
   bson_reinit (&op->holder);
   if (!fw_bson_lua_append (L, idx, &op->holder, "v", 1, path, &err)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s", method, err.message);
   }
   if (!bson_iter_init_find (iter, &op->holder, "v")) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s could not be converted", method, path);
   }
   return bson_iter_type (iter);
}

/* Copies the document or array iter points at into out (empty). */
static bool
copy_sub (const bson_iter_t *iter, bson_t *out)
{
   const uint8_t *data;
   uint32_t len;
   bson_t sub;

   if (BSON_ITER_HOLDS_DOCUMENT (iter)) {
      bson_iter_document (iter, &len, &data);
   } else {
      bson_iter_array (iter, &len, &data);
   }
   return bson_init_static (&sub, data, len) && bson_concat (out, &sub);
}

void
fw_mongo_arg_copy_document (lua_State *L, fw_mongo_op_t *op, const bson_iter_t *iter,
                            const char *method, const char *path, bson_t *out)
{
   if (!copy_sub (iter, out)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s is too large", method, path);
   }
}

bool
fw_mongo_arg_table (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, const char *path,
                    bson_t *out)
{
   fw_error_t err;
   bool is_array = false;

   if (!fw_bson_lua_to_document (L, idx, path, out, &is_array, &err)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s", method, err.message);
   }
   return is_array;
}

void
fw_mongo_arg_document (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                       const char *path, bson_t *out)
{
   bson_iter_t it;
   bson_type_t t;

   if (lua_type (L, idx) == LUA_TTABLE) {
      /* Straight into out: no holder, no copy (the common case). */
      t = fw_mongo_arg_table (L, op, idx, method, path, out) ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT;
   } else {
      t = fw_mongo_arg_value (L, op, idx, method, path, &it);
   }
   if (t != BSON_TYPE_DOCUMENT) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must be a document, not an array", method, path);
   }
   if (lua_type (L, idx) != LUA_TTABLE) {
      fw_mongo_arg_copy_document (L, op, &it, method, path, out);
   }
}

void
fw_mongo_arg_array (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, const char *path,
                    bson_t *out)
{
   bson_iter_t it;
   bson_type_t t = fw_mongo_arg_value (L, op, idx, method, path, &it);

   if (t == BSON_TYPE_DOCUMENT && bson_iter_init (&it, &op->holder) && bson_iter_next (&it)) {
      /* {} converts to an empty document: take it as an empty array. */
      bson_iter_t inner;
      if (bson_iter_recurse (&it, &inner) && !bson_iter_next (&inner)) {
         return;
      }
   }
   if (t != BSON_TYPE_ARRAY) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must be an array", method, path);
   }
   if (!copy_sub (&it, out)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s is too large", method, path);
   }
}

void
fw_mongo_check_opts (lua_State *L, int idx, const char *method, const char *const *allowed)
{
   if (lua_isnoneornil (L, idx)) {
      return;
   }
   if (!lua_istable (L, idx)) {
      fw_mongo_arg_error (L, "%s: options must be a table, got %s", method, luaL_typename (L, idx));
   }
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      const char *key, *hint;
      const char *const *a;

      lua_pop (L, 1);
      if (lua_type (L, -1) != LUA_TSTRING) {
         fw_mongo_arg_error (L, "%s: option names must be strings, got %s", method,
                             luaL_typename (L, -1));
      }
      key = lua_tostring (L, -1);
      /* The first byte before strcmp, and no further once found: this runs
       * for every option of every operation (a bulk write's each). */
      for (a = allowed; *a && ((*a)[0] != key[0] || strcmp (*a, key) != 0); a++) {
      }
      if (*a) {
         continue;
      }
      if ((hint = fw_suggest (key, allowed))) {
         fw_mongo_arg_error (L, "%s: unknown option \"%s\" (did you mean \"%s\"?)", method, key,
                             hint);
      }
      if (!allowed[0]) {
         fw_mongo_arg_error (L, "%s: unknown option \"%s\" (%s takes no options)", method, key,
                             method);
      }
      {
         luaL_Buffer b;
         luaL_buffinit (L, &b);
         for (const char *const *a = allowed; *a; a++) {
            if (a != allowed) {
               luaL_addstring (&b, ", ");
            }
            luaL_addstring (&b, *a);
         }
         luaL_pushresult (&b);
      }
      fw_mongo_arg_error (L, "%s: unknown option \"%s\" (the options are %s)", method, key,
                          lua_tostring (L, -1));
   }
}

/* Pushes option name of the options at idx (nil when absent or no options). */
static int
push_opt (lua_State *L, int idx, const char *name)
{
   if (!lua_istable (L, idx)) {
      lua_pushnil (L);
      return LUA_TNIL;
   }
   return lua_getfield (L, idx, name);
}

bool
fw_mongo_opt_bool (lua_State *L, int idx, const char *method, const char *name, bool dflt)
{
   int t = push_opt (L, idx, name);
   bool v = dflt;

   if (t == LUA_TBOOLEAN) {
      v = lua_toboolean (L, -1);
   } else if (t != LUA_TNIL) {
      fw_mongo_arg_error (L, "%s: %s must be a boolean, got %s", method, name,
                          luaL_typename (L, -1));
   }
   lua_pop (L, 1);
   return v;
}

int64_t
fw_mongo_opt_count (lua_State *L, int idx, const char *method, const char *name, int64_t min)
{
   int t = push_opt (L, idx, name);
   int64_t v = -1;

   if (t != LUA_TNIL) {
      if (!lua_isinteger (L, -1) || lua_tointeger (L, -1) < min) {
         fw_mongo_arg_error (L, "%s: %s must be an integer >= %d, got %s", method, name, (int) min,
                             lua_type (L, -1) == LUA_TNUMBER ? lua_tostring (L, -1)
                                                             : luaL_typename (L, -1));
      }
      v = lua_tointeger (L, -1);
   }
   lua_pop (L, 1);
   return v;
}

bool
fw_mongo_opt_document (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                       const char *name, bson_t *out)
{
   if (push_opt (L, idx, name) == LUA_TNIL) {
      lua_pop (L, 1);
      return false;
   }
   fw_mongo_arg_document (L, op, -1, method, name, out);
   lua_pop (L, 1);
   return true;
}

/* True when the table at idx is { {key, direction}, ... }. */
static bool
is_pair_list (lua_State *L, int idx)
{
   bool yes;
   if (!lua_istable (L, idx) || lua_getmetatable (L, idx)) {
      if (lua_istable (L, idx)) {
         lua_pop (L, 1);
      }
      return false;
   }
   yes = lua_rawgeti (L, idx, 1) == LUA_TTABLE;
   lua_pop (L, 1);
   return yes;
}

bool
fw_mongo_opt_sort (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, bson_t *out)
{
   fw_error_t err;
   int sidx, nkeys = 0;

   if (push_opt (L, idx, "sort") == LUA_TNIL) {
      lua_pop (L, 1);
      return false;
   }
   sidx = lua_gettop (L);
   if (is_pair_list (L, sidx)) {
      lua_Integer n = (lua_Integer) lua_rawlen (L, sidx);
      for (lua_Integer i = 1; i <= n; i++) {
         lua_rawgeti (L, sidx, i);
         if (!lua_istable (L, -1) || lua_rawgeti (L, -1, 1) != LUA_TSTRING ||
             lua_rawgeti (L, -2, 2) == LUA_TNIL) {
            fw_mongo_op_release (op);
            fw_mongo_arg_error (L, "%s: sort[%d] must be a pair such as { \"total\", -1 }", method,
                                (int) i);
         }
         if (!fw_bson_lua_append (L, -1, out, lua_tostring (L, -2), (int) lua_rawlen (L, -2),
                                  "sort", &err)) {
            fw_mongo_op_release (op);
            fw_mongo_arg_error (L, "%s: %s", method, err.message);
         }
         lua_pop (L, 3);
      }
      lua_pop (L, 1);
      return true;
   }
   if (lua_istable (L, sidx) && !lua_getmetatable (L, sidx)) {
      lua_pushnil (L);
      while (lua_next (L, sidx)) {
         lua_pop (L, 1);
         nkeys++;
      }
      if (nkeys > 1) {
         fw_mongo_op_release (op);
         fw_mongo_arg_error (
            L,
            "%s: sort has several keys but a Lua table keeps no order: write it as "
            "pairs, e.g. { { \"a\", 1 }, { \"b\", -1 } }",
            method);
      }
   } else if (lua_istable (L, sidx)) {
      lua_pop (L, 1); /* the metatable: a document read from BSON keeps its order */
   }
   fw_mongo_arg_document (L, op, sidx, method, "sort", out);
   lua_pop (L, 1);
   return true;
}

/* --- the module ------------------------------------------------------------ */

static const luaL_Reg handle_methods[] = {
   {"find_one", fw_mongo_find_one},       {"find", fw_mongo_find},
   {"aggregate", fw_mongo_aggregate},     {"count", fw_mongo_count},
   {"insert_one", fw_mongo_insert_one},   {"insert_many", fw_mongo_insert_many},
   {"update_one", fw_mongo_update_one},   {"update_many", fw_mongo_update_many},
   {"replace_one", fw_mongo_replace_one}, {"delete_one", fw_mongo_delete_one},
   {"delete_many", fw_mongo_delete_many}, {"find_one_and_update", fw_mongo_find_one_and_update},
   {"bulk_write", fw_mongo_bulk_write},   {NULL, NULL},
};

void
fw_mongo_lua_open (lua_State *L, int module_idx)
{
   module_idx = lua_absindex (L, module_idx);
   fw_mongo_op_open (L);
   if (luaL_newmetatable (L, HANDLE_MT)) {
      luaL_newlib (L, handle_methods);
      lua_setfield (L, -2, "__index");
      lua_pushcfunction (L, handle_tostring);
      lua_setfield (L, -2, "__tostring");
      lua_pushliteral (L, "flowwarden.mongo.collection");
      lua_setfield (L, -2, "__name");
      lua_pushboolean (L, 0);
      lua_setfield (L, -2, "__metatable");
   }
   lua_pop (L, 1);
   fw_mongo_cursor_open (L);
   lua_createtable (L, 0, 1);
   lua_pushcfunction (L, mongo_collection);
   lua_setfield (L, -2, "collection");
   lua_setfield (L, module_idx, "mongo");
}
