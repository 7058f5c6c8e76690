/*
 * log.h - the runtime's log: one line per record on stderr, as text or JSON.
 *
 * Records carry time, level and (when there is one) the stream name. Callers
 * must never pass document contents at a level above debug. Thread-safe: a
 * record is written with one write so lines from streams never interleave.
 */
#ifndef FLOWWARDEN_LOG_H
#define FLOWWARDEN_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
   FW_LOG_DEBUG = 0,
   FW_LOG_INFO = 1,
   FW_LOG_WARN = 2,
   FW_LOG_ERROR = 3
} fw_log_level_t;

/* Parses "debug" | "info" | "warn" | "error". Returns false on anything else. */
bool fw_log_level_parse (const char *name, fw_log_level_t *out);

/* Sets the threshold and the format (json = false: text). Call before
 * threads start. */
void fw_log_configure (fw_log_level_t level, bool json);

/* True when records at level would be written. */
bool fw_log_enabled (fw_log_level_t level);

/* Copies uri into buf (len bytes, always terminated) with the password of
 * its userinfo replaced by "***": "mongodb://u:secret@h/" -> "mongodb://u:***@h/".
 * The userinfo runs to the last '@', so a password that is not percent-encoded
 * ("u:pa/ss@h") is hidden too; so are the values of the options
 * tlsCertificateKeyFilePassword and sslClientCertificateKeyPassword. The rest
 * is copied as it is. Returns buf. */
const char *fw_log_redact_uri (const char *uri, char *buf, size_t len);

/* Copies message (libmongoc's reason for refusing uri, which may quote a
 * part of it) into buf (len bytes, always terminated) with every secret of
 * uri that fw_log_redact_uri hides replaced by "***". Returns buf. */
const char *fw_log_redact_uri_error (const char *uri, const char *message, char *buf, size_t len);

/* Where records go instead of stderr: `flowwarden test` collects a delivered
 * event's records (issue 15). message is the formatted text, valid during
 * the call. */
typedef void (*fw_log_sink_t) (void *ud, fw_log_level_t level, const char *stream,
                               const char *message);

/* Sends every record at or above the threshold to sink (NULL: back to
 * stderr). Not for a process whose streams run: one thread at a time. */
void fw_log_set_sink (fw_log_sink_t sink, void *ud);

/* Writes one record. stream may be NULL. The values a script read with
 * fw.env are replaced in the message, sink's included (secrets.h). */
void fw_log (fw_log_level_t level, const char *stream, const char *fmt, ...)
   __attribute__ ((format (printf, 3, 4)));

#endif
