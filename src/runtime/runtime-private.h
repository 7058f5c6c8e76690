/*
 * runtime-private.h - what runtime.c (the streams, reloads, signals) and
 * runtime_control.c (the admin endpoint's requests) share.
 */
#ifndef FLOWWARDEN_RUNTIME_PRIVATE_H
#define FLOWWARDEN_RUNTIME_PRIVATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "ops/admin.h"
#include "ops/metrics.h"
#include "runtime/stream/stream_worker.h"

/* What the control needs of the runtime, handed over by runtime.c (so the
 * control never calls back into it by name). ud is the runtime. */
typedef struct {
   /* The running worker of stream name, or NULL. Valid until the next
    * reload. The runtime's thread only. */
   fw_stream_worker_t *(*find_stream) (void *ud, const char *name);
   /* Reloads the script (as SIGHUP does); message (len bytes) gets the line
    * that was logged. The runtime's thread only. */
   bool (*reload) (void *ud, char *message, size_t len);
   /* The script and the --uri / FLOWWARDEN_URI the runtime was started
    * with (option_uri may be NULL). Fixed for the runtime's life: any
    * thread. */
   void (*script) (void *ud, const char **script, const char **option_uri);
   void *ud;
} fw_runtime_hooks_t;

/* --- runtime_control.c ---------------------------------------------------- */

/*
 * The admin endpoint's link to the runtime: its control callbacks run on the
 * endpoint's control thread, post their request here and wait; the
 * runtime's thread runs them (fw_runtime_control_run) between signals, so a
 * reload or a pause never races a SIGHUP reload.
 */
typedef struct fw_runtime_control fw_runtime_control_t;

/* The signal that wakes the runtime's thread when a request is posted; it
 * must be blocked and in the set the runtime waits for. */
#define FW_RUNTIME_CONTROL_SIGNAL SIGUSR1

/* NULL when out of memory (or its lock cannot be set up). hooks is copied;
 * metrics is borrowed; the runtime's thread is the calling
 * one. */
fw_runtime_control_t *fw_runtime_control_new (const fw_runtime_hooks_t *hooks,
                                              fw_metrics_t *metrics);

/* Starts the admin endpoint on listen with token (may be NULL). */
bool fw_runtime_control_start_admin (fw_runtime_control_t *ctl, const char *listen,
                                     const char *token, fw_error_t *error);

/* Runs the requests posted so far. Runtime's thread. */
void fw_runtime_control_run (fw_runtime_control_t *ctl);

/* Stops taking requests (those waiting get 503) and stops the endpoint.
 * Runtime's thread, before the streams stop. Idempotent. */
void fw_runtime_control_close (fw_runtime_control_t *ctl);

/* Closes if needed and frees. NULL is a no-op. */
void fw_runtime_control_destroy (fw_runtime_control_t *ctl);

/* --- runtime_dlq_routes.c --------------------------------------------------- */

/* The admin endpoint's dead-letter routes for script (option_uri: as `dlq`'s
 * --uri, may be NULL): *json gets the malloc'd answer (the caller frees it),
 * message the error. Control thread; may block (MongoDB, a replay). */
fw_control_result_t fw_runtime_dlq_route (const char *script, const char *option_uri,
                                          const fw_admin_dlq_request_t *req, char **json,
                                          char *message, size_t len);

#endif
