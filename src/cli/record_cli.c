/*
 * record_cli.c - `flowwarden record SCRIPT --stream NAME --out FILE [--uri URI]
 * [--limit N] [--redact a.b,c]`: a stream's live change events, from now on,
 * as canonical Extended JSON lines (fwt.events_from and `flowwarden replay`
 * read them). The change stream is opened as run opens it (the stream's
 * database, collection, pipeline and full_document settings); fields named by
 * --redact, in fullDocument, fullDocumentBeforeChange and
 * updateDescription.updatedFields, are replaced by "***".
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <mongoc/mongoc.h>

#include "cli/cli_args.h"
#include "cli_client.h"
#include "flowwarden/log.h"
#include "runtime/config/stream_config.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"
#include "runtime/runtime.h"
#include "test_cli.h"

static const char usage_text[] =
   "usage: flowwarden record SCRIPT --stream NAME --out FILE [--uri URI] [--limit N]\n"
   "                         [--redact a.b,c]\n";

static int
bad_usage (const char *msg, const char *arg)
{
   fprintf (stderr, "flowwarden: record: ");
   fprintf (stderr, msg, arg);
   fprintf (stderr, "\n%s", usage_text);
   return 2;
}

typedef struct {
   fw_lua_host_t *host;
   const char *stream;
   fw_stream_config_t *cfg;
   fw_error_t *error;
   bool found;
} find_t;

/* Protected: the validated settings of the stream named a->stream. */
static int
pfind (lua_State *L)
{
   find_t *a = lua_touserdata (L, 1);
   int n = fw_lua_host_stream_count (a->host);
   int specs;

   fw_lua_host_push_specs (a->host);
   specs = lua_gettop (L);
   for (int i = 0; i < n && !a->found; i++) {
      fw_lua_host_push_spec (a->host, i);
      lua_getfield (L, -1, "name");
      if (lua_type (L, -1) == LUA_TSTRING && strcmp (lua_tostring (L, -1), a->stream) == 0) {
         a->found = true;
         if (!fw_stream_config_read (L, lua_gettop (L) - 1, specs, a->cfg, a->error)) {
            return luaL_error (L, "%s", a->error->message);
         }
      }
      lua_pop (L, 2);
   }
   return 0;
}

/* Replaces path (dotted, relative to doc) by "***" in a copy of doc. */
static void
redact_doc (const bson_t *doc, const char *path, bson_t *out)
{
   const char *dot = strchr (path, '.');
   size_t head = dot ? (size_t) (dot - path) : strlen (path);
   bson_iter_t it;

   bson_init (out);
   if (!bson_iter_init (&it, doc)) {
      return;
   }
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      if (strcmp (key, path) == 0) {
         BSON_APPEND_UTF8 (out, key, "***"); /* a dotted key, as in updatedFields */
      } else if (strlen (key) == head && strncmp (key, path, head) == 0) {
         if (!dot) {
            BSON_APPEND_UTF8 (out, key, "***");
         } else if (BSON_ITER_HOLDS_DOCUMENT (&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t sub, red;
            bson_iter_document (&it, &len, &data);
            if (bson_init_static (&sub, data, len)) {
               redact_doc (&sub, dot + 1, &red);
               BSON_APPEND_DOCUMENT (out, key, &red);
               bson_destroy (&red);
            }
         } else {
            bson_append_iter (out, key, -1, &it);
         }
      } else {
         bson_append_iter (out, key, -1, &it);
      }
   }
}

/* The event with every --redact path replaced, in the event's documents. */
static void
redact_event (const bson_t *ev, char *const *paths, int n, bson_t *out)
{
   static const char *const docs[] = {"fullDocument", "fullDocumentBeforeChange",
                                      "updateDescription.updatedFields"};
   bson_t cur;

   bson_copy_to (ev, &cur);
   for (size_t d = 0; d < sizeof docs / sizeof *docs; d++) {
      for (int i = 0; i < n; i++) {
         char full[1200];
         bson_t next;
         snprintf (full, sizeof full, "%s.%s", docs[d], paths[i]);
         redact_doc (&cur, full, &next);
         bson_destroy (&cur);
         bson_steal (&cur, &next);
      }
   }
   bson_steal (out, &cur);
}

typedef struct {
   const char *stream, *uri_opt, *out_path, *script;
   char *paths[64];
   int n_paths;
   long limit;
} record_args_t;

/* Reads the command line into a; returns -1 to go on, else the exit code. */
static int
parse_args (int argc, char **argv, record_args_t *a)
{
   static const struct option longopts[] = {{"stream", required_argument, NULL, 's'},
                                            {"uri", required_argument, NULL, 'u'},
                                            {"out", required_argument, NULL, 'o'},
                                            {"limit", required_argument, NULL, 'l'},
                                            {"redact", required_argument, NULL, 'r'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
   char *redact = NULL;
   int c;

   opterr = 0;
   optind = 1;
   while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
      switch (c) {
      case 's':
         a->stream = optarg;
         break;
      case 'u':
         a->uri_opt = optarg;
         break;
      case 'o':
         a->out_path = optarg;
         break;
      case 'l': {
         char *end;
         a->limit = strtol (optarg, &end, 10);
         if (*end || a->limit <= 0) {
            return bad_usage ("--limit: expected an integer >= 1, got \"%s\"", optarg);
         }
         break;
      }
      case 'r':
         redact = optarg;
         break;
      case 'h':
         fputs (usage_text, stdout);
         return 0;
      case ':':
         return bad_usage ("option %s needs a value", argv[optind - 1]);
      default:
         return bad_usage ("unknown option %s", argv[optind - 1]);
      }
   }
   if ((c = fw_cli_one_script (argc, argv, optind, bad_usage, &a->script)) != -1) {
      return c;
   }
   if (!a->stream || !a->out_path) {
      return bad_usage ("%s is required", !a->stream ? "--stream NAME" : "--out FILE");
   }
   if (redact) {
      for (char *p = strtok (redact, ","); p && a->n_paths < 64; p = strtok (NULL, ",")) {
         if (*p) {
            a->paths[a->n_paths++] = p;
         }
      }
   }
   if (!a->uri_opt && getenv ("FLOWWARDEN_URI") && *getenv ("FLOWWARDEN_URI")) {
      a->uri_opt = getenv ("FLOWWARDEN_URI");
   }
   return -1;
}

/* Fills cfg with the settings of stream a->stream of the loaded script; says why not on stderr. */
static bool
find_stream (fw_lua_host_t *host, const record_args_t *a, fw_stream_config_t *cfg)
{
   fw_error_t err;
   find_t find = {host, a->stream, cfg, &err, false};

   lua_pushcfunction (fw_lua_host_state (host), pfind);
   lua_pushlightuserdata (fw_lua_host_state (host), &find);
   if (lua_pcall (fw_lua_host_state (host), 1, 0, 0) != LUA_OK) {
      fprintf (stderr, "flowwarden: record: %s\n", lua_tostring (fw_lua_host_state (host), -1));
      return false;
   }
   if (!find.found) {
      fprintf (stderr, "flowwarden: record: unknown stream \"%s\" in %s\n", a->stream, a->script);
      return false;
   }
   return true;
}

/* The stream's change stream opened as run opens it, or NULL after saying why on stderr. */
static mongoc_change_stream_t *
open_change_stream (mongoc_client_t *client, const fw_stream_config_t *cfg, const char *stream)
{
   bson_t opts = BSON_INITIALIZER, empty = BSON_INITIALIZER;
   mongoc_change_stream_t *cs;
   const bson_t *reply;
   bson_error_t berr;

   if (cfg->full_document && strcmp (cfg->full_document, "default") != 0) {
      BSON_APPEND_UTF8 (&opts, "fullDocument", cfg->full_document);
   }
   if (cfg->full_document_before_change && strcmp (cfg->full_document_before_change, "off") != 0) {
      BSON_APPEND_UTF8 (&opts, "fullDocumentBeforeChange", cfg->full_document_before_change);
   }
   BSON_APPEND_INT32 (&opts, "maxAwaitTimeMS", 500);
   if (cfg->collection) {
      mongoc_collection_t *coll = mongoc_client_get_collection (client, cfg->database,
                                                                cfg->collection);
      cs = mongoc_collection_watch (coll, cfg->pipeline ? cfg->pipeline : &empty, &opts);
      mongoc_collection_destroy (coll);
   } else {
      mongoc_database_t *db = mongoc_client_get_database (client, cfg->database);
      cs = mongoc_database_watch (db, cfg->pipeline ? cfg->pipeline : &empty, &opts);
      mongoc_database_destroy (db);
   }
   bson_destroy (&opts);
   if (mongoc_change_stream_error_document (cs, &berr, &reply)) {
      fprintf (stderr, "flowwarden: record: cannot open the change stream of %s: %s\n", stream,
               berr.message);
      mongoc_change_stream_destroy (cs);
      return NULL;
   }
   return cs;
}

/* Writes events of cs to out until the limit, SIGINT/SIGTERM or an error; returns the exit code. */
static int
record_events (mongoc_change_stream_t *cs, FILE *out, const record_args_t *a)
{
   long recorded = 0;
   sigset_t stop;
   int rc = 0;

   sigemptyset (&stop);
   sigaddset (&stop, SIGINT);
   sigaddset (&stop, SIGTERM);
   while (!a->limit || recorded < a->limit) {
      const bson_t *doc;
      struct timespec zero = {0, 0};
      bson_error_t berr;
      if (sigtimedwait (&stop, NULL, &zero) > 0) {
         break; /* main() blocked both: they wait here */
      }
      if (mongoc_change_stream_next (cs, &doc)) {
         bson_t red;
         char *json;
         redact_event (doc, a->paths, a->n_paths, &red);
         json = bson_as_canonical_extended_json (&red, NULL);
         bson_destroy (&red);
         if (!json || fprintf (out, "%s\n", json) < 0 || fflush (out) != 0) {
            fprintf (stderr, "flowwarden: record: cannot write %s: %s\n", a->out_path,
                     strerror (errno));
            bson_free (json);
            rc = 1;
            break;
         }
         bson_free (json);
         recorded++;
      } else if (mongoc_change_stream_error_document (cs, &berr, NULL)) {
         fprintf (stderr, "flowwarden: record: the change stream failed: %s\n", berr.message);
         rc = 1;
         break;
      }
   }
   fprintf (stderr, "recorded %ld event(s) to %s\n", recorded, a->out_path);
   return rc;
}

int
fw_record_cli_main (int argc, char **argv)
{
   record_args_t a;
   fw_stream_config_t cfg;
   fw_lua_host_t *host = NULL;
   mongoc_client_t *client = NULL;
   mongoc_change_stream_t *cs = NULL;
   FILE *out = NULL;
   fw_error_t err;
   int rc = 1;

   memset (&a, 0, sizeof a);
   memset (&cfg, 0, sizeof cfg);
   if ((rc = parse_args (argc, argv, &a)) >= 0) {
      return rc;
   }
   rc = 1;
   if (!(host = fw_lua_host_new (&err)) ||
       !fw_lua_host_load_script (host, a.script, a.uri_opt, &err)) {
      fprintf (stderr, "%s\n", err.message);
      goto done;
   }
   if (!find_stream (host, &a, &cfg) ||
       !(client = fw_cli_connect (host, "record", "flowwarden-record", 0)) ||
       !(cs = open_change_stream (client, &cfg, a.stream))) {
      goto done;
   }
   if (!(out = fopen (a.out_path, "w"))) {
      fprintf (stderr, "flowwarden: record: cannot write %s: %s\n", a.out_path, strerror (errno));
      goto done;
   }
   fprintf (stderr, "recording stream %s (%s%s%s) to %s; SIGINT or SIGTERM stops\n", a.stream,
            cfg.database, cfg.collection ? "." : "", cfg.collection ? cfg.collection : "",
            a.out_path);
   rc = record_events (cs, out, &a);

done:
   if (out && fclose (out) != 0) {
      rc = 1;
   }
   mongoc_change_stream_destroy (cs);
   mongoc_client_destroy (client);
   fw_stream_config_cleanup (&cfg);
   fw_lua_host_destroy (host);
   return rc;
}
