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

#include <lua.h>

/* Sets `pg` (a table: query, execute, transaction) and `pg_uri_check`
 * (uri -> true | false, why: libpq's parser, for config) in the table at
 * module_idx. May raise (memory). */
void fw_pg_lua_open (lua_State *L, int module_idx);

/* For `doctor`: connects to the PostgreSQL connection name declared by the
 * script loaded in L and runs SELECT 1, within timeout_ms. False with why
 * (len bytes; never the password) when that fails. */
bool fw_pg_lua_probe (lua_State *L, const char *name, int64_t timeout_ms, char *why, size_t len);

#endif
