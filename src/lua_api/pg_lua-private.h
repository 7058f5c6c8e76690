/*
 * pg_lua-private.h - what the files of fw.pg share: the socket-level IO
 * bounded by a deadline (pg_conn.c) and the mapping of values between Lua
 * and PostgreSQL's text format (pg_values.c).
 */
#ifndef FLOWWARDEN_PG_LUA_PRIVATE_H
#define FLOWWARDEN_PG_LUA_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <lua.h>

typedef enum {
   FW_PG_OK,      /* done (a result may still carry a server error) */
   FW_PG_TIMEOUT, /* the deadline came first; the statement was cancelled */
   FW_PG_LOST,    /* the connection failed or was closed */
} fw_pg_io_t;

/*
 * Opens *out to uri (a libpq URI or conninfo), waiting on its socket until
 * deadline_ns (CLOCK_MONOTONIC). On failure *out is NULL and why (len bytes)
 * holds libpq's reason with the URI's secrets hidden. The caller owns *out
 * (PQfinish).
 */
fw_pg_io_t fw_pg_connect (const char *uri, int64_t deadline_ns, PGconn **out, char *why,
                          size_t len);

/*
 * Runs sql with n text parameters (values[i] NULL: SQL NULL) on conn (in
 * non-blocking mode) until deadline_ns. FW_PG_OK: *out is the statement's
 * result (owned by the caller: PQclear), an error result when the server
 * refused it. FW_PG_TIMEOUT: a cancel request was sent; the caller must
 * close conn. FW_PG_LOST: why holds the reason.
 */
fw_pg_io_t fw_pg_exec (PGconn *conn, const char *sql, int n, const char *const *values,
                       int64_t deadline_ns, PGresult **out, char *why, size_t len);

/*
 * Converts the parameters table at params_idx (absolute; nil: none) to
 * text, for fw_pg_exec: pushes a table holding the strings (keep it on the
 * stack while values is used) and a userdata array of the pointers, and
 * returns their count (the highest integer key). Raises ArgumentError for a
 * value with no text form. *values points into the userdata.
 */
int fw_pg_push_params (lua_State *L, int params_idx, const char ***values);

/* Pushes res's rows as a list of tables keyed by column name, each value
 * mapped by its column's type (docs/lua-api.md). */
void fw_pg_push_rows (lua_State *L, const PGresult *res);

#endif
