/*
 * pg_pipeline.c - a prepared statement run once or many times in one round
 * trip, with libpq's pipeline mode (see pg_lua-private.h).
 *
 * On the wire: [Parse] then Bind/Describe/Execute per row, then one Sync.
 * The server answers each in order; after an error it skips the rest up to
 * the Sync (libpq reports those as PGRES_PIPELINE_ABORTED).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "pg_lua-private.h"

/* The next result of conn, waiting for it until deadline_ns. *res NULL:
 * the end of the current statement's results. */
static fw_pg_io_t
next_result (PGconn *conn, int64_t deadline_ns, PGresult **res)
{
   while (PQisBusy (conn)) {
      int ready = fw_pg_wait_socket (conn, POLLIN, deadline_ns);
      if (ready == 0) {
         return FW_PG_TIMEOUT;
      }
      if (ready < 0 || !PQconsumeInput (conn)) {
         return FW_PG_LOST;
      }
   }
   *res = PQgetResult (conn);
   return FW_PG_OK;
}

/* Queues the whole pipeline in libpq's buffer. */
static bool
send_all (PGconn *conn, const char *sql, const char *name, bool prepare, int n_rows,
          const fw_pg_params_t *rows)
{
   if (!PQenterPipelineMode (conn)) {
      return false;
   }
   if (prepare && !PQsendPrepare (conn, name, sql, 0, NULL)) {
      return false;
   }
   for (int i = 0; i < n_rows; i++) {
      if (!PQsendQueryPrepared (conn, name, rows[i].n, rows[i].values, NULL, NULL, 0)) {
         return false;
      }
   }
   return PQpipelineSync (conn) == 1;
}

/* Keeps res in out: the first error wins, else the latest result. */
static void
keep (fw_pg_batch_t *out, PGresult *res, int which)
{
   ExecStatusType st = PQresultStatus (res);

   if (st == PGRES_PIPELINE_ABORTED || (out->res && out->failed != INT32_MAX)) {
      PQclear (res);
      return;
   }
   if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE) {
      PQclear (out->res);
      out->res = res;
      out->failed = which;
      return;
   }
   if (which >= 0) {
      const char *n = PQcmdTuples (res);
      out->affected += *n ? strtoll (n, NULL, 10) : 0;
   }
   PQclear (out->res);
   out->res = res;
}

/* Reads the results of each queued statement, then the sync's. */
static fw_pg_io_t
read_all (PGconn *conn, int first, int n_rows, int64_t deadline_ns, fw_pg_batch_t *out)
{
   PGresult *res;
   fw_pg_io_t io;

   for (int which = first; which < n_rows; which++) {
      /* One statement: its result(s), then NULL. */
      if ((io = next_result (conn, deadline_ns, &res)) != FW_PG_OK) {
         return io;
      }
      if (!res) {
         return FW_PG_LOST; /* a statement without a result: the protocol broke */
      }
      do {
         keep (out, res, which);
         if ((io = next_result (conn, deadline_ns, &res)) != FW_PG_OK) {
            return io;
         }
      } while (res);
   }
   if ((io = next_result (conn, deadline_ns, &res)) != FW_PG_OK) {
      return io;
   }
   io = res && PQresultStatus (res) == PGRES_PIPELINE_SYNC ? FW_PG_OK : FW_PG_LOST;
   PQclear (res);
   return io;
}

fw_pg_io_t
fw_pg_pipeline (PGconn *conn, const char *sql, const char *name, bool prepare, int n_rows,
                const fw_pg_params_t *rows, int64_t deadline_ns, fw_pg_batch_t *out, char *why,
                size_t len)
{
   fw_pg_io_t io;

   out->res = NULL;
   out->failed = INT32_MAX; /* none yet: set to n_rows below */
   out->affected = 0;
   if (!send_all (conn, sql, name, prepare, n_rows, rows)) {
      fw_pg_reason (conn, why, len);
      return FW_PG_LOST;
   }
   if ((io = fw_pg_flush (conn, deadline_ns)) == FW_PG_OK) {
      io = read_all (conn, prepare ? -1 : 0, n_rows, deadline_ns, out);
   }
   if (io == FW_PG_OK && (!PQexitPipelineMode (conn) || PQstatus (conn) == CONNECTION_BAD)) {
      io = FW_PG_LOST;
   }
   if (io == FW_PG_LOST && out->failed != INT32_MAX) {
      return FW_PG_OK; /* the server said why before closing (57P01...): that error */
   }
   if (io != FW_PG_OK) {
      PQclear (out->res);
      out->res = NULL;
      if (io == FW_PG_TIMEOUT) {
         fw_pg_cancel (conn);
         snprintf (why, len, "no reply in time");
      } else {
         fw_pg_reason (conn, why, len);
      }
      return io;
   }
   if (out->failed == INT32_MAX) {
      out->failed = n_rows;
   }
   return FW_PG_OK;
}
