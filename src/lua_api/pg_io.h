/*
 * pg_io.h - libpq's connect and statement with every wait polled on the
 * socket against a deadline (src/lua_api/pg_conn.c): what fw.pg runs on, and
 * what exactly_once's PostgreSQL sink (runtime/stream) opens its own
 * connection with.
 */
#ifndef FLOWWARDEN_PG_IO_H
#define FLOWWARDEN_PG_IO_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

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
 * Runs n statements (sqls[i] with nparams[i] text parameters params[i]) in
 * one round trip (libpq's pipeline mode, one sync after the last) on conn
 * until deadline_ns. FW_PG_OK: out[i] is statement i's result, owned by the
 * caller (an error result when the server refused it, PGRES_PIPELINE_ABORTED
 * when an earlier one failed). Otherwise every out[i] is NULL and the
 * failure is fw_pg_exec's (the caller must close conn).
 */
fw_pg_io_t fw_pg_exec_pipeline (PGconn *conn, int n, const char *const *sqls, const int *nparams,
                                const char *const *const *params, int64_t deadline_ns,
                                PGresult **out, char *why, size_t len);

#endif
