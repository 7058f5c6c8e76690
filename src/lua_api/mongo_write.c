/*
 * mongo_write.c - fw.mongo's write methods: insert, update, replace,
 * delete, find_one_and_update and bulk_write (see mongo_lua.c for the
 * shared machinery and docs/lua-api.md for what scripts see).
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_check.h"
#include "bson/bson_lua.h"
#include "flowwarden/io_deadline.h"
#include "flowwarden/suggest.h"
#include "mongo_lua-private.h"

static const char *const no_opts[] = {NULL};
static const char *const insert_many_opts[] = {"ordered", NULL};
static const char *const update_opts[] = {"upsert", NULL};
static const char *const fam_opts[] = {"upsert", "return_document", "sort", "projection", NULL};
static const char *const bulk_opts[] = {"ordered", NULL};

/* --- helpers -------------------------------------------------------------- */

/* Whether doc's top-level keys all start with '$' (all_ops) and whether any
 * does (any_op); an empty document has neither. */
static void
scan_operators (const bson_t *doc, bool *all_ops, bool *any_op)
{
   bson_iter_t it;
   bool any_key = false;

   *all_ops = true;
   *any_op = false;
   if (bson_iter_init (&it, doc)) {
      while (bson_iter_next (&it)) {
         bool op = bson_iter_key (&it)[0] == '$';
         any_key = true;
         *any_op = *any_op || op;
         *all_ops = *all_ops && op;
      }
   }
   *all_ops = *all_ops && any_key;
}

/* Raises "<method>: <path>... <problem>" when out's keys or strings are not
 * what a document to write may hold (bson_check.h): flowwarden checks them
 * itself, once, and sends its documents, updates and replacements with
 * libmongoc's own validation off ("validate": false), which walked each
 * document again and, with Debian's libbson 1.23, let a string that is not
 * UTF-8 through (CDRIVER-4448). */
static void
check_text (lua_State *L, fw_mongo_op_t *op, const bson_t *out, const char *method,
            const char *path)
{
   char where[512];
   fw_bson_text_t t = fw_bson_check_text (out, path, where, sizeof where);

   if (t != FW_BSON_TEXT_OK) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s %s", method, where, fw_bson_text_problem (t));
   }
}

/* Converts the update at idx into out: a non-empty document of $-operators. */
static void
arg_update (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, const char *path,
            bson_t *out)
{
   bson_iter_t it;
   bool all_ops, any_op;
   int t = lua_type (L, idx);

   /* Converted once: a table straight into out, a view through the holder. */
   if (t == LUA_TTABLE ? fw_mongo_arg_table (L, op, idx, method, path, out)
                       : (t != LUA_TUSERDATA || fw_mongo_arg_value (L, op, idx, method, path,
                                                                    &it) != BSON_TYPE_DOCUMENT)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must be a table of $-operators or use replace_one", method,
                          path);
   }
   if (t != LUA_TTABLE) {
      fw_mongo_arg_copy_document (L, op, &it, method, path, out);
   }
   scan_operators (out, &all_ops, &any_op);
   if (!all_ops) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must be a table of $-operators or use replace_one", method,
                          path);
   }
   check_text (L, op, out, method, path);
}

/* Converts the replacement at idx into out: a document without $-operators. */
static void
arg_replacement (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, const char *path,
                 bson_t *out)
{
   bool all_ops, any_op;

   fw_mongo_arg_document (L, op, idx, method, path, out);
   scan_operators (out, &all_ops, &any_op);
   if (any_op) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s: %s must not contain $-operators", method, path);
   }
   check_text (L, op, out, method, path);
}

/* Appends to out an _id (a new ObjectId, first, as drivers do) unless doc
 * has one, then doc's fields. */
static bool
copy_with_id (const bson_t *doc, bson_t *out)
{
   bson_iter_t it;
   bson_oid_t oid;

   if (!bson_iter_init_find (&it, doc, "_id")) {
      bson_oid_init (&oid, NULL);
      if (!BSON_APPEND_OID (out, "_id", &oid)) {
         return false;
      }
   }
   return bson_concat (out, doc);
}

/* Pushes the value of key in doc (nil if absent). */
static void
push_field (lua_State *L, fw_mongo_op_t *op, const bson_t *doc, const char *key)
{
   bson_iter_t it;
   fw_error_t err;

   if (!doc || !bson_iter_init_find (&it, doc, key)) {
      lua_pushnil (L);
   } else if (!fw_bson_lua_push_value (L, &it, key, &err)) {
      fw_mongo_op_release (op);
      luaL_error (L, "fw.mongo: %s", err.message);
   }
}

/* The integer at key of doc, 0 if absent. */
static lua_Integer
reply_count (const bson_t *reply, const char *key)
{
   bson_iter_t it;
   if (bson_iter_init_find (&it, reply, key) && BSON_ITER_HOLDS_NUMBER (&it)) {
      return (lua_Integer) bson_iter_as_int64 (&it);
   }
   return 0;
}

/* Runs a libmongoc write under the operation's deadline. */
#define RUN_BOUNDED(ctx, ok, call)            \
   do {                                       \
      fw_io_deadline_set ((ctx).deadline_ns); \
      ok = (call);                            \
      fw_io_deadline_set (0);                 \
   } while (0)

/* --- insert --------------------------------------------------------------- */

int
fw_mongo_insert_one (lua_State *L)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   bool ok;

   fw_mongo_check_handle (L, "insert_one", 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "insert_one", db, coll, conn);
   fw_mongo_check_opts (L, 3, "insert_one", no_opts);
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, "insert_one", "document", &op->update);
   check_text (L, op, &op->update, "insert_one", "document");
   if (!copy_with_id (&op->update, &op->filter)) {
      fw_mongo_op_release (op);
      return fw_mongo_arg_error (L, "insert_one: document is too large");
   }
   fw_mongo_ctx_collection (L, op, &ctx, true);
   if (!BSON_APPEND_BOOL (&op->opts, "validate", false)) { /* checked: check_text */
      fw_mongo_op_release (op);
      return luaL_error (L, "insert_one: cannot build the options");
   }
   RUN_BOUNDED (
      ctx, ok, mongoc_collection_insert_one (op->coll, &op->filter, &op->opts, &op->reply, &error));
   if (!ok) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   lua_createtable (L, 0, 1);
   push_field (L, op, &op->filter, "_id");
   lua_setfield (L, -2, "inserted_id");
   fw_mongo_op_release (op);
   return 1;
}

/* Copies insert_many's documents (the array at it, recursed into already
 * checked) into op->docs, each with an _id, and checks each one's text; raises
 * (op released) on an empty array or a bad document. */
static void
take_docs (lua_State *L, fw_mongo_op_t *op, const bson_iter_t *it)
{
   bson_iter_t arr;
   size_t n = 0;

   bson_iter_recurse (it, &arr);
   while (bson_iter_next (&arr)) {
      n++;
   }
   if (n == 0) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "insert_many: docs must be a non-empty array");
      return;
   }
   op->docs = bson_malloc0 (n * sizeof *op->docs);
   bson_iter_recurse (it, &arr);
   while (bson_iter_next (&arr)) {
      const uint8_t *data;
      uint32_t len;
      bson_t sub;

      /* Releasing op resets ndocs: take the position first. */
      int pos = (int) op->ndocs + 1;
      if (!BSON_ITER_HOLDS_DOCUMENT (&arr)) {
         fw_mongo_op_release (op);
         fw_mongo_arg_error (L, "insert_many: docs[%d] must be a document", pos);
         return;
      }
      bson_iter_document (&arr, &len, &data);
      op->docs[op->ndocs] = bson_new ();
      op->ndocs++;
      if (!bson_init_static (&sub, data, len) || !copy_with_id (&sub, op->docs[op->ndocs - 1])) {
         fw_mongo_op_release (op);
         fw_mongo_arg_error (L, "insert_many: docs[%d] is too large", pos);
         return;
      }
      if (fw_bson_check_text (&sub, NULL, NULL, 0) != FW_BSON_TEXT_OK) {
         char path[32];
         snprintf (path, sizeof path, "docs[%d]", pos);
         check_text (L, op, &sub, "insert_many", path); /* raises, naming the element */
      }
   }
}

int
fw_mongo_insert_many (lua_State *L)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   bson_iter_t it, arr;
   int t = lua_type (L, 2);
   bool ok;

   fw_mongo_check_handle (L, "insert_many", 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "insert_many", db, coll, conn);
   fw_mongo_check_opts (L, 3, "insert_many", insert_many_opts);
   ok = fw_mongo_opt_bool (L, 3, "insert_many", "ordered", true);
   if (t != LUA_TTABLE && t != LUA_TUSERDATA) {
      return fw_mongo_arg_error (L, "insert_many: docs must be a non-empty array, got %s",
                                 luaL_typename (L, 2));
   }
   op = fw_mongo_op_new (L);
   /* validate = false: each document is checked by check_text. */
   if (!BSON_APPEND_BOOL (&op->opts, "ordered", ok) ||
       !BSON_APPEND_BOOL (&op->opts, "validate", false)) {
      fw_mongo_op_release (op);
      return luaL_error (L, "insert_many: cannot build the options");
   }
   if (fw_mongo_arg_value (L, op, 2, "insert_many", "docs", &it) != BSON_TYPE_ARRAY ||
       !bson_iter_recurse (&it, &arr)) {
      fw_mongo_op_release (op);
      return fw_mongo_arg_error (L, "insert_many: docs must be a non-empty array");
   }
   take_docs (L, op, &it);
   fw_mongo_ctx_collection (L, op, &ctx, true);
   RUN_BOUNDED (ctx, ok,
                mongoc_collection_insert_many (op->coll, (const bson_t **) op->docs, op->ndocs,
                                               &op->opts, &op->reply, &error));
   if (!ok) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   lua_createtable (L, 0, 1);
   lua_createtable (L, (int) op->ndocs, 0);
   for (size_t i = 0; i < op->ndocs; i++) {
      push_field (L, op, op->docs[i], "_id");
      lua_rawseti (L, -2, (lua_Integer) i + 1);
   }
   lua_setfield (L, -2, "inserted_ids");
   fw_mongo_op_release (op);
   return 1;
}

/* --- update, replace, delete ------------------------------------------------ */

typedef enum { UPDATE_ONE, UPDATE_MANY, REPLACE_ONE } update_kind_t;

static int
update (lua_State *L, const char *method, update_kind_t kind)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   bool ok, upsert;

   fw_mongo_check_handle (L, method, 3, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, method, db, coll, conn);
   fw_mongo_check_opts (L, 4, method, update_opts);
   upsert = fw_mongo_opt_bool (L, 4, method, "upsert", false);
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, method, "filter", &op->filter);
   if (kind == REPLACE_ONE) {
      arg_replacement (L, op, 3, method, "replacement", &op->update);
   } else {
      arg_update (L, op, 3, method, "update", &op->update);
   }
   /* libmongoc 1.23 puts unknown update options into the update statement,
    * where the server rejects maxTimeMS: the socket deadline bounds it. */
   fw_mongo_ctx_collection (L, op, &ctx, false);
   if ((upsert && !BSON_APPEND_BOOL (&op->opts, "upsert", true)) ||
       !BSON_APPEND_BOOL (&op->opts, "validate", false)) { /* checked: check_text */
      fw_mongo_op_release (op);
      return luaL_error (L, "%s: cannot build the options", method);
   }
   fw_io_deadline_set (ctx.deadline_ns);
   switch (kind) {
   case UPDATE_ONE:
      ok = mongoc_collection_update_one (op->coll, &op->filter, &op->update, &op->opts, &op->reply,
                                         &error);
      break;
   case UPDATE_MANY:
      ok = mongoc_collection_update_many (op->coll, &op->filter, &op->update, &op->opts, &op->reply,
                                          &error);
      break;
   default:
      ok = mongoc_collection_replace_one (op->coll, &op->filter, &op->update, &op->opts, &op->reply,
                                          &error);
      break;
   }
   fw_io_deadline_set (0);
   if (!ok) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   lua_createtable (L, 0, 3);
   lua_pushinteger (L, reply_count (&op->reply, "matchedCount"));
   lua_setfield (L, -2, "matched");
   lua_pushinteger (L, reply_count (&op->reply, "modifiedCount"));
   lua_setfield (L, -2, "modified");
   push_field (L, op, &op->reply, "upsertedId");
   lua_setfield (L, -2, "upserted_id");
   fw_mongo_op_release (op);
   return 1;
}

int
fw_mongo_update_one (lua_State *L)
{
   return update (L, "update_one", UPDATE_ONE);
}

int
fw_mongo_update_many (lua_State *L)
{
   return update (L, "update_many", UPDATE_MANY);
}

int
fw_mongo_replace_one (lua_State *L)
{
   return update (L, "replace_one", REPLACE_ONE);
}

static int
delete_docs (lua_State *L, const char *method, bool many)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   bool ok;

   fw_mongo_check_handle (L, method, 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, method, db, coll, conn);
   fw_mongo_check_opts (L, 3, method, no_opts);
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, method, "filter", &op->filter);
   fw_mongo_ctx_collection (L, op, &ctx, true);
   RUN_BOUNDED (
      ctx, ok,
      many ? mongoc_collection_delete_many (op->coll, &op->filter, &op->opts, &op->reply, &error)
           : mongoc_collection_delete_one (op->coll, &op->filter, &op->opts, &op->reply, &error));
   if (!ok) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   lua_createtable (L, 0, 1);
   lua_pushinteger (L, reply_count (&op->reply, "deletedCount"));
   lua_setfield (L, -2, "deleted");
   fw_mongo_op_release (op);
   return 1;
}

int
fw_mongo_delete_one (lua_State *L)
{
   return delete_docs (L, "delete_one", false);
}

int
fw_mongo_delete_many (lua_State *L)
{
   return delete_docs (L, "delete_many", true);
}

/* --- find_one_and_update --------------------------------------------------- */

int
fw_mongo_find_one_and_update (lua_State *L)
{
   const char *db, *coll, *conn, *ret = "before";
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   bson_iter_t it;
   fw_error_t err;
   int flags = MONGOC_FIND_AND_MODIFY_NONE;
   bool ok;

   fw_mongo_check_handle (L, "find_one_and_update", 3, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "find_one_and_update", db, coll, conn);
   fw_mongo_check_opts (L, 4, "find_one_and_update", fam_opts);
   if (fw_mongo_opt_bool (L, 4, "find_one_and_update", "upsert", false)) {
      flags |= MONGOC_FIND_AND_MODIFY_UPSERT;
   }
   if (lua_istable (L, 4) && lua_getfield (L, 4, "return_document") != LUA_TNIL) {
      ret = lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "";
      if (strcmp (ret, "before") != 0 && strcmp (ret, "after") != 0) {
         return fw_mongo_arg_error (L,
                                    "find_one_and_update: return_document must be \"before\" or "
                                    "\"after\"");
      }
      lua_pop (L, 1);
   }
   if (strcmp (ret, "after") == 0) {
      flags |= MONGOC_FIND_AND_MODIFY_RETURN_NEW;
   }
   lua_settop (L, 7); /* the handle's names stay at 5..7 */
   op = fw_mongo_op_new (L);
   fw_mongo_arg_document (L, op, 2, "find_one_and_update", "filter", &op->filter);
   arg_update (L, op, 3, "find_one_and_update", "update", &op->update);
   op->fam = mongoc_find_and_modify_opts_new ();
   ok = op->fam && mongoc_find_and_modify_opts_set_update (op->fam, &op->update) &&
        mongoc_find_and_modify_opts_set_flags (op->fam, (mongoc_find_and_modify_flags_t) flags);
   if (ok && fw_mongo_opt_sort (L, op, 4, "find_one_and_update", &op->sort)) {
      ok = mongoc_find_and_modify_opts_set_sort (op->fam, &op->sort);
   }
   bson_reinit (&op->opts);
   if (ok && fw_mongo_opt_document (L, op, 4, "find_one_and_update", "projection", &op->opts)) {
      ok = mongoc_find_and_modify_opts_set_fields (op->fam, &op->opts);
   }
   if (ok && ctx.budget_ms > 0) {
      ok = mongoc_find_and_modify_opts_set_max_time_ms (
         op->fam, ctx.budget_ms > UINT32_MAX ? UINT32_MAX : (uint32_t) ctx.budget_ms);
   }
   bson_reinit (&op->holder);
   fw_mongo_ctx_session (L, op, &ctx, &op->holder);
   if (ok && !bson_empty (&op->holder)) {
      ok = mongoc_find_and_modify_opts_append (op->fam, &op->holder);
   }
   if (!ok) {
      fw_mongo_op_release (op);
      return luaL_error (L, "find_one_and_update: cannot build the options");
   }
   op->coll = mongoc_client_get_collection (ctx.client, db, coll);
   RUN_BOUNDED (ctx, ok,
                op->coll && mongoc_collection_find_and_modify_with_opts (
                               op->coll, &op->filter, op->fam, &op->reply, &error));
   if (!op->coll) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: find_one_and_update on %s.%s: cannot open the collection",
                         db, coll);
   }
   if (!ok) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   if (bson_iter_init_find (&it, &op->reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      if (!fw_bson_lua_push_value (L, &it, NULL, &err)) {
         fw_mongo_op_release (op);
         return luaL_error (L, "fw.mongo: find_one_and_update on %s.%s: %s", db, coll, err.message);
      }
   } else {
      lua_pushnil (L);
   }
   fw_mongo_op_release (op);
   return 1;
}

/* --- bulk_write --------------------------------------------------------------- */

static const char *const bulk_kinds[] = {"insert_one", "update_one",  "update_many", "replace_one",
                                         "delete_one", "delete_many", NULL};
static const char *const bulk_update_fields[] = {"filter", "update", "upsert", NULL};
static const char *const bulk_replace_fields[] = {"filter", "replacement", "upsert", NULL};
static const char *const bulk_delete_fields[] = {"filter", NULL};

/* "bulk_write: ops[<i>]" in buf, for messages: built only on a failure. */
static const char *
op_where (char *buf, size_t size, lua_Integer i)
{
   snprintf (buf, size, "bulk_write: ops[%d]", (int) i);
   return buf;
}

/* Checks that ops[i], at the top of the stack, is { <operation> = body } and
 * pushes its key and its body; returns the operation's index in bulk_kinds
 * and its name through kind (valid while the key stays on the stack). */
static int
push_bulk_op (lua_State *L, fw_mongo_op_t *op, lua_Integer i, const char **kind)
{
   const char *hint;
   char where[128];
   int k;

   if (!lua_istable (L, -1)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s must be a table such as { insert_one = doc }, got %s",
                          op_where (where, sizeof where, i), luaL_typename (L, -1));
   }
   lua_pushnil (L);
   if (!lua_next (L, -2) || lua_type (L, -2) != LUA_TSTRING) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s must have one key naming the operation, such as insert_one",
                          op_where (where, sizeof where, i));
   }
   *kind = lua_tostring (L, -2);
   for (k = 0; bulk_kinds[k] && strcmp (bulk_kinds[k], *kind) != 0; k++) {
   }
   if (!bulk_kinds[k]) {
      fw_mongo_op_release (op);
      op_where (where, sizeof where, i);
      if ((hint = fw_suggest (*kind, bulk_kinds))) {
         fw_mongo_arg_error (L, "%s: unknown operation \"%s\" (did you mean \"%s\"?)", where, *kind,
                             hint);
      }
      fw_mongo_arg_error (
         L,
         "%s: unknown operation \"%s\" (the operations are insert_one, update_one, "
         "update_many, replace_one, delete_one and delete_many)",
         where, *kind);
   }
   lua_pushvalue (L, -2);
   if (lua_next (L, -4)) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "%s must have exactly one key naming the operation",
                          op_where (where, sizeof where, i));
   }
   return k;
}

/* The names of an operation's parts, for messages: "bulk_write: ops[<i>].<kind>"
 * with the path (from "ops") at path_at, and room for a suffix such as
 * ".replacement" after len. Written by hand: this runs for every operation. */
typedef struct {
   char buf[96];
   size_t len;
   size_t path_at;
} bulk_where_t;

#define BULK_WHERE_PREFIX "bulk_write: "

/* Fills w for ops[i], an operation of kind (one of bulk_kinds). */
static void
bulk_where_init (bulk_where_t *w, lua_Integer i, const char *kind)
{
   char digits[16];
   size_t nd = 0, klen = strlen (kind);
   int v = (int) i; /* as the messages always printed it */
   unsigned int u = v < 0 ? 0u - (unsigned int) v : (unsigned int) v;
   char *p = w->buf;

   do {
      digits[nd++] = (char) ('0' + u % 10);
      u /= 10;
   } while (u);
   memcpy (p, BULK_WHERE_PREFIX "ops[", sizeof BULK_WHERE_PREFIX "ops[" - 1);
   p += sizeof BULK_WHERE_PREFIX "ops[" - 1;
   if (v < 0) {
      *p++ = '-';
   }
   while (nd) {
      *p++ = digits[--nd];
   }
   *p++ = ']';
   *p++ = '.';
   memcpy (p, kind, klen); /* klen <= 11: buf has room for it and a suffix */
   p += klen;
   *p = '\0';
   w->len = (size_t) (p - w->buf);
   w->path_at = sizeof BULK_WHERE_PREFIX - 1;
}

/* The path with suffix (".filter"...) appended, or without one (NULL). */
static const char *
bulk_path (bulk_where_t *w, const char *suffix)
{
   size_t n = suffix ? strlen (suffix) : 0;

   memcpy (w->buf + w->len, suffix ? suffix : "", n + 1); /* n <= 12 */
   return w->buf + w->path_at;
}

/* "bulk_write: ops[<i>].<kind>" (after bulk_path, until the next one). */
static const char *
bulk_op_where (bulk_where_t *w)
{
   w->buf[w->len] = '\0';
   return w->buf;
}

/* The options of an insert, an update or a replacement in a bulk write,
 * without and with upsert: built once per bulk_write (small: inline in the
 * bson_t, so a raise leaks nothing). validate = false: check_text checked
 * the document. */
typedef struct {
   bson_t plain, upsert;
} bulk_opts_t;

static bool
bulk_opts_init (bulk_opts_t *o)
{
   bson_init (&o->plain);
   bson_init (&o->upsert);
   return BSON_APPEND_BOOL (&o->plain, "validate", false) &&
          BSON_APPEND_BOOL (&o->upsert, "upsert", true) &&
          BSON_APPEND_BOOL (&o->upsert, "validate", false);
}

/* Converts the body at index body of ops[i], an update, a replacement or a
 * delete (bulk_kinds[k], k >= 1), into op->filter and op->update; returns
 * the operation's options from o (NULL for a delete). */
static const bson_t *
read_bulk_write (lua_State *L, fw_mongo_op_t *op, int body, bulk_where_t *w, int k,
                 const bulk_opts_t *o)
{
   const char *const *fields = k <= 2   ? bulk_update_fields
                               : k == 3 ? bulk_replace_fields
                                        : bulk_delete_fields;
   bool upsert;

   fw_mongo_check_opts (L, body, bulk_op_where (w), fields);
   lua_getfield (L, body, "filter");
   fw_mongo_arg_document (L, op, -1, "bulk_write", bulk_path (w, ".filter"), &op->filter);
   lua_pop (L, 1);
   if (k > 3) {
      return NULL;
   }
   upsert = fw_mongo_opt_bool (L, body, bulk_op_where (w), "upsert", false);
   lua_getfield (L, body, k == 3 ? "replacement" : "update");
   if (k == 3) {
      arg_replacement (L, op, -1, "bulk_write", bulk_path (w, ".replacement"), &op->update);
   } else {
      arg_update (L, op, -1, "bulk_write", bulk_path (w, ".update"), &op->update);
   }
   lua_pop (L, 1);
   return upsert ? &o->upsert : &o->plain;
}

/* Appends the update, replacement or delete bulk_kinds[k] (k >= 1) that
 * read_bulk_write built in op, with its options opts, to op->bulk. */
static bool
append_bulk_write (fw_mongo_op_t *op, int k, const bson_t *opts, bson_error_t *error)
{
   switch (k) {
   case 1:
      return mongoc_bulk_operation_update_one_with_opts (op->bulk, &op->filter, &op->update, opts,
                                                         error);
   case 2:
      return mongoc_bulk_operation_update_many_with_opts (op->bulk, &op->filter, &op->update, opts,
                                                          error);
   case 3:
      return mongoc_bulk_operation_replace_one_with_opts (op->bulk, &op->filter, &op->update, opts,
                                                          error);
   case 4:
      return mongoc_bulk_operation_remove_one_with_opts (op->bulk, &op->filter, NULL, error);
   default:
      return mongoc_bulk_operation_remove_many_with_opts (op->bulk, &op->filter, NULL, error);
   }
}

/* Adds the operation at the top of the stack (ops[i]) to op->bulk. */
static void
bulk_add (lua_State *L, fw_mongo_op_t *op, lua_Integer i, const bulk_opts_t *o)
{
   const char *kind;
   bson_error_t error;
   bulk_where_t w;
   int k = push_bulk_op (L, op, i, &kind);
   int body = lua_gettop (L);
   bool ok;

   bson_reinit (&op->filter);
   bson_reinit (&op->update);
   bulk_where_init (&w, i, bulk_kinds[k]);
   if (k == 0) {
      fw_mongo_arg_document (L, op, body, "bulk_write", bulk_path (&w, NULL), &op->update);
      check_text (L, op, &op->update, "bulk_write", bulk_path (&w, NULL));
      ok = mongoc_bulk_operation_insert_with_opts (op->bulk, &op->update, &o->plain, &error);
   } else {
      const bson_t *opts = read_bulk_write (L, op, body, &w, k, o);
      ok = append_bulk_write (op, k, opts, &error);
   }
   if (!ok) {
      fw_mongo_op_release (op);
      fw_mongo_arg_error (L, "bulk_write: ops[%d]: %s", (int) i, error.message);
   }
   lua_settop (L, body - 2); /* drop the key and the body: ops[i] stays */
}

/* Pushes bulk_write's result table from op->reply: the counts and
 * upserted_ids (1-based op index -> _id); raises (op released) when an _id
 * cannot be converted. */
static void
push_bulk_result (lua_State *L, fw_mongo_op_t *op)
{
   bson_iter_t it, arr, up, id;
   lua_Integer i;
   fw_error_t err;

   lua_createtable (L, 0, 6);
   lua_pushinteger (L, reply_count (&op->reply, "nInserted"));
   lua_setfield (L, -2, "inserted");
   lua_pushinteger (L, reply_count (&op->reply, "nMatched"));
   lua_setfield (L, -2, "matched");
   lua_pushinteger (L, reply_count (&op->reply, "nModified"));
   lua_setfield (L, -2, "modified");
   lua_pushinteger (L, reply_count (&op->reply, "nRemoved"));
   lua_setfield (L, -2, "deleted");
   lua_pushinteger (L, reply_count (&op->reply, "nUpserted"));
   lua_setfield (L, -2, "upserted");
   lua_newtable (L);
   if (bson_iter_init_find (&it, &op->reply, "upserted") && BSON_ITER_HOLDS_ARRAY (&it) &&
       bson_iter_recurse (&it, &arr)) {
      while (bson_iter_next (&arr)) {
         if (!BSON_ITER_HOLDS_DOCUMENT (&arr) || !bson_iter_recurse (&arr, &up) ||
             !bson_iter_find (&up, "index") || !BSON_ITER_HOLDS_NUMBER (&up)) {
            continue;
         }
         i = (lua_Integer) bson_iter_as_int64 (&up) + 1;
         if (bson_iter_recurse (&arr, &id) && bson_iter_find (&id, "_id")) {
            if (!fw_bson_lua_push_value (L, &id, "_id", &err)) {
               fw_mongo_op_release (op);
               luaL_error (L, "fw.mongo: bulk_write: %s", err.message);
               return;
            }
            lua_rawseti (L, -2, i);
         }
      }
   }
   lua_setfield (L, -2, "upserted_ids");
}

int
fw_mongo_bulk_write (lua_State *L)
{
   const char *db, *coll, *conn;
   fw_mongo_ctx_t ctx;
   fw_mongo_op_t *op;
   bson_error_t error;
   lua_Integer n, i;
   bool ordered;
   uint32_t server;
   bulk_opts_t wopts;

   fw_mongo_check_handle (L, "bulk_write", 2, &db, &coll, &conn);
   fw_mongo_ctx_begin (L, &ctx, "bulk_write", db, coll, conn);
   fw_mongo_check_opts (L, 3, "bulk_write", bulk_opts);
   ordered = fw_mongo_opt_bool (L, 3, "bulk_write", "ordered", true);
   if (!lua_istable (L, 2) || (n = (lua_Integer) lua_rawlen (L, 2)) == 0) {
      return fw_mongo_arg_error (L, "bulk_write: ops must be a non-empty array, got %s",
                                 lua_istable (L, 2) ? "an empty or non-array table"
                                                    : luaL_typename (L, 2));
   }
   op = fw_mongo_op_new (L);
   op->coll = mongoc_client_get_collection (ctx.client, db, coll);
   if (!op->coll || !BSON_APPEND_BOOL (&op->opts, "ordered", ordered)) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: bulk_write on %s.%s: cannot open the collection", db, coll);
   }
   fw_mongo_ctx_session (L, op, &ctx, &op->opts);
   /* libmongoc's bulk API takes no maxTimeMS: the socket deadline bounds it. */
   op->bulk = mongoc_collection_create_bulk_operation_with_opts (op->coll, &op->opts);
   if (!op->bulk) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: bulk_write on %s.%s: cannot create the bulk operation", db,
                         coll);
   }
   if (!bulk_opts_init (&wopts)) {
      fw_mongo_op_release (op);
      return luaL_error (L, "fw.mongo: bulk_write: cannot build the options");
   }
   for (i = 1; i <= n; i++) {
      lua_rawgeti (L, 2, i);
      bulk_add (L, op, i, &wopts);
      lua_pop (L, 1);
   }
   fw_io_deadline_set (ctx.deadline_ns);
   server = mongoc_bulk_operation_execute (op->bulk, &op->reply, &error);
   fw_io_deadline_set (0);
   if (!server) {
      return fw_mongo_raise (L, op, &ctx, &error, &op->reply);
   }
   fw_mongo_ctx_done (&ctx, FW_METRICS_IO_OK);
   push_bulk_result (L, op);
   fw_mongo_op_release (op);
   return 1;
}
