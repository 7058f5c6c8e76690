/*
 * runtime_dlq_routes.c - the admin endpoint's dead-letter routes (the
 * console's Dead letters view): the same code as `flowwarden dlq list, show,
 * list --sequences, discard` (fw_dlq_admin_*), answering JSON, and replay
 * run as `flowwarden dlq replay` in a child process, so a replay loads the
 * script, claims and settles entries exactly as the command does, and a
 * handler that hangs or crashes there never touches the running streams.
 *
 * Every call runs on the endpoint's control thread: it opens its own
 * clients (fw_dlq_admin_new, as dlq_stats does), reads the script on disk,
 * and closes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowwarden/clock.h"
#include "runtime/dlq/dlq_admin.h"
#include "runtime/runtime-private.h"

extern char **environ;

/* List answers hold at most this many entries unless limit= asks fewer. */
#define LIST_LIMIT 200
/* A replay's output kept for the answer, and how long one may run. */
#define REPLAY_OUTPUT_MAX (64 * 1024)
#define REPLAY_TIMEOUT_MS (5 * 60 * 1000)

static const char *const document_fields[] = {"fullDocument", "fullDocumentBeforeChange",
                                              "updateDescription"};

typedef struct {
   bson_string_t *out;
   int64_t n;
   bool hide_documents; /* show: replace them by "hidden" */
   bool found;
} visit_t;

static const char *
nonempty (const char *s)
{
   return s && *s ? s : NULL;
}

/* Applies the query's filter arguments (named as `flowwarden dlq`'s options;
 * error_type also as error-type) to filter. */
static bool
apply_filters (const fw_admin_dlq_request_t *req, fw_dlq_filter_t *filter, fw_error_t *error)
{
   static const char *const names[] = {"stream", "status", "error-type", "since",
                                       "until",  "id",     "limit",      "filter"};
   int64_t now_ms = fw_now_ms ();

   for (int i = 0; i < req->n_args; i++) {
      const char *key = strcmp (req->keys[i], "error_type") == 0 ? "error-type" : req->keys[i];
      const char *value = req->values[i];
      if (!*value) {
         continue; /* an empty field of the page's form: no filter */
      }
      for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
         if (strcmp (key, names[k]) == 0 &&
             !fw_dlq_filter_option (filter, key, value, now_ms, error)) {
            return false;
         }
      }
   }
   return true;
}

static bool
list_visit (const bson_t *entry, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   visit_t *v = ud;
   char *text = bson_as_relaxed_extended_json (entry, NULL);

   (void) t;
   (void) error;
   bson_string_append (v->out, v->n++ ? "," : "");
   bson_string_append (v->out, text ? text : "null");
   bson_free (text);
   return true;
}

static bool
show_visit (const bson_t *entry, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   visit_t *v = ud;
   bson_t shown = BSON_INITIALIZER;
   char *text;
   int hidden = 0;

   (void) t;
   (void) error;
   if (v->hide_documents) {
      bson_copy_to_excluding_noinit (entry, &shown, document_fields[0], document_fields[1],
                                     document_fields[2], NULL);
   } else {
      bson_concat (&shown, entry);
   }
   text = bson_as_relaxed_extended_json (&shown, NULL);
   bson_string_append (v->out, "{\"entry\":");
   bson_string_append (v->out, text ? text : "null");
   bson_string_append (v->out, ",\"hidden\":[");
   for (size_t i = 0; v->hide_documents && i < 3; i++) {
      if (bson_has_field (entry, document_fields[i])) {
         bson_string_append_printf (v->out, "%s\"%s\"", hidden++ ? "," : "", document_fields[i]);
      }
   }
   bson_string_append (v->out, "]}");
   bson_free (text);
   bson_destroy (&shown);
   v->found = true;
   return true;
}

/* filter_json selecting one sequence's entries: {"sequenceId": id}. */
static char *
sequence_filter (const char *id)
{
   bson_t q = BSON_INITIALIZER;
   char *text;

   BSON_APPEND_UTF8 (&q, "sequenceId", id);
   text = bson_as_canonical_extended_json (&q, NULL);
   bson_destroy (&q);
   return text;
}

static fw_control_result_t
dlq_list (fw_dlq_admin_t *admin, const fw_admin_dlq_request_t *req, bson_string_t *out,
          fw_error_t *error)
{
   fw_dlq_filter_t filter;
   visit_t v = {out, 0, false, false};
   const char *seq = fw_admin_dlq_arg (req, "sequence");
   char *seq_filter = NULL;
   bool ok;

   memset (&filter, 0, sizeof filter);
   if (!apply_filters (req, &filter, error)) {
      return FW_CONTROL_FAILED;
   }
   if (seq && *seq) {
      if (!(seq_filter = sequence_filter (seq))) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         return FW_CONTROL_FAILED;
      }
      filter.filter_json = seq_filter;
   }
   if (filter.limit <= 0 || filter.limit > LIST_LIMIT) {
      filter.limit = LIST_LIMIT;
   }
   bson_string_append (out, "{\"entries\":[");
   ok = fw_dlq_admin_find (admin, &filter, NULL, false, list_visit, &v, error);
   bson_string_append_printf (out, "],\"limit\":%lld}", (long long) filter.limit);
   bson_free (seq_filter);
   return ok ? FW_CONTROL_OK : FW_CONTROL_FAILED;
}

static fw_control_result_t
dlq_show (fw_dlq_admin_t *admin, const fw_admin_dlq_request_t *req, bson_string_t *out,
          fw_error_t *error)
{
   fw_dlq_filter_t filter;
   visit_t v = {out, 0, fw_admin_dlq_arg (req, "documents") == NULL, false};

   memset (&filter, 0, sizeof filter);
   filter.stream = nonempty (fw_admin_dlq_arg (req, "stream"));
   filter.ids[filter.n_ids++] = req->id;
   filter.limit = 1;
   if (!fw_dlq_admin_find (admin, &filter, NULL, true, show_visit, &v, error)) {
      return FW_CONTROL_FAILED;
   }
   if (!v.found) {
      fw_error_set (error, FW_ERROR_INVALID, "no DLQ entry with _id or eventId \"%s\"", req->id);
      return FW_CONTROL_NOT_FOUND;
   }
   return FW_CONTROL_OK;
}

static fw_control_result_t
dlq_sequences (fw_dlq_admin_t *admin, const fw_admin_dlq_request_t *req, bson_string_t *out,
               fw_error_t *error)
{
   fw_dlq_filter_t filter;
   visit_t v = {out, 0, false, false};
   bool ok;

   memset (&filter, 0, sizeof filter);
   if (!apply_filters (req, &filter, error)) {
      return FW_CONTROL_FAILED;
   }
   if (filter.limit <= 0 || filter.limit > LIST_LIMIT) {
      filter.limit = LIST_LIMIT;
   }
   bson_string_append (out, "{\"sequences\":[");
   ok = fw_dlq_admin_sequences (admin, &filter, fw_now_ms (), list_visit, &v, error);
   bson_string_append (out, "]}");
   return ok ? FW_CONTROL_OK : FW_CONTROL_FAILED;
}

static fw_control_result_t
dlq_discard (fw_dlq_admin_t *admin, const fw_admin_dlq_request_t *req, bson_string_t *out,
             fw_error_t *error)
{
   const char *reason = fw_admin_dlq_arg (req, "reason");
   fw_dlq_filter_t filter;
   fw_dlq_selection_t *sel;
   int64_t n, touched = 0;
   bool ok;

   memset (&filter, 0, sizeof filter);
   filter.stream = nonempty (fw_admin_dlq_arg (req, "stream"));
   filter.ids[filter.n_ids++] = req->id;
   if (!(sel = fw_dlq_admin_select (admin, &filter, "PENDING", error))) {
      return FW_CONTROL_FAILED;
   }
   n = fw_dlq_selection_size (sel);
   ok = fw_dlq_admin_discard (admin, sel, reason && *reason ? reason : "discarded in the console",
                              "admin:console", fw_now_ms (), &touched, error);
   fw_dlq_selection_destroy (sel);
   if (!ok) {
      return FW_CONTROL_FAILED;
   }
   if (touched == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "entry \"%s\" is not PENDING (claimed by a replay, resolved or discarded "
                    "meanwhile): nothing was changed",
                    req->id);
      return FW_CONTROL_CONFLICT;
   }
   bson_string_append_printf (out, "{\"selected\":%lld,\"discarded\":%lld}", (long long) n,
                              (long long) touched);
   return FW_CONTROL_OK;
}

/* --- replay: `flowwarden dlq replay SCRIPT --id ID` in a child ------------- */

/* environ, with FLOWWARDEN_URI=uri instead of any FLOWWARDEN_URI (the URI
 * stays out of the child's arguments, which `ps` shows). NULL: out of memory. */
static char **
child_env (const char *uri, char **uri_var)
{
   size_t n = 0, k = 0;
   char **env;

   while (environ[n]) {
      n++;
   }
   if (!(env = calloc (n + 2, sizeof *env))) {
      return NULL;
   }
   for (size_t i = 0; i < n; i++) {
      if (!uri || strncmp (environ[i], "FLOWWARDEN_URI=", 15) != 0) {
         env[k++] = environ[i];
      }
   }
   if (uri) {
      if (!(*uri_var = bson_strdup_printf ("FLOWWARDEN_URI=%s", uri))) {
         free (env);
         return NULL;
      }
      env[k++] = *uri_var;
   }
   return env;
}

/* Reads the child's output into out (at most REPLAY_OUTPUT_MAX bytes kept)
 * until it closes it or the deadline passes (then false). */
static bool
read_output (int fd, bson_string_t *out, int64_t deadline_ms)
{
   char buf[4096];

   for (;;) {
      struct pollfd p = {fd, POLLIN, 0};
      int64_t left = deadline_ms - fw_mono_ms ();
      ssize_t got;
      if (left <= 0) {
         return false;
      }
      if (poll (&p, 1, (int) (left > 1000 ? 1000 : left)) < 0 && errno != EINTR) {
         return false;
      }
      if (!p.revents) {
         continue;
      }
      if ((got = read (fd, buf, sizeof buf)) == 0) {
         return true;
      }
      if (got < 0) {
         if (errno == EINTR || errno == EAGAIN) {
            continue;
         }
         return true;
      }
      if (out->len < REPLAY_OUTPUT_MAX) {
         bson_string_append_printf (out, "%.*s", (int) got, buf);
      }
   }
}

/* Runs argv with the output of both streams into *output; the exit code, or
 * -1 with error filled. */
static int
run_child (char *const argv[], const char *uri, bson_string_t *output, fw_error_t *error)
{
   posix_spawn_file_actions_t fa;
   posix_spawnattr_t attr;
   sigset_t none, defaults;
   char *uri_var = NULL, **env;
   int fds[2], status = 0, rc;
   pid_t pid;
   bool finished;

   if (!(env = child_env (uri, &uri_var))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return -1;
   }
   if (pipe2 (fds, O_CLOEXEC) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the replay: %s", strerror (errno));
      free (env);
      bson_free (uri_var);
      return -1;
   }
   posix_spawn_file_actions_init (&fa);
   posix_spawn_file_actions_addopen (&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
   posix_spawn_file_actions_adddup2 (&fa, fds[1], STDOUT_FILENO);
   posix_spawn_file_actions_adddup2 (&fa, fds[1], STDERR_FILENO);
   /* The child holds none of the instance's sockets, and starts with the
    * signals the runtime blocks unblocked (a replay stops on SIGTERM). */
   posix_spawn_file_actions_addclosefrom_np (&fa, STDERR_FILENO + 1);
   posix_spawnattr_init (&attr);
   sigemptyset (&none);
   sigemptyset (&defaults);
   sigaddset (&defaults, SIGINT);
   sigaddset (&defaults, SIGTERM);
   sigaddset (&defaults, SIGHUP);
   sigaddset (&defaults, SIGUSR1);
   posix_spawnattr_setsigmask (&attr, &none);
   posix_spawnattr_setsigdefault (&attr, &defaults);
   posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
   rc = posix_spawn (&pid, "/proc/self/exe", &fa, &attr, argv, env);
   posix_spawnattr_destroy (&attr);
   posix_spawn_file_actions_destroy (&fa);
   close (fds[1]);
   free (env);
   bson_free (uri_var);
   if (rc != 0) {
      close (fds[0]);
      fw_error_set (error, FW_ERROR_IO, "cannot start the replay: %s", strerror (rc));
      return -1;
   }
   finished = read_output (fds[0], output, fw_mono_ms () + REPLAY_TIMEOUT_MS);
   close (fds[0]);
   if (!finished) {
      /* Its claim expires after the claim TTL, as a killed `dlq replay`'s. */
      kill (pid, SIGKILL);
   }
   while (waitpid (pid, &status, 0) < 0 && errno == EINTR) {
   }
   if (!finished) {
      fw_error_set (error, FW_ERROR_IO, "the replay ran over %d s and was stopped",
                    REPLAY_TIMEOUT_MS / 1000);
      return -1;
   }
   return WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
}

static fw_control_result_t
dlq_replay (const char *script, const char *uri, const fw_admin_dlq_request_t *req,
            bson_string_t *out, fw_error_t *error)
{
   const char *stream = fw_admin_dlq_arg (req, "stream");
   const char *dry = fw_admin_dlq_arg (req, "dry_run");
   bool dry_run = dry && strcmp (dry, "0") != 0 && strcmp (dry, "false") != 0;
   char *argv[12];
   int argc = 0, code;
   bson_string_t *output = bson_string_new (NULL);
   bson_t reply = BSON_INITIALIZER;
   char *text;

   argv[argc++] = (char *) "flowwarden";
   argv[argc++] = (char *) "dlq";
   argv[argc++] = (char *) "replay";
   argv[argc++] = (char *) script;
   argv[argc++] = (char *) "--id";
   argv[argc++] = (char *) req->id;
   if (stream && *stream) {
      argv[argc++] = (char *) "--stream";
      argv[argc++] = (char *) stream;
   }
   if (dry_run) {
      argv[argc++] = (char *) "--dry-run";
   }
   argv[argc] = NULL;
   code = run_child (argv, uri, output, error);
   if (code < 0) {
      bson_string_free (output, true);
      return FW_CONTROL_FAILED;
   }
   /* dlq replay's exit codes: 0 resolved (or would run), 3 failed again or
    * not replayable, 1 bad usage or a server error. */
   BSON_APPEND_UTF8 (&reply, "result",
                     code == 0   ? (dry_run ? "dry run" : "resolved")
                     : code == 3 ? "not resolved"
                                 : "error");
   BSON_APPEND_BOOL (&reply, "dry_run", dry_run);
   BSON_APPEND_INT32 (&reply, "exit_code", code);
   BSON_APPEND_UTF8 (&reply, "output", output->str);
   text = bson_as_relaxed_extended_json (&reply, NULL);
   bson_string_append (out, text ? text : "{}");
   bson_free (text);
   bson_destroy (&reply);
   bson_string_free (output, true);
   return code == 0 ? FW_CONTROL_OK : FW_CONTROL_FAILED;
}

fw_control_result_t
fw_runtime_dlq_route (const char *script, const char *uri, const fw_admin_dlq_request_t *req,
                      char **json, char *message, size_t len)
{
   bson_string_t *out = bson_string_new (NULL);
   fw_dlq_admin_t *admin = NULL;
   fw_control_result_t r;
   fw_error_t err;

   memset (&err, 0, sizeof err);
   *json = NULL;
   if (req->verb == FW_ADMIN_DLQ_REPLAY) {
      r = dlq_replay (script, uri, req, out, &err);
   } else if (!(admin = fw_dlq_admin_new (script, uri, &err))) {
      r = FW_CONTROL_NOT_FOUND;
   } else if (req->verb == FW_ADMIN_DLQ_LIST) {
      r = dlq_list (admin, req, out, &err);
   } else if (req->verb == FW_ADMIN_DLQ_SHOW) {
      r = dlq_show (admin, req, out, &err);
   } else if (req->verb == FW_ADMIN_DLQ_SEQUENCES) {
      r = dlq_sequences (admin, req, out, &err);
   } else {
      r = dlq_discard (admin, req, out, &err);
   }
   fw_dlq_admin_destroy (admin);
   snprintf (message, len, "%s", err.message);
   /* A replay that ran says what it did, resolved or not; any other failure
    * is the error answer alone. */
   if (r == FW_CONTROL_OK || (req->verb == FW_ADMIN_DLQ_REPLAY && out->len > 0)) {
      *json = strdup (out->str);
   }
   bson_string_free (out, true);
   if (r == FW_CONTROL_OK && !*json) {
      snprintf (message, len, "out of memory");
      return FW_CONTROL_FAILED;
   }
   return r;
}
