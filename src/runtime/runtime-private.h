/*
 * runtime-private.h - what runtime.c (the streams, reloads, signals) and
 * runtime_control.c (the admin endpoint's requests) share.
 */
#ifndef FLOWWARDEN_RUNTIME_PRIVATE_H
#define FLOWWARDEN_RUNTIME_PRIVATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "flowwarden/admin.h"
#include "flowwarden/metrics.h"
#include "flowwarden/stream_worker.h"

typedef struct fw_runtime fw_runtime_t;

/* --- runtime.c: called on the runtime's (main) thread only --------------- */

/* The running worker of stream name, or NULL. Valid until the next reload. */
fw_stream_worker_t *fw_runtime_find_stream (fw_runtime_t *rt, const char *name);

/* The script and the --uri / FLOWWARDEN_URI the runtime was started with
 * (option_uri may be NULL). Fixed for the runtime's life: any thread. */
void fw_runtime_script (fw_runtime_t *rt, const char **script, const char **option_uri);

/* Reloads the script (as SIGHUP does); message (len bytes) gets the line
 * that was logged. */
bool fw_runtime_reload (fw_runtime_t *rt, char *message, size_t len);

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

/* rt and metrics are borrowed; the runtime's thread is the calling one. */
fw_runtime_control_t *fw_runtime_control_new (fw_runtime_t *rt, fw_metrics_t *metrics);

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

#endif
