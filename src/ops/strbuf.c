/*
 * strbuf.c - the ops layer's text buffer and its escapes.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/secrets.h"
#include "strbuf.h"

void
fw_strbuf_init (fw_strbuf_t *b)
{
   memset (b, 0, sizeof *b);
}

void
fw_strbuf_cleanup (fw_strbuf_t *b)
{
   free (b->data);
   fw_strbuf_init (b);
}

char *
fw_strbuf_steal (fw_strbuf_t *b, size_t *len)
{
   char *out;

   if (b->oom) {
      fw_strbuf_cleanup (b);
      return NULL;
   }
   if (!b->data) {
      fw_strbuf_append (b, "", 0);
      if (b->oom) {
         return NULL;
      }
   }
   out = b->data;
   if (len) {
      *len = b->len;
   }
   fw_strbuf_init (b);
   return out;
}

static bool
reserve (fw_strbuf_t *b, size_t more)
{
   size_t want;
   char *p;

   if (b->oom) {
      return false;
   }
   if (b->len + more + 1 <= b->cap) {
      return true;
   }
   want = b->cap ? b->cap : 4096;
   while (want < b->len + more + 1) {
      want *= 2;
   }
   if (!(p = realloc (b->data, want))) {
      b->oom = true;
      return false;
   }
   b->data = p;
   b->cap = want;
   return true;
}

void
fw_strbuf_append (fw_strbuf_t *b, const char *s, size_t n)
{
   if (!reserve (b, n)) {
      return;
   }
   memcpy (b->data + b->len, s, n);
   b->len += n;
   b->data[b->len] = '\0';
}

void
fw_strbuf_puts (fw_strbuf_t *b, const char *s)
{
   fw_strbuf_append (b, s, strlen (s));
}

void
fw_strbuf_printf (fw_strbuf_t *b, const char *fmt, ...)
{
   va_list ap;
   int n;

   if (!reserve (b, 256)) {
      return;
   }
   va_start (ap, fmt);
   n = vsnprintf (b->data + b->len, b->cap - b->len, fmt, ap);
   va_end (ap);
   if (n < 0) {
      return;
   }
   if ((size_t) n >= b->cap - b->len) {
      if (!reserve (b, (size_t) n)) {
         return;
      }
      va_start (ap, fmt);
      vsnprintf (b->data + b->len, b->cap - b->len, fmt, ap);
      va_end (ap);
   }
   b->len += (size_t) n;
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static void
shortest_double (char *buf, size_t len, double v)
{
   for (int prec = 15; prec <= 17; prec++) {
      snprintf (buf, len, "%.*g", prec, v);
      if (strtod (buf, NULL) == v) {
         return;
      }
   }
}

void
fw_strbuf_prom_double (fw_strbuf_t *b, double v)
{
   char buf[40];

   if (isnan (v)) {
      fw_strbuf_puts (b, "NaN");
   } else if (isinf (v)) {
      fw_strbuf_puts (b, v > 0 ? "+Inf" : "-Inf");
   } else {
      shortest_double (buf, sizeof buf, v);
      fw_strbuf_puts (b, buf);
   }
}

void
fw_strbuf_json_double (fw_strbuf_t *b, double v)
{
   char buf[40];

   if (!isfinite (v)) {
      fw_strbuf_puts (b, "null");
   } else {
      shortest_double (buf, sizeof buf, v);
      fw_strbuf_puts (b, buf);
   }
}

int
fw_utf8_sequence_length (const char *str)
{
   const unsigned char *s = (const unsigned char *) str;
   unsigned int cp;
   int n;

   if (s[0] < 0x80) {
      return 1;
   }
   if (s[0] >= 0xC2 && s[0] <= 0xDF) {
      n = 2;
      cp = s[0] & 0x1F;
   } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
      n = 3;
      cp = s[0] & 0x0F;
   } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
      n = 4;
      cp = s[0] & 0x07;
   } else {
      return 0;
   }
   for (int i = 1; i < n; i++) {
      if ((s[i] & 0xC0) != 0x80) {
         return 0; /* also stops at the NUL */
      }
      cp = (cp << 6) | (s[i] & 0x3F);
   }
   if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
       (cp >= 0xD800 && cp <= 0xDFFF)) {
      return 0;
   }
   return n;
}

bool
fw_utf8_valid (const char *s, size_t n)
{
   size_t i = 0;

   while (i < n) {
      int k;
      if (s[i] == '\0') {
         return false;
      }
      k = fw_utf8_sequence_length (s + i);
      if (k == 0 || i + (size_t) k > n) {
         return false;
      }
      i += (size_t) k;
   }
   return true;
}

typedef enum { ESC_LABEL, ESC_HELP, ESC_JSON } esc_t;

/* Appends s escaped for mode, with the values of fw.env hidden (label
 * values, help and status strings all pass here). Returns true when a
 * secret was hidden. */
static bool
append_escaped (fw_strbuf_t *b, const char *s, esc_t mode)
{
   char *owned = NULL;
   const char *orig = s;
   bool redacted;

   if (fw_secrets_any ()) {
      s = fw_secrets_redact (s, strlen (s), &owned, NULL);
   }
   redacted = s != orig;
   while (*s) {
      unsigned char c = (unsigned char) *s;
      int k = fw_utf8_sequence_length (s);
      if (k == 0) {
         fw_strbuf_puts (b, "\xEF\xBF\xBD");
         s++;
         continue;
      }
      if (k > 1) {
         fw_strbuf_append (b, s, (size_t) k);
         s += k;
         continue;
      }
      if (c == '\\') {
         fw_strbuf_puts (b, "\\\\");
      } else if (c == '\n') {
         fw_strbuf_puts (b, "\\n");
      } else if (c == '"' && mode != ESC_HELP) {
         fw_strbuf_puts (b, "\\\"");
      } else if (c < 0x20 && mode == ESC_JSON) {
         fw_strbuf_printf (b, "\\u%04x", c);
      } else {
         fw_strbuf_append (b, s, 1);
      }
      s++;
   }
   free (owned);
   return redacted;
}

/* The label values that had a secret in them, in the order first seen: the
 * first renders as FW_SECRETS_MARKER, the n-th as FW_SECRETS_MARKER "#n", so
 * two values that differ only in their secret stay two series. Grows with
 * the process (a handful in practice); out of memory, the plain marker. */
static struct {
   pthread_mutex_t mu;
   char **values;
   size_t n, cap;
} redacted_labels = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

/* 1-based rank of label value s among the redacted ones (adding it), or 0
 * when out of memory. */
static size_t
redacted_label_rank (const char *s)
{
   size_t i, rank = 0;

   pthread_mutex_lock (&redacted_labels.mu);
   for (i = 0; i < redacted_labels.n && !rank; i++) {
      if (strcmp (redacted_labels.values[i], s) == 0) {
         rank = i + 1;
      }
   }
   if (!rank) {
      if (redacted_labels.n == redacted_labels.cap) {
         size_t cap = redacted_labels.cap ? 2 * redacted_labels.cap : 8;
         char **v = realloc (redacted_labels.values, cap * sizeof *v);
         if (v) {
            redacted_labels.values = v;
            redacted_labels.cap = cap;
         }
      }
      if (redacted_labels.n < redacted_labels.cap &&
          (redacted_labels.values[redacted_labels.n] = strdup (s)) != NULL) {
         rank = ++redacted_labels.n;
      }
   }
   pthread_mutex_unlock (&redacted_labels.mu);
   return rank;
}

void
fw_strbuf_prom_label (fw_strbuf_t *b, const char *s)
{
   size_t rank;

   if (!append_escaped (b, s, ESC_LABEL)) {
      return;
   }
   rank = redacted_label_rank (s);
   if (rank > 1) {
      fw_strbuf_printf (b, "#%zu", rank);
   }
}

void
fw_strbuf_prom_help (fw_strbuf_t *b, const char *s)
{
   append_escaped (b, s, ESC_HELP);
}

void
fw_strbuf_json_string (fw_strbuf_t *b, const char *s)
{
   if (!s) {
      fw_strbuf_puts (b, "null");
      return;
   }
   fw_strbuf_puts (b, "\"");
   append_escaped (b, s, ESC_JSON);
   fw_strbuf_puts (b, "\"");
}
