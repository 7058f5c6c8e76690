/*
 * pg_lua-private.h - what the files of fw.pg share: the socket-level IO
 * bounded by a deadline (pg_conn.c) and the mapping of values between Lua
 * and PostgreSQL's text format (pg_values.c).
 */
#ifndef FLOWWARDEN_PG_LUA_PRIVATE_H
#define FLOWWARDEN_PG_LUA_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <lua.h>

#include "lua_api/pg_io.h"

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

/* One execution's text parameters (values[i] NULL: SQL NULL). */
typedef struct {
   int n;
   const char *const *values;
} fw_pg_params_t;

/* What fw_pg_pipeline read. */
typedef struct {
   PGresult *res;    /* the first error result, else the last execution's (caller: PQclear) */
   int failed;       /* which execution failed (0-based; -1: the PREPARE; n: none) */
   int64_t affected; /* rows affected, summed over the executions */
} fw_pg_batch_t;

/*
 * Sends in one round trip on conn (libpq's pipeline mode): when prepare, a
 * PREPARE of sql as name; then statement name executed once per rows[i]
 * (n_rows >= 1); then one sync, so outside an explicit transaction all of
 * it is one implicit transaction. Waits for every reply until deadline_ns.
 * FW_PG_OK: *out holds the first error (the executions after it were
 * skipped by the server) or the last execution's result. FW_PG_TIMEOUT: a
 * cancel request was sent; FW_PG_LOST: why holds the reason; either way the
 * caller must close conn.
 */
fw_pg_io_t fw_pg_pipeline (PGconn *conn, const char *sql, const char *name, bool prepare,
                           int n_rows, const fw_pg_params_t *rows, int64_t deadline_ns,
                           fw_pg_batch_t *out, char *why, size_t len);

/* Cancels conn's running statement (best effort; pg_conn.c). */
void fw_pg_cancel (PGconn *conn);

/* Waits until conn's socket is ready for events or deadline_ns: 1 ready,
 * 0 the deadline passed, -1 poll failed (pg_conn.c). */
int fw_pg_wait_socket (PGconn *conn, short events, int64_t deadline_ns);

/* Sends what libpq buffered on conn, reading meanwhile (pg_conn.c). */
fw_pg_io_t fw_pg_flush (PGconn *conn, int64_t deadline_ns);

/* libpq's last message on conn, one line (pg_conn.c). */
void fw_pg_reason (PGconn *conn, char *why, size_t len);

/*
 * The prepared statements of one connection (pg_stmts.c), keyed by their
 * SQL text and named fw_1, fw_2... At most FW_PG_STMTS_MAX exist on the
 * server at once: then the caller deallocates the victim (the least
 * recently used, or one forgotten) before preparing another. Cleared when
 * the connection closes (the server forgets them too).
 */
#define FW_PG_STMTS_MAX 64

typedef struct {
   char *sql; /* NULL: forgotten (still on the server until deallocated) */
   size_t len;
   uint64_t hash;
   uint64_t used; /* the cache's clock at its last use */
   char name[16];
} fw_pg_stmt_t;

typedef struct {
   fw_pg_stmt_t *items; /* FW_PG_STMTS_MAX of them once one is added */
   int count;
   uint64_t clock;
   unsigned next_id;
} fw_pg_stmts_t;

/* The statement prepared for sql (marked used), or NULL. */
const fw_pg_stmt_t *fw_pg_stmts_find (fw_pg_stmts_t *cache, const char *sql);
/* When the cache is full: the name of the statement to deallocate first
 * (then fw_pg_stmts_remove); else NULL. */
const char *fw_pg_stmts_victim (const fw_pg_stmts_t *cache);
/* Names a new statement for sql (to be prepared by the caller); NULL when
 * the cache is full or out of memory. The pointer lives until the next
 * change of the cache. */
const fw_pg_stmt_t *fw_pg_stmts_add (fw_pg_stmts_t *cache, const char *sql);
/* Stops reusing statement name (failed to prepare, or its plan went stale);
 * it keeps its place until removed. */
void fw_pg_stmts_forget (fw_pg_stmts_t *cache, const char *name);
/* Drops statement name (deallocated on the server). */
void fw_pg_stmts_remove (fw_pg_stmts_t *cache, const char *name);
void fw_pg_stmts_clear (fw_pg_stmts_t *cache);
void fw_pg_stmts_destroy (fw_pg_stmts_t *cache);

/* The host names of a URI resolved for libpq (comma lists; NULL: keep the
 * URI's own). */
typedef struct {
   char *host;     /* each name, repeated once per address */
   char *hostaddr; /* the addresses, in the same order */
   char *port;     /* set only when the URI gives one port per host */
} fw_pg_hosts_t;

/*
 * Looks up the host names of uri (not addresses, socket directories, or
 * when it sets hostaddr), each in a thread of its own, until deadline_ns:
 * libpq's own lookup blocks without a bound (pg_resolve.c). FW_PG_OK: *out
 * holds what to pass to libpq (all NULL when there was nothing to look up;
 * free with fw_pg_hosts_free). FW_PG_TIMEOUT: a lookup outlasted the
 * deadline. FW_PG_LOST: a name did not resolve. why says which.
 */
fw_pg_io_t fw_pg_resolve (const char *uri, int64_t deadline_ns, fw_pg_hosts_t *out, char *why,
                          size_t len);
void fw_pg_hosts_free (fw_pg_hosts_t *h);

#endif
