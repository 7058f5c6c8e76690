/*
 * admin.h - the admin endpoint: a small HTTP server (libmicrohttpd) serving
 * Prometheus metrics, health, stream status and the operator's controls.
 *
 *   GET  /metrics                      the registry's exposition
 *   GET  /healthz                      200 while the process answers
 *   GET  /readyz                       200 when every stream runs with an open
 *                                      change stream; else 503 naming the others
 *   GET  /v1/streams, /v1/streams/NAME JSON status of the streams
 *   POST /v1/streams/NAME/pause|resume|restart
 *   POST /v1/reload                    as SIGHUP
 *   GET  /v1/dlq/stats                 `flowwarden dlq stats --json` of the script
 *
 * Errors are JSON ({"error": "...", "status": N}): 404 unknown route or
 * stream, 405 wrong method, 413 body over 64 KiB, 401 missing or wrong token.
 * When a token is set, every POST needs "Authorization: Bearer TOKEN".
 *
 * The endpoint knows nothing of the runtime: the runtime hands it a control
 * interface (function pointers) and the metrics registry. The HTTP thread
 * never blocks on the runtime: POSTs run on a thread of their own, one at a
 * time, with their connection suspended meanwhile, so /metrics and the GETs
 * answer while a reload or a pause is under way. 200 idle connections cost a
 * socket each and nothing else (epoll, connection limit and timeout).
 */
#ifndef FLOWWARDEN_ADMIN_H
#define FLOWWARDEN_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include "flowwarden/error.h"
#include "flowwarden/metrics.h"

typedef struct fw_admin fw_admin_t;

/* What a control call did; each maps to an HTTP status. */
typedef enum {
   FW_CONTROL_OK = 0,      /* 200: done */
   FW_CONTROL_ACCEPTED,    /* 202: asked; it happens at the stream's next event boundary */
   FW_CONTROL_NOT_FOUND,   /* 404: no stream of that name */
   FW_CONTROL_CONFLICT,    /* 409: not possible in the stream's state (message says why) */
   FW_CONTROL_FAILED,      /* 422: tried and refused, e.g. a reload of an invalid script */
   FW_CONTROL_UNAVAILABLE  /* 503: flowwarden is stopping */
} fw_control_result_t;

typedef enum {
   FW_STREAM_PAUSE = 0,
   FW_STREAM_RESUME,
   FW_STREAM_RESTART,
   FW_STREAM_SNAPSHOT /* an incremental snapshot on the running stream (issue 28) */
} fw_stream_action_t;

/* "pause", "resume", "restart", "snapshot". */
const char *fw_stream_action_name (fw_stream_action_t action);

/*
 * What the runtime lets the endpoint see and do. list_streams runs on the
 * HTTP thread and must not block (copy snapshots out, e.g. with
 * fw_metrics_snapshot_all); stream_action and reload run on the endpoint's
 * control thread and may block until the work is done, but must return soon
 * once the runtime is stopping. message (len bytes) takes a one-line
 * explanation for the JSON answer.
 */
typedef struct {
   /* Snapshots of every stream: a malloc'd array in *out (the endpoint frees
    * it), the count returned, -1 on failure. */
   int (*list_streams) (void *ud, fw_stream_snapshot_t **out);
   fw_control_result_t (*stream_action) (void *ud, const char *stream, fw_stream_action_t action,
                                         char *message, size_t len);
   fw_control_result_t (*reload) (void *ud, char *message, size_t len);
   void *ud;
   /* Counts the script's dead letters (runs on the control thread, may
    * block): *json gets a malloc'd JSON object the endpoint frees. NULL:
    * the route answers 404. */
   fw_control_result_t (*dlq_stats) (void *ud, char **json, char *message, size_t len);
   /* POST /v1/streams/NAME/snapshot[?filter=JSON]: starts an incremental
    * snapshot of the stream's collection, limited by filter (extended JSON;
    * NULL: every document). NULL: the route answers 503. */
   fw_control_result_t (*snapshot) (void *ud, const char *stream, const char *filter,
                                    char *message, size_t len);
} fw_admin_control_t;

typedef struct {
   const char *listen;       /* "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464", ":9464" */
   const char *token;        /* NULL or "": none */
   fw_metrics_t *metrics;    /* borrowed; must outlive the endpoint */
   fw_admin_control_t control;
} fw_admin_options_t;

/* Largest request body accepted; larger ones get 413. */
#define FW_ADMIN_MAX_BODY (64 * 1024)

/*
 * Checks listen and token without binding anything: the address parses
 * (an IP address or "localhost", and a port), and an address other than
 * loopback comes with a token. Fills error with what is wrong and how to fix
 * it. `what` names where the values came from in that message ("--admin").
 */
bool fw_admin_check_options (const char *listen, const char *token, const char *what,
                             fw_error_t *error);

/* Starts the endpoint (after fw_admin_check_options's checks). Returns NULL
 * with error filled when the address cannot be bound. The caller owns the
 * result: fw_admin_stop. */
fw_admin_t *fw_admin_start (const fw_admin_options_t *opts, fw_error_t *error);

/* The port bound (useful with port 0). */
int fw_admin_port (const fw_admin_t *admin);

/* Stops the endpoint: waits for a control call in progress to return,
 * answers queued ones with 503, closes every connection, frees everything.
 * NULL is a no-op. */
void fw_admin_stop (fw_admin_t *admin);

#endif
