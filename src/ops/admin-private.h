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

#endif
