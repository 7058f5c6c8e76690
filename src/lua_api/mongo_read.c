/*
 * mongo_read.c - fw.mongo's read methods: find_one, find, aggregate and
 * count (see mongo_lua.c for the shared machinery, mongo_cursor.c for what
 * find and aggregate return).
 */
#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/io_deadline.h"
#include "mongo_lua-private.h"

static const char *const find_one_opts[] = {"projection", "sort", "skip", NULL};
static const char *const find_opts[] = {"projection", "sort", "skip", "limit", "batch_size", NULL};
static const char *const aggregate_opts[] = {"batch_size", NULL};
static const char *const count_opts[] = {"skip", "limit", NULL};

/* Appends projection, sort, skip, limit and batchSize from the options at
 * idx to op->opts. */
static void
read_opts (lua_State *L, fw_mongo_op_t *op, int idx, const char *method)
{
   int64_t n;
   bool ok = true;

   if (fw_mongo_opt_document (L, op, idx, method, "projection", &op->update)) {
      ok = ok && BSON_APPEND_DOCUMENT (&op->opts, "projection", &op->update);
   }
   if (fw_mongo_opt_sort (L, op, idx, method, &op->sort)) {
      ok = ok && BSON_APPEND_DOCUMENT (&op->opts, "sort", &op->sort);
   }
   if ((n = fw_mongo_opt_count (L, idx, method, "skip", 0)) > 0) {
      ok = ok && BSON_APPEND_INT64 (&op->opts, "skip", n);
   }
   if ((n = fw_mongo_opt_count (L, idx, method, "limit", 0)) > 0) {
      ok = ok && BSON_APPEND_INT64 (&op->opts, "limit", n);
   }
   if ((n = fw_mongo_opt_count (L, idx, method, "batch_size", 1)) > 0) {
      ok = ok &&
           BSON_APPEND_INT32 (&op->opts, "batchSize", n > INT32_MAX ? INT32_MAX : (int32_t) n);
   }
   if (!ok) {
      fw_mongo_op_release (op);
      luaL_error (L, "%s: the options are too large", method);
   }
}

/* coll:find_one(filter [, opts]) -> document or nil */
int
fw_mongo_find_one (lua_State *L)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   const bson_t *doc, *reply;
   bson_error_t error;
   fw_error_t err;
   bool got;

   fw_mongo_check_handle (L, "find_one", 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "find_one", db, coll, conn);
   fw_mongo_check_opts (L, 3, "find_one", find_one_opts);
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, "find_one", "filter", &op->filter);
   read_opts (L, op, 3, "find_one");
   fw_mongo_ctx_collection (L, op, &ctx, true);
   if (!BSON_APPEND_INT64 (&op->opts, "limit", 1) ||
       !BSON_APPEND_BOOL (&op->opts, "singleBatch", true)) {
      fw_mongo_op_release (op);
      return luaL_error (L, "find_one: the options are too large");
   }
   op->cursor = mongoc_collection_find_with_opts (op->coll, &op->filter, &op->opts, NULL);
   fw_io_deadline_set (ctx.deadline_ns);
   got = op->cursor && mongoc_cursor_next (op->cursor, &doc);
   fw_io_deadline_set (0);
   if (!op->cursor) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: find_one on %s.%s: cannot create the cursor", db, coll);
   }
   if (!got) {
      if (mongoc_cursor_error_document (op->cursor, &error, &reply)) {
         return fw_mongo_raise (L, op, &ctx, &error, reply);
      }
      fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
      fw_mongo_op_release (op);
      lua_pushnil (L);
      return 1;
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   if (!fw_bson_lua_push_document (L, doc, NULL, &err)) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: find_one on %s.%s: %s", db, coll, err.message);
   }
   fw_mongo_op_release (op);
   return 1;
}

/* find and aggregate: their argument (a filter document or a pipeline
 * array) and options, then a cursor on them. */
static int
open_cursor (lua_State *L, const char *method, bool pipeline)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;

   fw_mongo_check_handle (L, method, 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, method, db, coll, conn);
   fw_mongo_check_opts (L, 3, method, pipeline ? aggregate_opts : find_opts);
   op = fw_mongo_op_new (L);
   if (pipeline) {
      fw_mongo_arg_array (L, op, 2, method, "pipeline", &op->filter);
   } else {
      fw_mongo_arg_document (L, op, 2, method, "filter", &op->filter);
   }
   read_opts (L, op, 3, method);
   fw_mongo_ctx_collection (L, op, &ctx, true);
   op->cursor = pipeline
                   ? mongoc_collection_aggregate (op->coll, MONGOC_QUERY_NONE, &op->filter,
                                                  &op->opts, NULL)
                   : mongoc_collection_find_with_opts (op->coll, &op->filter, &op->opts, NULL);
   if (!op->cursor) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: %s on %s.%s: cannot create the cursor", method, db, coll);
   }
   fw_mongo_cursor_push (L, op, &ctx);
   fw_mongo_op_release (op);
   return 1;
}

/* coll:find(filter [, opts]) -> cursor */
int
fw_mongo_find (lua_State *L)
{
   return open_cursor (L, "find", false);
}

/* coll:aggregate(pipeline [, opts]) -> cursor */
int
fw_mongo_aggregate (lua_State *L)
{
   return open_cursor (L, "aggregate", true);
}

/* coll:count(filter [, opts]) -> integer */
int
fw_mongo_count (lua_State *L)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   int64_t n;

   fw_mongo_check_handle (L, "count", 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "count", db, coll, conn);
   fw_mongo_check_opts (L, 3, "count", count_opts);
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, "count", "filter", &op->filter);
   read_opts (L, op, 3, "count");
   fw_mongo_ctx_collection (L, op, &ctx, true);
   fw_io_deadline_set (ctx.deadline_ns);
   n = mongoc_collection_count_documents (op->coll, &op->filter, &op->opts, NULL, &op->reply,
                                          &error);
   fw_io_deadline_set (0);
   if (n < 0) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   fw_mongo_op_release (op);
   lua_pushinteger (L, (lua_Integer) n);
   return 1;
}
