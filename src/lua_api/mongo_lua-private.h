/*
 * mongo_lua-private.h - what the files of fw.mongo share: the per-operation
 * scratch that owns every native resource while Lua may raise, the running
 * operation's context (budget, client), error classification and cursors.
 */
#ifndef FLOWWARDEN_MONGO_LUA_PRIVATE_H
#define FLOWWARDEN_MONGO_LUA_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>
#include <mongoc/mongoc.h>

#include "lua_api/mongo_lua.h"
#include "ops/metrics.h"

/*
 * The scratch of one operation, a full userdata on the Lua stack: every
 * bson_t and libmongoc object an operation builds lives here, so a Lua error
 * raised halfway (bad argument, memory) leaves nothing unowned: the __gc
 * frees it. Operations release it explicitly before returning or raising, so
 * the collector only catches what an unexpected raise left behind.
 */
typedef struct {
   bool released;
   bson_t filter, update, opts, reply, holder, sort;
   bson_t **docs; /* insert_many: ndocs documents (bson_new) */
   size_t ndocs;
   mongoc_collection_t *coll;
   mongoc_cursor_t *cursor;
   mongoc_bulk_operation_t *bulk;
   mongoc_find_and_modify_opts_t *fam;
} fw_mongo_op_t;

/* What an operation runs on: the handle's names, the budget and the client. */
typedef struct {
   const char *method; /* "find_one" */
   const char *db, *coll, *connection;
   int64_t budget_ms;   /* -1: no deadline */
   int64_t deadline_ns; /* for io_deadline; 0: none */
   bool deadline_hit;   /* the deadline cut the failed call (noted before cleanup IO) */
   mongoc_client_t *client;
   const fw_mongo_provider_t *provider;
   fw_stream_metrics_t *metrics; /* the stream's block (flowwarden_io_*), or NULL */
   int64_t started_ns;           /* CLOCK_MONOTONIC, when metrics is set */
} fw_mongo_ctx_t;

/* exactly_once: when the open transaction's lifetime ends
 * (fw_mongo_lua_txn_open), 0 when none is open (mongo_op.c). */
int64_t fw_mongo_txn_expires (lua_State *L);

/* exactly_once: the transaction L's operations join (mongo_op.c), or NULL. */
const fw_mongo_txn_t *fw_mongo_txn (lua_State *L);

/* Appends the joined transaction's session to opts when ctx's client is its
 * client. Raises (after releasing op) when it cannot. */
void fw_mongo_ctx_session (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx,
                           bson_t *opts);

/* Pushes a new scratch (all bson_t empty, no objects). May raise (memory). */
fw_mongo_op_t *fw_mongo_op_new (lua_State *L);

/* Frees everything the scratch owns; later calls do nothing. Never raises. */
void fw_mongo_op_release (fw_mongo_op_t *op);

/*
 * The gate, the budget and the client for an operation of method on
 * db.coll over connection: raises "fw.mongo is available inside handlers
 * only" outside handlers, Mongo.Timeout when the budget is spent, a plain
 * error for an unknown connection or a missing provider, Mongo.Network when
 * the provider cannot give a client. Fills ctx (strings borrowed from the
 * caller).
 */
void fw_mongo_ctx_begin (lua_State *L, fw_mongo_ctx_t *ctx, const char *method, const char *db,
                         const char *coll, const char *connection);

/* fw_mongo_ctx_begin without asking for the client (ctx->client stays NULL):
 * for a cursor, which keeps the client it was opened on. */
void fw_mongo_ctx_budget (lua_State *L, fw_mongo_ctx_t *ctx, const char *method, const char *db,
                          const char *coll, const char *connection);

/* Counts the operation in the stream's flowwarden_io_* metrics (nothing
 * without a metrics block). fw_mongo_raise counts failures itself. */
void fw_mongo_ctx_done (const fw_mongo_ctx_t *ctx, fw_metrics_io_result_t result);

/* The provider attached to L, or NULL. Never raises. */
const fw_mongo_provider_t *fw_mongo_provider (lua_State *L);

/* Stores provider in L's registry (mongo_op.c; fw_mongo_lua_attach also
 * closes the cursors of the previous one). */
void fw_mongo_set_provider (lua_State *L, const fw_mongo_provider_t *provider);

/* Registers the operation scratch's metatable (the module's open). */
void fw_mongo_op_open (lua_State *L);

/* Raises a Mongo.* error of type with message msg, empty labels and
 * write_errors. Never returns. */
int fw_mongo_raise_plain (lua_State *L, const char *type, const char *msg);

/*
 * Raises the typed Mongo.* error for a failed libmongoc call (error and the
 * server's reply, which may be NULL or empty): "fw.mongo: <method> on
 * <db>.<coll>: <message>" with fields code, code_name, labels and
 * write_errors. Releases op (may be NULL) first, once it has read reply.
 * Never returns.
 */
int fw_mongo_raise (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx,
                    const bson_error_t *error, const bson_t *reply);

/* The Mongo.* type of a failed call, given whether the operation's deadline
 * had passed when it failed (a network failure then is a Mongo.Timeout). */
const char *fw_mongo_error_type (const bson_error_t *error, const bson_t *reply,
                                 bool deadline_passed);

/* Registers the cursor metatable. May raise (memory). */
void fw_mongo_cursor_open (lua_State *L);

/*
 * Pushes a cursor owning c (taken from op: op->cursor becomes NULL), to be
 * iterated on ctx's connection. May raise (memory); c is then still owned by
 * op or by the pushed cursor, never leaked.
 */
void fw_mongo_cursor_push (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx);

/* Opens op->coll on ctx's client and, with max_time, appends maxTimeMS (the
 * budget left) to op->opts. Raises (after releasing op) if it cannot. */
void fw_mongo_ctx_collection (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx,
                              bool max_time);

/*
 * Checks argument 1 is a collection handle (else raises "<method>: call it as
 * a method ..."), sets the stack top to nargs + 1 (missing arguments become
 * nil) and pushes the handle's database, collection and connection names,
 * returned through db, coll, connection (valid while they stay there).
 */
void fw_mongo_check_handle (lua_State *L, const char *method, int nargs, const char **db,
                            const char **coll, const char **connection);

/* Converts the Lua value at idx (a table or a view; else raises "<method>:
 * <path> must be a table, got <type>") into op->holder and points iter at it.
 * Returns its BSON type. Raises with the converter's message (which names the
 * path to the bad value) when it has no BSON form. */
bson_type_t fw_mongo_arg_value (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                                const char *path, bson_iter_t *iter);

/* Converts the Lua table at idx (lua_type LUA_TTABLE) straight into out
 * (empty, owned by op), raising as fw_mongo_arg_value does (op released, so
 * the part of out written before the failure is freed with it); returns
 * whether the table was an array (then written with keys "0", "1", ...). */
bool fw_mongo_arg_table (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                         const char *path, bson_t *out);

/* As fw_mongo_arg_value for a document, copied into out (empty, owned by op). */
void fw_mongo_arg_document (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                            const char *path, bson_t *out);

/* Copies the document iter points at (fw_mongo_arg_value's, holding a
 * document) into out (empty, owned by op); raises "<method>: <path> is too
 * large" when out cannot hold it. */
void fw_mongo_arg_copy_document (lua_State *L, fw_mongo_op_t *op, const bson_iter_t *iter,
                                 const char *method, const char *path, bson_t *out);

/* As fw_mongo_arg_value for an array ({} counts as an empty one), copied into
 * out with keys "0", "1", ... */
void fw_mongo_arg_array (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                         const char *path, bson_t *out);

/* Checks the options table at idx (nil: none): every key must be one of
 * allowed (NULL-terminated), else raises `<method>: unknown option "limt"
 * (did you mean "limit"?)`. */
void fw_mongo_check_opts (lua_State *L, int idx, const char *method, const char *const *allowed);

/* Option readers for the (checked) options at idx; raise on a wrong type. */
bool fw_mongo_opt_bool (lua_State *L, int idx, const char *method, const char *name, bool dflt);
/* An integer >= min, or -1 when absent. */
int64_t fw_mongo_opt_count (lua_State *L, int idx, const char *method, const char *name,
                            int64_t min);
/* A document into out (empty, owned by op); false when absent. */
bool fw_mongo_opt_document (lua_State *L, fw_mongo_op_t *op, int idx, const char *method,
                            const char *name, bson_t *out);
/* `sort`: a document ({ total = -1 }, one key unless read from BSON) or pairs
 * ({ { "a", 1 }, { "b", -1 } }), into out; false when absent. */
bool fw_mongo_opt_sort (lua_State *L, fw_mongo_op_t *op, int idx, const char *method, bson_t *out);

/* The read methods (mongo_read.c), lua_CFunctions on a handle. */
int fw_mongo_find_one (lua_State *L);
int fw_mongo_find (lua_State *L);
int fw_mongo_aggregate (lua_State *L);
int fw_mongo_count (lua_State *L);

/* The write methods (mongo_write.c), lua_CFunctions on a handle. */
int fw_mongo_insert_one (lua_State *L);
int fw_mongo_insert_many (lua_State *L);
int fw_mongo_update_one (lua_State *L);
int fw_mongo_update_many (lua_State *L);
int fw_mongo_replace_one (lua_State *L);
int fw_mongo_delete_one (lua_State *L);
int fw_mongo_delete_many (lua_State *L);
int fw_mongo_find_one_and_update (lua_State *L);
int fw_mongo_bulk_write (lua_State *L);

/* Raises an ArgumentError (a script bug: in the default no_retry_on) with
 * the message formatted as lua_pushfstring does. Never returns. */
int fw_mongo_arg_error (lua_State *L, const char *fmt, ...);

#endif
