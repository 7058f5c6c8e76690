#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <bson/bson.h>

#include "flowwarden/log.h"
#include "flowwarden/secrets.h"

static fw_log_level_t threshold = FW_LOG_INFO;
static bool as_json = false;
static fw_log_sink_t sink;
static void *sink_ud;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

bool
fw_log_level_parse (const char *name, fw_log_level_t *out)
{
   for (int i = 0; i < 4; i++) {
      if (name && strcmp (name, level_names[i]) == 0) {
         *out = (fw_log_level_t) i;
         return true;
      }
   }
   return false;
}

void
fw_log_configure (fw_log_level_t level, bool json)
{
   threshold = level;
   as_json = json;
}

bool
fw_log_enabled (fw_log_level_t level)
{
   return level >= threshold;
}

static void
format_time (char *buf, size_t len)
{
   struct timespec ts;
   struct tm tm;

   clock_gettime (CLOCK_REALTIME, &ts);
   gmtime_r (&ts.tv_sec, &tm);
   snprintf (buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* Writes the whole line with one write(2) so concurrent records stay whole. */
static void
emit (const char *line, size_t len)
{
   while (len > 0) {
      ssize_t n = write (STDERR_FILENO, line, len);
      if (n <= 0) {
         return;
      }
      line += n;
      len -= (size_t) n;
   }
}

void
fw_log_set_sink (fw_log_sink_t fn, void *ud)
{
   sink = fn;
   sink_ud = ud;
}

/* Formats into msg (len bytes) with the values of fw.env hidden. A message
 * cut at len is formatted whole first, so no part of a secret that
 * straddles the cut is shown. */
static void
format_redacted (char *msg, size_t len, const char *fmt, va_list ap)
{
   va_list again;
   int n;

   va_copy (again, ap);
   n = vsnprintf (msg, len, fmt, ap);
   if (fw_secrets_any () && n >= 0) {
      char *whole = (size_t) n >= len ? malloc ((size_t) n + 1) : NULL;
      if (whole) {
         vsnprintf (whole, (size_t) n + 1, fmt, again);
         fw_secrets_copy (msg, len, whole, (size_t) n);
         free (whole);
      } else if ((size_t) n >= len) {
         snprintf (msg, len, "(a message too long to redact: out of memory)");
      } else {
         fw_secrets_redact_in_place (msg, len);
      }
   }
   va_end (again);
}

void
fw_log (fw_log_level_t level, const char *stream, const char *fmt, ...)
{
   char when[64];
   char msg[2048];
   va_list ap;

   if (level < threshold) {
      return;
   }
   format_time (when, sizeof when);
   va_start (ap, fmt);
   format_redacted (msg, sizeof msg, fmt, ap);
   va_end (ap);

   if (sink) {
      sink (sink_ud, level, stream, msg);
      return;
   }
   if (as_json) {
      /* libbson does the JSON escaping; the record is tiny. */
      bson_t rec = BSON_INITIALIZER;
      size_t len;
      char *json;

      BSON_APPEND_UTF8 (&rec, "ts", when);
      BSON_APPEND_UTF8 (&rec, "level", level_names[level]);
      if (stream) {
         BSON_APPEND_UTF8 (&rec, "stream", stream);
      }
      if (!bson_utf8_validate (msg, strlen (msg), false)) {
         BSON_APPEND_UTF8 (&rec, "msg", "(message was not valid UTF-8)");
      } else {
         BSON_APPEND_UTF8 (&rec, "msg", msg);
      }
      json = bson_as_relaxed_extended_json (&rec, &len);
      bson_destroy (&rec);
      if (json) {
         char *line = bson_strdup_printf ("%s\n", json);
         emit (line, strlen (line));
         bson_free (line);
         bson_free (json);
      }
      return;
   }

   {
      char line[2300];
      int n;
      if (stream) {
         n = snprintf (line, sizeof line, "%s %-5s [%s] %s\n", when, level_names[level], stream,
                       msg);
      } else {
         n = snprintf (line, sizeof line, "%s %-5s %s\n", when, level_names[level], msg);
      }
      if (n > (int) sizeof line - 1) {
         n = (int) sizeof line - 1;
         line[n - 1] = '\n';
      }
      emit (line, (size_t) n);
   }
}

/* URI options whose values are secrets, masked like the password. */
/* The last: a PostgreSQL URI's ?password=. */
static const char *const secret_options[] = {
   "tlsCertificateKeyFilePassword=", "sslClientCertificateKeyPassword=", "password="};

/* Appends s[0..n) to buf at *used (bounded by len). */
static void
append (char *buf, size_t len, size_t *used, const char *s, size_t n)
{
   if (*used + 1 >= len) {
      return;
   }
   if (n > len - 1 - *used) {
      n = len - 1 - *used;
   }
   memcpy (buf + *used, s, n);
   *used += n;
   buf[*used] = '\0';
}

static bool
is_secret_option (const char *p)
{
   for (size_t i = 0; i < sizeof secret_options / sizeof secret_options[0]; i++) {
      if (!strncasecmp (p, secret_options[i], strlen (secret_options[i]))) {
         return true;
      }
   }
   return false;
}

/* The next secret of uri at or after from, as [*start, *start + *n): the
 * password of the userinfo, then the values of the secret options. The
 * userinfo ends at the last '@': a host list never holds one, and a password
 * the user forgot to percent-encode may hold '/', '?', '#' or '@' (libmongoc
 * then rejects the URI, and its error message must not show the password).
 * An '@' in the options can only hide more than needed. False: no more. */
static bool
next_secret (const char *uri, const char *from, const char **start, size_t *n)
{
   const char *scheme_end = strstr (uri, "://"), *at, *colon;

   if (!scheme_end) {
      return false;
   }
   at = strrchr (scheme_end + 3, '@');
   colon = at ? memchr (scheme_end + 3, ':', (size_t) (at - scheme_end - 3)) : NULL;
   if (colon && from <= colon + 1) {
      *start = colon + 1;
      *n = (size_t) (at - colon - 1);
      return true;
   }
   for (const char *p = colon && from < at ? at : from; *p; p++) {
      if (p > uri && (p[-1] == '?' || p[-1] == '&') && is_secret_option (p)) {
         const char *eq = strchr (p, '=');
         *start = eq + 1;
         *n = strcspn (eq + 1, "&");
         return true;
      }
   }
   return false;
}

const char *
fw_log_redact_uri (const char *uri, char *buf, size_t len)
{
   const char *p = uri, *secret;
   size_t used = 0, n;

   if (!len) {
      return buf;
   }
   buf[0] = '\0';
   while (next_secret (uri, p, &secret, &n)) {
      append (buf, len, &used, p, (size_t) (secret - p));
      append (buf, len, &used, "***", 3);
      p = secret + n;
   }
   append (buf, len, &used, p, strlen (p));
   return buf;
}

const char *
fw_log_redact_uri_error (const char *uri, const char *message, char *buf, size_t len)
{
   const char *secret[16], *from = uri;
   size_t slen[16], n = 0, used = 0;
   const char *p = message;

   if (!len) {
      return buf;
   }
   while (n < 16 && next_secret (uri, from, &secret[n], &slen[n])) {
      from = secret[n] + slen[n];
      n += slen[n] > 0; /* an empty value hides nothing */
   }
   buf[0] = '\0';
   while (*p) {
      size_t hit = 0;
      for (size_t i = 0; i < n && !hit; i++) {
         hit = strncmp (p, secret[i], slen[i]) == 0 ? slen[i] : 0;
      }
      if (hit) {
         append (buf, len, &used, "***", 3);
         p += hit;
      } else {
         append (buf, len, &used, p, 1);
         p++;
      }
   }
   return buf;
}
