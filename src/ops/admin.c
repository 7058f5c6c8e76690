/*
 * admin.c - the admin endpoint's server: address checks, routing, the token,
 * and the control thread POSTs run on.
 *
 * libmicrohttpd runs one internal thread with epoll: every GET is answered
 * there, from snapshots, without waiting on the runtime (but the dead-letter
 * ones, which read MongoDB on the control thread). A POST's
 * connection is suspended and its request queued for the control thread,
 * which calls the runtime (that may take a while: a reload, a pause waiting
 * for the event in flight) and resumes the connection with the answer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <microhttpd.h>

#include "admin-private.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/mono_cond.h"

#define CONNECTION_LIMIT 512
/* Every answer: scripts and styles from this origin only (no inline script,
 * no eval, no other origin), no framing, no plugin, no form posted away. */
#define CSP                                                                    \
   "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " \
   "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

#define CONNECTION_TIMEOUT_S 30

typedef enum {
   R_METRICS,
   R_HEALTHZ,
   R_READYZ,
   R_STREAMS,
   R_STREAM,
   R_ACTION,
   R_RELOAD,
   R_DLQ_STATS,
   R_DLQ, /* the dead-letter routes: req->dlq */
   R_HISTORY,
   R_CONSOLE, /* a file of the console: req->file */
   R_INFO     /* GET /v1/console: what the page needs to know first */
} route_t;

typedef struct request {
   struct request *next; /* the control queue */
   struct MHD_Connection *conn;
   route_t route;
   char *stream; /* R_STREAM, R_ACTION */
   char *filter; /* R_ACTION snapshot: its ?filter=, or NULL */
   fw_stream_action_t action;
   size_t body;    /* bytes of body seen */
   bool answered;  /* a response is queued */
   bool submitted; /* handed to the control thread */
   fw_control_result_t result;
   char message[1024];
   char *json;                    /* R_DLQ_STATS, R_DLQ: the answer (malloc'd) */
   fw_admin_dlq_request_t dlq;    /* R_DLQ; its strings malloc'd */
   const fw_console_file_t *file; /* R_CONSOLE */
} request_t;

struct fw_admin {
   struct MHD_Daemon *daemon;
   fw_metrics_t *metrics;
   fw_admin_control_t control;
   char *token;
   int port;
   pthread_t control_thread;
   bool thread_started;
   pthread_mutex_t mu;
   pthread_cond_t cond;
   request_t *head, *tail;
   bool stopping;
   fw_admin_history_t *history;
   pthread_t sampler;
   pthread_cond_t sampler_cond; /* on CLOCK_MONOTONIC; signalled on stop */
   bool sampler_started;
   bool http_thread_named;
};

const char *
fw_stream_action_name (fw_stream_action_t action)
{
   switch (action) {
   case FW_STREAM_PAUSE:
      return "pause";
   case FW_STREAM_RESUME:
      return "resume";
   case FW_STREAM_SNAPSHOT:
      return "snapshot";
   default:
      return "restart";
   }
}

/* --- answering ------------------------------------------------------------- */

static enum MHD_Result
reply (request_t *req, unsigned int status, const char *content_type, fw_strbuf_t *body,
       const char *allow)
{
   size_t len = 0;
   char *text = fw_strbuf_steal (body, &len);
   struct MHD_Response *resp;
   enum MHD_Result ret;

   req->answered = true;
   if (!text) {
      static const char oom[] = "{\"error\":\"out of memory\",\"status\":500}\n";
      resp = MHD_create_response_from_buffer (sizeof oom - 1, (void *) oom, MHD_RESPMEM_PERSISTENT);
      status = MHD_HTTP_INTERNAL_SERVER_ERROR;
      content_type = "application/json";
   } else {
      resp = MHD_create_response_from_buffer (len, text, MHD_RESPMEM_MUST_FREE);
      if (!resp) {
         free (text);
      }
   }
   if (!resp) {
      return MHD_NO;
   }
   MHD_add_response_header (resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
   MHD_add_response_header (resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
   MHD_add_response_header (resp, "Content-Security-Policy", CSP);
   MHD_add_response_header (resp, "X-Content-Type-Options", "nosniff");
   MHD_add_response_header (resp, "X-Frame-Options", "DENY");
   MHD_add_response_header (resp, "Referrer-Policy", "no-referrer");
   if (allow) {
      MHD_add_response_header (resp, MHD_HTTP_HEADER_ALLOW, allow);
   }
   if (status == MHD_HTTP_UNAUTHORIZED) {
      MHD_add_response_header (resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                               "Bearer realm=\"flowwarden\"");
   }
   ret = MHD_queue_response (req->conn, status, resp);
   MHD_destroy_response (resp);
   return ret;
}

static enum MHD_Result
reply_json (request_t *req, unsigned int status, fw_strbuf_t *body)
{
   return reply (req, status, "application/json", body, NULL);
}

static enum MHD_Result reply_error (request_t *req, unsigned int status, const char *allow,
                                    const char *fmt, ...) __attribute__ ((format (printf, 4, 5)));

static enum MHD_Result
reply_error (request_t *req, unsigned int status, const char *allow, const char *fmt, ...)
{
   char message[1024];
   fw_strbuf_t body;
   va_list ap;

   va_start (ap, fmt);
   vsnprintf (message, sizeof message, fmt, ap);
   va_end (ap);
   fw_strbuf_init (&body);
   fw_admin_json_error (&body, (int) status, message);
   return reply (req, status, "application/json", &body, allow);
}

static int
list_streams (fw_admin_t *a, fw_stream_snapshot_t **out)
{
   *out = NULL;
   if (!a->control.list_streams) {
      return 0;
   }
   return a->control.list_streams (a->control.ud, out);
}

static const fw_stream_snapshot_t *
find_stream (const fw_stream_snapshot_t *s, int n, const char *name)
{
   for (int i = 0; i < n; i++) {
      if (strcmp (s[i].name, name) == 0) {
         return &s[i];
      }
   }
   return NULL;
}

static enum MHD_Result
answer_get (fw_admin_t *a, request_t *req)
{
   fw_strbuf_t body;
   fw_stream_snapshot_t *snaps = NULL;
   const fw_stream_snapshot_t *one;
   enum MHD_Result ret;
   unsigned int status = MHD_HTTP_OK;
   int n;

   fw_strbuf_init (&body);
   switch (req->route) {
   case R_METRICS: {
      size_t len;
      char *text = fw_metrics_render (a->metrics, &len);
      if (!text) {
         return reply_error (req, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "out of memory");
      }
      fw_strbuf_append (&body, text, len);
      free (text);
      return reply (req, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &body, NULL);
   }
   case R_HEALTHZ:
      fw_strbuf_puts (&body, "{\"status\":\"ok\"}\n");
      return reply_json (req, MHD_HTTP_OK, &body);
   case R_CONSOLE:
      fw_strbuf_append (&body, (const char *) req->file->data, req->file->len);
      return reply (req, MHD_HTTP_OK, req->file->content_type, &body, NULL);
   case R_INFO:
      fw_strbuf_printf (&body,
                        "{\"version\":\"%s\",\"token_required\":%s,\"dlq\":%s,"
                        "\"history_step_seconds\":%d}\n",
                        FW_VERSION, a->token ? "true" : "false", a->control.dlq ? "true" : "false",
                        FW_ADMIN_HISTORY_STEP_MS / 1000);
      return reply_json (req, MHD_HTTP_OK, &body);
   case R_HISTORY:
      if (!a->history) {
         return reply_error (req, MHD_HTTP_NOT_FOUND, NULL, "no history is kept");
      }
      fw_admin_history_json (a->history, &body, fw_now_ms ());
      return reply_json (req, MHD_HTTP_OK, &body);
   default:
      break;
   }
   if ((n = list_streams (a, &snaps)) < 0) {
      return reply_error (req, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL,
                          "cannot list the streams (out of memory)");
   }
   if (req->route == R_READYZ) {
      status = fw_admin_json_ready (&body, snaps, n) ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
   } else if (req->route == R_STREAMS) {
      fw_reload_result_t reload;
      bool any = a->metrics && fw_metrics_last_reload (a->metrics, &reload);
      fw_admin_json_streams (&body, snaps, n, any ? &reload : NULL, fw_now_ms ());
   } else if ((one = find_stream (snaps, n, req->stream))) {
      fw_admin_json_stream (&body, one);
      fw_strbuf_puts (&body, "\n");
   } else {
      free (snaps);
      fw_strbuf_cleanup (&body);
      return reply_error (req, MHD_HTTP_NOT_FOUND, NULL, "no stream named \"%s\"", req->stream);
   }
   free (snaps);
   ret = reply_json (req, status, &body);
   return ret;
}

static unsigned int
control_status (fw_control_result_t r)
{
   switch (r) {
   case FW_CONTROL_OK:
      return MHD_HTTP_OK;
   case FW_CONTROL_ACCEPTED:
      return MHD_HTTP_ACCEPTED;
   case FW_CONTROL_NOT_FOUND:
      return MHD_HTTP_NOT_FOUND;
   case FW_CONTROL_CONFLICT:
      return MHD_HTTP_CONFLICT;
   case FW_CONTROL_FAILED:
      return MHD_HTTP_UNPROCESSABLE_CONTENT;
   default:
      return MHD_HTTP_SERVICE_UNAVAILABLE;
   }
}

/* The answer to a POST, once the control thread has run it. */
static enum MHD_Result
answer_post (fw_admin_t *a, request_t *req)
{
   unsigned int status = control_status (req->result);
   fw_strbuf_t body;

   if (status >= 400 && !(req->route == R_DLQ && req->json)) {
      return reply_error (req, status, NULL, "%s", req->message);
   }
   fw_strbuf_init (&body);
   if (req->route == R_DLQ_STATS || req->route == R_DLQ) {
      fw_strbuf_puts (&body, req->json ? req->json : "{}");
      fw_strbuf_puts (&body, "\n");
      return reply_json (req, status, &body);
   }
   fw_strbuf_printf (
      &body, "{\"result\":\"%s\",\"message\":", req->result == FW_CONTROL_OK ? "ok" : "accepted");
   fw_strbuf_json_string (&body, req->message);
   if (req->route == R_ACTION) {
      fw_stream_snapshot_t *snaps = NULL;
      const fw_stream_snapshot_t *one;
      int n = list_streams (a, &snaps);
      fw_strbuf_printf (&body,
                        ",\"action\":\"%s\",\"stream\":", fw_stream_action_name (req->action));
      if (n > 0 && (one = find_stream (snaps, n, req->stream))) {
         fw_admin_json_stream (&body, one);
      } else {
         fw_strbuf_json_string (&body, req->stream);
      }
      free (snaps);
   }
   fw_strbuf_puts (&body, "}\n");
   return reply_json (req, status, &body);
}

/* --- the control thread ------------------------------------------------------ */

static void
run_control (fw_admin_t *a, request_t *req)
{
   req->message[0] = '\0';
   if (req->route == R_DLQ) {
      req->result = a->control.dlq ? a->control.dlq (a->control.ud, &req->dlq, &req->json,
                                                     req->message, sizeof req->message)
                                   : FW_CONTROL_NOT_FOUND;
      if (req->result == FW_CONTROL_NOT_FOUND && !req->message[0]) {
         snprintf (req->message, sizeof req->message, "no dead-letter queue to read");
      }
   } else if (req->route == R_DLQ_STATS) {
      req->result = a->control.dlq_stats ? a->control.dlq_stats (a->control.ud, &req->json,
                                                                 req->message, sizeof req->message)
                                         : FW_CONTROL_NOT_FOUND;
      if (req->result == FW_CONTROL_NOT_FOUND && !req->message[0]) {
         snprintf (req->message, sizeof req->message, "no dead-letter queue to count");
      }
   } else if (req->route == R_RELOAD) {
      req->result = a->control.reload
                       ? a->control.reload (a->control.ud, req->message, sizeof req->message)
                       : FW_CONTROL_UNAVAILABLE;
   } else if (req->action == FW_STREAM_SNAPSHOT) {
      req->result = a->control.snapshot
                       ? a->control.snapshot (a->control.ud, req->stream, req->filter, req->message,
                                              sizeof req->message)
                       : FW_CONTROL_UNAVAILABLE;
   } else {
      req->result = a->control.stream_action
                       ? a->control.stream_action (a->control.ud, req->stream, req->action,
                                                   req->message, sizeof req->message)
                       : FW_CONTROL_UNAVAILABLE;
   }
   if (!req->message[0]) {
      snprintf (req->message, sizeof req->message, "%s",
                req->result == FW_CONTROL_NOT_FOUND     ? "no such stream"
                : req->result == FW_CONTROL_UNAVAILABLE ? "flowwarden is stopping"
                                                        : "");
   }
   if (req->result == FW_CONTROL_NOT_FOUND && req->route == R_ACTION) {
      snprintf (req->message, sizeof req->message, "no stream named \"%s\"", req->stream);
   }
}

static void *
control_main (void *arg)
{
   fw_admin_t *a = arg;

   pthread_setname_np (pthread_self (), "fw-admin-ctl");
   pthread_mutex_lock (&a->mu);
   for (;;) {
      request_t *req;
      while (!a->head && !a->stopping) {
         pthread_cond_wait (&a->cond, &a->mu);
      }
      if (!(req = a->head)) {
         break;
      }
      if (!(a->head = req->next)) {
         a->tail = NULL;
      }
      if (a->stopping) {
         req->result = FW_CONTROL_UNAVAILABLE;
         snprintf (req->message, sizeof req->message, "flowwarden is stopping");
      } else {
         pthread_mutex_unlock (&a->mu);
         run_control (a, req);
         pthread_mutex_lock (&a->mu);
      }
      /* The HTTP thread answers (and frees req) once resumed. */
      MHD_resume_connection (req->conn);
   }
   pthread_mutex_unlock (&a->mu);
   return NULL;
}

/* Queues req for the control thread; false when the endpoint is stopping. */
static bool
submit (fw_admin_t *a, request_t *req)
{
   bool ok;

   pthread_mutex_lock (&a->mu);
   ok = !a->stopping;
   if (ok) {
      req->submitted = true;
      req->next = NULL;
      if (a->tail) {
         a->tail->next = req;
      } else {
         a->head = req;
      }
      a->tail = req;
      /* Suspended under the lock, so the control thread cannot resume it
       * before it is suspended. */
      MHD_suspend_connection (req->conn);
      pthread_cond_signal (&a->cond);
   }
   pthread_mutex_unlock (&a->mu);
   return ok;
}

/* --- routing ---------------------------------------------------------------- */

static bool
token_matches (const char *expected, const char *header)
{
   static const char prefix[] = "Bearer ";
   size_t n, m;
   unsigned char diff;

   if (!header || strncmp (header, prefix, sizeof prefix - 1) != 0) {
      return false;
   }
   header += sizeof prefix - 1;
   n = strlen (expected);
   m = strlen (header);
   diff = n != m;
   /* Constant time in the token's length: the comparison does not stop at
    * the first wrong byte. */
   for (size_t i = 0; i < n; i++) {
      diff |= (unsigned char) (expected[i] ^ (i < m ? header[i] : 0));
   }
   return diff == 0;
}

static bool
ends_with_action (const char *rest, fw_stream_action_t *action, size_t *name_len)
{
   static const char *const suffixes[] = {"/pause", "/resume", "/restart", "/snapshot"};
   size_t n = strlen (rest);

   for (int i = 0; i < 4; i++) {
      size_t k = strlen (suffixes[i]);
      if (n > k && strcmp (rest + n - k, suffixes[i]) == 0) {
         *action = (fw_stream_action_t) i;
         *name_len = n - k;
         return true;
      }
   }
   return false;
}

/* Finds the route of url; *allow is the method it takes. False: no such
 * route. */
static bool
route (request_t *req, const char *url, const char **allow)
{
   static const char streams[] = "/v1/streams/";
   size_t name_len;

   *allow = "GET, HEAD";
   if ((req->file = fw_console_file (url))) {
      req->route = R_CONSOLE;
   } else if (strcmp (url, "/v1/console") == 0) {
      req->route = R_INFO;
   } else if (strcmp (url, "/v1/history") == 0) {
      req->route = R_HISTORY;
   } else if (strncmp (url, "/v1/dlq/", 8) == 0 && strcmp (url, "/v1/dlq/stats") != 0) {
      req->route = R_DLQ;
      return fw_admin_route_dlq (&req->dlq, url, allow);
   } else if (strcmp (url, "/metrics") == 0) {
      req->route = R_METRICS;
   } else if (strcmp (url, "/healthz") == 0) {
      req->route = R_HEALTHZ;
   } else if (strcmp (url, "/readyz") == 0) {
      req->route = R_READYZ;
   } else if (strcmp (url, "/v1/streams") == 0 || strcmp (url, streams) == 0) {
      req->route = R_STREAMS;
   } else if (strcmp (url, "/v1/dlq/stats") == 0) {
      req->route = R_DLQ_STATS;
   } else if (strcmp (url, "/v1/reload") == 0) {
      req->route = R_RELOAD;
      *allow = "POST";
   } else if (strncmp (url, streams, sizeof streams - 1) == 0) {
      const char *rest = url + sizeof streams - 1;
      if (ends_with_action (rest, &req->action, &name_len)) {
         req->route = R_ACTION;
         *allow = "POST";
      } else {
         req->route = R_STREAM;
         name_len = strlen (rest);
      }
      if (!(req->stream = strndup (rest, name_len))) {
         return false;
      }
   } else {
      return false;
   }
   return true;
}

static bool
authorized (fw_admin_t *a, request_t *req)
{
   return !a->token ||
          token_matches (a->token, MHD_lookup_connection_value (req->conn, MHD_HEADER_KIND,
                                                                MHD_HTTP_HEADER_AUTHORIZATION));
}

static enum MHD_Result
refuse (request_t *req)
{
   const char *header = MHD_lookup_connection_value (req->conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION);
   return reply_error (req, MHD_HTTP_UNAUTHORIZED, NULL,
                       "missing or wrong token: send \"Authorization: Bearer TOKEN\" with the "
                       "admin token (the flowwarden CLI reads it from FLOWWARDEN_ADMIN_TOKEN; "
                       "the console asks for it). This request %s",
                       !header ? "sent no token"
                       : strncmp (header, "Bearer ", 7) != 0
                          ? "has an Authorization header that is not \"Bearer TOKEN\""
                          : "sent a wrong token");
}

/* The first call for a request: the headers are in. */
static enum MHD_Result
begin (fw_admin_t *a, request_t *req, const char *url, const char *method)
{
   const char *allow, *length;
   bool is_get = strcmp (method, "GET") == 0 || strcmp (method, "HEAD") == 0;
   bool is_post = strcmp (method, "POST") == 0;

   if (!route (req, url, &allow)) {
      return reply_error (req, MHD_HTTP_NOT_FOUND, NULL,
                          "no such endpoint: %s (see GET /, /v1/streams, /v1/dlq/stats, "
                          "/v1/dlq/entries, /v1/history, /metrics, /healthz, /readyz)",
                          url);
   }
   if (strcmp (allow, "POST") == 0 ? !is_post : !is_get) {
      return reply_error (req, MHD_HTTP_METHOD_NOT_ALLOWED, allow, "%s %s: use %s", method, url,
                          allow);
   }
   if (req->route == R_DLQ) {
      MHD_get_connection_values (req->conn, MHD_GET_ARGUMENT_KIND, fw_admin_collect_arg, &req->dlq);
      if (req->dlq.n_args > FW_ADMIN_DLQ_MAX_ARGS) {
         return reply_error (req, MHD_HTTP_BAD_REQUEST, NULL, "more than %d query arguments",
                             FW_ADMIN_DLQ_MAX_ARGS);
      }
      /* A document may hold personal data: with a token, only its holder
       * sees one, as only its holder acts. */
      if (is_get && fw_admin_dlq_arg (&req->dlq, "documents") && !authorized (a, req)) {
         return refuse (req);
      }
   }
   if (is_get && (req->route == R_DLQ_STATS || req->route == R_DLQ)) {
      return MHD_YES; /* read on the control thread: submitted by the next call */
   }
   if (is_get) {
      return answer_get (a, req);
   }
   if (!authorized (a, req)) {
      return refuse (req);
   }
   if (req->route == R_ACTION && req->action == FW_STREAM_SNAPSHOT) {
      const char *filter = MHD_lookup_connection_value (req->conn, MHD_GET_ARGUMENT_KIND, "filter");
      if (filter && !(req->filter = strdup (filter))) {
         return MHD_NO;
      }
   }
   length = MHD_lookup_connection_value (req->conn, MHD_HEADER_KIND,
                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
   if (length && strtoull (length, NULL, 10) > FW_ADMIN_MAX_BODY) {
      return reply_error (req, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "request body over %d bytes",
                          FW_ADMIN_MAX_BODY);
   }
   return MHD_YES; /* the body (ignored) comes next */
}

static enum MHD_Result
handle (void *cls, struct MHD_Connection *conn, const char *url, const char *method,
        const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
   fw_admin_t *a = cls;
   request_t *req = *con_cls;

   (void) version;
   (void) upload_data;
   if (!a->http_thread_named) {
      /* libmicrohttpd's thread, named for top -H and the console's
       * benchmark; only this thread reads or writes the flag. */
      a->http_thread_named = true;
      pthread_setname_np (pthread_self (), "fw-admin-http");
   }
   if (!req) {
      if (!(req = calloc (1, sizeof *req))) {
         return MHD_NO;
      }
      req->conn = conn;
      *con_cls = req;
      return begin (a, req, url, method);
   }
   if (*upload_size) {
      req->body += *upload_size;
      *upload_size = 0;
      if (!req->answered && req->body > FW_ADMIN_MAX_BODY) {
         return reply_error (req, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "request body over %d bytes",
                             FW_ADMIN_MAX_BODY);
      }
      return MHD_YES;
   }
   if (req->answered) {
      return MHD_YES;
   }
   if (!req->submitted) {
      if (!submit (a, req)) {
         return reply_error (req, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, "flowwarden is stopping");
      }
      return MHD_YES;
   }
   return answer_post (a, req);
}

static void
completed (void *cls, struct MHD_Connection *conn, void **con_cls,
           enum MHD_RequestTerminationCode toe)
{
   request_t *req = *con_cls;

   (void) cls;
   (void) conn;
   (void) toe;
   if (req) {
      free (req->stream);
      free (req->filter);
      free (req->json);
      free ((char *) req->dlq.id);
      for (int i = 0; i < req->dlq.n_args && i < FW_ADMIN_DLQ_MAX_ARGS; i++) {
         free ((char *) req->dlq.keys[i]);
         free ((char *) req->dlq.values[i]);
      }
      free (req);
      *con_cls = NULL;
   }
}

/* libmicrohttpd's messages are about single connections (a client that
 * went away mid-request, ...): debug level. What matters to the operator,
 * a failed start, is reported by fw_admin_start itself. */
static void
mhd_log (void *cls, const char *fmt, va_list ap)
{
   char buf[1024];
   size_t n;

   (void) cls;
   if (!fw_log_enabled (FW_LOG_DEBUG)) {
      return;
   }
   vsnprintf (buf, sizeof buf, fmt, ap);
   n = strlen (buf);
   while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
      buf[--n] = '\0';
   }
   fw_log (FW_LOG_DEBUG, NULL, "admin endpoint: %s", buf);
}

/* --- the console's history ------------------------------------------------ */

/* Samples every stream's lag and rate into the history, once. */
static void
sample_history (fw_admin_t *a)
{
   fw_stream_snapshot_t *snaps = NULL;
   int n;

   if ((n = list_streams (a, &snaps)) >= 0) {
      fw_admin_history_record (a->history, snaps, n, fw_now_ms ());
   }
   free (snaps);
}

/* Samples the history every FW_ADMIN_HISTORY_STEP_MS after the one taken at
 * start, until the endpoint stops. */
static void *
sampler_main (void *arg)
{
   fw_admin_t *a = arg;
   int64_t next_ms;

   pthread_setname_np (pthread_self (), "fw-admin-hist");
   next_ms = fw_mono_ms ();
   pthread_mutex_lock (&a->mu);
   while (!a->stopping) {
      next_ms += FW_ADMIN_HISTORY_STEP_MS;
      while (!a->stopping &&
             fw_mono_cond_wait_until_ms (&a->sampler_cond, &a->mu, next_ms) != ETIMEDOUT) {
      }
      if (!a->stopping) {
         pthread_mutex_unlock (&a->mu);
         sample_history (a);
         pthread_mutex_lock (&a->mu);
      }
   }
   pthread_mutex_unlock (&a->mu);
   return NULL;
}

/* The first sample is taken before the endpoint answers, so the console's
 * history has every stream from its first request. */
static bool
start_sampler (fw_admin_t *a)
{
   if (!(a->history = fw_admin_history_new ())) {
      return false;
   }
   sample_history (a);
   a->sampler_started = pthread_create (&a->sampler, NULL, sampler_main, a) == 0;
   return a->sampler_started;
}

/* --- start and stop ------------------------------------------------------- */

fw_admin_t *
fw_admin_start (const fw_admin_options_t *opts, fw_error_t *error)
{
   fw_admin_t *a;
   address_t addr;
   const union MHD_DaemonInfo *info;
   int rc;
   bool mu_made = false, cond_made = false;
   unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                        MHD_USE_ERROR_LOG;

   if (!fw_admin_check_options (opts->listen, opts->token, "admin.listen", error) ||
       !fw_admin_parse_listen (opts->listen, "admin.listen", &addr, error)) {
      return NULL;
   }
   if (!(a = calloc (1, sizeof *a))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory starting the admin endpoint");
      return NULL;
   }
   if (!(mu_made = (rc = pthread_mutex_init (&a->mu, NULL)) == 0) ||
       !(cond_made = (rc = pthread_cond_init (&a->cond, NULL)) == 0) ||
       (rc = fw_mono_cond_init (&a->sampler_cond)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot set up the admin endpoint%s: %s",
                    cond_made ? "'s history sampler" : "", strerror (rc));
      if (cond_made) {
         pthread_cond_destroy (&a->cond);
      }
      if (mu_made) {
         pthread_mutex_destroy (&a->mu);
      }
      free (a);
      return NULL;
   }
   a->metrics = opts->metrics;
   a->control = opts->control;
   if (opts->token && *opts->token && !(a->token = strdup (opts->token))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory starting the admin endpoint");
      goto fail;
   }
   if (pthread_create (&a->control_thread, NULL, control_main, a) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the admin endpoint's control thread");
      goto fail;
   }
   a->thread_started = true;
   if (!start_sampler (a)) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the admin endpoint's history sampler");
      goto fail;
   }
   if (addr.v6) {
      flags |= MHD_USE_IPv6;
   }
   a->daemon = MHD_start_daemon (flags, 0, NULL, NULL, handle, a, MHD_OPTION_EXTERNAL_LOGGER,
                                 mhd_log, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr.ss,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int) CONNECTION_LIMIT,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) CONNECTION_TIMEOUT_S,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, a, MHD_OPTION_END);
   if (!a->daemon) {
      fw_error_set (error, FW_ERROR_IO,
                    "cannot serve the admin endpoint on %s (is the port in use, or the address "
                    "not one of this machine's?)",
                    opts->listen);
      goto fail;
   }
   info = MHD_get_daemon_info (a->daemon, MHD_DAEMON_INFO_BIND_PORT);
   a->port = info ? info->port : 0;
   if (!addr.loopback) {
      fw_log (FW_LOG_WARN, NULL,
              "admin endpoint on %s, beyond this machine: actions need the token, but reads "
              "do not (/metrics, stream status, the console, dead letters' errors and keys; "
              "documents need the token): let only operators reach that address",
              opts->listen);
   }
   return a;

fail:
   fw_admin_stop (a);
   return NULL;
}

int
fw_admin_port (const fw_admin_t *admin)
{
   return admin->port;
}

void
fw_admin_stop (fw_admin_t *a)
{
   if (!a) {
      return;
   }
   pthread_mutex_lock (&a->mu);
   a->stopping = true;
   pthread_cond_broadcast (&a->cond);
   pthread_cond_broadcast (&a->sampler_cond);
   pthread_mutex_unlock (&a->mu);
   if (a->sampler_started) {
      pthread_join (a->sampler, NULL);
   }
   if (a->thread_started) {
      /* Every queued request is resumed (answered 503) before it returns,
       * as MHD_stop_daemon needs. */
      pthread_join (a->control_thread, NULL);
   }
   if (a->daemon) {
      MHD_stop_daemon (a->daemon);
   }
   pthread_cond_destroy (&a->cond);
   pthread_cond_destroy (&a->sampler_cond);
   pthread_mutex_destroy (&a->mu);
   fw_admin_history_destroy (a->history);
   free (a->token);
   free (a);
}
