/*
 * runtime.c - assembles the streams of a script and runs them until told to
 * stop. Everything that can fail (script, URI, every stream's spec) is done
 * before the first thread starts, so a bad script never half-starts.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/secrets.h"
#include "lua_api/metrics_lua.h"
#include "ops/admin.h"
#include "ops/metrics.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"
#include "runtime/host/oplog_window.h"
#include "runtime/host/server_probe.h"
#include "runtime/runtime-private.h"
#include "runtime/runtime.h"
#include "runtime/stream/stream_worker.h"

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

/* Loads the script into a new host; the metrics it defines go to metrics
 * (pending until the load is committed), or to the host's own when NULL. */
static fw_lua_host_t *
load (const char *script, const char *uri, fw_metrics_t *metrics, fw_error_t *error)
{
   fw_lua_host_t *host = fw_lua_host_new (error);
   if (host && metrics) {
      fw_metrics_lua_attach (fw_lua_host_state (host), metrics);
   }
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
fw_runtime_check (const char *script, const char *uri, bool strict)
{
   fw_error_t err;
   fw_lua_host_t *host = fw_lua_host_new (&err);
   char *text;
   int rc = 1, warnings = 0;

   if (host) {
      /* flowwarden.config's CHECK_KEY: the database may come from run's --uri. */
      lua_pushboolean (fw_lua_host_state (host), 1);
      lua_setfield (fw_lua_host_state (host), LUA_REGISTRYINDEX, "flowwarden.check");
      if (!fw_lua_host_load_script (host, script, uri ? uri : option_uri (NULL), &err)) {
         fw_lua_host_destroy (host);
         host = NULL;
      }
   }

   /* The values the script read with fw.env are hidden in what check
    * prints (secrets.h): a load error may quote one, the description too. */
   if (!host) {
      fw_secrets_redact_in_place (err.message, sizeof err.message);
      fprintf (stderr, "%s\n", err.message);
      return 1;
   }
   text = fw_lua_host_describe (host, &warnings, &err);
   if (!text) {
      fw_secrets_redact_in_place (err.message, sizeof err.message);
      fprintf (stderr, "%s\n", err.message);
   } else {
      char *owned;
      printf ("script: %s (version %s)\n", script, fw_lua_host_version (host));
      fputs (fw_secrets_redact (text, strlen (text), &owned, NULL), stdout);
      free (owned);
      free (text);
      rc = 0;
      if (strict && warnings > 0) {
         fprintf (stderr,
                  "check --strict: %d warning%s (above): fix %s or run check without "
                  "--strict\n",
                  warnings, warnings == 1 ? "" : "s", warnings == 1 ? "it" : "them");
         rc = 1;
      }
   }
   fw_lua_host_destroy (host);
   return rc;
}

static bool
write_pid_file (const char *path)
{
   FILE *f;
   long other = 0;
   char comm[64] = "";

   /* A pid file naming a live flowwarden means another instance runs with
    * it: refuse rather than take it over. A stale one is replaced. */
   if ((f = fopen (path, "r"))) {
      if (fscanf (f, "%ld", &other) != 1) {
         other = 0;
      }
      fclose (f);
   }
   if (other > 0 && other != (long) getpid ()) {
      char proc[64];
      snprintf (proc, sizeof proc, "/proc/%ld/comm", other);
      if ((f = fopen (proc, "r"))) {
         if (!fgets (comm, sizeof comm, f)) {
            comm[0] = '\0';
         }
         fclose (f);
         comm[strcspn (comm, "\n")] = '\0';
      }
      if (strcmp (comm, "flowwarden") == 0) {
         fw_log (FW_LOG_ERROR, NULL,
                 "pid file %s names a running flowwarden (pid %ld): stop it first or use "
                 "another --pid-file",
                 path, other);
         return false;
      }
      fw_log (FW_LOG_WARN, NULL,
              "pid file %s is stale (pid %ld is not a running flowwarden): "
              "replacing it",
              path, other);
   }
   f = fopen (path, "w");
   if (!f) {
      fw_log (FW_LOG_ERROR, NULL, "cannot write pid file %s: %s", path, strerror (errno));
      return false;
   }
   fprintf (f, "%ld\n", (long) getpid ());
   return fclose (f) == 0;
}

typedef struct fw_runtime {
   const fw_run_options_t *opts;
   mongoc_client_pool_t *pool;
   fw_connections_t *conns;      /* fw.mongo's and named DLQs' connections */
   fw_stream_worker_t **workers; /* running (or failed) streams */
   int n;
   char *version;
   uint64_t reloads;
   uint64_t reload_failures;
   fw_metrics_t *metrics;         /* every stream's counters, fw.metrics */
   fw_runtime_control_t *control; /* the admin endpoint's requests to this thread */
   fw_oplog_sampler_t *oplog;     /* flowwarden_oplog_window_seconds (NULL: not sampled) */
   const mongoc_uri_t *uri;       /* the streams' server (a stop probes it), borrowed */
} fw_runtime_t;

static void
log_summary (fw_stream_worker_t *w, const char *why)
{
   fw_stream_stats_t s;
   char parked[48] = "";
   fw_stream_worker_stats (w, &s);
   if (s.parked) {
      snprintf (parked, sizeof parked, " parked=%llu", (unsigned long long) s.parked);
   }
   fw_log (FW_LOG_INFO, fw_stream_worker_name (w),
           "summary%s: handled=%llu handler_errors=%llu retries=%llu dead_lettered=%llu "
           "skipped=%llu lost=%llu%s%s",
           why, (unsigned long long) s.handled, (unsigned long long) s.handler_errors,
           (unsigned long long) s.retries, (unsigned long long) s.dead_lettered,
           (unsigned long long) s.skipped, (unsigned long long) s.lost, parked,
           s.failed ? " (stream stopped on an error)" : "");
}

static void
free_workers (fw_stream_worker_t **ws, int n)
{
   for (int i = 0; i < n; i++) {
      fw_stream_worker_destroy (ws[i]);
   }
   free (ws);
}

/* A lane's Lua state (lanes = N): the script loaded once more. */
static fw_lua_host_t *
lane_load (void *ud, fw_error_t *error)
{
   fw_runtime_t *rt = ud;
   return load (rt->opts->script, option_uri (rt->opts), rt->metrics, error);
}

/* Loads the script once per stream (each stream gets a Lua state of its
 * own) and builds every worker without starting any: a failure leaves
 * nothing behind. */
static bool
build_workers (fw_runtime_t *rt, fw_stream_worker_t ***out, int *n_out, char **version,
               fw_error_t *error)
{
   fw_lua_host_t *first = load (rt->opts->script, option_uri (rt->opts), rt->metrics, error);
   fw_stream_worker_t **ws;
   int n;

   if (!first) {
      return false;
   }
   if (!fw_connections_set_declared (rt->conns, first, error)) {
      fw_lua_host_destroy (first);
      return false;
   }
   n = fw_lua_host_stream_count (first);
   *version = strdup (fw_lua_host_version (first));
   if (n == 0 || !(ws = calloc ((size_t) n, sizeof *ws)) || !*version) {
      fw_error_set (error, FW_ERROR_INVALID, "%s declares no stream (use fw.stream { ... })",
                    rt->opts->script);
      fw_lua_host_destroy (first);
      free (*version);
      *version = NULL;
      return false;
   }
   for (int i = 0; i < n; i++) {
      fw_lua_host_t *host = i == 0
                               ? first
                               : load (rt->opts->script, option_uri (rt->opts), rt->metrics, error);
      if (!host || !(ws[i] = fw_stream_worker_new (host, i, rt->pool, rt->conns, error)) ||
          !fw_stream_worker_build_lanes (ws[i], lane_load, rt, error)) {
         free_workers (ws, i + 1);
         free (*version);
         *version = NULL;
         fw_metrics_rollback (rt->metrics);
         return false;
      }
   }
   /* Valid: the metrics the script defines are the process's now, and each
    * stream counts in its block (a reload's streams in the same ones). */
   fw_metrics_commit (rt->metrics);
   for (int i = 0; i < n; i++) {
      fw_stream_worker_set_metrics (ws[i], rt->metrics);
   }
   *out = ws;
   *n_out = n;
   return true;
}

static void
stop_and_forget (fw_stream_worker_t *w, const char *why)
{
   fw_stream_worker_stop (w);
   fw_stream_worker_join (w);
   log_summary (w, why);
   fw_stream_worker_destroy (w);
}

static void
hook_script (void *ud, const char **script, const char **uri)
{
   fw_runtime_t *rt = ud;
   *script = rt->opts->script;
   *uri = option_uri (rt->opts);
}

static fw_stream_worker_t *
hook_find_stream (void *ud, const char *name)
{
   fw_runtime_t *rt = ud;
   for (int i = 0; i < rt->n; i++) {
      if (fw_stream_worker_is_named (rt->workers[i], name)) {
         return rt->workers[i];
      }
   }
   return NULL;
}

/* Stops the running streams that next (the reloaded script's) no longer
 * declares; returns how many. */
static int
remove_dropped_streams (fw_runtime_t *rt, fw_stream_worker_t **next, int n)
{
   int removed = 0;

   for (int i = 0; i < rt->n; i++) {
      fw_stream_worker_t *old = rt->workers[i];
      bool found = false;
      for (int j = 0; j < n && !found; j++) {
         found = fw_stream_worker_is_named (old, fw_stream_worker_name (next[j]));
      }
      if (!found) {
         fw_stream_metrics_t *block = fw_stream_worker_metrics (old);
         stop_and_forget (old, " (removed by reload)");
         if (block) {
            fw_stream_metrics_set_active (block, false);
         }
         rt->workers[i] = NULL;
         removed++;
      }
   }
   return removed;
}

/* Takes the running worker of stream name out of rt->workers (NULL: none). */
static fw_stream_worker_t *
take_running (fw_runtime_t *rt, const char *name)
{
   for (int i = 0; i < rt->n; i++) {
      fw_stream_worker_t *old = rt->workers[i];
      if (old && fw_stream_worker_is_named (old, name)) {
         rt->workers[i] = NULL;
         return old;
      }
   }
   return NULL;
}

typedef enum { STREAM_KEPT, STREAM_RESTARTED, STREAM_ADDED } reload_fate_t;

/* Puts the reloaded worker *slot in place of the running stream of its name:
 * an unchanged source keeps the old worker (and its cursor) with the new
 * program, *slot then holding the old worker; otherwise *slot starts. */
static reload_fate_t
swap_stream (fw_runtime_t *rt, fw_stream_worker_t **slot)
{
   fw_stream_worker_t *old = take_running (rt, fw_stream_worker_name (*slot));
   reload_fate_t fate = STREAM_ADDED;
   fw_error_t err;

   if (old && !fw_stream_worker_finished (old) && fw_stream_worker_same_source (old, *slot)) {
      fw_stream_worker_replace_program (old, *slot);
      *slot = old;
      return STREAM_KEPT;
   }
   if (old) {
      /* fw.state outlives the restart: hand the joined worker's store on. */
      fw_stream_worker_stop (old);
      fw_stream_worker_join (old);
      fw_stream_worker_take_state (*slot, old);
      stop_and_forget (old, " (source changed by reload)");
      if (fw_stream_worker_metrics (*slot)) {
         fw_stream_metrics_restart (fw_stream_worker_metrics (*slot), FW_METRICS_RESTART_RELOAD);
      }
      fate = STREAM_RESTARTED;
   }
   if (!fw_stream_worker_start (*slot, &err)) {
      fw_log (FW_LOG_ERROR, fw_stream_worker_name (*slot), "%s", err.message);
   }
   return fate;
}

/* The reload's result for status, with the values read by fw.env hidden
 * (a load error may quote one). */
static void
record_reload (fw_runtime_t *rt, bool ok, const char *message)
{
   char shown[2048];
   snprintf (shown, sizeof shown, "%s", message);
   fw_secrets_redact_in_place (shown, sizeof shown);
   fw_metrics_set_last_reload (rt->metrics, ok, fw_now_ms (), shown);
}

/*
 * SIGHUP: load and validate the script again while the old one runs, then
 * swap all streams at once. Unchanged sources keep their cursor and switch
 * code at their next attempt; changed sources restart from their checkpoint.
 */
static bool
reload (fw_runtime_t *rt, char *message, size_t len)
{
   fw_stream_worker_t **next = NULL;
   fw_error_t err;
   char *version = NULL;
   int n = 0, fates[3] = {0, 0, 0}, removed;
   int64_t t0 = fw_mono_ms ();

   if (!build_workers (rt, &next, &n, &version, &err)) {
      rt->reload_failures++;
      fw_metrics_count_reload (rt->metrics, false);
      fw_log (FW_LOG_ERROR, NULL,
              "reload failed (failures so far: %llu); still running script version %s:\n%s",
              (unsigned long long) rt->reload_failures, rt->version, err.message);
      snprintf (message, len, "reload failed; still running script version %s: %s", rt->version,
                err.message);
      record_reload (rt, false, message);
      return false;
   }
   removed = remove_dropped_streams (rt, next, n);
   for (int j = 0; j < n; j++) {
      fates[swap_stream (rt, &next[j])]++;
   }
   free (rt->workers); /* every old worker was kept, stopped or moved */
   rt->workers = next;
   rt->n = n;
   rt->reloads++;
   fw_metrics_count_reload (rt->metrics, true);
   fw_metrics_set_script_version (rt->metrics, version);
   snprintf (message, len,
             "reloaded %s: version %s -> %s in %lld ms (%d kept their position, %d restarted, "
             "%d added, %d removed)",
             rt->opts->script, rt->version, version, (long long) (fw_mono_ms () - t0),
             fates[STREAM_KEPT], fates[STREAM_RESTARTED], fates[STREAM_ADDED], removed);
   fw_log (FW_LOG_INFO, NULL, "%s", message);
   record_reload (rt, true, message);
   free (rt->version);
   rt->version = version;
   return true;
}

static bool
hook_reload (void *ud, char *message, size_t len)
{
   return reload (ud, message, len);
}

/* The admin endpoint's address and token: --admin wins over the script's
 * admin.listen; the token is the script's admin.token, else
 * FLOWWARDEN_ADMIN_TOKEN. Both malloc'd (NULL: none). */
static void
admin_settings (const fw_run_options_t *opts, fw_lua_host_t *probe, char **listen, char **token,
                const char **what)
{
   lua_State *L = fw_lua_host_state (probe);
   const char *env = getenv ("FLOWWARDEN_ADMIN_TOKEN");

   *listen = *token = NULL;
   *what = "--admin";
   fw_lua_host_push_admin (probe);
   if (opts->admin) {
      *listen = strdup (opts->admin);
   } else if (lua_getfield (L, -1, "listen") == LUA_TSTRING) {
      *listen = strdup (lua_tostring (L, -1));
      *what = "fw.defaults { admin = { listen = ... } }";
      lua_pop (L, 1);
   } else {
      lua_pop (L, 1);
   }
   if (lua_getfield (L, -1, "token") == LUA_TSTRING) {
      *token = strdup (lua_tostring (L, -1));
   } else if (env && *env) {
      *token = strdup (env);
   }
   lua_pop (L, 2);
}

/* --admin-token-file's token replaces *token; it is kept out of every log
 * line. False (logged) when the file is unusable. */
static bool
admin_token_file (const fw_run_options_t *opts, char **token)
{
   fw_error_t err;
   char *read;

   if (!opts->admin_token_file) {
      return true;
   }
   if (!fw_admin_read_token_file (opts->admin_token_file, &read, &err)) {
      fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
      return false;
   }
   fw_secrets_add (read, strlen (read));
   free (*token);
   *token = read;
   return true;
}

static bool
all_failed (fw_runtime_t *rt)
{
   for (int i = 0; i < rt->n; i++) {
      fw_stream_stats_t s;
      /* Its stats are its thread's until that thread finished (a data race
       * ThreadSanitizer found): a failed stream's thread ends. */
      if (!fw_stream_worker_finished (rt->workers[i])) {
         return false;
      }
      fw_stream_worker_stats (rt->workers[i], &s);
      if (!s.failed) {
         return false;
      }
   }
   return rt->n > 0;
}

/* Signals are taken by the runtime's thread only (sigtimedwait); threads
 * created later inherit the mask. sigs: every signal it waits for; hup:
 * SIGHUP alone. */
static void
block_signals (sigset_t *sigs, sigset_t *hup)
{
   sigemptyset (sigs);
   sigaddset (sigs, SIGINT);
   sigaddset (sigs, SIGTERM);
   sigaddset (sigs, SIGHUP);
   sigaddset (sigs, FW_RUNTIME_CONTROL_SIGNAL); /* an admin endpoint request */
   sigemptyset (hup);
   sigaddset (hup, SIGHUP);
   pthread_sigmask (SIG_BLOCK, sigs, NULL);
   signal (SIGPIPE, SIG_IGN);
}

/* The URI and the admin endpoint's address and token, from a first load of
 * the script (the URI can come from the script, so it is read before the
 * pool is built). What it sets is malloc'd (NULL: none), also when it fails;
 * a failure is logged. */
static bool
read_settings (const fw_run_options_t *opts, char **uri_string, char **admin_listen,
               char **admin_token)
{
   const char *admin_what;
   fw_error_t err;
   fw_lua_host_t *probe = load (opts->script, option_uri (opts), NULL, &err);

   if (!probe) {
      fw_log (FW_LOG_ERROR, NULL, "invalid script:\n%s", err.message);
      return false;
   }
   *uri_string = effective_uri (probe);
   admin_settings (opts, probe, admin_listen, admin_token, &admin_what);
   fw_lua_host_destroy (probe);
   if (!admin_token_file (opts, admin_token)) {
      return false;
   }
   if (opts->admin_token_file && !*admin_listen) {
      fw_log (FW_LOG_WARN, NULL,
              "--admin-token-file given, but no admin endpoint: add --admin "
              "ADDR (or fw.defaults { admin = { listen = ... } })");
   }
   /* A bad admin address (or an open one without a token) is refused
    * before anything starts. */
   if (*admin_listen && !fw_admin_check_options (*admin_listen, *admin_token, admin_what, &err)) {
      fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
      return false;
   }
   return true;
}

/* The change streams' client pool (rt->pool, for *uri, which the caller
 * destroys) and fw.mongo's "default" connection; a failure is logged. */
static bool
open_pools (fw_runtime_t *rt, const char *uri_string, mongoc_uri_t **uri)
{
   bson_error_t berr;
   fw_error_t err;

   *uri = mongoc_uri_new_with_error (uri_string, &berr);
   if (!*uri) {
      char shown[512], why[512];
      fw_log (FW_LOG_ERROR, NULL, "invalid MongoDB URI \"%s\": %s",
              fw_log_redact_uri (uri_string, shown, sizeof shown),
              fw_log_redact_uri_error (uri_string, berr.message, why, sizeof why));
      return false;
   }
   rt->pool = mongoc_client_pool_new (*uri);
   if (!rt->pool) {
      char shown[512];
      fw_log (FW_LOG_ERROR, NULL, "cannot create a client pool for \"%s\"",
              fw_log_redact_uri (uri_string, shown, sizeof shown));
      return false;
   }
   mongoc_client_pool_set_error_api (rt->pool, MONGOC_ERROR_API_VERSION_2);
   if (!mongoc_client_pool_set_appname (rt->pool, "flowwarden")) {
      fw_log (FW_LOG_WARN, NULL, "cannot set the client pool's appname");
   }
   /* fw.mongo's "default" connection: the run URI, in a pool of its own so
    * handler IO never waits behind (or times out) the change stream's. */
   if (!(rt->conns = fw_connections_new ()) ||
       !fw_connections_set (rt->conns, "default", uri_string, &err)) {
      fw_log (FW_LOG_ERROR, NULL, "%s", rt->conns ? err.message : "out of memory");
      return false;
   }
   return true;
}

/* Builds every stream, writes the pid file and opens the admin endpoint, in
 * that order, without starting a stream; a failure is logged (and removes
 * the pid file it wrote). */
static bool
prepare_streams (fw_runtime_t *rt, const char *admin_listen, const char *admin_token)
{
   const fw_run_options_t *opts = rt->opts;
   fw_error_t err;

   if (!build_workers (rt, &rt->workers, &rt->n, &rt->version, &err)) {
      fw_log (FW_LOG_ERROR, NULL, "invalid script:\n%s", err.message);
      return false;
   }
   if (opts->pid_file && !write_pid_file (opts->pid_file)) {
      return false;
   }
   fw_metrics_set_script_version (rt->metrics, rt->version);
   if (admin_listen &&
       !fw_runtime_control_start_admin (rt->control, admin_listen, admin_token, &err)) {
      fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
      if (opts->pid_file) {
         unlink (opts->pid_file);
      }
      return false;
   }
   return true;
}

/* Starts every stream; false (logged) when one could not start. */
static bool
start_streams (fw_runtime_t *rt)
{
   fw_error_t err;

   for (int i = 0; i < rt->n; i++) {
      if (!fw_stream_worker_start (rt->workers[i], &err)) {
         fw_log (FW_LOG_ERROR, NULL, "%s", err.message);
         return false;
      }
   }
   return true;
}

/* Waits for SIGTERM or SIGINT, serving SIGHUP (reload) and the admin
 * endpoint's requests meanwhile; returns true when it stopped because every
 * stream had stopped on an error instead. */
static bool
serve_until_stopped (fw_runtime_t *rt, const sigset_t *sigs, const sigset_t *hup)
{
   for (;;) {
      struct timespec tick = {1, 0};
      int sig = sigtimedwait (sigs, NULL, &tick);
      if (sig == SIGTERM || sig == SIGINT) {
         fw_log (FW_LOG_INFO, NULL, "%s received: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
         return false;
      } else if (sig == SIGHUP) {
         struct timespec zero = {0, 0};
         char message[FW_ERROR_MESSAGE_MAX + 256];
         /* A burst of SIGHUPs becomes one reload; reloads run on this
          * thread, so they never overlap. */
         while (sigtimedwait (hup, NULL, &zero) == SIGHUP) {
         }
         fw_log (FW_LOG_INFO, NULL, "SIGHUP received: reloading %s", rt->opts->script);
         reload (rt, message, sizeof message);
      } else if (sig == FW_RUNTIME_CONTROL_SIGNAL) {
         fw_runtime_control_run (rt->control);
      } else if (all_failed (rt)) {
         fw_log (FW_LOG_ERROR, NULL, "every stream has stopped on an error: exiting");
         return true;
      }
   }
}

/* A stream still running this long into a stop: flowwarden says it waits
 * and asks whether the server is there at all (docs/operations.md), then
 * again as often; the question waits at most STOP_PROBE_CONNECT_MS. */
#define STOP_PROBE_MS 2000
#define STOP_PROBE_CONNECT_MS 500

/* The exit of a second SIGINT or SIGTERM during a stop: at once, 128 + sig. */
static void
exit_on_second_signal (int sig)
{
   fw_log (FW_LOG_WARN, NULL,
           "%s received again: exiting at once (exit code %d) without the final "
           "checkpoints; events since the last checkpoint are delivered again",
           sig == SIGTERM ? "SIGTERM" : "SIGINT", 128 + sig);
   fflush (NULL);
   _exit (128 + sig);
}

/* Streams from `from` on still run into a stop: when the server does not
 * answer a bounded probe, their threads wait in a MongoDB call for server
 * selection (serverSelectionTimeoutMS, 30 s by default; their final
 * checkpoints and the sessions' end as long again): exits the process with
 * 0 at once, saying that their final checkpoints are not saved (a signal
 * that came during the probe exits as a second one). Returns when the
 * server answers: the streams are busy, not stuck on it. */
static void
exit_when_server_gone (fw_runtime_t *rt, int from, const sigset_t *sigs)
{
   struct timespec zero = {0, 0};
   mongoc_uri_t *quick;
   char why[512];
   bool there;
   int sig;

   if (!rt->uri || !(quick = mongoc_uri_copy (rt->uri))) {
      return;
   }
   if (mongoc_uri_get_option_as_int32 (quick, MONGOC_URI_CONNECTTIMEOUTMS, 10000) >
       STOP_PROBE_CONNECT_MS) {
      mongoc_uri_set_option_as_int32 (quick, MONGOC_URI_CONNECTTIMEOUTMS, STOP_PROBE_CONNECT_MS);
   }
   there = fw_server_probe (quick, why, sizeof why);
   mongoc_uri_destroy (quick);
   if ((sig = sigtimedwait (sigs, NULL, &zero)) == SIGINT || sig == SIGTERM) {
      exit_on_second_signal (sig);
   }
   if (there) {
      return;
   }
   for (int i = from; i < rt->n; i++) {
      if (fw_stream_worker_running (rt->workers[i])) {
         fw_log (FW_LOG_WARN, NULL,
                 "stream %s: stopping without waiting for its MongoDB call: the server does "
                 "not answer (%s); its final checkpoint is not saved: the next start resumes "
                 "from the last saved one and delivers again the events handled since",
                 fw_stream_worker_name (rt->workers[i]), why);
      }
   }
   if (rt->opts->pid_file) {
      unlink (rt->opts->pid_file); /* removed at exit, as a clean stop does */
   }
   fflush (NULL);
   _exit (0);
}

/* Waits until every started stream's thread has finished, serving SIGINT
 * and SIGTERM meanwhile: a second one exits the process at once, with
 * 128 + its number (130, 143) and without the final checkpoints (the events
 * since the last one are delivered again at the next start); so does a
 * server that has gone (exit_when_server_gone, with 0). */
static void
wait_streams_finished (fw_runtime_t *rt, const sigset_t *sigs)
{
   int64_t t0 = fw_mono_ms (), probe_at = t0 + STOP_PROBE_MS;
   bool told = false;

   for (int i = 0; i < rt->n; i++) {
      /* A stream that could not start has no thread to wait for. */
      while (fw_stream_worker_running (rt->workers[i])) {
         struct timespec slice = {0, 100 * 1000 * 1000};
         int sig = sigtimedwait (sigs, NULL, &slice);
         if (sig == SIGINT || sig == SIGTERM) {
            exit_on_second_signal (sig);
         }
         if (fw_mono_ms () < probe_at || !fw_stream_worker_running (rt->workers[i])) {
            continue;
         }
         if (!told) {
            told = true;
            fw_log (FW_LOG_INFO, NULL,
                    "waiting for stream %s to finish its event or MongoDB call (SIGINT again "
                    "exits at once)",
                    fw_stream_worker_name (rt->workers[i]));
         }
         exit_when_server_gone (rt, i, sigs);
         probe_at = fw_mono_ms () + STOP_PROBE_MS;
      }
   }
}

/* Stops and joins every stream, with their summaries once they had started. */
static void
stop_streams (fw_runtime_t *rt, bool started, const sigset_t *sigs)
{
   for (int i = 0; i < rt->n; i++) {
      fw_stream_worker_stop (rt->workers[i]);
   }
   if (started) {
      wait_streams_finished (rt, sigs);
   }
   for (int i = 0; i < rt->n; i++) {
      fw_stream_worker_join (rt->workers[i]);
      if (started) {
         log_summary (rt->workers[i], "");
      }
   }
   if (started && (rt->reloads || rt->reload_failures)) {
      fw_log (FW_LOG_INFO, NULL, "reloads: %llu succeeded, %llu failed",
              (unsigned long long) rt->reloads, (unsigned long long) rt->reload_failures);
   }
}

/* The oplog window's sampler; a failure to start it is logged and the run
 * goes on without the metric. */
static void
start_oplog_sampler (fw_runtime_t *rt, const mongoc_uri_t *uri)
{
   fw_error_t err;
   if (!(rt->oplog = fw_oplog_sampler_start (uri, rt->metrics, 0, &err))) {
      fw_log (FW_LOG_WARN, NULL, "the oplog window is not sampled: %s", err.message);
   }
}

int
fw_runtime_run (const fw_run_options_t *opts)
{
   fw_runtime_t rt = {opts, NULL, NULL, NULL, 0, NULL, 0, 0, NULL, NULL, NULL, NULL};
   fw_runtime_hooks_t hooks = {hook_find_stream, hook_reload, hook_script, &rt};
   mongoc_uri_t *uri = NULL;
   sigset_t sigs, hup;
   char *uri_string = NULL, *admin_listen = NULL, *admin_token = NULL;
   bool started = false;
   int rc = 1;

   block_signals (&sigs, &hup);
   if (!read_settings (opts, &uri_string, &admin_listen, &admin_token)) {
      goto done;
   }
   if (!(rt.metrics = fw_metrics_new ()) ||
       !(rt.control = fw_runtime_control_new (&hooks, rt.metrics))) {
      fw_log (FW_LOG_ERROR, NULL, "out of memory");
      goto done;
   }
   fw_metrics_set_build_info (rt.metrics, FW_VERSION, MONGOC_VERSION_S, LUA_RELEASE);
   if (!open_pools (&rt, uri_string, &uri) || !prepare_streams (&rt, admin_listen, admin_token)) {
      goto done;
   }
   rt.uri = uri;
   fw_log (FW_LOG_INFO, NULL, "flowwarden %s running %s (script version %s): %d stream(s)",
           FW_VERSION, opts->script, rt.version, rt.n);
   {
      char where[512];
      fw_server_describe (uri, where, sizeof where);
      fw_log (FW_LOG_INFO, NULL, "connecting to %s ...", where);
   }
   started = true;
   start_oplog_sampler (&rt, uri);
   /* exit 1 when not every stream could start, or every one stopped on an error */
   if (start_streams (&rt) && !serve_until_stopped (&rt, &sigs, &hup)) {
      rc = 0;
   }

done:
   /* The endpoint goes first: it reads the streams' blocks and posts to
    * this thread. */
   fw_runtime_control_destroy (rt.control);
   stop_streams (&rt, started, &sigs);
   /* After the streams (their wait serves a second SIGINT): its read in
    * flight, if any, ends within the sampler's own short timeouts. */
   fw_oplog_sampler_stop (rt.oplog);
   free_workers (rt.workers, rt.n);
   fw_connections_destroy (rt.conns);
   mongoc_client_pool_destroy (rt.pool);
   mongoc_uri_destroy (uri);
   if (opts->pid_file && started) {
      unlink (opts->pid_file);
   }
   free (rt.version);
   free (uri_string);
   free (admin_listen);
   free (admin_token);
   fw_metrics_destroy (rt.metrics); /* after the workers: their Lua states use it */
   return rc;
}
