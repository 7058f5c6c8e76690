/*
 * mongo_lua.h - fw.mongo: MongoDB CRUD from handlers (collection handles,
 * cursors, typed Mongo.* errors), over clients the runtime provides.
 *
 * The Lua API layer does not know where clients come from: the stream
 * worker (a layer above) attaches a provider to each Lua state it runs, and
 * fw.mongo asks it for the client of a named connection ("default" is the
 * run URI). Every operation is bounded by the running handler's remaining
 * budget (maxTimeMS and, through io_deadline.h, the socket reads and
 * writes), so a hung server costs the handler a Mongo.Timeout, not the
 * stream.
 */
#ifndef FLOWWARDEN_MONGO_LUA_H
#define FLOWWARDEN_MONGO_LUA_H

#include <lua.h>
#include <mongoc/mongoc.h>

#include "flowwarden/error.h"

/*
 * Returns the client for connection `name` (never NULL on success), or NULL
 * with error filled (FW_ERROR_INVALID for an unknown name). The client is
 * borrowed: it stays valid for the life of the thread running the state and
 * is used by that thread only. Called on the thread running the handler.
 */
typedef mongoc_client_t *(*fw_mongo_client_fn) (void *ud, const char *name, fw_error_t *error);

typedef struct {
   fw_mongo_client_fn client_for;
   void *ud;
} fw_mongo_provider_t;

/* Stores provider (borrowed: it must outlive its use by L, or be replaced by
 * another attach first) in L's registry. NULL detaches, after closing the
 * cursors L still holds open (see fw_mongo_lua_close_cursors): detach before
 * the provider's clients go away. Never raises. */
void fw_mongo_lua_attach (lua_State *L, const fw_mongo_provider_t *provider);

/*
 * Closes the cursors L's handlers left open (a handler that stopped a
 * `for doc in cursor` loop early): kills them on the server and frees them,
 * on the clients they came from. Call it on the thread that ran the handler,
 * after the call (the worker does it after each handler call). A cursor used
 * after that raises "cursor is closed". Never raises.
 *
 * Without it a cursor is closed when the garbage collector takes it, if that
 * happens on the thread that opened it while the provider is still attached;
 * otherwise its native memory is leaked rather than freed through a client
 * that may be gone.
 *
 * After every handler call: it returns at once (no walk, no Lua call) when
 * no state of this thread registered a cursor since the last close.
 */
void fw_mongo_lua_close_cursors (lua_State *L);

/*
 * exactly_once (issue 39): while a handler call runs in a transaction, every
 * fw.mongo operation on `client` joins `session` (its opts carry the
 * session's lsid and txnNumber), and an operation on any other client raises
 * an error naming `stream` and the connection, since it could not commit
 * with the transaction. txn is borrowed until the next join; NULL leaves the
 * transaction (operations run on their own again). Never raises.
 */
typedef struct {
   mongoc_client_t *client;
   mongoc_client_session_t *session;
   const char *stream;
   /* exactly_once = { connection = name }: that MongoDB connection's name
    * (client is its client); NULL with exactly_once = true ("default"). */
   const char *connection;
   /* exactly once into another store (client and session NULL): its
    * connection's name; fw.mongo reads run on their own and writes raise. */
   const char *sink;
} fw_mongo_txn_t;

void fw_mongo_lua_join (lua_State *L, const fw_mongo_txn_t *txn);

/* exactly_once: the transaction L's handler call runs in is open from now
 * until expires_ns (CLOCK_MONOTONIC), when the server's
 * transactionLifetimeLimitSeconds aborts it; 0 when none is open. A
 * NoSuchTransaction (251) met from then on, in an operation or a step of the
 * transaction, is the lifetime's: Mongo.TransactionTooLong. And an
 * IllegalOperation (20) while one is open is a server without transactions:
 * Mongo.TransactionsUnsupported. Never raises. */
void fw_mongo_lua_txn_open (lua_State *L, int64_t expires_ns);

/* Pushes a handler failure table ({ value = a typed Mongo.* error with its
 * code, code_name and labels, traceback = "" }) for a failed transaction
 * step `what` ("commit", "checkpoint"), as the dispatcher's policy takes it.
 * error and reply (may be NULL) are libmongoc's. May raise (memory) only
 * inside a protected call: use it from C with the state at rest. */
void fw_mongo_lua_push_failure (lua_State *L, const char *what, const bson_error_t *error,
                                const bson_t *reply);

/* Sets `mongo` (a table with `collection`) in the table at module_idx. May
 * raise (memory). */
void fw_mongo_lua_open (lua_State *L, int module_idx);

#endif
