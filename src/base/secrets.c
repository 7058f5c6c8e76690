/*
 * secrets.c - the set of fw.env values and the redaction of text.
 *
 * The set is a list that only grows: a new value is prepended under the
 * lock and published with a release store of the head, so a reader walks
 * it with no lock and sees whole values. Nodes live as long as the process
 * (a script reads a handful of variables).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/secrets.h"

typedef struct secret {
   struct secret *next;
   size_t len;
   bool userinfo; /* hidden only where a URI's "@" (or "%40") follows it */
   char value[];
} secret_t;

static secret_t *head;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

static const secret_t *
first (void)
{
   return __atomic_load_n (&head, __ATOMIC_ACQUIRE);
}

bool
fw_secrets_any (void)
{
   return first () != NULL;
}

/* Adds one value; the caller holds add_lock. */
static bool
add_locked (const char *value, size_t n, bool userinfo)
{
   secret_t *s;

   if (n < FW_SECRETS_MIN_LEN) {
      return true;
   }
   for (const secret_t *e = head; e; e = e->next) {
      if (e->len == n && e->userinfo == userinfo && memcmp (e->value, value, n) == 0) {
         return true;
      }
   }
   if (!(s = malloc (sizeof *s + n + 1))) {
      return false;
   }
   memcpy (s->value, value, n);
   s->value[n] = '\0';
   s->len = n;
   s->userinfo = userinfo;
   s->next = head;
   __atomic_store_n (&head, s, __ATOMIC_RELEASE);
   return true;
}

/* RFC 3986's unreserved characters: a URL carries them as they are. */
static bool
unreserved (unsigned char c)
{
   return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
          (c != 0 && strchr ("-._~", c));
}

/* value percent-encoded as a URL's query or path would carry it, or NULL
 * when that is the value itself or memory is short. The caller frees it. */
static char *
percent_encoded (const char *value, size_t n, size_t *out_n)
{
   static const char hex[] = "0123456789ABCDEF";
   size_t plain = 0;
   char *out, *p;

   while (plain < n && unreserved ((unsigned char) value[plain])) {
      plain++;
   }
   if (plain == n || n > SIZE_MAX / 3 - 1 || !(out = malloc (n * 3 + 1))) {
      return NULL;
   }
   p = out;
   for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char) value[i];
      if (unreserved (c)) {
         *p++ = (char) c;
      } else {
         *p++ = '%';
         *p++ = hex[c >> 4];
         *p++ = hex[c & 15];
      }
   }
   *p = '\0';
   *out_n = (size_t) (p - out);
   return out;
}

static bool
add (const char *value, size_t n, bool userinfo)
{
   size_t enc_n = 0;
   char *enc;
   bool ok;

   if (!value || n < FW_SECRETS_MIN_LEN) {
      return true;
   }
   enc = percent_encoded (value, n, &enc_n);
   pthread_mutex_lock (&add_lock);
   ok = add_locked (value, n, userinfo) && (!enc || add_locked (enc, enc_n, userinfo));
   pthread_mutex_unlock (&add_lock);
   free (enc);
   return ok;
}

bool
fw_secrets_add (const char *value, size_t n)
{
   return add (value, n, false);
}

bool
fw_secrets_add_userinfo (const char *value, size_t n)
{
   return add (value, n, true);
}

/* Whether a URI's userinfo ends at p (end: the text's end): "@", or "%40" in
 * a percent-encoded URI. */
static bool
at_follows (const char *p, const char *end)
{
   return (p < end && *p == '@') || (end - p >= 3 && p[0] == '%' && p[1] == '4' && p[2] == '0');
}

/* Sets mask[i] for every byte of s[0..n) inside an occurrence of a secret
 * (overlapping occurrences too); with mask NULL, only tells whether one
 * occurs. Returns true when one does. */
static bool
mark (const secret_t *list, const char *s, size_t n, unsigned char *mask)
{
   bool any = false;

   for (const secret_t *e = list; e; e = e->next) {
      const char *p = s, *end = s + n;
      while ((size_t) (end - p) >= e->len &&
             (p = memmem (p, (size_t) (end - p), e->value, e->len))) {
         if (e->userinfo && !at_follows (p + e->len, end)) {
            p++;
            continue;
         }
         if (!mask) {
            return true;
         }
         memset (mask + (p - s), 1, e->len);
         any = true;
         p++;
      }
   }
   return any;
}

/* Writes s with each run of marked bytes replaced by the marker into out
 * (NULL: only counts). Returns the length written. */
static size_t
render (const char *s, size_t n, const unsigned char *mask, char *out)
{
   static const size_t marker_n = sizeof FW_SECRETS_MARKER - 1;
   size_t len = 0;

   for (size_t i = 0; i < n;) {
      if (!mask[i]) {
         if (out) {
            out[len] = s[i];
         }
         len++;
         i++;
         continue;
      }
      if (out) {
         memcpy (out + len, FW_SECRETS_MARKER, marker_n);
      }
      len += marker_n;
      while (i < n && mask[i]) {
         i++;
      }
   }
   return len;
}

const char *
fw_secrets_redact (const char *s, size_t n, char **owned, size_t *out_len)
{
   const secret_t *list = first ();
   unsigned char small[1024], *mask = small;
   char *out = NULL;
   size_t len;

   *owned = NULL;
   if (!list || !s || !mark (list, s, n, NULL)) {
      if (out_len) {
         *out_len = n;
      }
      return s;
   }
   if (n > sizeof small && !(mask = malloc (n))) {
      goto done;
   }
   memset (mask, 0, n);
   mark (list, s, n, mask);
   len = render (s, n, mask, NULL);
   if ((out = malloc (len + 1))) {
      render (s, n, mask, out);
      out[len] = '\0';
      if (out_len) {
         *out_len = len;
      }
   }
done:
   if (mask != small) {
      free (mask);
   }
   if (!out) {
      if (out_len) {
         *out_len = sizeof FW_SECRETS_MARKER - 1;
      }
      return FW_SECRETS_MARKER;
   }
   *owned = out;
   return out;
}

size_t
fw_secrets_copy (char *buf, size_t cap, const char *s, size_t n)
{
   char *owned;
   const char *text;
   size_t len;

   if (!buf || cap == 0) {
      return 0;
   }
   text = fw_secrets_redact (s ? s : "", s ? n : 0, &owned, &len);
   if (len > cap - 1) {
      len = cap - 1;
   }
   memmove (buf, text, len);
   buf[len] = '\0';
   free (owned);
   return len;
}

bool
fw_secrets_redact_in_place (char *buf, size_t cap)
{
   char *owned;
   const char *text;
   size_t n, len;

   if (!buf || cap == 0 || !fw_secrets_any ()) {
      return false;
   }
   n = strnlen (buf, cap - 1);
   buf[n] = '\0';
   text = fw_secrets_redact (buf, n, &owned, &len);
   if (text == buf) {
      return false;
   }
   if (len > cap - 1) {
      len = cap - 1;
   }
   memmove (buf, text, len);
   buf[len] = '\0';
   free (owned);
   return true;
}
