/*
 * secrets.h - the values a script read with fw.env, kept out of every text
 * flowwarden writes.
 *
 * One process-wide set, filled when a script is loaded (fw.env registers
 * each value unless the script says { secret = false }) and never emptied:
 * a value read once stays hidden after a reload that no longer reads it.
 * The writers of text (the log, the dispatcher's copy of a handler's error,
 * the status JSON and the metrics labels, `check`) pass their text through
 * fw_secrets_redact, which replaces every occurrence of a registered value
 * by FW_SECRETS_MARKER.
 *
 * Thread-safe: values are added under a lock and read without one (the set
 * only grows, and a value is published whole before it is visible). With no
 * value registered, redacting costs one atomic load.
 */
#ifndef FLOWWARDEN_SECRETS_H
#define FLOWWARDEN_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

/* What a secret is replaced by. */
#define FW_SECRETS_MARKER "[redacted]"

/* Values shorter than this many bytes are not secrets (a flag such as "on",
 * a short number): hiding them would mangle ordinary words in every line. */
#define FW_SECRETS_MIN_LEN 4

/* Registers value[0..n) (copied) and, when it differs, its percent-encoded
 * form (a token put into a URL). A value shorter than FW_SECRETS_MIN_LEN, or
 * already registered, is ignored. Returns false only when out of memory. */
bool fw_secrets_add (const char *value, size_t n);

/* As fw_secrets_add, for a URI's userinfo without a password (a user name,
 * "scheme://NAME@host"): hidden only where "@" (or "%40") follows it, so the
 * same word elsewhere in a text stays (a user named "flowwarden"). */
bool fw_secrets_add_userinfo (const char *value, size_t n);

/* True when at least one value is registered. */
bool fw_secrets_any (void);

/* The text s[0..n) with every registered value replaced by
 * FW_SECRETS_MARKER (overlapping or adjacent occurrences become one marker).
 * Returns s itself when nothing matched; else a NUL-terminated copy that
 * the caller frees with free() (*owned is set to it; it is NULL otherwise),
 * with its length in *out_len when out_len is not NULL. Out of memory:
 * returns FW_SECRETS_MARKER (static, *owned NULL), never the text. */
const char *fw_secrets_redact (const char *s, size_t n, char **owned, size_t *out_len);

/* Copies s[0..n) redacted into buf (cap bytes, always terminated), cut at
 * cap - 1 bytes after the redaction, so a secret that straddles the cut is
 * hidden whole. s may be buf. Returns the length written. */
size_t fw_secrets_copy (char *buf, size_t cap, const char *s, size_t n);

/* Redacts the NUL-terminated text in buf (cap bytes) in place; a result
 * longer than cap - 1 bytes is cut there. Returns true when something was
 * replaced. */
bool fw_secrets_redact_in_place (char *buf, size_t cap);

#endif
