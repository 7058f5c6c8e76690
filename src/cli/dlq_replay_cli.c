/*
 * dlq_replay_cli.c - `flowwarden dlq replay`: selects entries with the
 * shared dlq filters, replays them oldest clusterTime first through each
 * stream's current handler (src/runtime/replay/dlq_replay.c), and reports.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>

#include "cli/cli_args.h"
#include "flowwarden/clock.h"
#include "flowwarden/duration.h"
#include "flowwarden/log.h"
#include "flowwarden/shutdown.h"
#include "flowwarden/suggest.h"
#include "lua_api/metrics_lua.h"
#include "ops/metrics.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_admin.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/replay/dlq_replay_store.h"
#include "runtime/replay/replay_sessions.h"
#include "runtime/stream/stream_worker.h"

#define DEFAULT_URI "mongodb://127.0.0.1:27017/?replicaSet=rs0"

static const char replay_help[] =
   "usage: flowwarden dlq replay SCRIPT [filters] [--dry-run] [--rate N] [--no-retry]\n"
   "                             [--claim-ttl DUR] [--uri URI]\n\n"
   "Runs SCRIPT's current handler for each selected entry, oldest clusterTime first, with\n"
   "the stream's retry policy and budgets. A success marks the entry RESOLVED; a failure\n"
   "goes to dlq.enqueue_policy (default: back to PENDING). On a sequenced DLQ the filters\n"
   "select sequences by their head entry, and a sequence is replayed whole, in order.\n\n"
   "  --stream NAME        entries of this stream only\n"
   "  --status S[,S]       default PENDING,REPROCESSING (claims that expired); entries\n"
   "                       claimed by a running replay are never selected\n"
   "  --error-type T       error type T and its subtypes\n"
   "  --since T, --until T createdAt bounds: a duration back from now (2h, 7d) or a date\n"
   "  --id ID              this entry: its _id or its event id (repeatable)\n"
   "  --limit N            at most N entries\n"
   "  --filter JSON        an Extended JSON query ANDed with the rest\n"
   "  --sequence ID        a sequenced DLQ: this sequence (its id as `dlq list` shows it)\n"
   "  --any                a sequenced DLQ: the oldest open sequence\n"
   "  --dry-run            list what would run; change nothing\n"
   "  --rate N             at most N entries per second (N > 0)\n"
   "  --no-retry           one attempt per entry, whatever the retry policy says\n"
   "  --claim-ttl DUR      how long a claim holds without renewal (default 30s)\n"
   "  --uri URI            MongoDB connection string (else FLOWWARDEN_URI, then the script's)\n"
   "  --log-level L, --log-format text|json   for the handlers' logs (stderr)\n\n"
   "exit codes: 0 every entry resolved; 3 some failed again or could not be replayed;\n"
   "1 bad usage or a connection error\n";

static int
usage (const char *fmt, const char *arg)
{
   fprintf (stderr, "flowwarden dlq replay: ");
   fprintf (stderr, fmt, arg);
   fprintf (stderr, "\n(flowwarden dlq replay --help lists the options)\n");
   return 1;
}

typedef struct {
   fw_dlq_filter_t filter;
   const char *script;
   const char *uri;
   const char *sequence; /* --sequence ID */
   bool any;             /* --any */
   bool dry_run, no_retry, json;
   double rate;
   int64_t claim_ttl_ms;
   fw_log_level_t level;
} options_t;

static const struct option longopts[] = {{"stream", required_argument, NULL, 's'},
                                         {"status", required_argument, NULL, 'S'},
                                         {"error-type", required_argument, NULL, 'e'},
                                         {"since", required_argument, NULL, 'a'},
                                         {"until", required_argument, NULL, 'b'},
                                         {"id", required_argument, NULL, 'i'},
                                         {"limit", required_argument, NULL, 'n'},
                                         {"filter", required_argument, NULL, 'f'},
                                         {"dry-run", no_argument, NULL, 'd'},
                                         {"rate", required_argument, NULL, 'r'},
                                         {"no-retry", no_argument, NULL, 'R'},
                                         {"claim-ttl", required_argument, NULL, 't'},
                                         {"uri", required_argument, NULL, 'u'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"log-format", required_argument, NULL, 'F'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"sequence", required_argument, NULL, 'q'},
                                         {"any", no_argument, NULL, 'A'},
                                         {NULL, 0, NULL, 0}};

/* The parse_* functions below return -1 when the value is good, else the
 * exit code (usage's). */

/* --rate N: entries per second, a finite number > 0. */
static int
parse_rate (const char *arg, double *rate)
{
   char *end;

   *rate = strtod (arg, &end);
   if (*end || end == arg || !(*rate > 0) || isinf (*rate)) {
      return usage ("--rate: expected a number of entries per second > 0, got \"%s\"", arg);
   }
   return -1;
}

/* --claim-ttl DUR: a duration greater than zero. */
static int
parse_claim_ttl (const char *arg, int64_t *ms)
{
   fw_error_t err;

   if (!fw_duration_parse (arg, ms, &err)) {
      return usage ("--claim-ttl: %s", err.message);
   }
   if (*ms <= 0) {
      return usage ("--claim-ttl: must be greater than zero, got \"%s\"", arg);
   }
   return -1;
}

/* --log-level (c 'l') and --log-format (c 'F'): the handlers' logs. */
static int
parse_log_option (int c, const char *arg, options_t *o)
{
   if (c == 'l') {
      if (!fw_log_level_parse (arg, &o->level)) {
         return usage ("--log-level: unknown level \"%s\" (use debug, info, warn or error)", arg);
      }
      return -1;
   }
   if (strcmp (arg, "json") != 0 && strcmp (arg, "text") != 0) {
      return usage ("--log-format: unknown format \"%s\" (use text or json)", arg);
   }
   o->json = strcmp (arg, "json") == 0;
   return -1;
}

/* SCRIPT, alone after the options, and --any or --sequence, not both. */
static int
parse_script (int argc, char **argv, options_t *o)
{
   int rc = fw_cli_one_script (argc, argv, optind, usage, &o->script);

   if (rc != -1) {
      return rc;
   }
   if (o->any && o->sequence) {
      return usage ("%s", "--any and --sequence select sequences in two different ways: use one");
   }
   return -1;
}

/* Returns -1 to go on, else the exit code. */
static int
parse (int argc, char **argv, options_t *o)
{
   int64_t now = fw_now_ms ();
   fw_error_t err;
   int c, idx = 0, rc = -1;

   o->claim_ttl_ms = FW_DLQ_CLAIM_TTL_MS;
   o->level = FW_LOG_INFO;
   opterr = 0;
   optind = 1;
   while (rc < 0 && (c = getopt_long (argc, argv, ":h", longopts, &idx)) != -1) {
      switch (c) {
      case 's':
      case 'S':
      case 'e':
      case 'a':
      case 'b':
      case 'i':
      case 'n':
      case 'f':
         if (!fw_dlq_filter_option (&o->filter, longopts[idx].name, optarg, now, &err)) {
            return usage ("%s", err.message);
         }
         break;
      case 'd':
         o->dry_run = true;
         break;
      case 'q':
         if (!*optarg) {
            return usage ("--sequence: expected a sequence id such as '\"k1\"', got \"%s\"",
                          optarg);
         }
         o->sequence = optarg;
         break;
      case 'A':
         o->any = true;
         break;
      case 'r':
         rc = parse_rate (optarg, &o->rate);
         break;
      case 'R':
         o->no_retry = true;
         break;
      case 't':
         rc = parse_claim_ttl (optarg, &o->claim_ttl_ms);
         break;
      case 'u':
         o->uri = optarg;
         break;
      case 'l':
      case 'F':
         rc = parse_log_option (c, optarg, o);
         break;
      case 'h':
         fputs (replay_help, stdout);
         return 0;
      case ':':
         return usage ("option %s needs a value", argv[optind - 1]);
      default:
         return usage ("unknown option %s", argv[optind - 1]);
      }
   }
   return rc >= 0 ? rc : parse_script (argc, argv, o);
}

/* --- the session: one worker per stream with a DLQ, driven from here ------ */

typedef struct {
   fw_stream_worker_t **workers;
   fw_replay_sessions_t *txn_sessions; /* workers[i]'s (exactly_once: replay_sessions.h) */
   int n;
   mongoc_uri_t *uri;
   mongoc_client_pool_t *pool;
   fw_connections_t *conns;
   fw_metrics_t *metrics; /* fw.metrics updates in replayed handlers go here, unread */
   fw_shutdown_t stop;
   volatile int finished;
   pthread_t signals;
   bool has_signals;
   const char *script;     /* a full Lua state is loaded afresh from these */
   const char *option_uri; /* (replay_load); not owned */
} session_t;

/* SIGINT / SIGTERM (blocked in every thread by main): stop between entries,
 * and end a retry wait at once. */
static void *
signal_thread (void *arg)
{
   session_t *s = arg;
   sigset_t sigs;
   sigemptyset (&sigs);
   sigaddset (&sigs, SIGINT);
   sigaddset (&sigs, SIGTERM);
   while (!__atomic_load_n (&s->finished, __ATOMIC_ACQUIRE)) {
      struct timespec tick = {0, 200 * 1000 * 1000};
      int sig = sigtimedwait (&sigs, NULL, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
         fw_log (FW_LOG_INFO, NULL, "%s received: stopping after the current entry",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
         fw_shutdown_request (&s->stop);
         for (int i = 0; i < s->n; i++) {
            fw_stream_worker_stop (s->workers[i]);
         }
      }
   }
   return NULL;
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

/* A dispatcher's loader (state_rebuild.c): a replayed handler that fills its
 * Lua state gets a new one from the script, as under `run`. */
static fw_lua_host_t *
replay_load (void *ud, fw_error_t *error)
{
   const session_t *s = ud;
   fw_lua_host_t *host = fw_lua_host_new (error);

   if (host && s->metrics) {
      fw_metrics_lua_attach (fw_lua_host_state (host), s->metrics);
   }
   if (host && !fw_lua_host_load_script (host, s->script, s->option_uri, error)) {
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host;
}

/* The script's URI (fw.uri or the default), malloc'd. */
static char *
script_uri (fw_lua_host_t *first)
{
   char *uri_text;

   fw_lua_host_push_uri (first);
   uri_text = strdup (lua_isstring (fw_lua_host_state (first), -1)
                         ? lua_tostring (fw_lua_host_state (first), -1)
                         : DEFAULT_URI);
   lua_pop (fw_lua_host_state (first), 1);
   return uri_text;
}

/* s->uri, s->pool and s->conns (with first's declared connections) for
 * uri_text; says what failed on stderr and returns false when one did. */
static bool
open_pool (session_t *s, const char *uri_text, fw_lua_host_t *first)
{
   bson_error_t berr;
   fw_error_t err;

   s->uri = mongoc_uri_new_with_error (uri_text, &berr);
   if (!s->uri) {
      char why[512];
      fprintf (stderr, "flowwarden dlq replay: invalid MongoDB URI: %s\n",
               fw_log_redact_uri_error (uri_text, berr.message, why, sizeof why));
      return false;
   }
   /* An operator's tool: say the server is unreachable in seconds, not 30. */
   if (!mongoc_uri_has_option (s->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS)) {
      if (!mongoc_uri_set_option_as_int32 (s->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 5000)) {
         fprintf (stderr, "flowwarden dlq replay: warning: cannot set serverSelectionTimeoutMS\n");
      }
   }
   s->pool = mongoc_client_pool_new (s->uri);
   s->conns = fw_connections_new ();
   if (!s->pool || !s->conns || !fw_connections_set (s->conns, "default", uri_text, &err) ||
       !fw_connections_set_declared (s->conns, first, &err)) {
      fprintf (stderr, "flowwarden dlq replay: %s\n",
               s->pool && s->conns ? err.message : "cannot create a client pool");
      return false;
   }
   mongoc_client_pool_set_error_api (s->pool, MONGOC_ERROR_API_VERSION_2);
   if (!mongoc_client_pool_set_appname (s->pool, "flowwarden-dlq-replay")) {
      fprintf (stderr, "flowwarden dlq replay: warning: cannot set the pool's appname\n");
   }
   return true;
}

/* Adds w to the session when it is a stream the filters select and it has
 * a DLQ, else destroys it. True when added. */
static bool
add_worker (session_t *s, const options_t *o, fw_stream_worker_t *w)
{
   fw_error_t err;
   fw_dlq_store_t *store;

   if (o->filter.stream && strcmp (o->filter.stream, fw_stream_worker_name (w)) != 0) {
      fw_stream_worker_destroy (w);
      return false;
   }
   /* Handlers update their fw.metrics as under `run` (this process
    * serves no metrics: the updates only keep them from raising). */
   if (!s->metrics) {
      s->metrics = fw_metrics_new ();
   }
   fw_stream_worker_set_metrics (w, s->metrics);
   fw_stream_worker_bind (w);
   if (!(store = fw_dlq_replay_store (fw_stream_worker_dispatcher (w), &err))) {
      /* No DLQ at all: nothing of this stream can be waiting. */
      fw_stream_worker_unbind (w);
      fw_stream_worker_destroy (w);
      return false;
   }
   fw_dlq_store_destroy (store);
   if (!o->dry_run) { /* a dry run changes nothing, a killed replay's session included */
      fw_replay_sessions_start (&s->txn_sessions[s->n], fw_stream_worker_dispatcher (w));
   }
   s->workers[s->n++] = w;
   return true;
}

/* One worker per stream with a DLQ (the filters' stream only, if any), the
 * first on first, the others on their own load of the script. Returns the
 * exit code on failure, -1 on success. */
/* --stream NAME names no stream with a DLQ: say which there are (names:
 * the script's, NULL-terminated) and the likely one. */
static void
unknown_stream (const options_t *o, const char *const *names)
{
   const char *guess = fw_suggest (o->filter.stream, names);

   fprintf (stderr,
            "flowwarden dlq replay: %s: --stream %s: no such stream with a dead-letter "
            "queue%s%s%s; its streams are:",
            o->script, o->filter.stream, guess ? " (did you mean " : "", guess ? guess : "",
            guess ? "?)" : "");
   for (int i = 0; names[i]; i++) {
      fprintf (stderr, "%s %s", i ? "," : "", names[i]);
   }
   fprintf (stderr, "%s\n", names[0] ? "" : " none");
}

static void
free_names (char **names, int n)
{
   for (int i = 0; names && i < n; i++) {
      free (names[i]);
   }
   free (names);
}

static int
open_workers (session_t *s, const options_t *o, fw_lua_host_t *first, const char *option_uri)
{
   fw_error_t err;
   int count = fw_lua_host_stream_count (first), n_names = 0;
   bool known = !o->filter.stream;
   char **names = calloc ((size_t) count + 1, sizeof *names);

   s->workers = names ? calloc ((size_t) count + 1, sizeof *s->workers) : NULL;
   s->txn_sessions = s->workers ? calloc ((size_t) count + 1, sizeof *s->txn_sessions) : NULL;
   if (!s->txn_sessions) {
      free (s->workers);
      s->workers = NULL;
   }
   for (int i = 0; i < count && s->workers; i++) {
      fw_lua_host_t *host = i == 0 ? first : load (o->script, option_uri, &err);
      fw_stream_worker_t *w = host ? fw_stream_worker_new (host, i, s->pool, s->conns, &err) : NULL;
      if (!w) {
         fprintf (stderr, "flowwarden dlq replay: %s\n", err.message);
         free_names (names, n_names);
         return 1;
      }
      s->script = o->script;
      s->option_uri = option_uri;
      fw_dispatcher_set_loader (fw_stream_worker_dispatcher (w), replay_load, s);
      if ((names[n_names] = strdup (fw_stream_worker_name (w)))) {
         n_names++;
      }
      if (add_worker (s, o, w)) {
         known = true;
      }
   }
   if (!s->workers) {
      fprintf (stderr, "flowwarden dlq replay: out of memory\n");
      free_names (names, n_names);
      return 1;
   }
   if (!known && o->filter.stream) {
      unknown_stream (o, (const char *const *) names);
   } else if (s->n == 0) {
      fprintf (stderr, "flowwarden dlq replay: %s has no stream with a dead-letter queue\n",
               o->script);
   }
   free_names (names, n_names);
   return !known || s->n == 0 ? 1 : -1;
}

/* False (said on stderr) when none of the selected streams' DLQ collections
 * exists: a wrong database or collection would otherwise look like an empty
 * DLQ. One missing beside others is only said. */
static bool
dlq_collections_exist (session_t *s)
{
   int found = 0;

   for (int i = 0; i < s->n; i++) {
      fw_dispatcher_t *d = fw_stream_worker_dispatcher (s->workers[i]);
      const fw_stream_config_t *cfg = fw_dispatcher_config (d);
      const fw_dlq_config_t *dlq = cfg->dlq.enabled ? &cfg->dlq : &cfg->dlq_fallback;
      const char *db_name = dlq->database ? dlq->database : cfg->database;
      fw_error_t err;
      bson_error_t berr = {0};
      mongoc_client_t *client = fw_dispatcher_client_for (d, dlq->connection, &err);
      mongoc_database_t *db = client ? mongoc_client_get_database (client, db_name) : NULL;
      bool exists = db && mongoc_database_has_collection (db, dlq->collection, &berr);

      if (db && !exists && berr.code != 0) {
         fprintf (stderr, "flowwarden dlq replay: cannot list the collections of %s: %s\n", db_name,
                  berr.message);
         exists = true; /* not known: the replay says what it finds */
      }
      mongoc_database_destroy (db);
      if (exists) {
         found++;
      } else {
         fprintf (stderr,
                  "flowwarden dlq replay: stream \"%s\": its DLQ collection %s.%s does "
                  "not exist (a wrong database in --uri or the script?)\n",
                  cfg->name, db_name, dlq->collection);
      }
   }
   return found > 0;
}

/* A ping, so that an unreachable server is said before anything else. */
static bool
ping_server (session_t *s)
{
   mongoc_client_t *client = mongoc_client_pool_pop (s->pool);
   bson_t ping = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok = true;

   BSON_APPEND_INT32 (&ping, "ping", 1);
   if (!mongoc_client_command_simple (client, "admin", &ping, NULL, NULL, &berr)) {
      char redacted[2048];
      fprintf (stderr, "flowwarden dlq replay: cannot connect to %s: %s\n",
               fw_log_redact_uri (mongoc_uri_get_string (s->uri), redacted, sizeof redacted),
               berr.message);
      ok = false;
   }
   mongoc_client_pool_push (s->pool, client);
   bson_destroy (&ping);
   return ok;
}

/* Loads the script once per stream with a DLQ (each its own Lua state, as
 * `run` does) and connects. Returns the exit code on failure, -1 on success. */
static int
open_session (session_t *s, const options_t *o)
{
   const char *env = getenv ("FLOWWARDEN_URI");
   const char *option_uri = o->uri ? o->uri : (env && *env ? env : NULL);
   fw_error_t err;
   fw_lua_host_t *first = load (o->script, option_uri, &err);
   char *uri_text;
   bool ok;
   int rc;

   if (!first) {
      fprintf (stderr, "flowwarden dlq replay: invalid script:\n%s\n", err.message);
      return 1;
   }
   if (!(uri_text = script_uri (first))) {
      fprintf (stderr, "flowwarden dlq replay: out of memory\n");
      fw_lua_host_destroy (first);
      return 1;
   }
   ok = open_pool (s, uri_text, first);
   free (uri_text);
   if (!ok) {
      fw_lua_host_destroy (first);
      return 1;
   }
   if ((rc = open_workers (s, o, first, option_uri)) >= 0) {
      return rc;
   }
   return ping_server (s) ? -1 : 1;
}

static void
close_session (session_t *s)
{
   __atomic_store_n (&s->finished, 1, __ATOMIC_RELEASE);
   if (s->has_signals) {
      pthread_join (s->signals, NULL);
   }
   for (int i = 0; i < s->n; i++) {
      fw_replay_sessions_end (&s->txn_sessions[i]);
      fw_stream_worker_unbind (s->workers[i]);
      fw_stream_worker_destroy (s->workers[i]);
   }
   free (s->workers);
   free (s->txn_sessions);
   fw_metrics_destroy (s->metrics); /* after the workers' Lua states */
   fw_connections_destroy (s->conns);
   mongoc_client_pool_destroy (s->pool);
   mongoc_uri_destroy (s->uri);
   fw_shutdown_cleanup (&s->stop);
}

/* --- selecting ------------------------------------------------------------- */

typedef struct {
   int worker;
   bson_value_t id;
   char *seq;           /* sequenceId, or NULL */
   uint32_t ct_t, ct_i; /* clusterTime; 0 when absent (sorts first) */
   int64_t created;
} candidate_t;

static int
by_cluster_time (const void *a, const void *b)
{
   const candidate_t *x = a, *y = b;
   if (x->ct_t != y->ct_t) {
      return x->ct_t < y->ct_t ? -1 : 1;
   }
   if (x->ct_i != y->ct_i) {
      return x->ct_i < y->ct_i ? -1 : 1;
   }
   if (x->created != y->created) {
      return x->created < y->created ? -1 : 1;
   }
   return x->worker - y->worker;
}

/* Candidates as they are gathered: v[0..n), room for cap. */
typedef struct {
   candidate_t *v;
   size_t n, cap;
} candidates_t;

/* Frees the ids and sequence ids of list[from..n). */
static void
free_candidates (candidate_t *list, size_t from, size_t n)
{
   for (size_t i = from; i < n; i++) {
      bson_value_destroy (&list[i].id);
      free (list[i].seq);
   }
}

/* Appends the entry doc of worker's stream to c; false when out of memory. */
static bool
add_candidate (candidates_t *c, const bson_t *doc, int worker)
{
   /* doc: the fields fw_dlq_store_t's claimable gives. */
   candidate_t *e;
   bson_iter_t it;

   if (c->n == c->cap) {
      size_t cap = c->cap ? c->cap * 2 : 64;
      candidate_t *grown = realloc (c->v, cap * sizeof *c->v);
      if (!grown) {
         return false;
      }
      c->v = grown;
      c->cap = cap;
   }
   e = &c->v[c->n];
   memset (e, 0, sizeof *e);
   e->worker = worker;
   if (bson_iter_init_find (&it, doc, "_id")) {
      bson_value_copy (bson_iter_value (&it), &e->id);
   }
   if (bson_iter_init_find (&it, doc, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &e->ct_t, &e->ct_i);
   }
   if (bson_iter_init_find (&it, doc, "createdAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      e->created = bson_iter_date_time (&it);
   }
   if (bson_iter_init_find (&it, doc, "sequenceId") && BSON_ITER_HOLDS_UTF8 (&it) &&
       !(e->seq = strdup (bson_iter_utf8 (&it, NULL)))) {
      bson_value_destroy (&e->id);
      return false;
   }
   c->n++;
   return true;
}

typedef struct {
   candidates_t *c;
   int worker;
} gather_t;

static bool
gather (const bson_t *entry, void *ud, fw_error_t *error)
{
   gather_t *g = ud;
   if (!add_candidate (g->c, entry, g->worker)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory selecting the entries");
      return false;
   }
   return true;
}

/* The selected entries of the session's stream i onto c: PENDING, and
 * REPROCESSING whose claim expired (a replay killed with -9); a live claim
 * is never selected, whatever --status says. */
static bool
select_from_stream (session_t *s, const options_t *o, int i, candidates_t *c)
{
   fw_error_t err;
   const char *name = fw_stream_worker_name (s->workers[i]);
   fw_dlq_store_t *store = fw_dlq_replay_store (fw_stream_worker_dispatcher (s->workers[i]), &err);
   fw_dlq_filter_t f = o->filter;
   fw_dlq_query_t q = {&f, "PENDING,REPROCESSING", NULL, o->filter.limit, false};
   fw_dlq_claimable_t claimable = {o->sequence, o->any, 0, fw_now_ms ()};
   gather_t g = {c, i};
   bool ok;

   f.stream = name;
   ok = store && store->claimable (store, &q, &claimable, gather, &g, &err);
   if (!ok) {
      fprintf (stderr, "flowwarden dlq replay: cannot read the DLQ of stream \"%s\": %s\n", name,
               err.message);
   }
   fw_dlq_store_destroy (store);
   return ok;
}

/* Every selected entry of every stream, oldest clusterTime first. */
static bool
select_entries (session_t *s, const options_t *o, candidate_t **out, size_t *n_out)
{
   fw_error_t err;
   candidates_t c = {NULL, 0, 0};
   bool ok = true;

   if (!fw_dlq_filter_check (&o->filter, "PENDING,REPROCESSING", &err)) {
      fprintf (stderr, "flowwarden dlq replay: %s\n", err.message);
      return false;
   }
   if (!dlq_collections_exist (s)) {
      return false;
   }
   for (int i = 0; ok && i < s->n; i++) {
      ok = select_from_stream (s, o, i, &c);
   }
   if (c.n > 1) {
      qsort (c.v, c.n, sizeof *c.v, by_cluster_time);
   }
   /* --any: the oldest open sequence (Axon's processAny()), by its oldest
    * waiting entry. */
   if (o->any && c.n > 1) {
      free_candidates (c.v, 1, c.n);
      c.n = 1;
   }
   if (o->filter.limit > 0 && (int64_t) c.n > o->filter.limit) {
      free_candidates (c.v, (size_t) o->filter.limit, c.n);
      c.n = (size_t) o->filter.limit;
   }
   *out = c.v;
   *n_out = c.n;
   return ok;
}

typedef struct {
   bson_t *out;
   bool found;
} fetched_t;

static bool
copy_entry (const bson_t *entry, void *ud, fw_error_t *error)
{
   fetched_t *f = ud;
   (void) error;
   if (!f->found) {
      bson_copy_to (entry, f->out);
      f->found = true;
   }
   return true;
}

/* The entry as it is now (out initialised then, the caller's), or false
 * when it is gone. */
static bool
fetch (session_t *s, const candidate_t *c, bson_t *out, char *error, size_t len)
{
   fw_error_t err;
   fw_dlq_store_t *store = fw_dlq_replay_store (fw_stream_worker_dispatcher (s->workers[c->worker]),
                                                &err);
   bson_t ids = BSON_INITIALIZER;
   fw_dlq_query_t q = {NULL, NULL, &ids, 1, true};
   fetched_t f = {out, false};

   BSON_APPEND_VALUE (&ids, "0", &c->id);
   if (!store || !store->query (store, &q, copy_entry, &f, &err)) {
      if (f.found) {
         bson_destroy (out);
         f.found = false;
      }
      snprintf (error, len, "cannot read the entry: %.1000s", err.message);
   } else if (!f.found) {
      snprintf (error, len, "no longer in the DLQ");
   }
   fw_dlq_store_destroy (store);
   bson_destroy (&ids);
   return f.found;
}

static void
id_text (const bson_value_t *id, char *buf, size_t len)
{
   if (id->value_type == BSON_TYPE_UTF8) {
      snprintf (buf, len, "%s", id->value.v_utf8.str);
   } else {
      snprintf (buf, len, "(_id of BSON type %d)", (int) id->value_type);
   }
}

/* --- the verb ---------------------------------------------------------------- */

typedef struct {
   fw_stream_worker_t *w;
   int *counts;
   size_t done, failed, total;
   bool tty;
   int64_t t0;
} progress_t;

/* One line per replayed entry (alone, or as part of its sequence). */
static void
print_result (void *ud, const bson_t *entry, const fw_replay_result_t *r)
{
   progress_t *pr = ud;
   bson_iter_t it;
   char id[200] = "(no _id)";

   if (bson_iter_init_find (&it, entry, "_id")) {
      id_text (bson_iter_value (&it), id, sizeof id);
   }
   pr->counts[r->status]++;
   pr->done++;
   if (r->status != FW_REPLAY_RESOLVED && r->status != FW_REPLAY_SKIPPED &&
       r->status != FW_REPLAY_WOULD_RUN && r->status != FW_REPLAY_BUSY) {
      pr->failed++;
   }
   if (pr->tty) {
      fputs ("\r\033[K", stderr);
   }
   printf ("%s [%s]: %s%s%s%s\n", id, fw_stream_worker_name (pr->w), r->what,
           r->notes[0] ? " (" : "", r->notes, r->notes[0] ? ")" : "");
   fflush (stdout);
   if (pr->tty) {
      double secs = (double) (fw_mono_ms () - pr->t0) / 1000.0;
      fprintf (stderr, "replay: %zu/%zu done, %.1f/s, %zu failed", pr->done,
               pr->done > pr->total ? pr->done : pr->total,
               secs > 0 ? (double) pr->done / secs : 0.0, pr->failed);
      fflush (stderr);
   }
}

/* What became of a sequence, after its entries' lines. */
static void
print_sequence (progress_t *pr, const char *seq, fw_seq_replay_t out, size_t *left_open)
{
   if (out == FW_SEQ_REPLAY_CLOSED) {
      printf ("sequence %s [%s]: resolved and closed\n", seq, fw_stream_worker_name (pr->w));
   } else if (out == FW_SEQ_REPLAY_OPEN) {
      (*left_open)++;
      printf ("sequence %s [%s]: left open%s\n", seq, fw_stream_worker_name (pr->w),
              pr->counts[FW_REPLAY_WOULD_RUN] ? " (dry run)" : "");
   }
   fflush (stdout);
}

/* --sequence of a sequence whose entries were all resolved or discarded by
 * hand: nothing to select, but it still closes. */
static void
close_emptied_sequence (session_t *s, const options_t *o, const fw_replay_options_t *ropts,
                        progress_t *pr, size_t *left_open)
{
   for (int i = 0; i < s->n; i++) {
      fw_error_t err;
      fw_dlq_store_t *store = fw_dlq_replay_store (fw_stream_worker_dispatcher (s->workers[i]),
                                                   &err);
      fw_seq_replay_t out;
      pr->w = s->workers[i];
      if (store && fw_stream_worker_sequenced (s->workers[i])) {
         out = fw_dlq_replay_sequence (fw_stream_worker_dispatcher (s->workers[i]), store,
                                       o->sequence, ropts, print_result, pr, &err);
         if (out == FW_SEQ_REPLAY_ERROR) {
            fprintf (stderr, "flowwarden dlq replay: %s\n", err.message);
            pr->failed++;
         } else if (out == FW_SEQ_REPLAY_CLOSED) {
            print_sequence (pr, o->sequence, out, left_open);
         }
      }
      fw_dlq_store_destroy (store);
   }
}

/* True when list[i] belongs to a sequence an earlier candidate of its
 * stream already ran: a sequence runs whole, once. */
static bool
ran_with_its_sequence (const candidate_t *list, size_t i)
{
   const candidate_t *c = &list[i];
   bool seen = false;

   for (size_t j = 0; j < i && !seen; j++) {
      seen = list[j].seq && list[j].worker == c->worker && strcmp (list[j].seq, c->seq) == 0;
   }
   return seen;
}

/* --rate: waits until the next entry is due (done entries since t0 at rate
 * per second); true when a shutdown ended the wait. */
static bool
wait_for_rate (fw_shutdown_t *stop, double rate, int64_t t0, size_t done)
{
   int64_t due = t0 + (int64_t) llround ((double) done * 1000.0 / rate);
   int64_t wait = due - fw_mono_ms ();
   return wait > 0 && fw_shutdown_wait_ms (stop, wait);
}

/* Replays the candidate as its entry is now (or its whole sequence), each
 * result a line; counts in *behind an entry waiting behind an unselected
 * head, in *left_open a sequence left open. */
static void
replay_candidate (session_t *s, const candidate_t *c, const fw_replay_options_t *ropts,
                  progress_t *pr, size_t *behind, size_t *left_open)
{
   fw_stream_worker_t *w = s->workers[c->worker];
   fw_replay_result_t r;
   bson_t entry;
   char id[200];

   id_text (&c->id, id, sizeof id);
   memset (&r, 0, sizeof r);
   pr->w = w;
   if (!fetch (s, c, &entry, r.what, sizeof r.what)) {
      bson_t stub = BSON_INITIALIZER;
      BSON_APPEND_VALUE (&stub, "_id", &c->id);
      r.status = strstr (r.what, "no longer") ? FW_REPLAY_BUSY : FW_REPLAY_ERROR;
      print_result (pr, &stub, &r);
      bson_destroy (&stub);
   } else {
      fw_error_t err;
      fw_dlq_store_t *store = fw_dlq_replay_store (fw_stream_worker_dispatcher (w), &err);
      fw_seq_replay_t out = store ? fw_dlq_replay_select (fw_stream_worker_dispatcher (w), store,
                                                          &entry, ropts, print_result, pr, &err)
                                  : FW_SEQ_REPLAY_ERROR;
      if (out == FW_SEQ_REPLAY_ERROR) {
         r.status = FW_REPLAY_ERROR;
         snprintf (r.what, sizeof r.what, "%.1000s", err.message);
         print_result (pr, &entry, &r);
      } else if (out == FW_SEQ_REPLAY_BEHIND) {
         (*behind)++;
         printf (
            "%s [%s]: waits behind an earlier entry of sequence %s, which the filters "
            "did not select: not touched (replay the sequence with --sequence)\n",
            id, fw_stream_worker_name (w), c->seq);
      } else if (out != FW_SEQ_REPLAY_NONE) {
         print_sequence (pr, c->seq, out, left_open);
      }
      fw_dlq_store_destroy (store);
      bson_destroy (&entry);
   }
   /* The entry's transactions are over: its session leaves the record. */
   fw_replay_sessions_end (&s->txn_sessions[c->worker]);
}

/* The last lines: what ran, what failed, what was left. */
static void
print_summary (const options_t *o, const int *counts, bool stopped, size_t left_open, size_t behind)
{
   if (o->dry_run) {
      printf ("dry run: %d would run, %d would not (no handler or invalid); nothing was changed\n",
              counts[FW_REPLAY_WOULD_RUN], counts[FW_REPLAY_UNHANDLED] + counts[FW_REPLAY_INVALID]);
      return;
   }
   printf (
      "summary: resolved=%d skipped=%d requeued=%d evicted=%d errors=%d "
      "(no handler=%d, invalid=%d, claimed elsewhere=%d%s)\n",
      counts[FW_REPLAY_RESOLVED], counts[FW_REPLAY_SKIPPED], counts[FW_REPLAY_REQUEUED],
      counts[FW_REPLAY_EVICTED],
      counts[FW_REPLAY_UNHANDLED] + counts[FW_REPLAY_INVALID] + counts[FW_REPLAY_ERROR] +
         counts[FW_REPLAY_STOPPED],
      counts[FW_REPLAY_UNHANDLED], counts[FW_REPLAY_INVALID], counts[FW_REPLAY_BUSY],
      stopped ? ", stopped before the end" : "");
   if (left_open || behind) {
      printf ("sequences: %zu left open, %zu entr%s waiting behind an unselected head\n", left_open,
              behind, behind == 1 ? "y" : "ies");
   }
}

int
fw_dlq_replay_main (int argc, char **argv)
{
   options_t o;
   session_t s;
   candidate_t *list = NULL;
   size_t n = 0;
   int counts[FW_REPLAY_ERROR + 1] = {0};
   fw_replay_options_t ropts;
   char actor[300];
   bool tty = isatty (STDERR_FILENO);
   int64_t t0;
   int rc;
   progress_t pr = {0};
   size_t behind = 0, left_open = 0;
   bool stopped;

   memset (&o, 0, sizeof o);
   memset (&s, 0, sizeof s);
   if ((rc = parse (argc, argv, &o)) >= 0) {
      return rc;
   }
   fw_log_configure (o.level, o.json);
   if ((rc = fw_shutdown_init (&s.stop)) != 0) {
      fprintf (stderr, "flowwarden dlq replay: cannot set up the stop flag: %s\n", strerror (rc));
      return 1;
   }
   if ((rc = open_session (&s, &o)) >= 0 || !select_entries (&s, &o, &list, &n)) {
      close_session (&s);
      return rc >= 0 ? rc : 1;
   }
   s.has_signals = pthread_create (&s.signals, NULL, signal_thread, &s) == 0;
   fw_dlq_actor (actor, sizeof actor);
   ropts = (fw_replay_options_t){actor, o.claim_ttl_ms, o.no_retry, o.dry_run, false};
   printf ("%s %zu entr%s\n", o.dry_run ? "dry run: would replay" : "replaying", n,
           n == 1 ? "y" : "ies");
   fflush (stdout);

   t0 = fw_mono_ms ();
   pr.counts = counts;
   pr.total = n;
   pr.tty = tty;
   pr.t0 = t0;
   if (o.sequence && n == 0 && !o.dry_run) {
      close_emptied_sequence (&s, &o, &ropts, &pr, &left_open);
   }
   for (size_t i = 0; i < n && !fw_shutdown_requested (&s.stop); i++) {
      if (list[i].seq && ran_with_its_sequence (list, i)) {
         continue;
      }
      if (o.rate > 0 && wait_for_rate (&s.stop, o.rate, t0, pr.done)) {
         break;
      }
      replay_candidate (&s, &list[i], &ropts, &pr, &behind, &left_open);
   }
   stopped = fw_shutdown_requested (&s.stop);
   if (tty) {
      fputs ("\r\033[K", stderr);
   }
   print_summary (&o, counts, stopped, left_open, behind);
   rc = pr.failed > 0 || stopped || (left_open > 0 && !o.dry_run) ? 3 : 0;
   free_candidates (list, 0, n);
   free (list);
   close_session (&s);
   return rc;
}
