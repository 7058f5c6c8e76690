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
 *   GET  /v1/dlq/entries[?filters]     `dlq list --json` (filters as its options:
 *                                      stream, status, error-type, since, until,
 *                                      id, limit, filter; sequence=ID: one
 *                                      sequence's entries)
 *   GET  /v1/dlq/entries/ID[?documents=1]  `dlq show --json` (documents hidden
 *                                      unless asked, as there)
 *   GET  /v1/dlq/sequences[?stream=S]  `dlq list --sequences --json`
 *   POST /v1/dlq/entries/ID/replay[?dry_run=1]   `dlq replay --id ID`
 *   POST /v1/dlq/entries/ID/discard[?reason=R]   `dlq discard --id ID --yes`
 *   GET  /v1/history                   lag and events/s of each stream over the
 *                                      last 15 minutes (sampled every 5 s)
 *   GET  /, /console.js, /console.css  the console (console/ in the sources,
 *                                      embedded at build time)
 *
 * Errors are JSON ({"error": "...", "status": N}): 404 unknown route or
 * stream, 405 wrong method, 413 body over 64 KiB, 401 missing or wrong token.
 * When a token is set, every POST needs "Authorization: Bearer TOKEN" (a
 * header: a cross-site page cannot send it). Every answer carries a
 * Content-Security-Policy allowing only this origin's scripts and styles,
 * no inline script and no framing, and X-Content-Type-Options: nosniff.
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
#include "ops/metrics.h"

typedef struct fw_admin fw_admin_t;

/* What a control call did; each maps to an HTTP status. */
typedef enum {
   FW_CONTROL_OK = 0,     /* 200: done */
   FW_CONTROL_ACCEPTED,   /* 202: asked; it happens at the stream's next event boundary */
   FW_CONTROL_NOT_FOUND,  /* 404: no stream of that name */
   FW_CONTROL_CONFLICT,   /* 409: not possible in the stream's state (message says why) */
   FW_CONTROL_FAILED,     /* 422: tried and refused, e.g. a reload of an invalid script */
   FW_CONTROL_UNAVAILABLE /* 503: flowwarden is stopping */
} fw_control_result_t;

typedef enum {
   FW_STREAM_PAUSE = 0,
   FW_STREAM_RESUME,
   FW_STREAM_RESTART,
   FW_STREAM_SNAPSHOT /* an incremental snapshot on the running stream (issue 28) */
} fw_stream_action_t;

/* "pause", "resume", "restart", "snapshot". */
const char *fw_stream_action_name (fw_stream_action_t action);

/* A dead-letter route's request: what the console asks of `flowwarden dlq`. */
typedef enum {
   FW_ADMIN_DLQ_LIST = 0,  /* GET /v1/dlq/entries */
   FW_ADMIN_DLQ_SHOW,      /* GET /v1/dlq/entries/ID */
   FW_ADMIN_DLQ_SEQUENCES, /* GET /v1/dlq/sequences */
   FW_ADMIN_DLQ_REPLAY,    /* POST /v1/dlq/entries/ID/replay */
   FW_ADMIN_DLQ_DISCARD    /* POST /v1/dlq/entries/ID/discard */
} fw_admin_dlq_verb_t;

#define FW_ADMIN_DLQ_MAX_ARGS 16

typedef struct fw_admin_dlq_request {
   fw_admin_dlq_verb_t verb;
   const char *id; /* SHOW, REPLAY, DISCARD: the entry */
   int n_args;     /* the query string's arguments */
   const char *keys[FW_ADMIN_DLQ_MAX_ARGS];
   const char *values[FW_ADMIN_DLQ_MAX_ARGS]; /* "" for a key without value */
} fw_admin_dlq_request_t;

/* The value of query argument key, or NULL. */
const char *fw_admin_dlq_arg (const fw_admin_dlq_request_t *req, const char *key);

/*
 * What the runtime lets the endpoint see and do. list_streams runs on the
 * HTTP thread and on the console's history sampler, maybe at once: it must
 * be thread-safe and must not block (copy snapshots out, e.g. with
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
   fw_control_result_t (*snapshot) (void *ud, const char *stream, const char *filter, char *message,
                                    size_t len);
   /* The dead-letter routes (GET /v1/dlq/entries..., /v1/dlq/sequences, POST
    * .../replay, .../discard): runs on the control thread, may block. *json
    * gets a malloc'd JSON answer the endpoint frees (also with an error
    * result, then sent as the body when set). NULL: the routes answer 404. */
   fw_control_result_t (*dlq) (void *ud, const struct fw_admin_dlq_request *req, char **json,
                               char *message, size_t len);
} fw_admin_control_t;

typedef struct {
   const char *listen;    /* "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464", ":9464" */
   const char *token;     /* NULL or "": none */
   fw_metrics_t *metrics; /* borrowed; must outlive the endpoint */
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

/*
 * Reads the admin token from path (`run --admin-token-file`): the file's
 * text less a final line break. *token gets it, malloc'd (the caller frees
 * it). False with error naming path when the file cannot be read, is empty,
 * is over 4 KiB or holds more than one line or a character that is not
 * printable ASCII. A file other users may read is accepted with a warning in
 * the log.
 */
bool fw_admin_read_token_file (const char *path, char **token, fw_error_t *error);

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
