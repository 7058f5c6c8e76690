/*
 * admin-private.h - the admin endpoint's JSON (admin_json.c), shared with
 * the server (admin.c).
 */
#ifndef FLOWWARDEN_ADMIN_PRIVATE_H
#define FLOWWARDEN_ADMIN_PRIVATE_H

#include <sys/socket.h>

#include <microhttpd.h>

#include "ops/admin.h"
#include "strbuf.h"

/* --- the address (admin_options.c) ----------------------------------------- */

typedef struct {
   struct sockaddr_storage ss;
   bool v6;
   bool loopback;
} address_t;

/* Parses listen ("IP:PORT", "[IPv6]:PORT", "localhost:PORT", ":PORT") into
 * out; false with error (naming `what`) when it is not such an address. */
bool fw_admin_parse_listen (const char *listen, const char *what, address_t *out,
                            fw_error_t *error);

/* --- the JSON (admin_json.c) --------------------------------------------------- */

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

/* NULL when out of memory (or its lock cannot be set up); the caller owns it:
 * fw_admin_history_destroy. */
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
   const char *path; /* "/", "/console.js", ... */
   const char *content_type;
   const unsigned char *data;
   size_t len;
} fw_console_file_t;

/* Ends with a NULL path. */
extern const fw_console_file_t fw_console_files[];

/* The file served at url ("/index.html" is "/"), or NULL. */
const fw_console_file_t *fw_console_file (const char *url);

/* Fills req's verb and id (malloc'd) from a /v1/dlq/... url other than
 * /v1/dlq/stats: /v1/dlq/entries[/ID[/replay|/discard]], /v1/dlq/sequences;
 * *allow: the method it takes. False: no such route (or out of memory). */
bool fw_admin_route_dlq (fw_admin_dlq_request_t *req, const char *url, const char **allow);

/* MHD_get_connection_values's iterator: copies each query argument into cls
 * (an fw_admin_dlq_request_t), malloc'd; past FW_ADMIN_DLQ_MAX_ARGS it stops
 * with n_args one over, which the caller answers with 400. */
enum MHD_Result fw_admin_collect_arg (void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value);

#endif
