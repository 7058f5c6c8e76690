/*
 * strbuf.h - a growing text buffer for the ops layer's outputs (the
 * Prometheus exposition, the admin endpoint's JSON), with the escapes each
 * format needs. Private to src/ops/.
 *
 * Appending never fails visibly: when memory runs out the buffer remembers
 * it (oom) and ignores further appends, so a writer checks once at the end.
 */
#ifndef FLOWWARDEN_OPS_STRBUF_H
#define FLOWWARDEN_OPS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
   char *data; /* NUL-terminated when len > 0 */
   size_t len;
   size_t cap;
   bool oom;
} fw_strbuf_t;

void fw_strbuf_init (fw_strbuf_t *b);

/* Frees the text. */
void fw_strbuf_cleanup (fw_strbuf_t *b);

/* Hands the text over (caller frees; never NULL unless oom) and resets b.
 * Returns NULL when an append ran out of memory. */
char *fw_strbuf_steal (fw_strbuf_t *b, size_t *len);

void fw_strbuf_append (fw_strbuf_t *b, const char *s, size_t n);
void fw_strbuf_puts (fw_strbuf_t *b, const char *s);
void fw_strbuf_printf (fw_strbuf_t *b, const char *fmt, ...)
   __attribute__ ((format (printf, 2, 3)));

/* A double the way Prometheus and JSON read it back exactly, in the
 * shortest form: "0.1", "1e-05", "42". Prometheus also gets "+Inf", "-Inf",
 * "NaN"; JSON gets null for those. */
void fw_strbuf_prom_double (fw_strbuf_t *b, double v);
void fw_strbuf_json_double (fw_strbuf_t *b, double v);

/* A Prometheus label value without its quotes: \, " and newline escaped;
 * bytes that are not UTF-8 become U+FFFD. */
void fw_strbuf_prom_label (fw_strbuf_t *b, const char *s);

/* A Prometheus HELP text: \ and newline escaped, bad UTF-8 replaced. */
void fw_strbuf_prom_help (fw_strbuf_t *b, const char *s);

/* A JSON string with its quotes; NULL gives null. Bad UTF-8 replaced. */
void fw_strbuf_json_string (fw_strbuf_t *b, const char *s);

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when s[0] does not
 * start one. s must be NUL-terminated. */
int fw_utf8_sequence_length (const char *s);

/* True when the n bytes at s are valid UTF-8 with no NUL. */
bool fw_utf8_valid (const char *s, size_t n);

#endif
