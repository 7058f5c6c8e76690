/* The admin endpoint on 127.0.0.1, port 0, with fake control callbacks:
 * every route and error code through libcurl, the token, address checks,
 * idle connections, and GETs answered while a POST is being worked on. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "../../src/ops/admin-private.h"
#include "flowwarden/clock.h"
#include "ops/admin.h"

/* --- the fake runtime --------------------------------------------------- */

typedef struct {
   fw_metrics_t *metrics;
   fw_stream_state_t audit_state;
   char last_call[256];
   int calls;
   /* reload blocks while hold is set, so a test can do things meanwhile */
   pthread_mutex_t mu;
   pthread_cond_t cond;
   bool hold;
   bool reloading;
   bool audit_window; /* audit: an oplog window and a checkpoint 60 s old */
} fake_t;

static int
fake_list (void *ud, fw_stream_snapshot_t **out)
{
   fake_t *f = ud;
   fw_stream_snapshot_t *s = calloc (2, sizeof *s);

   snprintf (s[0].name, sizeof s[0].name, "orders");
   s[0].state = FW_STREAM_RUNNING;
   s[0].events = 12;
   s[0].lag_seconds = 0.25;
   s[0].has_oplog_window = true;
   s[0].oplog_window_seconds = 3600;
   s[0].last_event_ms = 1700000000123LL;
   s[0].dlq_pending = 3;
   snprintf (s[0].last_error_type, sizeof s[0].last_error_type, "Payment.Timeout");
   snprintf (s[1].name, sizeof s[1].name, "audit");
   /* Read by the HTTP thread and the history sampler while a test changes it. */
   s[1].state = __atomic_load_n (&f->audit_state, __ATOMIC_RELAXED);
   s[1].dlq_pending = -1;
   if (!fw_stream_state_ready (s[1].state)) {
      snprintf (s[1].reason, sizeof s[1].reason, "the change stream history is lost");
   }
   s[1].oplog_window_unknown = FW_OPLOG_UNKNOWN_EMPTY;
   if (__atomic_load_n (&f->audit_window, __ATOMIC_RELAXED)) {
      s[1].has_oplog_window = true;
      s[1].oplog_window_seconds = 3600;
      s[1].checkpoint_ms = fw_now_ms () - 60000;
   }
   *out = s;
   return 2;
}

static fw_control_result_t
fake_action (void *ud, const char *stream, fw_stream_action_t action, char *message, size_t len)
{
   fake_t *f = ud;

   f->calls++;
   snprintf (f->last_call, sizeof f->last_call, "%s %s", fw_stream_action_name (action), stream);
   if (strcmp (stream, "orders") != 0 && strcmp (stream, "audit") != 0) {
      return FW_CONTROL_NOT_FOUND;
   }
   if (strcmp (stream, "audit") == 0) {
      snprintf (message, len, "stream audit has failed: restart it instead");
      return FW_CONTROL_CONFLICT;
   }
   if (action == FW_STREAM_RESTART) {
      snprintf (message, len, "restarting at the next event boundary");
      return FW_CONTROL_ACCEPTED;
   }
   snprintf (message, len, "%s done", fw_stream_action_name (action));
   return FW_CONTROL_OK;
}

static fw_control_result_t
fake_reload (void *ud, char *message, size_t len)
{
   fake_t *f = ud;

   pthread_mutex_lock (&f->mu);
   f->calls++;
   f->reloading = true;
   pthread_cond_broadcast (&f->cond);
   while (f->hold) {
      pthread_cond_wait (&f->cond, &f->mu);
   }
   f->reloading = false;
   pthread_mutex_unlock (&f->mu);
   snprintf (f->last_call, sizeof f->last_call, "reload");
   snprintf (message, len, "reloaded script.lua: version a -> b");
   return FW_CONTROL_OK;
}

/* The dead-letter routes: says what it was asked, as JSON; an id "broken"
 * fails with an answer (as a replay that ran and did not resolve). */
static fw_control_result_t
fake_dlq (void *ud, const fw_admin_dlq_request_t *req, char **json, char *message, size_t len)
{
   fake_t *f = ud;
   char buf[1024];
   int n;

   f->calls++;
   n = snprintf (buf, sizeof buf, "{\"verb\":%d,\"id\":\"%s\",\"args\":\"", (int) req->verb,
                 req->id ? req->id : "");
   for (int i = 0; i < req->n_args && n < (int) sizeof buf; i++) {
      n += snprintf (buf + n, sizeof buf - (size_t) n, "%s=%s;", req->keys[i], req->values[i]);
   }
   snprintf (buf + n, sizeof buf - (size_t) n, "\"}");
   *json = strdup (buf);
   if (req->id && strcmp (req->id, "broken") == 0) {
      snprintf (message, len, "the replay did not resolve it");
      return FW_CONTROL_FAILED;
   }
   if (req->id && strcmp (req->id, "gone") == 0) {
      free (*json);
      *json = NULL;
      snprintf (message, len, "no DLQ entry with _id or eventId \"gone\"");
      return FW_CONTROL_NOT_FOUND;
   }
   return FW_CONTROL_OK;
}

static fake_t fake;

/* The running endpoint and the test's response buffer: a test that fails
 * leaves both to teardown, which stops the endpoint (and a reload it held)
 * so that the next test starts clean and nothing leaks. */
static fw_admin_t *g_admin;
static struct resp *g_resp;

static fw_admin_t *
start (const char *token)
{
   fw_admin_options_t opts = {0};
   fw_error_t err;
   fw_admin_t *a;
   fw_stream_metrics_t *b;

   memset (&fake, 0, sizeof fake);
   pthread_mutex_init (&fake.mu, NULL);
   pthread_cond_init (&fake.cond, NULL);
   fake.metrics = fw_metrics_new ();
   fake.audit_state = FW_STREAM_FAILED;
   b = fw_metrics_stream (fake.metrics, "orders");
   fw_stream_metrics_event_received (b, FW_METRICS_OP_INSERT, 0);
   opts.listen = "127.0.0.1:0";
   opts.token = token;
   opts.metrics = fake.metrics;
   opts.control = (fw_admin_control_t){fake_list, fake_action, fake_reload, &fake,
                                       NULL,      NULL,        fake_dlq};
   a = fw_admin_start (&opts, &err);
   if (!a) {
      fail_msg ("fw_admin_start: %s", err.message);
   }
   assert_true (fw_admin_port (a) > 0);
   g_admin = a;
   return a;
}

static void
stop (fw_admin_t *a)
{
   g_admin = NULL;
   fw_admin_stop (a);
   fw_metrics_destroy (fake.metrics);
   pthread_cond_destroy (&fake.cond);
   pthread_mutex_destroy (&fake.mu);
}

/* --- the client ----------------------------------------------------------- */

typedef struct resp {
   long status;
   char body[200000];
   size_t len;
   char headers[4096];
   size_t hlen;
   double seconds;
   CURLcode rc;
} resp_t;

static size_t
on_body (char *p, size_t size, size_t n, void *ud)
{
   resp_t *r = ud;
   size_t k = size * n;
   if (r->len + k >= sizeof r->body) {
      return 0;
   }
   memcpy (r->body + r->len, p, k);
   r->len += k;
   r->body[r->len] = '\0';
   return k;
}

static size_t
on_header (char *p, size_t size, size_t n, void *ud)
{
   resp_t *r = ud;
   size_t k = size * n;
   if (r->hlen + k < sizeof r->headers) {
      memcpy (r->headers + r->hlen, p, k);
      r->hlen += k;
      r->headers[r->hlen] = '\0';
   }
   return k;
}

static int port;

/* The test's response buffer (freed by teardown). */
static resp_t *
response (void)
{
   free (g_resp);
   g_resp = malloc (sizeof *g_resp);
   assert_non_null (g_resp);
   return g_resp;
}

static int
teardown (void **state)
{
   (void) state;
   if (g_admin) { /* the test failed: a reload it held is let go, the endpoint stopped */
      pthread_mutex_lock (&fake.mu);
      fake.hold = false;
      pthread_cond_broadcast (&fake.cond);
      pthread_mutex_unlock (&fake.mu);
      stop (g_admin);
   }
   free (g_resp);
   g_resp = NULL;
   return 0;
}

static void
http (const char *method, const char *path, const char *token, size_t body_len, resp_t *r)
{
   CURL *c = curl_easy_init ();
   struct curl_slist *h = NULL;
   char url[512], auth[256];
   char *body = NULL;

   memset (r, 0, sizeof *r);
   snprintf (url, sizeof url, "http://127.0.0.1:%d%s", port, path);
   curl_easy_setopt (c, CURLOPT_URL, url);
   curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, on_body);
   curl_easy_setopt (c, CURLOPT_WRITEDATA, r);
   curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, on_header);
   curl_easy_setopt (c, CURLOPT_HEADERDATA, r);
   curl_easy_setopt (c, CURLOPT_TIMEOUT, 20L);
   curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
   if (strcmp (method, "HEAD") == 0) {
      curl_easy_setopt (c, CURLOPT_NOBODY, 1L);
   } else if (strcmp (method, "POST") == 0) {
      body = calloc (1, body_len + 1);
      memset (body, 'x', body_len);
      curl_easy_setopt (c, CURLOPT_POSTFIELDS, body);
      curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE, (long) body_len);
   } else if (strcmp (method, "GET") != 0) {
      curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, method);
   }
   if (token) {
      snprintf (auth, sizeof auth, "Authorization: %s", token);
      h = curl_slist_append (h, auth);
      curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
   }
   r->rc = curl_easy_perform (c);
   curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &r->status);
   curl_easy_getinfo (c, CURLINFO_TOTAL_TIME, &r->seconds);
   curl_slist_free_all (h);
   curl_easy_cleanup (c);
   free (body);
}

#define assert_has(text, s)                             \
   do {                                                 \
      if (!strstr ((text), (s))) {                      \
         fail_msg ("expected %s in:\n%s", (s), (text)); \
      }                                                 \
   } while (0)

/* --- the routes ----------------------------------------------------------- */

static void
admin_every_route_answers (void **state)
{
   fw_admin_t *a = start (NULL);
   resp_t *r = response ();
   (void) state;

   port = fw_admin_port (a);
   http ("GET", "/metrics", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->headers, "Content-Type: text/plain; version=0.0.4; charset=utf-8");
   assert_has (r->body, "flowwarden_events_total{stream=\"orders\",operation=\"insert\"} 1\n");
   assert_has (r->body, "# TYPE process_cpu_seconds_total counter");

   http ("GET", "/healthz", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (r->body, "{\"status\":\"ok\"}\n");
   http ("HEAD", "/healthz", NULL, 0, r);
   assert_int_equal (r->status, 200);

   http ("GET", "/readyz", NULL, 0, r);
   assert_int_equal (r->status, 503);
   assert_string_equal (
      r->body,
      "{\"ready\":false,\"streams\":2,\"not_ready\":[{\"stream\":\"audit\","
      "\"state\":\"failed\",\"reason\":\"the change stream history is lost\"}]}\n");
   __atomic_store_n (&fake.audit_state, FW_STREAM_RETRYING, __ATOMIC_RELAXED);
   http ("GET", "/readyz", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (r->body, "{\"ready\":true,\"streams\":2,\"not_ready\":[]}\n");
   __atomic_store_n (&fake.audit_state, FW_STREAM_FAILED, __ATOMIC_RELAXED);

   http ("GET", "/v1/streams", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->headers, "Content-Type: application/json");
   assert_has (r->body,
               "{\"streams\":[{\"name\":\"orders\",\"state\":\"running\",\"ready\":true,"
               "\"reason\":null,\"script_version\":null,"
               "\"last_event_time\":\"2023-11-14T22:13:20.123Z\",\"lag_seconds\":0.25,"
               "\"oplog_window_seconds\":3600,\"headroom_seconds\":3599.75,"
               "\"events_per_second\":0,\"events\":{\"total\":12,");
   assert_has (r->body, "\"last_error_type\":\"Payment.Timeout\"");
   assert_has (r->body, "\"dlq_pending\":3,");
   assert_has (r->body,
               "{\"name\":\"audit\",\"state\":\"failed\",\"ready\":false,"
               "\"reason\":\"the change stream history is lost\"");
   http ("GET", "/v1/streams/audit", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "{\"name\":\"audit\",\"state\":\"failed\"");
   assert_has (r->body, "\"dlq_pending\":null,");
   /* Issue 38: why it is unknown. */
   assert_has (r->body,
               "\"oplog_window_seconds\":null,\"headroom_seconds\":null,"
               "\"oplog_window_unknown\":\"empty oplog\",");
   /* A stream that does not read is behind by its checkpoint's age. */
   __atomic_store_n (&fake.audit_window, true, __ATOMIC_RELAXED);
   http ("GET", "/v1/streams/audit", NULL, 0, r);
   assert_has (r->body, "\"oplog_window_seconds\":3600,\"headroom_seconds\":");
   assert_null (strstr (r->body, "oplog_window_unknown"));
   {
      double headroom = strtod (strstr (r->body, "\"headroom_seconds\":") + 19, NULL);
      assert_true (headroom > 3530 && headroom <= 3540);
   }
   __atomic_store_n (&fake.audit_window, false, __ATOMIC_RELAXED);
   http ("GET", "/v1/streams/nope", NULL, 0, r);
   assert_int_equal (r->status, 404);
   assert_string_equal (r->body, "{\"error\":\"no stream named \\\"nope\\\"\",\"status\":404}\n");

   http ("POST", "/v1/streams/orders/pause", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (fake.last_call, "pause orders");
   assert_has (r->body,
               "{\"result\":\"ok\",\"message\":\"pause done\",\"action\":\"pause\","
               "\"stream\":{\"name\":\"orders\",\"state\":\"running\"");
   http ("POST", "/v1/streams/orders/resume", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (fake.last_call, "resume orders");
   http ("POST", "/v1/streams/orders/restart", NULL, 0, r);
   assert_int_equal (r->status, 202);
   assert_has (r->body,
               "{\"result\":\"accepted\",\"message\":\"restarting at the next event boundary\"");
   http ("POST", "/v1/streams/audit/resume", NULL, 0, r);
   assert_int_equal (r->status, 409);
   assert_string_equal (r->body,
                        "{\"error\":\"stream audit has failed: restart it instead\","
                        "\"status\":409}\n");
   http ("POST", "/v1/streams/nope/pause", NULL, 0, r);
   assert_int_equal (r->status, 404);
   assert_string_equal (r->body, "{\"error\":\"no stream named \\\"nope\\\"\",\"status\":404}\n");
   /* The name is percent-decoded. */
   http ("POST", "/v1/streams/ord%65rs/pause", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (fake.last_call, "pause orders");

   http ("POST", "/v1/reload", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (
      r->body, "{\"result\":\"ok\",\"message\":\"reloaded script.lua: version a -> b\"}\n");

   /* Errors. */
   http ("GET", "/v1/reload", NULL, 0, r);
   assert_int_equal (r->status, 405);
   assert_has (r->headers, "Allow: POST");
   assert_string_equal (r->body, "{\"error\":\"GET /v1/reload: use POST\",\"status\":405}\n");
   http ("GET", "/v1/streams/orders/pause", NULL, 0, r);
   assert_int_equal (r->status, 405);
   http ("POST", "/metrics", NULL, 0, r);
   assert_int_equal (r->status, 405);
   assert_has (r->headers, "Allow: GET, HEAD");
   http ("DELETE", "/v1/streams/orders", NULL, 0, r);
   assert_int_equal (r->status, 405);
   http ("GET", "/nothing", NULL, 0, r);
   assert_int_equal (r->status, 404);
   assert_has (r->body, "{\"error\":\"no such endpoint: /nothing");
   fake.calls = 0;
   http ("POST", "/v1/reload", NULL, FW_ADMIN_MAX_BODY + 1, r);
   assert_int_equal (r->status, 413);
   assert_string_equal (r->body, "{\"error\":\"request body over 65536 bytes\",\"status\":413}\n");
   assert_int_equal (fake.calls, 0);
   http ("POST", "/v1/streams/orders/pause", NULL, FW_ADMIN_MAX_BODY, r);
   assert_int_equal (r->status, 200);
   stop (a);
}

static void
admin_token_guards_posts_only (void **state)
{
   fw_admin_t *a = start ("s3cret-token");
   resp_t *r = response ();
   (void) state;

   port = fw_admin_port (a);
   http ("POST", "/v1/reload", NULL, 0, r);
   assert_int_equal (r->status, 401);
   assert_has (r->headers, "WWW-Authenticate: Bearer realm=\"flowwarden\"");
   assert_has (r->body,
               "{\"error\":\"missing or wrong token: send \\\"Authorization: Bearer "
               "TOKEN\\\"");
   http ("POST", "/v1/streams/orders/pause", "Bearer s3cret-tokex", 0, r);
   assert_int_equal (r->status, 401);
   http ("POST", "/v1/streams/orders/pause", "Bearer s3cret-token-and-more", 0, r);
   assert_int_equal (r->status, 401);
   http ("POST", "/v1/streams/orders/pause", "Basic s3cret-token", 0, r);
   assert_int_equal (r->status, 401);
   assert_int_equal (fake.calls, 0);
   http ("POST", "/v1/streams/orders/pause", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 200);
   http ("POST", "/v1/reload", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 200);
   assert_int_equal (fake.calls, 2);
   http ("GET", "/metrics", NULL, 0, r);
   assert_int_equal (r->status, 200);
   http ("GET", "/v1/streams", NULL, 0, r);
   assert_int_equal (r->status, 200);
   stop (a);
}

static void
admin_addresses_are_checked_and_open_ones_need_a_token (void **state)
{
   fw_error_t err;
   (void) state;

   assert_true (fw_admin_check_options ("127.0.0.1:9464", NULL, "--admin", &err));
   assert_true (fw_admin_check_options ("localhost:9464", "", "--admin", &err));
   assert_true (fw_admin_check_options ("[::1]:9464", NULL, "--admin", &err));
   assert_true (fw_admin_check_options ("127.1.2.3:0", NULL, "--admin", &err));
   assert_true (fw_admin_check_options ("0.0.0.0:9464", "tok", "--admin", &err));
   assert_true (fw_admin_check_options (":9464", "tok", "--admin", &err));
   assert_false (fw_admin_check_options ("0.0.0.0:9464", NULL, "--admin", &err));
   assert_string_equal (err.message,
                        "--admin: refusing to serve the admin endpoint on 0.0.0.0:9464 without a "
                        "token: anyone who can reach that address could pause streams and reload "
                        "the script. Set a token (fw.defaults { admin = { token = "
                        "fw.env(\"FW_ADMIN_TOKEN\") } }) or listen on a loopback address such as "
                        "127.0.0.1");
   assert_false (fw_admin_check_options ("10.1.2.3:80", "", "admin.listen", &err));
   assert_non_null (strstr (err.message, "admin.listen: refusing to serve"));
   assert_false (fw_admin_check_options ("[::]:9464", NULL, "--admin", &err));
   assert_false (fw_admin_check_options ("9464", NULL, "--admin", &err));
   assert_string_equal (err.message,
                        "--admin: expected an address and port such as "
                        "\"127.0.0.1:9464\", got \"9464\"");
   assert_false (fw_admin_check_options ("127.0.0.1:99999", NULL, "--admin", &err));
   assert_string_equal (err.message,
                        "--admin: \"127.0.0.1:99999\": the port must be a number from 0 to 65535");
   assert_false (fw_admin_check_options ("127.0.0.1:", NULL, "--admin", &err));
   assert_false (fw_admin_check_options ("::1:9464", NULL, "--admin", &err));
   assert_non_null (strstr (err.message, "write an IPv6 address in brackets, e.g. \"[::1]:9464\""));
   assert_false (fw_admin_check_options ("example.com:80", NULL, "--admin", &err));
   assert_non_null (strstr (err.message, "\"example.com\" is not an IP address"));
   assert_false (fw_admin_check_options ("127.0.0.1:1", "bad token", "--admin", &err));
   assert_non_null (strstr (err.message, "the admin token must be printable ASCII without spaces"));
   assert_false (fw_admin_check_options (NULL, NULL, "--admin", &err));
}

static void
admin_busy_port_is_reported (void **state)
{
   fw_admin_t *a = start (NULL);
   fw_admin_options_t opts = {0};
   fw_error_t err;
   char listen[64];
   (void) state;

   snprintf (listen, sizeof listen, "127.0.0.1:%d", fw_admin_port (a));
   opts.listen = listen;
   opts.metrics = fake.metrics;
   assert_null (fw_admin_start (&opts, &err));
   assert_non_null (strstr (err.message, "cannot serve the admin endpoint on 127.0.0.1:"));
   stop (a);
}

static int
connect_idle (int p)
{
   struct sockaddr_in sa = {0};
   int fd = socket (AF_INET, SOCK_STREAM, 0);

   sa.sin_family = AF_INET;
   sa.sin_port = htons ((uint16_t) p);
   sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
   assert_true (fd >= 0);
   assert_int_equal (connect (fd, (struct sockaddr *) &sa, sizeof sa), 0);
   return fd;
}

static void
admin_idle_connections_do_not_block_metrics (void **state)
{
   fw_admin_t *a = start (NULL);
   resp_t *r = response ();
   int fds[200];
   (void) state;

   port = fw_admin_port (a);
   for (int i = 0; i < 200; i++) {
      fds[i] = connect_idle (port);
      /* Some send half a request and stop. */
      if (i % 4 == 0) {
         static const char half[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
         assert_int_equal (write (fds[i], half, sizeof half - 1), (ssize_t) (sizeof half - 1));
      }
   }
   /* Answered while the 200 stay connected: the endpoint drops an idle one only after
    * CONNECTION_TIMEOUT_S (30 s), later than curl gives up (20 s), so a GET that waited for
    * them would fail (rc CURLE_OPERATION_TIMEDOUT), however busy the machine. */
   for (int i = 0; i < 5; i++) {
      http ("GET", "/metrics", NULL, 0, r);
      assert_int_equal (r->rc, CURLE_OK);
      assert_int_equal (r->status, 200);
   }
   http ("GET", "/readyz", NULL, 0, r);
   assert_int_equal (r->status, 503);
   for (int i = 0; i < 200; i++) {
      close (fds[i]);
   }
   stop (a);
}

typedef struct {
   resp_t r;   /* the POST's */
   resp_t get; /* a GET made meanwhile */
} poster_t;

static void *
post_reload (void *arg)
{
   poster_t *p = arg;
   http ("POST", "/v1/reload", NULL, 0, &p->r);
   return NULL;
}

static void
admin_gets_answer_while_a_post_is_worked_on (void **state)
{
   fw_admin_t *a = start (NULL);
   resp_t *r = response ();
   static poster_t poster;
   poster_t *p = &poster;
   pthread_t t;
   (void) state;

   port = fw_admin_port (a);
   fake.hold = true;
   assert_int_equal (pthread_create (&t, NULL, post_reload, p), 0);
   pthread_mutex_lock (&fake.mu);
   while (!fake.reloading) {
      pthread_cond_wait (&fake.cond, &fake.mu);
   }
   pthread_mutex_unlock (&fake.mu);
   /* The reload is blocked in the runtime, and stays so until both GETs returned: a GET
    * that waited for the POST would never return (curl gives up after 20 s, status 0).
    * Checked once the reload is let go, so that a failure leaves no thread behind. */
   http ("GET", "/metrics", NULL, 0, r);
   http ("GET", "/v1/streams/orders", NULL, 0, &p->get);
   pthread_mutex_lock (&fake.mu);
   fake.hold = false;
   pthread_cond_broadcast (&fake.cond);
   pthread_mutex_unlock (&fake.mu);
   pthread_join (t, NULL);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "flowwarden_events_total");
   assert_int_equal (p->get.status, 200);
   assert_int_equal (p->r.status, 200);
   assert_has (p->r.body, "reloaded script.lua");
   stop (a);
}

/* --- the console ------------------------------------------------------- */

static void
admin_serves_the_console_with_its_headers (void **state)
{
   fw_admin_t *a = start (NULL);
   resp_t *r = response ();
   (void) state;

   port = fw_admin_port (a);
   http ("GET", "/", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->headers, "Content-Type: text/html; charset=utf-8");
   assert_has (r->headers, "Content-Security-Policy: default-src 'none'; script-src 'self'; ");
   assert_has (r->headers, "frame-ancestors 'none'");
   assert_has (r->headers, "X-Content-Type-Options: nosniff");
   assert_has (r->body, "<script src=\"/console.js\" defer></script>");
   http ("GET", "/console.js", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->headers, "Content-Type: text/javascript");
   assert_null (strstr (r->body, "innerHTML"));
   http ("GET", "/console.css", NULL, 0, r);
   assert_has (r->headers, "Content-Type: text/css");
   http ("POST", "/", NULL, 0, r);
   assert_int_equal (r->status, 405);
   /* Every answer, errors too, forbids framing and sniffing. */
   http ("GET", "/nope", NULL, 0, r);
   assert_int_equal (r->status, 404);
   assert_has (r->headers, "Content-Security-Policy: ");
   assert_has (r->headers, "X-Content-Type-Options: nosniff");

   http ("GET", "/v1/console", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "\"token_required\":false,\"dlq\":true,\"history_step_seconds\":5}");
   /* The sampler took one sample of each stream at start. */
   http ("GET", "/v1/history", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "{\"step_seconds\":5,\"window_seconds\":900,\"now\":");
   assert_has (r->body, "\"orders\":{\"t\":[");
   assert_has (r->body, "\"lag_seconds\":[0.25]");
   stop (a);
}

static void
admin_dlq_routes_reach_the_runtime_with_their_arguments (void **state)
{
   fw_admin_t *a = start ("s3cret-token");
   resp_t *r = response ();
   char many[1024] = "/v1/dlq/entries?";
   (void) state;

   port = fw_admin_port (a);
   http ("GET", "/v1/dlq/entries?stream=orders&status=PENDING&error_type=Http", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_string_equal (r->body,
                        "{\"verb\":0,\"id\":\"\",\"args\":\"stream=orders;"
                        "status=PENDING;error_type=Http;\"}\n");
   http ("GET", "/v1/dlq/entries/e%201", NULL, 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "{\"verb\":1,\"id\":\"e 1\"");
   http ("GET", "/v1/dlq/sequences?stream=orders", NULL, 0, r);
   assert_has (r->body, "{\"verb\":2,\"id\":\"\",\"args\":\"stream=orders;\"}");
   http ("GET", "/v1/dlq/entries/gone", NULL, 0, r);
   assert_int_equal (r->status, 404);
   assert_has (r->body, "{\"error\":\"no DLQ entry with _id or eventId \\\"gone\\\"\"");

   /* Actions and documents need the token; the runtime is not asked. */
   fake.calls = 0;
   http ("POST", "/v1/dlq/entries/e1/replay?dry_run=1", NULL, 0, r);
   assert_int_equal (r->status, 401);
   assert_has (r->body, "This request sent no token");
   http ("POST", "/v1/dlq/entries/e1/discard", "Bearer wrong", 0, r);
   assert_int_equal (r->status, 401);
   assert_has (r->body, "This request sent a wrong token");
   http ("GET", "/v1/dlq/entries/e1?documents=1", NULL, 0, r);
   assert_int_equal (r->status, 401);
   assert_int_equal (fake.calls, 0);
   http ("GET", "/v1/dlq/entries/e1?documents=1", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "\"args\":\"documents=1;\"");
   http ("POST", "/v1/dlq/entries/e1/replay?dry_run=1", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 200);
   assert_has (r->body, "{\"verb\":3,\"id\":\"e1\",\"args\":\"dry_run=1;\"}");
   http ("POST", "/v1/dlq/entries/e1/discard?reason=dup", "Bearer s3cret-token", 0, r);
   assert_has (r->body, "{\"verb\":4,\"id\":\"e1\",\"args\":\"reason=dup;\"}");
   /* A replay that ran and failed answers 422 with what it did. */
   http ("POST", "/v1/dlq/entries/broken/replay", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 422);
   assert_has (r->body, "{\"verb\":3,\"id\":\"broken\"");
   http ("GET", "/v1/dlq/entries/e1/replay", NULL, 0, r);
   assert_int_equal (r->status, 405);
   http ("POST", "/v1/dlq/entries/e1/explode", "Bearer s3cret-token", 0, r);
   assert_int_equal (r->status, 404);
   for (int i = 0; i <= FW_ADMIN_DLQ_MAX_ARGS; i++) {
      snprintf (many + strlen (many), sizeof many - strlen (many), "a%d=1&", i);
   }
   http ("GET", many, NULL, 0, r);
   assert_int_equal (r->status, 400);
   stop (a);
}

static void
admin_token_file_is_read_and_checked (void **state)
{
   char dir[] = "/tmp/fw-token-XXXXXX", path[64];
   fw_error_t err;
   char *token;
   FILE *f;
   (void) state;

   assert_non_null (mkdtemp (dir));
   snprintf (path, sizeof path, "%s/token", dir);
   umask (077); /* the file is private, as it should be: no warning */
   assert_false (fw_admin_read_token_file (path, &token, &err));
   assert_has (err.message, "--admin-token-file: cannot read ");
   assert_has (err.message, "No such file or directory");
   f = fopen (path, "w");
   fclose (f);
   assert_false (fw_admin_read_token_file (path, &token, &err));
   assert_has (err.message, "is empty");
   f = fopen (path, "w");
   fputs ("two words\n", f);
   fclose (f);
   assert_false (fw_admin_read_token_file (path, &token, &err));
   assert_has (err.message, "printable ASCII without spaces");
   f = fopen (path, "w");
   fputs ("one\ntwo\n", f);
   fclose (f);
   assert_false (fw_admin_read_token_file (path, &token, &err));
   assert_has (err.message, "one line");
   f = fopen (path, "w");
   fputs ("s3cret\r\n", f);
   fclose (f);
   assert_true (fw_admin_read_token_file (path, &token, &err));
   assert_string_equal (token, "s3cret");
   free (token);
   unlink (path);
   rmdir (dir);
}

static void
admin_history_keeps_the_last_15_minutes (void **state)
{
   fw_admin_history_t *h = fw_admin_history_new ();
   fw_stream_snapshot_t s[2];
   fw_strbuf_t out;
   char *text, *t;
   int commas = 0;
   (void) state;

   memset (s, 0, sizeof s);
   snprintf (s[0].name, sizeof s[0].name, "orders");
   snprintf (s[1].name, sizeof s[1].name, "gone");
   /* 200 samples 5 s apart: the ring keeps the last 180; "gone" stops
    * after the first and leaves once its newest sample is 15 min old. */
   for (int i = 0; i < 200; i++) {
      s[0].lag_seconds = i;
      s[0].events_per_second = 0.5;
      fw_admin_history_record (h, s, i == 0 ? 2 : 1, 1000000 + (int64_t) i * 5000);
   }
   fw_strbuf_init (&out);
   fw_admin_history_json (h, &out, 2000000);
   text = fw_strbuf_steal (&out, NULL);
   assert_null (strstr (text, "\"gone\""));
   assert_has (text, "\"orders\":{\"t\":[1100000,1105000,");
   assert_has (text, ",1995000],\"lag_seconds\":[20,21,");
   assert_has (text, ",199],\"events_per_second\":[0.5,");
   t = strstr (text, "\"lag_seconds\":[");
   for (; *t != ']'; t++) {
      commas += *t == ',';
   }
   assert_int_equal (commas + 1, FW_ADMIN_HISTORY_SAMPLES);
   free (text);
   fw_admin_history_destroy (h);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown (admin_every_route_answers, teardown),
      cmocka_unit_test_teardown (admin_token_guards_posts_only, teardown),
      cmocka_unit_test_teardown (admin_addresses_are_checked_and_open_ones_need_a_token, teardown),
      cmocka_unit_test_teardown (admin_busy_port_is_reported, teardown),
      cmocka_unit_test_teardown (admin_idle_connections_do_not_block_metrics, teardown),
      cmocka_unit_test_teardown (admin_gets_answer_while_a_post_is_worked_on, teardown),
      cmocka_unit_test_teardown (admin_serves_the_console_with_its_headers, teardown),
      cmocka_unit_test_teardown (admin_dlq_routes_reach_the_runtime_with_their_arguments, teardown),
      cmocka_unit_test_teardown (admin_token_file_is_read_and_checked, teardown),
      cmocka_unit_test_teardown (admin_history_keeps_the_last_15_minutes, teardown),
   };
   int rc;

   curl_global_init (CURL_GLOBAL_DEFAULT);
   rc = cmocka_run_group_tests (tests, NULL, NULL);
   curl_global_cleanup ();
   return rc;
}
