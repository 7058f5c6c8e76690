/*
 * http_transfer.c - one HTTP exchange over libcurl (see http_transfer.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "lua_api/http_transfer.h"

#define MAX_REDIRECTS 10

struct fw_http_session {
   CURL *easy;
};

struct fw_http_transfer {
   CURL *easy; /* the session's, borrowed while it performs and after */
   CURLU *url;
   struct curl_slist *headers;
   const fw_http_request_t *rq;
   const fw_http_policy_t *policy;
   char *body;
   size_t len, cap;
   long status;
   bool too_large, nomem;
   fw_http_verdict_t denied;
   char denied_what[FW_HTTP_HOST_MAX]; /* the host or address refused */
   char target[1400];
   char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void
global_init (void)
{
   global_rc = curl_global_init (CURL_GLOBAL_DEFAULT);
}

static bool fail (fw_http_failure_t *f, const char *type, const char *fmt, ...)
   __attribute__ ((format (printf, 3, 4)));

static bool
fail (fw_http_failure_t *f, const char *type, const char *fmt, ...)
{
   va_list ap;
   f->type = type;
   va_start (ap, fmt);
   vsnprintf (f->message, sizeof f->message, fmt, ap);
   va_end (ap);
   return false;
}

fw_http_session_t *
fw_http_session_new (void)
{
   fw_http_session_t *s;

   pthread_once (&global_once, global_init);
   if (global_rc != CURLE_OK || !(s = calloc (1, sizeof *s))) {
      return NULL;
   }
   if (!(s->easy = curl_easy_init ())) {
      free (s);
      return NULL;
   }
   return s;
}

void
fw_http_session_destroy (fw_http_session_t *s)
{
   if (s) {
      curl_easy_cleanup (s->easy);
      free (s);
   }
}

fw_http_transfer_t *
fw_http_transfer_new (void)
{
   return calloc (1, sizeof (fw_http_transfer_t));
}

void
fw_http_transfer_destroy (fw_http_transfer_t *t)
{
   if (t) {
      curl_url_cleanup (t->url);
      curl_slist_free_all (t->headers);
      free (t->body);
      free (t);
   }
}

/* Copies a part of url (as libcurl normalized it) into out; false when the
 * part is missing or does not fit. */
static bool
url_part (CURLU *url, CURLUPart part, char *out, size_t n)
{
   char *s = NULL;
   bool ok = curl_url_get (url, part, &s, 0) == CURLUE_OK && strlen (s) < n;

   if (ok) {
      strcpy (out, s);
   }
   curl_free (s);
   return ok;
}

/* url for a message: without query, fragment and user info, at most 200
 * characters. */
static void
redact_url (const char *url, char *out, size_t n)
{
   const char *auth = strstr (url, "://");
   size_t len = strcspn (url, "?#"), start = 0, o = 0;

   if (auth && (size_t) (auth - url) < len) {
      const char *host = auth + 3;
      const char *at = memrchr (host, '@', strcspn (host, "/?#"));
      if (at) {
         o = (size_t) snprintf (out, n, "%.*s", (int) (host - url), url);
         start = (size_t) (at + 1 - url);
      }
   }
   if (o >= n) {
      o = n - 1;
   }
   snprintf (out + o, n - o, "%.*s%s", (int) (len - start > 200 ? 200 : len - start), url + start,
             len - start > 200 ? "..." : "");
}

static bool
deny (fw_http_failure_t *f, const char *target, fw_http_verdict_t v, const char *what)
{
   if (v == FW_HTTP_DENIED_HOST) {
      return fail (f, "Http.Denied", "fw.http: %s: host \"%s\" is not in allow_hosts", target,
                   what);
   }
   return fail (f, "Http.Denied",
                "fw.http: %s: %s is a link-local address (list it in allow_hosts to allow it)",
                target, what);
}

bool
fw_http_transfer_prepare (fw_http_transfer_t *t, const char *call, const fw_http_request_t *rq,
                          const fw_http_policy_t *policy, fw_http_failure_t *f)
{
   char shown[300], scheme[16], raw[FW_HTTP_HOST_MAX], host[FW_HTTP_HOST_MAX], port[16];
   char path[1024];
   size_t sl = strcspn (rq->url, ":");
   fw_http_verdict_t v;
   CURLUcode uc;

   t->rq = rq;
   t->policy = policy;
   redact_url (rq->url, shown, sizeof shown);
   if (!(rq->url[sl] == ':' && strncmp (rq->url + sl, "://", 3) == 0 &&
         ((sl == 4 && strncasecmp (rq->url, "http", 4) == 0) ||
          (sl == 5 && strncasecmp (rq->url, "https", 5) == 0)))) {
      return fail (f, "ArgumentError", "%s: url must be an http:// or https:// URL, got \"%s\"",
                   call, shown);
   }
   if (!t->url && !(t->url = curl_url ())) {
      return fail (f, NULL, "out of memory");
   }
   uc = curl_url_set (t->url, CURLUPART_URL, rq->url, 0);
   if (uc == CURLUE_OUT_OF_MEMORY) {
      return fail (f, NULL, "out of memory");
   }
   if (uc != CURLUE_OK || !url_part (t->url, CURLUPART_SCHEME, scheme, sizeof scheme) ||
       !url_part (t->url, CURLUPART_HOST, raw, sizeof raw) ||
       !fw_http_host_normalize (raw, host, sizeof host)) {
      return fail (f, "ArgumentError", "%s: url \"%s\" is not a valid URL (%s)", call, shown,
                   uc != CURLUE_OK ? curl_url_strerror (uc) : "no host, or one too long");
   }
   if (!url_part (t->url, CURLUPART_PORT, port, sizeof port)) {
      port[0] = '\0';
   }
   if (!url_part (t->url, CURLUPART_PATH, path, sizeof path)) {
      strcpy (path, "/...");
   }
   snprintf (t->target, sizeof t->target, "%s %s://%s%s%s%s", rq->method, scheme, raw,
             port[0] ? ":" : "", port, path);
   if ((v = fw_http_policy_check (policy, host, NULL)) != FW_HTTP_ALLOWED) {
      return deny (f, t->target, v, host);
   }
   return true;
}

const char *
fw_http_transfer_target (const fw_http_transfer_t *t)
{
   return t->target;
}

bool
fw_http_transfer_add_header (fw_http_transfer_t *t, const char *line)
{
   struct curl_slist *next = curl_slist_append (t->headers, line);
   if (!next) {
      return false;
   }
   t->headers = next;
   return true;
}

/* libcurl calls this before each new connection, redirects included: the
 * allow list and the link-local rule see the host of the URL being fetched
 * and the address it resolved to before a packet goes out. */
static curl_socket_t
open_socket (void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
   fw_http_transfer_t *t = clientp;
   char *effective = NULL, raw[FW_HTTP_HOST_MAX], host[FW_HTTP_HOST_MAX];
   CURLU *u = curl_url ();
   fw_http_verdict_t v = FW_HTTP_DENIED_HOST;

   (void) purpose;
   curl_easy_getinfo (t->easy, CURLINFO_EFFECTIVE_URL, &effective);
   if (u && effective && curl_url_set (u, CURLUPART_URL, effective, 0) == CURLUE_OK &&
       url_part (u, CURLUPART_HOST, raw, sizeof raw) &&
       fw_http_host_normalize (raw, host, sizeof host)) {
      v = fw_http_policy_check (t->policy, host, &address->addr);
   } else {
      strcpy (host, "(unreadable)");
   }
   curl_url_cleanup (u);
   if (v == FW_HTTP_DENIED_LINK_LOCAL) {
      const void *a = address->family == AF_INET
                         ? (const void *) &((struct sockaddr_in *) &address->addr)->sin_addr
                         : (const void *) &((struct sockaddr_in6 *) &address->addr)->sin6_addr;
      if (!inet_ntop (address->family, a, t->denied_what, sizeof t->denied_what)) {
         strcpy (t->denied_what, "?");
      }
   } else if (v == FW_HTTP_DENIED_HOST) {
      snprintf (t->denied_what, sizeof t->denied_what, "%s", host);
   }
   if (v != FW_HTTP_ALLOWED) {
      t->denied = v;
      return CURL_SOCKET_BAD;
   }
   return socket (address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

static size_t
on_body (char *data, size_t size, size_t nmemb, void *clientp)
{
   fw_http_transfer_t *t = clientp;
   size_t n = size * nmemb, max = t->rq->max_body;

   if (n > max - t->len) {
      t->too_large = true;
      return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
   }
   if (t->len + n > t->cap) {
      size_t cap = t->cap ? t->cap : 16384;
      char *p;
      while (cap < t->len + n) {
         cap *= 2;
      }
      cap = cap > max ? max : cap;
      if (!(p = realloc (t->body, cap))) {
         t->nomem = true;
         return 0;
      }
      t->body = p;
      t->cap = cap;
   }
   memcpy (t->body + t->len, data, n);
   t->len += n;
   return n;
}

/* Sets this request's options on the freshly reset handle. */
static CURLcode
set_options (fw_http_transfer_t *t, long timeout_ms)
{
   const fw_http_request_t *rq = t->rq;
   CURL *e = t->easy;
   CURLcode rc = CURLE_OK;
   char *url = NULL;

#define SET(opt, val)                         \
   do {                                       \
      if (rc == CURLE_OK) {                   \
         rc = curl_easy_setopt (e, opt, val); \
      }                                       \
   } while (0)

   if (curl_url_get (t->url, CURLUPART_URL, &url, 0) != CURLUE_OK) {
      return CURLE_OUT_OF_MEMORY;
   }
   SET (CURLOPT_URL, url); /* copied by libcurl */
   curl_free (url);
   SET (CURLOPT_NOSIGNAL, 1L); /* the handler watchdog signals this thread; curl must not */
   SET (CURLOPT_PROTOCOLS_STR, "http,https");
   SET (CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
   SET (CURLOPT_FOLLOWLOCATION, rq->follow_redirects ? 1L : 0L);
   SET (CURLOPT_MAXREDIRS, (long) MAX_REDIRECTS);
   SET (CURLOPT_TIMEOUT_MS, timeout_ms);
   SET (CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms > 0 && rq->connect_timeout_ms < timeout_ms
                                      ? (long) rq->connect_timeout_ms
                                      : timeout_ms);
   SET (CURLOPT_SSL_VERIFYPEER, rq->verify_tls ? 1L : 0L);
   SET (CURLOPT_SSL_VERIFYHOST, rq->verify_tls ? 2L : 0L);
   if (rq->ca_file) {
      SET (CURLOPT_CAINFO, rq->ca_file);
   }
   SET (CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) rq->max_body);
   SET (CURLOPT_ACCEPT_ENCODING, ""); /* max_body bounds the decoded body */
   SET (CURLOPT_USERAGENT, "flowwarden/" FW_VERSION);
   SET (CURLOPT_HTTPHEADER, t->headers);
   SET (CURLOPT_WRITEFUNCTION, on_body);
   SET (CURLOPT_WRITEDATA, t);
   SET (CURLOPT_OPENSOCKETFUNCTION, open_socket);
   SET (CURLOPT_OPENSOCKETDATA, t);
   SET (CURLOPT_ERRORBUFFER, t->errbuf);
   if (strcmp (rq->method, "HEAD") == 0) {
      SET (CURLOPT_NOBODY, 1L);
   } else if (rq->body || strcmp (rq->method, "POST") == 0) {
      SET (CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) rq->body_len);
      SET (CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
      if (strcmp (rq->method, "POST") != 0) {
         SET (CURLOPT_CUSTOMREQUEST, rq->method);
      }
   } else if (strcmp (rq->method, "GET") != 0) {
      SET (CURLOPT_CUSTOMREQUEST, rq->method);
   }
#undef SET
   return rc;
}

static bool
is_tls_error (CURLcode rc)
{
   switch (rc) {
   case CURLE_SSL_CONNECT_ERROR:
   case CURLE_PEER_FAILED_VERIFICATION:
   case CURLE_SSL_CERTPROBLEM:
   case CURLE_SSL_CIPHER:
   case CURLE_SSL_CACERT_BADFILE:
   case CURLE_SSL_CRL_BADFILE:
   case CURLE_SSL_ISSUER_ERROR:
   case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
   case CURLE_SSL_INVALIDCERTSTATUS:
   case CURLE_SSL_ENGINE_NOTFOUND:
   case CURLE_SSL_ENGINE_SETFAILED:
   case CURLE_SSL_ENGINE_INITFAILED:
   case CURLE_SSL_SHUTDOWN_FAILED:
   case CURLE_SSL_CLIENTCERT:
   case CURLE_USE_SSL_FAILED:
      return true;
   default:
      return false;
   }
}

/* "16MB", "64KB" or "1000 bytes". */
static void
format_size (size_t bytes, char *out, size_t n)
{
   if (bytes && bytes % (1024 * 1024) == 0) {
      snprintf (out, n, "%zuMB", bytes / (1024 * 1024));
   } else if (bytes && bytes % 1024 == 0) {
      snprintf (out, n, "%zuKB", bytes / 1024);
   } else {
      snprintf (out, n, "%zu bytes", bytes);
   }
}

/* The typed failure for what curl_easy_perform returned. libcurl's own
 * texts name hosts, never whole URLs. */
static bool
classify (fw_http_transfer_t *t, CURLcode rc, long timeout_ms, bool budget_bound,
          fw_http_failure_t *f)
{
   const char *target = t->target, *detail = t->errbuf[0] ? t->errbuf : curl_easy_strerror (rc);
   long os_errno = 0;
   double connect_time = 0;
   char size[32];

   if (t->denied != FW_HTTP_ALLOWED && rc == CURLE_COULDNT_CONNECT) {
      return deny (f, target, t->denied, t->denied_what);
   }
   if (t->nomem || rc == CURLE_OUT_OF_MEMORY) {
      return fail (f, NULL, "out of memory");
   }
   if (t->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
      format_size (t->rq->max_body, size, sizeof size);
      return fail (f, "Http.TooLarge",
                   "fw.http: %s: the response body is larger than max_body (%s)", target, size);
   }
   if (is_tls_error (rc)) {
      return fail (f, "Http.TLS", "fw.http: %s: %s", target, detail);
   }
   switch (rc) {
   case CURLE_OPERATION_TIMEDOUT:
      curl_easy_getinfo (t->easy, CURLINFO_CONNECT_TIME, &connect_time);
      return fail (f, "Http.Timeout", "fw.http: %s: %s within %ld ms%s", target,
                   connect_time > 0 ? "no complete response" : "no connection", timeout_ms,
                   budget_bound ? " (the handler's remaining budget)" : "");
   case CURLE_COULDNT_CONNECT:
      curl_easy_getinfo (t->easy, CURLINFO_OS_ERRNO, &os_errno);
      if (os_errno == ECONNREFUSED) {
         return fail (f, "Http.Connect", "fw.http: %s: connection refused", target);
      }
      return fail (f, "Http.Connect", "fw.http: %s: cannot connect (%s)", target,
                   os_errno ? strerror ((int) os_errno) : detail);
   case CURLE_COULDNT_RESOLVE_HOST:
   case CURLE_COULDNT_RESOLVE_PROXY:
      return fail (f, "Http.Connect", "fw.http: %s: %s", target, detail);
   case CURLE_SEND_ERROR:
   case CURLE_RECV_ERROR:
      return fail (f, "Http.Connect", "fw.http: %s: connection lost (%s)", target, detail);
   case CURLE_TOO_MANY_REDIRECTS:
      return fail (f, "Http.Protocol", "fw.http: %s: more than %d redirects", target,
                   MAX_REDIRECTS);
   case CURLE_UNSUPPORTED_PROTOCOL:
      return fail (f, "Http.Protocol",
                   "fw.http: %s: redirected to a URL that is not http:// or https://", target);
   default:
      return fail (f, "Http.Protocol", "fw.http: %s: %s", target, detail);
   }
}

/* The handle outlives the transfer: drop its pointers into it. */
static void
detach (CURL *e)
{
   curl_easy_setopt (e, CURLOPT_HTTPHEADER, NULL);
   curl_easy_setopt (e, CURLOPT_POSTFIELDS, NULL);
   curl_easy_setopt (e, CURLOPT_WRITEDATA, NULL);
   curl_easy_setopt (e, CURLOPT_OPENSOCKETDATA, NULL);
   curl_easy_setopt (e, CURLOPT_ERRORBUFFER, NULL);
}

bool
fw_http_transfer_perform (fw_http_transfer_t *t, fw_http_session_t *s, long timeout_ms,
                          bool budget_bound, fw_http_failure_t *f)
{
   CURLcode rc;

   t->easy = s->easy;
   curl_easy_reset (t->easy); /* options only: the connection cache stays */
   if ((rc = set_options (t, timeout_ms)) != CURLE_OK) {
      detach (t->easy);
      if (rc == CURLE_OUT_OF_MEMORY) {
         return fail (f, NULL, "out of memory");
      }
      return fail (f, "Http.Protocol", "fw.http: %s: libcurl refused an option: %s", t->target,
                   curl_easy_strerror (rc));
   }
   rc = curl_easy_perform (t->easy);
   detach (t->easy);
   if (rc != CURLE_OK) {
      return classify (t, rc, timeout_ms, budget_bound, f);
   }
   curl_easy_getinfo (t->easy, CURLINFO_RESPONSE_CODE, &t->status);
   return true;
}

long
fw_http_transfer_status (const fw_http_transfer_t *t)
{
   return t->status;
}

const char *
fw_http_transfer_body (const fw_http_transfer_t *t, size_t *len)
{
   *len = t->body ? t->len : 0;
   return t->body ? t->body : "";
}

void
fw_http_transfer_drop_body (fw_http_transfer_t *t)
{
   free (t->body);
   t->body = NULL;
   t->len = t->cap = 0;
}

bool
fw_http_transfer_next_header (fw_http_transfer_t *t, void **iter, const char **name,
                              const char **value)
{
   struct curl_header *h = curl_easy_nextheader (t->easy, CURLH_HEADER, -1, *iter);

   if (!h) {
      return false;
   }
   *iter = h;
   *name = h->name;
   *value = h->value;
   return true;
}
