/*
 * runtime.c - assembles the streams of a script and runs them until told to
 * stop. Everything that can fail (script, URI, every stream's spec) is done
 * before the first thread starts, so a bad script never half-starts.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

#include "flowwarden/log.h"
#include "flowwarden/lua_host.h"
#include "flowwarden/runtime.h"
#include "flowwarden/shutdown.h"
#include "flowwarden/stream_worker.h"

/* --uri, else FLOWWARDEN_URI, else NULL (the script's or the default URI
 * then applies: flowwarden.config resolves the rest of the precedence). */
static const char *
option_uri (const fw_run_options_t *opts)
{
   const char *env = getenv ("FLOWWARDEN_URI");
   if (opts && opts->uri) {
      return opts->uri;
   }
   return env && *env ? env : NULL;
}

static fw_lua_host_t *
load (const char *script, const char *uri, fw_error_t *error)
{
   fw_lua_host_t *host = fw_lua_host_new (error);
   if (host && !fw_lua_host_load_script (host, script, uri, error)) {
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host;
}

static char *
effective_uri (fw_lua_host_t *host)
{
   lua_State *L = fw_lua_host_state (host);
   char *out;
   fw_lua_host_push_uri (host);
   out = strdup (lua_isstring (L, -1) ? lua_tostring (L, -1) : FW_DEFAULT_URI);
   lua_pop (L, 1);
   return out;
}

int
fw_runtime_check (const char *script)
{
   fw_error_t err;
   fw_lua_host_t *host = load (script, option_uri (NULL), &err);
   char *text;
   int rc = 1;

   if (!host) {
      fprintf (stderr, "%s\n", err.message);
      return 1;
   }
   text = fw_lua_host_describe (host, &err);
   if (!text) {
      fprintf (stderr, "%s\n", err.message);
   } else {
      fputs (text, stdout);
      free (text);
      rc = 0;
   }
   fw_lua_host_destroy (host);
   return rc;
}

static bool
write_pid_file (const char *path)
{
   FILE *f = fopen (path, "w");
   if (!f) {
      fw_log (FW_LOG_ERROR, NULL, "cannot write pid file %s: %s", path, strerror (errno));
      return false;
   }
   fprintf (f, "%ld\n", (long) getpid ());
   return fclose (f) == 0;
}

static bool
all_failed (fw_stream_worker_t **workers, int n)
{
   for (int i = 0; i < n; i++) {
      fw_stream_stats_t s;
      fw_stream_worker_stats (workers[i], &s);
      if (!s.failed) {
         return false;
      }
   }
   return n > 0;
}

int
fw_runtime_run (const fw_run_options_t *opts)
{
   fw_error_t err;
   fw_lua_host_t *first = NULL;
   fw_stream_worker_t **workers = NULL;
   mongoc_uri_t *uri = NULL;
   mongoc_client_pool_t *pool = NULL;
   fw_shutdown_t shutdown;
   sigset_t sigs;
   char *uri_string = NULL;
   int n = 0, started = 0, rc = 1;
   bool failed_all = false;

   fw_shutdown_init (&shutdown);
   /* Signals are taken by this thread only (sigtimedwait below); threads
    * created later inherit the mask. */
   sigemptyset (&sigs);
   sigaddset (&sigs, SIGINT);
   sigaddset (&sigs, SIGTERM);
   sigaddset (&sigs, SIGHUP);
   pthread_sigmask (SIG_BLOCK, &sigs, NULL);
   signal (SIGPIPE, SIG_IGN);

   first = load (opts->script, option_uri (opts), &err);
   if (!first) {
      fw_log (FW_LOG_ERROR, NULL, "invalid script:\n%s", err.message);
      goto done;
   }
   uri_string = effective_uri (first);

   uri = mongoc_uri_new_with_error (uri_string, NULL);
   if (!uri) {
      fw_log (FW_LOG_ERROR, NULL, "invalid MongoDB URI \"%s\"", uri_string);
      goto done;
   }
   pool = mongoc_client_pool_new (uri);
   if (!pool) {
      fw_log (FW_LOG_ERROR, NULL, "cannot create a client pool for \"%s\"", uri_string);
      goto done;
   }
   mongoc_client_pool_set_error_api (pool, MONGOC_ERROR_API_VERSION_2);
   mongoc_client_pool_set_appname (pool, "flowwarden");

   n = fw_lua_host_stream_count (first);
   if (n == 0) {
      fw_log (FW_LOG_ERROR, NULL, "%s declares no stream (use fw.stream { ... })", opts->script);
      goto done;
   }
   workers = calloc ((size_t) n, sizeof *workers);
   if (!workers) {
      goto done;
   }
   /* Each stream gets a state of its own; the first load serves stream 0. */
   for (int i = 0; i < n; i++) {
      fw_lua_host_t *host = first;
      if (i > 0 && !(host = load (opts->script, option_uri (opts), &err))) {
         fw_log (FW_LOG_ERROR, NULL, "invalid script:\n%s", err.message);
         goto done;
      }
      first = i == 0 ? NULL : first;
      if (!(workers[i] = fw_stream_worker_new (host, i, pool, &shutdown, &err))) {
         fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
         goto done;
      }
   }
   if (opts->pid_file && !write_pid_file (opts->pid_file)) {
      goto done;
   }
   fw_log (FW_LOG_INFO, NULL, "flowwarden %s running %s: %d stream(s)", FW_VERSION,
           opts->script, n);
   for (started = 0; started < n; started++) {
      if (!fw_stream_worker_start (workers[started], &err)) {
         fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
         fw_shutdown_request (&shutdown);
         break;
      }
   }

   while (!fw_shutdown_requested (&shutdown)) {
      struct timespec tick = {1, 0};
      int sig = sigtimedwait (&sigs, NULL, &tick);
      if (sig == SIGTERM || sig == SIGINT) {
         fw_log (FW_LOG_INFO, NULL, "%s received: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
         fw_shutdown_request (&shutdown);
      } else if (sig == SIGHUP) {
         fw_log (FW_LOG_WARN, NULL, "SIGHUP received: reloading is not supported by this "
                                    "version; keeping the running script");
      } else if (all_failed (workers, started)) {
         failed_all = true;
         fw_log (FW_LOG_ERROR, NULL, "every stream has stopped on an error: exiting");
         fw_shutdown_request (&shutdown);
      }
   }
   rc = failed_all ? 1 : 0;

done:
   fw_shutdown_request (&shutdown);
   for (int i = 0; i < n && workers; i++) {
      if (workers[i]) {
         fw_stream_stats_t s;
         fw_stream_worker_join (workers[i]);
         fw_stream_worker_stats (workers[i], &s);
         if (i < started) {
            fw_log (FW_LOG_INFO, fw_stream_worker_name (workers[i]),
                    "summary: handled=%llu handler_errors=%llu retries=%llu dead_lettered=%llu "
                    "skipped=%llu lost=%llu%s",
                    (unsigned long long) s.handled, (unsigned long long) s.handler_errors,
                    (unsigned long long) s.retries, (unsigned long long) s.dead_lettered,
                    (unsigned long long) s.skipped, (unsigned long long) s.lost,
                    s.failed ? " (stream stopped on an error)" : "");
         }
         fw_stream_worker_destroy (workers[i]);
      }
   }
   free (workers);
   fw_lua_host_destroy (first);
   mongoc_client_pool_destroy (pool);
   mongoc_uri_destroy (uri);
   if (opts->pid_file && started > 0) {
      unlink (opts->pid_file);
   }
   free (uri_string);
   fw_shutdown_cleanup (&shutdown);
   return rc;
}
