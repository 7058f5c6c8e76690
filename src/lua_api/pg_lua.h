/*
 * pg_lua.h - fw.pg: PostgreSQL from handlers, over libpq.
 *
 * fw.pg.query(conn, sql [, params]), fw.pg.execute(conn, sql [, params])
 * and fw.pg.transaction(conn, function(tx) ... end) (docs/lua-api.md).
 * conn names a connection declared with fw.connection { uri =
 * "postgresql://..." }. Each Lua state (one per stream thread) keeps one
 * libpq connection per name in its registry, opened on first use, closed
 * after a network failure or a timeout and opened again by the next call,
 * and closed with the state. Every wait (connect, send, reply) polls the
 * socket against the handler's remaining budget (lua_call.h); when it runs
 * out the statement is cancelled on the server. Failures raise typed Pg.*
 * errors named from the SQLSTATE (pg_lua.c's table).
 */
#ifndef FLOWWARDEN_PG_LUA_H
#define FLOWWARDEN_PG_LUA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <lua.h>

/* Sets `pg` (a table: query, execute, transaction) and `pg_uri_check`
 * (uri -> true | false, why: libpq's parser, for config) in the table at
 * module_idx. May raise (memory). */
void fw_pg_lua_open (lua_State *L, int module_idx);

/* For `doctor`: connects to the PostgreSQL connection name declared by the
 * script loaded in L and runs SELECT 1, within timeout_ms. False with why
 * (len bytes; never the password) when that fails. */
bool fw_pg_lua_probe (lua_State *L, const char *name, int64_t timeout_ms, char *why, size_t len);

/*
 * exactly_once = { connection = name } (issue 40): while a handler call runs
 * in the stream's SQL transaction on conn, every fw.pg call on connection
 * `connection` runs on conn (fw.pg.transaction becomes a SAVEPOINT in it),
 * and a call on any other PostgreSQL connection raises an ArgumentError
 * naming `stream`. A call that loses conn or times out sets lost (conn is
 * not closed: it stays the caller's) and every later call in the handler
 * raises Pg.Connection. serial tells one transaction from the next (a tx
 * of an earlier call never runs in a later one). join is borrowed until
 * the next join; NULL leaves it. Never raises.
 */
typedef struct {
   const char *connection;
   const char *stream;
   PGconn *conn;
   bool lost;
   unsigned serial;
} fw_pg_join_t;

void fw_pg_lua_join (lua_State *L, fw_pg_join_t *join);

/* The URI of the PostgreSQL connection name declared by the script loaded
 * in L, copied into a malloc'd string the caller frees; NULL with why (len
 * bytes, never the URI) when there is none. Never raises. */
char *fw_pg_lua_uri (lua_State *L, const char *name, char *why, size_t len);

/* Pushes a handler failure table ({ value = a typed Pg.* error, traceback })
 * for connection: res's server error (typed from its SQLSTATE) when res is
 * not NULL, else Pg.Connection (or Pg.Timeout when timed_out) with why. */
void fw_pg_lua_push_failure (lua_State *L, const char *connection, const PGresult *res,
                             bool timed_out, const char *why);

#endif
