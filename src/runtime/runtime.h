/*
 * runtime.h - `flowwarden run` and `flowwarden check`: load the script,
 * start every stream, wait for a signal, stop cleanly.
 */
#ifndef FLOWWARDEN_RUNTIME_H
#define FLOWWARDEN_RUNTIME_H

#include <stdbool.h>

typedef struct {
   const char *script;
   const char *uri;              /* --uri, or NULL */
   const char *pid_file;         /* or NULL */
   const char *admin_token_file; /* --admin-token-file FILE: the admin token (wins over
                                  * admin.token and FLOWWARDEN_ADMIN_TOKEN), or NULL */
   const char *admin;            /* --admin ADDR: the admin endpoint's address, or NULL (then
                          * fw.defaults { admin = { listen = ... } }, else none) */
} fw_run_options_t;

/* Runs until SIGTERM/SIGINT. Returns the process exit code: 0 after a clean
 * stop, 1 when the script is invalid, the URI is bad, or every stream
 * stopped on a terminal error. */
int fw_runtime_run (const fw_run_options_t *opts);

/* Validates the script without connecting and prints the effective settings
 * to stdout (errors to stderr), against uri (check's --uri; NULL:
 * FLOWWARDEN_URI, else the script's or the default; given none of the first
 * two, a stream whose database would come from the URI's path draws a
 * warning, not an error). Returns 0 or 1; with strict, a script that draws a
 * warning also returns 1. */
int fw_runtime_check (const char *script, const char *uri, bool strict);

#endif
