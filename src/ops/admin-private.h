/*
 * admin-private.h - the admin endpoint's JSON (admin_json.c), shared with
 * the server (admin.c).
 */
#ifndef FLOWWARDEN_ADMIN_PRIVATE_H
#define FLOWWARDEN_ADMIN_PRIVATE_H

#include "flowwarden/admin.h"
#include "strbuf.h"

/* One stream's status object. */
void fw_admin_json_stream (fw_strbuf_t *out, const fw_stream_snapshot_t *s);

/* {"streams": [...], "last_reload": ...}; reload may be NULL (none). */
void fw_admin_json_streams (fw_strbuf_t *out, const fw_stream_snapshot_t *s, int n,
                            const fw_reload_result_t *reload, int64_t now_ms);

/* /readyz's body; returns whether every stream is ready (and there is one). */
bool fw_admin_json_ready (fw_strbuf_t *out, const fw_stream_snapshot_t *s, int n);

/* {"error": message, "status": status} */
void fw_admin_json_error (fw_strbuf_t *out, int status, const char *message);

/* --- the console's chart (admin_history.c) -------------------------------- */

#define FW_ADMIN_HISTORY_STEP_MS 5000
#define FW_ADMIN_HISTORY_WINDOW_MS (15 * 60 * 1000)
#define FW_ADMIN_HISTORY_SAMPLES (FW_ADMIN_HISTORY_WINDOW_MS / FW_ADMIN_HISTORY_STEP_MS)
#define FW_ADMIN_HISTORY_STREAMS 256

typedef struct fw_admin_history fw_admin_history_t;

/* NULL when out of memory; the caller owns it: fw_admin_history_destroy. */
fw_admin_history_t *fw_admin_history_new (void);
void fw_admin_history_destroy (fw_admin_history_t *h);

/* Adds one sample of each stream in snaps (thread-safe). */
void fw_admin_history_record (fw_admin_history_t *h, const fw_stream_snapshot_t *snaps, int n,
                              int64_t now_ms);

/* {"step_seconds", "window_seconds", "now", "streams": {name: {"t": [ms...],
 * "lag_seconds": [...], "events_per_second": [...]}}}, oldest first. */
void fw_admin_history_json (fw_admin_history_t *h, fw_strbuf_t *out, int64_t now_ms);

/* --- the console's files (console/, embedded by cmake/embed_console.cmake) - */

typedef struct {
   const char *path;         /* "/", "/console.js", ... */
   const char *content_type;
   const unsigned char *data;
   size_t len;
} fw_console_file_t;

/* Ends with a NULL path. */
extern const fw_console_file_t fw_console_files[];

#endif
