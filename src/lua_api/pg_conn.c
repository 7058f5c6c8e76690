/*
 * pg_conn.c - libpq's connect and statement, each wait polled on the socket
 * against a deadline (see pg_lua-private.h).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "pg_lua-private.h"

/* 1: ready, 0: the deadline passed, -1: poll failed. */
static int
wait_socket (PGconn *conn, short events, int64_t deadline_ns)
{
   struct pollfd pfd = {.fd = PQsocket (conn), .events = events};

   if (pfd.fd < 0) {
      return -1;
   }
   for (;;) {
      int64_t left_ms = (deadline_ns - fw_mono_ns ()) / 1000000;
      int rc;
      if (left_ms <= 0) {
         return 0;
      }
      rc = poll (&pfd, 1, left_ms > 60000 ? 60000 : (int) left_ms);
      if (rc > 0) {
         return 1;
      }
      if (rc < 0 && errno != EINTR) {
         return -1;
      }
   }
}

/* libpq's message, one line, secrets of uri hidden (uri may be NULL). */
static void
copy_reason (const char *uri, const char *message, char *why, size_t len)
{
   char raw[512];
   size_t n;

   snprintf (raw, sizeof raw, "%s", message && *message ? message : "connection lost");
   for (n = strlen (raw); n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == ' '); n--) {
      raw[n - 1] = '\0';
   }
   for (char *p = raw; *p; p++) {
      if (*p == '\n') {
         *p = ' ';
      }
   }
   if (uri) {
      fw_log_redact_uri_error (uri, raw, why, len);
   } else {
      snprintf (why, len, "%s", raw);
   }
}

/* Server notices and warnings (RAISE NOTICE, "terminating connection due
 * to ...") go to the log at debug level: libpq's default prints them on
 * stderr, in the middle of the runtime's own lines. */
static void
log_notice (void *arg, const char *message)
{
   (void) arg;
   fw_log (FW_LOG_DEBUG, NULL, "fw.pg: server notice: %.*s", (int) strcspn (message, "\n"),
           message);
}

fw_pg_io_t
fw_pg_connect (const char *uri, int64_t deadline_ns, PGconn **out, char *why, size_t len)
{
   /* Timestamps in ISO 8601 whatever the server's default; options in the
    * URI come after, and win.
    * Host names come resolved (fw_pg_resolve): after the URI, they win.
    */
   static const char *const keys[] = {
      "options", "dbname", "fallback_application_name", "host", "hostaddr", "port", NULL};
   fw_pg_hosts_t hosts;
   fw_pg_io_t io = fw_pg_resolve (uri, deadline_ns, &hosts, why, len);
   const char *values[] = {"-c datestyle=ISO,YMD", uri,        "flowwarden", hosts.host,
                           hosts.hostaddr,         hosts.port, NULL};
   PGconn *conn;
   PostgresPollingStatusType st = PGRES_POLLING_WRITING;

   *out = NULL;
   if (io != FW_PG_OK) {
      return io;
   }
   conn = PQconnectStartParams (keys, values, 1);
   fw_pg_hosts_free (&hosts);
   if (!conn) {
      snprintf (why, len, "out of memory");
      return FW_PG_LOST;
   }
   PQsetNoticeProcessor (conn, log_notice, NULL);
   while (PQstatus (conn) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
          st != PGRES_POLLING_FAILED) {
      int ready = wait_socket (conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline_ns);
      if (ready == 0) {
         PQfinish (conn);
         snprintf (why, len, "no answer in time");
         return FW_PG_TIMEOUT;
      }
      st = ready < 0 ? PGRES_POLLING_FAILED : PQconnectPoll (conn);
   }
   if (st != PGRES_POLLING_OK || PQstatus (conn) != CONNECTION_OK ||
       PQsetnonblocking (conn, 1) != 0) {
      copy_reason (uri, PQerrorMessage (conn), why, len);
      PQfinish (conn);
      return FW_PG_LOST;
   }
   *out = conn;
   return FW_PG_OK;
}

static void *
cancel_run (void *arg)
{
   PGcancel *c = arg;
   char err[256];

   (void) PQcancel (c, err, sizeof err);
   PQfreeCancel (c);
   return NULL;
}

/* Asks the server to stop conn's statement (a short connection of its own;
 * best effort). libpq 15's PQcancel blocks (a connect without a bound: an
 * unreachable server holds it for minutes), so it runs in a detached thread
 * that owns the request; the caller may close conn at once. */
static void
cancel (PGconn *conn)
{
   PGcancel *c = PQgetCancel (conn);
   pthread_attr_t attr;
   pthread_t t;
   bool started;

   if (!c) {
      return;
   }
   started = pthread_attr_init (&attr) == 0;
   if (started) {
      started = pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                pthread_create (&t, &attr, cancel_run, c) == 0;
      pthread_attr_destroy (&attr);
   }
   if (!started) {
      cancel_run (c); /* no thread: here, as before */
   }
}

/* Sends what libpq buffered. */
static fw_pg_io_t
flush (PGconn *conn, int64_t deadline_ns)
{
   int rc;

   while ((rc = PQflush (conn)) == 1) {
      int ready = wait_socket (conn, POLLOUT | POLLIN, deadline_ns);
      if (ready == 0) {
         return FW_PG_TIMEOUT;
      }
      if (ready < 0 || !PQconsumeInput (conn)) {
         return FW_PG_LOST;
      }
   }
   return rc == 0 ? FW_PG_OK : FW_PG_LOST;
}

fw_pg_io_t
fw_pg_exec (PGconn *conn, const char *sql, int n, const char *const *values, int64_t deadline_ns,
            PGresult **out, char *why, size_t len)
{
   PGresult *keep = NULL, *res;
   fw_pg_io_t io;

   *out = NULL;
   if (!PQsendQueryParams (conn, sql, n, NULL, values, NULL, NULL, 0)) {
      copy_reason (NULL, PQerrorMessage (conn), why, len);
      return FW_PG_LOST;
   }
   if ((io = flush (conn, deadline_ns)) != FW_PG_OK) {
      goto failed;
   }
   for (;;) {
      while (PQisBusy (conn)) {
         int ready = wait_socket (conn, POLLIN, deadline_ns);
         if (ready == 0) {
            io = FW_PG_TIMEOUT;
            goto failed;
         }
         if (ready < 0 || !PQconsumeInput (conn)) {
            io = FW_PG_LOST;
            goto failed;
         }
      }
      if (!(res = PQgetResult (conn))) {
         break;
      }
      /* The first error wins; else the last result. */
      if (keep && PQresultStatus (keep) == PGRES_FATAL_ERROR) {
         PQclear (res);
      } else {
         PQclear (keep);
         keep = res;
      }
   }
   if (!keep || PQstatus (conn) == CONNECTION_BAD) {
      PQclear (keep);
      copy_reason (NULL, PQerrorMessage (conn), why, len);
      return FW_PG_LOST;
   }
   *out = keep;
   return FW_PG_OK;

failed:
   PQclear (keep);
   if (io == FW_PG_TIMEOUT) {
      cancel (conn);
      snprintf (why, len, "no reply in time");
   } else {
      copy_reason (NULL, PQerrorMessage (conn), why, len);
   }
   return io;
}

/* Reads the results of a pipeline of n statements up to its sync into out. */
static fw_pg_io_t
read_pipeline (PGconn *conn, int n, int64_t deadline_ns, PGresult **out)
{
   int i = 0;

   for (;;) {
      PGresult *res;
      while (PQisBusy (conn)) {
         int ready = wait_socket (conn, POLLIN, deadline_ns);
         if (ready == 0) {
            return FW_PG_TIMEOUT;
         }
         if (ready < 0 || !PQconsumeInput (conn)) {
            return FW_PG_LOST;
         }
      }
      if (!(res = PQgetResult (conn))) {
         i++; /* the end of statement i's results */
         if (i > n || PQstatus (conn) == CONNECTION_BAD) {
            return FW_PG_LOST;
         }
         continue;
      }
      if (PQresultStatus (res) == PGRES_PIPELINE_SYNC) {
         PQclear (res);
         return i == n ? FW_PG_OK : FW_PG_LOST;
      }
      if (i < n && !out[i]) {
         out[i] = res;
      } else {
         PQclear (res);
      }
   }
}

fw_pg_io_t
fw_pg_exec_pipeline (PGconn *conn, int n, const char *const *sqls, const int *nparams,
                     const char *const *const *params, int64_t deadline_ns, PGresult **out,
                     char *why, size_t len)
{
   fw_pg_io_t io = FW_PG_LOST;

   for (int i = 0; i < n; i++) {
      out[i] = NULL;
   }
   if (!PQenterPipelineMode (conn)) {
      goto failed;
   }
   for (int i = 0; i < n; i++) {
      if (!PQsendQueryParams (conn, sqls[i], nparams[i], NULL, params[i], NULL, NULL, 0)) {
         goto failed;
      }
   }
   if (!PQpipelineSync (conn) || (io = flush (conn, deadline_ns)) != FW_PG_OK ||
       (io = read_pipeline (conn, n, deadline_ns, out)) != FW_PG_OK) {
      goto failed;
   }
   if (!PQexitPipelineMode (conn)) {
      io = FW_PG_LOST;
      goto failed;
   }
   return FW_PG_OK;

failed:
   for (int i = 0; i < n; i++) {
      PQclear (out[i]);
      out[i] = NULL;
   }
   if (io == FW_PG_TIMEOUT) {
      cancel (conn);
      snprintf (why, len, "no reply in time");
   } else {
      copy_reason (NULL, PQerrorMessage (conn), why, len);
      io = FW_PG_LOST;
   }
   return io;
}

/* The helpers above, for pg_pipeline.c. */
int
fw_pg_wait_socket (PGconn *conn, short events, int64_t deadline_ns)
{
   return wait_socket (conn, events, deadline_ns);
}

fw_pg_io_t
fw_pg_flush (PGconn *conn, int64_t deadline_ns)
{
   return flush (conn, deadline_ns);
}

void
fw_pg_cancel (PGconn *conn)
{
   cancel (conn);
}

void
fw_pg_reason (PGconn *conn, char *why, size_t len)
{
   copy_reason (NULL, PQerrorMessage (conn), why, len);
}
