/*
 * doctor_cli.c - `flowwarden doctor SCRIPT [--uri URI] [--json]`: reads the
 * script as check does, connects as run would (the same URI), and prints
 * what the deployment lacks for its streams (doctor.h). Exit 0: all good,
 * 1: warnings, 2: failures (or a bad command line or script).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <mongoc/mongoc.h>

#include "cli/cli_args.h"
#include "cli_client.h"
#include "flowwarden/log.h"
#include "runtime/config/stream_config.h"
#include "runtime/doctor/doctor.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"
#include "runtime/host/server_probe.h"
#include "runtime/runtime.h"
#include "test_cli.h"

/* How long doctor waits to select a server when the URI does not say. */
#define DOCTOR_SELECTION_TIMEOUT_MS 3000

static const char usage_text[] = "usage: flowwarden doctor SCRIPT [--uri URI] [--json]\n";

static const char help_text[] =
   "flowwarden doctor SCRIPT [--uri URI] [--json]: check the deployment against SCRIPT's\n"
   "streams before running them: reachable and authenticated, version and topology (a\n"
   "replica set or mongos), each stream's privileges, pre- and post-images, the split\n"
   "stage, its checkpoint against the oplog window, and the clock. Each line: ok, info,\n"
   "warn or fail, and what to do. Only reads.\n\n"
   "  --uri URI   MongoDB connection string (else FLOWWARDEN_URI, the script's\n"
   "              fw.defaults { uri = ... }, then " FW_DEFAULT_URI
   ")\n"
   "  --json      one JSON document: {checks: [{stream, name, status, message, fix}], exit}\n\n"
   "Exit code: 0 all good, 1 warnings, 2 failures (or a bad command line or script).\n";

static int
bad_usage (const char *msg, const char *arg)
{
   fprintf (stderr, "flowwarden: doctor: ");
   fprintf (stderr, msg, arg);
   fprintf (stderr, "\n%s", usage_text);
   return 2;
}

typedef struct {
   fw_lua_host_t *host;
   fw_stream_config_t *cfgs; /* count entries, zeroed: each is cleaned up */
   size_t n, count;
   fw_error_t *error;
} read_all_t;

/* Protected: the validated settings of every stream. */
static int
pread_all (lua_State *L)
{
   read_all_t *a = lua_touserdata (L, 1);
   int n = fw_lua_host_stream_count (a->host);
   int specs;

   fw_lua_host_push_specs (a->host);
   specs = lua_gettop (L);
   for (int i = 0; i < n; i++) {
      fw_lua_host_push_spec (a->host, i);
      if (!fw_stream_config_read (L, lua_gettop (L), specs, &a->cfgs[i], a->error)) {
         return luaL_error (L, "%s", a->error->message);
      }
      a->n++;
      lua_pop (L, 1);
   }
   return 0;
}

static void
print_text (const fw_doctor_report_t *r)
{
   for (size_t i = 0; i < r->n; i++) {
      const fw_doctor_check_t *c = &r->checks[i];
      printf ("%-4s  %s%s%s: %s\n", fw_doctor_status_name (c->status), c->stream ? c->stream : "",
              c->stream ? " " : "", c->name, c->message);
      if (c->fix) {
         printf ("      fix: %s\n", c->fix);
      }
   }
}

static bool
print_json (const fw_doctor_report_t *r, int rc)
{
   bson_t doc = BSON_INITIALIZER, arr;
   char *json;
   bool ok;

   BSON_APPEND_ARRAY_BEGIN (&doc, "checks", &arr);
   for (size_t i = 0; i < r->n; i++) {
      const fw_doctor_check_t *c = &r->checks[i];
      bson_t one;
      char key[24];
      snprintf (key, sizeof key, "%zu", i);
      BSON_APPEND_DOCUMENT_BEGIN (&arr, key, &one);
      if (c->stream) {
         BSON_APPEND_UTF8 (&one, "stream", c->stream);
      } else {
         BSON_APPEND_NULL (&one, "stream");
      }
      BSON_APPEND_UTF8 (&one, "name", c->name);
      BSON_APPEND_UTF8 (&one, "status", fw_doctor_status_name (c->status));
      BSON_APPEND_UTF8 (&one, "message", c->message ? c->message : "");
      if (c->fix) {
         BSON_APPEND_UTF8 (&one, "fix", c->fix);
      } else {
         BSON_APPEND_NULL (&one, "fix");
      }
      bson_append_document_end (&arr, &one);
   }
   bson_append_array_end (&doc, &arr);
   BSON_APPEND_INT32 (&doc, "exit", rc);
   json = bson_as_relaxed_extended_json (&doc, NULL);
   ok = json && printf ("%s\n", json) >= 0;
   bson_free (json);
   bson_destroy (&doc);
   return ok;
}

/* Reads argv into *script, *uri and *json; -1 to go on, else the exit code. */
static int
parse_args (int argc, char **argv, const char **script, const char **uri, bool *json)
{
   static const struct option longopts[] = {{"uri", required_argument, NULL, 'u'},
                                            {"json", no_argument, NULL, 'j'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
   int c;

   opterr = 0;
   optind = 1;
   while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
      switch (c) {
      case 'u':
         *uri = optarg;
         break;
      case 'j':
         *json = true;
         break;
      case 'h':
         fputs (help_text, stdout);
         return 0;
      case ':':
         return bad_usage ("option %s needs a value", argv[optind - 1]);
      default:
         return bad_usage ("unknown option %s", argv[optind - 1]);
      }
   }
   if ((c = fw_cli_one_script (argc, argv, optind, bad_usage, script)) != -1) {
      return c;
   }
   if (!*uri && getenv ("FLOWWARDEN_URI") && *getenv ("FLOWWARDEN_URI")) {
      *uri = getenv ("FLOWWARDEN_URI");
   }
   return -1;
}

int
fw_doctor_cli_main (int argc, char **argv)
{
   const char *script = NULL, *uri = NULL;
   bool json = false;
   fw_lua_host_t *host = NULL;
   mongoc_client_t *client = NULL;
   fw_doctor_report_t report;
   read_all_t all;
   fw_error_t err;
   int rc;

   memset (&report, 0, sizeof report);
   memset (&all, 0, sizeof all);
   if ((rc = parse_args (argc, argv, &script, &uri, &json)) >= 0) {
      return rc;
   }
   rc = 2;
   if (!(host = fw_lua_host_new (&err)) || !fw_lua_host_load_script (host, script, uri, &err)) {
      fprintf (stderr, "%s\n", err.message);
      goto done;
   }
   all.host = host;
   all.error = &err;
   all.count = (size_t) fw_lua_host_stream_count (host);
   if (!(all.cfgs = calloc (all.count + 1, sizeof *all.cfgs))) {
      fprintf (stderr, "flowwarden: doctor: out of memory\n");
      goto done;
   }
   lua_pushcfunction (fw_lua_host_state (host), pread_all);
   lua_pushlightuserdata (fw_lua_host_state (host), &all);
   if (lua_pcall (fw_lua_host_state (host), 1, 0, 0) != LUA_OK) {
      fprintf (stderr, "flowwarden: doctor: %s\n", lua_tostring (fw_lua_host_state (host), -1));
      goto done;
   }
   if (!(client = fw_cli_connect (host, "doctor", "flowwarden-doctor",
                                  DOCTOR_SELECTION_TIMEOUT_MS))) {
      goto done;
   }
   fw_doctor_run (client, all.cfgs, all.n, &report);
   fw_doctor_stores (fw_lua_host_state (host), &report);
   switch (fw_doctor_worst (&report)) {
   case FW_DOCTOR_FAIL:
      rc = 2;
      break;
   case FW_DOCTOR_WARN:
      rc = 1;
      break;
   default:
      rc = 0;
   }
   if (json) {
      if (!print_json (&report, rc)) {
         rc = 2;
      }
   } else {
      print_text (&report);
   }

done:
   fw_doctor_report_cleanup (&report);
   mongoc_client_destroy (client);
   for (size_t i = 0; all.cfgs && i < all.count; i++) {
      fw_stream_config_cleanup (&all.cfgs[i]);
   }
   free (all.cfgs);
   fw_lua_host_destroy (host);
   return rc;
}
