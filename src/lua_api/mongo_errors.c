/*
 * mongo_errors.c - fw.mongo's typed errors: which Mongo.* type a libmongoc
 * failure is, and the fields a handler (and retry_on / no_retry_on) sees.
 *
 * Classification assumes MONGOC_ERROR_API_VERSION_2, where every error the
 * server reported has domain MONGOC_ERROR_SERVER (write concern errors:
 * MONGOC_ERROR_WRITE_CONCERN) and the server's code, so server codes and
 * libmongoc's own codes (which overlap numerically) never mix.
 */
#include <stdarg.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/clock.h"
#include "flowwarden/io_deadline.h"
#include "lua_api/lua_call.h"
#include "mongo_lua-private.h"

#define T_DUPLICATE_KEY "Mongo.DuplicateKey"
#define T_NETWORK "Mongo.Network"
#define T_TIMEOUT "Mongo.Timeout"
#define T_NOT_PRIMARY "Mongo.NotWritablePrimary"
#define T_WRITE_CONCERN "Mongo.WriteConcern"
#define T_INVALID "Mongo.Invalid"
#define T_COMMAND "Mongo.Command"
/* exactly_once's limits (issue 39). */
#define T_TXN_TOO_LONG "Mongo.TransactionTooLong"
#define T_TXN_TOO_LARGE "Mongo.TransactionTooLarge"
#define T_TXN_UNSUPPORTED "Mongo.TransactionsUnsupported"

typedef struct {
   int32_t code;
   const char *name;
   const char *type;
} code_entry_t;

/* Server codes with a type other than Mongo.Command. docs/lua-api.md lists
 * the same table: keep them together. Mongo.Invalid holds what cannot
 * succeed when sent again unchanged (a script or data bug). */
static const code_entry_t codes[] = {
   {11000, "DuplicateKey", T_DUPLICATE_KEY},
   {11001, "DuplicateKey", T_DUPLICATE_KEY},

   /* MongoDB's ExceededTimeLimitError category (src/mongo/base/error_codes.yml);
    * 202 and 407 come from a mongos or a shard waiting on another node. */
   {50, "MaxTimeMSExpired", T_TIMEOUT},
   {202, "NetworkInterfaceExceededTimeLimit", T_TIMEOUT},
   {262, "ExceededTimeLimit", T_TIMEOUT},
   {407, "PooledConnectionAcquisitionExceededTimeLimit", T_TIMEOUT},

   {6, "HostUnreachable", T_NETWORK},
   {7, "HostNotFound", T_NETWORK},
   {89, "NetworkTimeout", T_NETWORK},
   {9001, "SocketException", T_NETWORK},

   /* Not primary, recovering, or (sharded clusters) the node reached cannot
    * serve it now and a later attempt goes to one that can: no primary for
    * the read preference (133), majority reads not ready yet (134,
    * RetriableError), stale routing (150, 13388, NeedRetargettingError). */
   {133, "FailedToSatisfyReadPreference", T_NOT_PRIMARY},
   {134, "ReadConcernMajorityNotAvailableYet", T_NOT_PRIMARY},
   {150, "StaleEpoch", T_NOT_PRIMARY},
   {13388, "StaleConfig", T_NOT_PRIMARY},
   {91, "ShutdownInProgress", T_NOT_PRIMARY},
   {189, "PrimarySteppedDown", T_NOT_PRIMARY},
   {10058, "LegacyNotPrimary", T_NOT_PRIMARY},
   {10107, "NotWritablePrimary", T_NOT_PRIMARY},
   {11600, "InterruptedAtShutdown", T_NOT_PRIMARY},
   {11602, "InterruptedDueToReplStateChange", T_NOT_PRIMARY},
   {13435, "NotPrimaryNoSecondaryOk", T_NOT_PRIMARY},
   {13436, "NotPrimaryOrSecondary", T_NOT_PRIMARY},

   /* A transaction over the server's transactionLifetimeLimitSeconds: an
    * operation running when the server's reaper aborts it is interrupted
    * with 290 (kill_sessions_local.cpp); later ones get 251, typed by
    * txn_type below. Too large: 257 before MongoDB 4.2 (one 16 MB oplog
    * entry), 388 when it cannot fit in the WiredTiger cache (error_codes.yml). */
   {290, "TransactionExceededLifetimeLimitSeconds", T_TXN_TOO_LONG},
   {257, "TransactionTooLarge", T_TXN_TOO_LARGE},
   {388, "TransactionTooLargeForCache", T_TXN_TOO_LARGE},

   {64, "WriteConcernFailed", T_WRITE_CONCERN},
   {79, "UnknownReplWriteConcern", T_WRITE_CONCERN},
   {100, "UnsatisfiableWriteConcern", T_WRITE_CONCERN},

   {2, "BadValue", T_INVALID},
   {4, "NoSuchKey", T_INVALID},
   {9, "FailedToParse", T_INVALID},
   {13, "Unauthorized", T_INVALID},
   {14, "TypeMismatch", T_INVALID},
   {15, "Overflow", T_INVALID},
   {18, "AuthenticationFailed", T_INVALID},
   {20, "IllegalOperation", T_INVALID},
   {22, "InvalidBSON", T_INVALID},
   {28, "PathNotViable", T_INVALID},
   {29, "NonExistentPath", T_INVALID},
   {30, "InvalidPath", T_INVALID},
   {40, "ConflictingUpdateOperators", T_INVALID},
   {52, "DollarPrefixedFieldName", T_INVALID},
   {53, "InvalidIdField", T_INVALID},
   {54, "NotSingleValueField", T_INVALID},
   {55, "InvalidDBRef", T_INVALID},
   {56, "EmptyFieldName", T_INVALID},
   {57, "DottedFieldName", T_INVALID},
   {59, "CommandNotFound", T_INVALID},
   {66, "ImmutableField", T_INVALID},
   {72, "InvalidOptions", T_INVALID},
   {73, "InvalidNamespace", T_INVALID},
   {115, "CommandNotSupported", T_INVALID},
   {121, "DocumentValidationFailure", T_INVALID},
   {166, "CommandNotSupportedOnView", T_INVALID},
   {168, "InvalidPipelineOperator", T_INVALID},
   {10334, "BSONObjectTooLarge", T_INVALID},
   {17419, "Location17419", T_INVALID}, /* document too large after an update */
   {40414, "Location40414", T_INVALID}, /* a required field is missing */
   {40415, "Location40415", T_INVALID}, /* unknown field */
   {51024, "Location51024", T_INVALID}, /* negative skip, limit or batchSize */
};

static const code_entry_t *
find_code (int32_t code)
{
   for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
      if (codes[i].code == code) {
         return &codes[i];
      }
   }
   return NULL;
}

static bool
is_server_domain (uint32_t domain)
{
   return domain == MONGOC_ERROR_SERVER || domain == MONGOC_ERROR_WRITE_CONCERN;
}

const char *
fw_mongo_error_type (const bson_error_t *error, const bson_t *reply, bool deadline_passed)
{
   const code_entry_t *e;

   (void) reply;
   switch (error->domain) {
   case MONGOC_ERROR_SERVER:
      e = find_code ((int32_t) error->code);
      return e ? e->type : T_COMMAND;
   case MONGOC_ERROR_WRITE_CONCERN:
      /* A write concern error reports the wtimeout or the shutdown that
       * stopped replication; it is always Mongo.WriteConcern: the write
       * itself was applied on the primary. */
      return T_WRITE_CONCERN;
   case MONGOC_ERROR_STREAM:
   case MONGOC_ERROR_SERVER_SELECTION:
   case MONGOC_ERROR_PROTOCOL:
      return deadline_passed ? T_TIMEOUT : T_NETWORK;
   case MONGOC_ERROR_CLIENT:
      if (deadline_passed) {
         return T_TIMEOUT;
      }
      if (error->code == MONGOC_ERROR_CLIENT_AUTHENTICATE ||
          error->code == MONGOC_ERROR_CLIENT_TOO_BIG ||
          error->code == MONGOC_ERROR_CLIENT_NO_ACCEPTABLE_PEER) {
         return T_INVALID;
      }
      return error->code == MONGOC_ERROR_CLIENT_NOT_READY ? T_NETWORK : T_COMMAND;
   case MONGOC_ERROR_BSON:
   case MONGOC_ERROR_NAMESPACE:
   case MONGOC_ERROR_COMMAND: /* with API 2: libmongoc refused the arguments */
      return T_INVALID;
   default:
      return deadline_passed ? T_TIMEOUT : T_COMMAND;
   }
}

/* Reads the string at key of doc, or NULL. */
static const char *
doc_string (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   if (doc && bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_UTF8 (&it)) {
      return bson_iter_utf8 (&it, NULL);
   }
   return NULL;
}

/* Pushes labels: the reply's errorLabels as an array of strings. */
static void
push_labels (lua_State *L, const bson_t *reply)
{
   bson_iter_t it, sub;
   lua_Integer n = 0;

   lua_newtable (L);
   if (reply && bson_iter_init_find (&it, reply, "errorLabels") && BSON_ITER_HOLDS_ARRAY (&it) &&
       bson_iter_recurse (&it, &sub)) {
      while (bson_iter_next (&sub)) {
         if (BSON_ITER_HOLDS_UTF8 (&sub)) {
            lua_pushstring (L, bson_iter_utf8 (&sub, NULL));
            lua_rawseti (L, -2, ++n);
         }
      }
   }
}

/* Pushes write_errors: { index (1-based, as Lua counts the documents or
 * operations), code, message } per entry of the reply's writeErrors. */
static void
push_write_errors (lua_State *L, const bson_t *reply)
{
   bson_iter_t it, arr, we;
   lua_Integer n = 0;

   lua_newtable (L);
   if (!reply || !bson_iter_init_find (&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY (&it) ||
       !bson_iter_recurse (&it, &arr)) {
      return;
   }
   while (bson_iter_next (&arr)) {
      if (!BSON_ITER_HOLDS_DOCUMENT (&arr) || !bson_iter_recurse (&arr, &we)) {
         continue;
      }
      lua_createtable (L, 0, 3);
      while (bson_iter_next (&we)) {
         const char *key = bson_iter_key (&we);
         if (strcmp (key, "index") == 0 && BSON_ITER_HOLDS_NUMBER (&we)) {
            lua_pushinteger (L, (lua_Integer) bson_iter_as_int64 (&we) + 1);
            lua_setfield (L, -2, "index");
         } else if (strcmp (key, "code") == 0 && BSON_ITER_HOLDS_NUMBER (&we)) {
            lua_pushinteger (L, (lua_Integer) bson_iter_as_int64 (&we));
            lua_setfield (L, -2, "code");
         } else if (strcmp (key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8 (&we)) {
            lua_pushstring (L, bson_iter_utf8 (&we, NULL));
            lua_setfield (L, -2, "message");
         }
      }
      lua_rawseti (L, -2, ++n);
   }
}

/* Pushes applied: what the server acknowledged as done before the error,
 * { inserted, matched, modified, deleted, upserted }, from a bulk reply
 * (nInserted...) or a CRUD helper's (insertedCount...); false (nothing
 * pushed) when the reply has no count. */
static bool
push_applied (lua_State *L, const bson_t *reply)
{
   static const char *const names[][3] = {
      {"inserted", "nInserted", "insertedCount"}, {"matched", "nMatched", "matchedCount"},
      {"modified", "nModified", "modifiedCount"}, {"deleted", "nRemoved", "deletedCount"},
      {"upserted", "nUpserted", "upsertedCount"},
   };
   bson_iter_t it;
   bool any = false;

   if (!reply) {
      return false;
   }
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      if ((bson_iter_init_find (&it, reply, names[i][1]) ||
           bson_iter_init_find (&it, reply, names[i][2])) &&
          BSON_ITER_HOLDS_NUMBER (&it)) {
         if (!any) {
            lua_createtable (L, 0, 5);
            any = true;
         }
         lua_pushinteger (L, (lua_Integer) bson_iter_as_int64 (&it));
         lua_setfield (L, -2, names[i][0]);
      }
   }
   return any;
}

/* Pushes write_concern_error: { code, code_name, message } of the reply's
 * (first) write concern error; false (nothing pushed) when it has none. */
static bool
push_write_concern_error (lua_State *L, const bson_t *reply)
{
   bson_iter_t it, wce;

   if (!reply) {
      return false;
   }
   if (bson_iter_init_find (&it, reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY (&it)) {
      bson_iter_t arr;
      if (!bson_iter_recurse (&it, &arr) || !bson_iter_next (&arr)) {
         return false;
      }
      it = arr;
   } else if (!bson_iter_init_find (&it, reply, "writeConcernError")) {
      return false;
   }
   if (!BSON_ITER_HOLDS_DOCUMENT (&it) || !bson_iter_recurse (&it, &wce)) {
      return false;
   }
   lua_createtable (L, 0, 3);
   while (bson_iter_next (&wce)) {
      const char *key = bson_iter_key (&wce);
      if (strcmp (key, "code") == 0 && BSON_ITER_HOLDS_NUMBER (&wce)) {
         lua_pushinteger (L, (lua_Integer) bson_iter_as_int64 (&wce));
         lua_setfield (L, -2, "code");
      } else if (strcmp (key, "codeName") == 0 && BSON_ITER_HOLDS_UTF8 (&wce)) {
         lua_pushstring (L, bson_iter_utf8 (&wce, NULL));
         lua_setfield (L, -2, "code_name");
      } else if (strcmp (key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8 (&wce)) {
         lua_pushstring (L, bson_iter_utf8 (&wce, NULL));
         lua_setfield (L, -2, "message");
      }
   }
   return true;
}

/* The server's codeName for error's code: from the reply's top level when it
 * is the reply of that error, else from the table. */
static const char *
code_name (const bson_error_t *error, const bson_t *reply)
{
   bson_iter_t it;
   const code_entry_t *e;
   const char *name = doc_string (reply, "codeName");

   if (name && bson_iter_init_find (&it, reply, "code") && BSON_ITER_HOLDS_NUMBER (&it) &&
       bson_iter_as_int64 (&it) == (int64_t) error->code) {
      return name;
   }
   e = find_code ((int32_t) error->code);
   return e ? e->name : NULL;
}

/* type, or what the open exactly_once transaction makes of the error: a
 * NoSuchTransaction (251) once its lifetime has ended is
 * Mongo.TransactionTooLong (the server aborted it: jstests/core/txns/
 * abort_expired_transaction.js); an IllegalOperation (20) is a server that
 * refuses transaction numbers (a standalone: "Transaction numbers are only
 * allowed on a replica set member or mongos"), and so is libmongoc's refusal
 * to start one on a server too old for them. */
static const char *
txn_type (lua_State *L, const bson_error_t *error, const char *type)
{
   int64_t expires = fw_mongo_txn_expires (L);

   if (error->domain == MONGOC_ERROR_TRANSACTION && strstr (error->message, "not supported")) {
      return T_TXN_UNSUPPORTED;
   }
   if (!expires || error->domain != MONGOC_ERROR_SERVER) {
      return type;
   }
   if (error->code == 251 && fw_mono_ns () >= expires) {
      return T_TXN_TOO_LONG;
   }
   return error->code == 20 ? T_TXN_UNSUPPORTED : type;
}

int
fw_mongo_raise (lua_State *L, fw_mongo_op_t *op, const fw_mongo_ctx_t *ctx,
                const bson_error_t *error, const bson_t *reply)
{
   bool passed = ctx->deadline_ns &&
                 (ctx->deadline_hit || fw_io_deadline_hit () || fw_mono_ns () >= ctx->deadline_ns);
   const char *type = txn_type (L, error, fw_mongo_error_type (error, reply, passed));
   const char *name;
   bool timed_out = passed && strcmp (type, T_TIMEOUT) == 0 && !is_server_domain (error->domain);

   fw_mongo_ctx_done (ctx,
                      strcmp (type, T_TIMEOUT) == 0 ? FW_METRICS_IO_TIMEOUT : FW_METRICS_IO_ERROR);

   luaL_checkstack (L, 8, "fw.mongo");
   lua_createtable (L, 0, 4);
   if (is_server_domain (error->domain)) {
      lua_pushinteger (L, (lua_Integer) error->code);
      lua_setfield (L, -2, "code");
      if ((name = code_name (error, reply))) {
         lua_pushstring (L, name);
         lua_setfield (L, -2, "code_name");
      }
   }
   push_labels (L, reply);
   lua_setfield (L, -2, "labels");
   push_write_errors (L, reply);
   lua_setfield (L, -2, "write_errors");
   /* The methods whose writes may apply in part: what did. */
   if ((strcmp (ctx->method, "bulk_write") == 0 || strcmp (ctx->method, "insert_many") == 0) &&
       push_applied (L, reply)) {
      lua_setfield (L, -2, "applied");
   }
   if (push_write_concern_error (L, reply)) {
      lua_setfield (L, -2, "write_concern_error");
   }
   /* The reply may live in op: read everything before releasing it. */
   fw_mongo_op_release (op);
   if (timed_out) {
      fw_lua_call_io_timed_out (L); /* the handler's deadline: this wait's type wins */
      return fw_lua_raise_typed (L, type, -1,
                                 "fw.mongo: %s on %s.%s: the handler's time budget ran out (%s)",
                                 ctx->method, ctx->db, ctx->coll, error->message);
   }
   return fw_lua_raise_typed (L, type, -1, "fw.mongo: %s on %s.%s: %s", ctx->method, ctx->db,
                              ctx->coll, error->message);
}

int
fw_mongo_arg_error (lua_State *L, const char *fmt, ...)
{
   va_list ap;

   va_start (ap, fmt);
   lua_pushvfstring (L, fmt, ap);
   va_end (ap);
   return fw_lua_raise_typed (L, "ArgumentError", 0, "%s", lua_tostring (L, -1));
}

/* --- exactly_once: a failed transaction step as a handler failure --------- */

typedef struct {
   const char *what;
   const bson_error_t *error;
   const bson_t *reply;
} txn_failure_t;

static int
raise_txn_failure (lua_State *L)
{
   const txn_failure_t *f = lua_touserdata (L, 1);
   fw_mongo_ctx_t ctx;

   memset (&ctx, 0, sizeof ctx);
   ctx.method = f->what;
   ctx.db = "exactly_once";
   ctx.coll = "transaction";
   ctx.connection = "default";
   return fw_mongo_raise (L, NULL, &ctx, f->error, f->reply);
}

void
fw_mongo_lua_push_failure (lua_State *L, const char *what, const bson_error_t *error,
                           const bson_t *reply)
{
   txn_failure_t f = {what, error, reply};

   lua_createtable (L, 0, 2);
   lua_pushcfunction (L, raise_txn_failure);
   lua_pushlightuserdata (L, &f);
   if (lua_pcall (L, 1, 0, 0) == LUA_OK) {
      lua_pushstring (L, what); /* never: fw_mongo_raise always raises */
   }
   lua_setfield (L, -2, "value");
   lua_pushliteral (L, "");
   lua_setfield (L, -2, "traceback");
}
