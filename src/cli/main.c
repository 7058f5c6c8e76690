/*
 * main.c - the command line: flowwarden run | check | doctor | dlq | status | pause |
 * resume | restart | snapshot | reload | test | record | replay | version.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <lua.h>
#include <mongoc/mongoc.h>

#include "cli/cli_args.h"
#include "cli/status_cli.h"
#include "dlq_cli.h"
#include "flowwarden/log.h"
#include "runtime/host/connections.h"
#include "runtime/runtime.h"
#include "test_cli.h"

static const char usage_text[] =
   "usage: flowwarden run SCRIPT [--uri URI] [--log-level debug|info|warn|error]\n"
   "                             [--log-format text|json] [--pid-file PATH] [--admin ADDR]\n"
   "                             [--admin-token-file FILE]\n"
   "       flowwarden check SCRIPT [--uri URI] [--strict]   (--strict: warnings fail too)\n"
   "       flowwarden doctor SCRIPT [--uri URI] [--json]   (what the deployment lacks;\n"
   "                         exit 0 all good, 1 warnings, 2 failures)\n"
   "       flowwarden status [--admin URL]... [--json]\n"
   "       flowwarden pause|resume|restart STREAM [--admin URL]\n"
   "       flowwarden snapshot STREAM [--filter JSON] [--admin URL]\n"
   "       flowwarden reload [--admin URL]\n"
   "       flowwarden dlq list|show|stats|discard|purge|export|import|replay SCRIPT ...\n"
   "       flowwarden test [busted options] [SPEC...]\n"
   "       flowwarden record SCRIPT --stream NAME --out FILE [--uri URI] [--limit N]\n"
   "                         [--redact a.b,c]\n"
   "       flowwarden replay SCRIPT --events FILE [--stream NAME] [--json] [--uri URI]\n"
   "       flowwarden version\n"
   "       flowwarden --help | flowwarden run --help | flowwarden dlq --help\n";

static const char run_help[] =
   "flowwarden run SCRIPT: load SCRIPT, start every stream it declares and run until\n"
   "SIGTERM or SIGINT.\n\n"
   "  --uri URI            MongoDB connection string (else FLOWWARDEN_URI, the script's\n"
   "                       fw.defaults { uri = ... }, then " FW_DEFAULT_URI
   ")\n"
   "  --log-level LEVEL    debug, info (default), warn or error\n"
   "  --log-format FORMAT  text (default) or json: one record per line on stderr\n"
   "  --pid-file PATH      write the process id to PATH while running\n"
   "  --admin ADDR         serve the admin endpoint (metrics, health, status, pause,\n"
   "                       reload) on ADDR, e.g. 127.0.0.1:9464 (else the script's\n"
   "                       fw.defaults { admin = { listen = ... } }, else none); its\n"
   "                       console is at http://ADDR/\n"
   "  --admin-token-file FILE  the admin token (one line): every action, from the\n"
   "                       console or a POST, then needs \"Authorization: Bearer TOKEN\"\n"
   "                       (else admin.token, else FLOWWARDEN_ADMIN_TOKEN, else none)\n";

/* verb: "" or "VERB: ", before the problem. */
static int
verb_usage (const char *verb, const char *fmt, const char *arg)
{
   fprintf (stderr, "flowwarden: %s", verb);
   fprintf (stderr, fmt, arg);
   fprintf (stderr, "\n%s", usage_text);
   return 2;
}

static int
bad_usage (const char *fmt, const char *arg)
{
   return verb_usage ("", fmt, arg);
}

static int
run_usage (const char *fmt, const char *arg)
{
   return verb_usage ("run: ", fmt, arg);
}

static int
cmd_run (int argc, char **argv)
{
   static const struct option longopts[] = {{"uri", required_argument, NULL, 'u'},
                                            {"log-level", required_argument, NULL, 'l'},
                                            {"log-format", required_argument, NULL, 'f'},
                                            {"pid-file", required_argument, NULL, 'p'},
                                            {"admin", required_argument, NULL, 'a'},
                                            {"admin-token-file", required_argument, NULL, 't'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
   fw_run_options_t opts = {0};
   fw_log_level_t level = FW_LOG_INFO;
   bool json = false;
   int c;

   opterr = 0;
   optind = 1;
   while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
      switch (c) {
      case 'u':
         opts.uri = optarg;
         break;
      case 'l':
         if (!fw_log_level_parse (optarg, &level)) {
            return bad_usage ("--log-level: unknown level \"%s\" (use debug, info, warn or error)",
                              optarg);
         }
         break;
      case 'f':
         if (strcmp (optarg, "json") == 0) {
            json = true;
         } else if (strcmp (optarg, "text") != 0) {
            return bad_usage ("--log-format: unknown format \"%s\" (use text or json)", optarg);
         }
         break;
      case 'p':
         opts.pid_file = optarg;
         break;
      case 'a':
         opts.admin = optarg;
         break;
      case 't':
         opts.admin_token_file = optarg;
         break;
      case 'h':
         fputs (run_help, stdout);
         return 0;
      case ':':
         return bad_usage ("option %s needs a value", argv[optind - 1]);
      default:
         return bad_usage ("unknown option %s", argv[optind - 1]);
      }
   }
   if ((c = fw_cli_one_script (argc, argv, optind, run_usage, &opts.script)) != -1) {
      return c;
   }
   fw_log_configure (level, json);
   return fw_runtime_run (&opts);
}

/* libmongoc's own messages go through the runtime's log, so they honour
 * --log-level and --log-format (its default handler writes raw lines to
 * stderr, and debug ones to stdout). */
static void
mongoc_log_to_fw (mongoc_log_level_t level, const char *domain, const char *message,
                  void *user_data)
{
   fw_log_level_t lv;

   (void) user_data;
   switch (level) {
   case MONGOC_LOG_LEVEL_ERROR:
   case MONGOC_LOG_LEVEL_CRITICAL:
      lv = FW_LOG_ERROR;
      break;
   case MONGOC_LOG_LEVEL_WARNING:
      lv = FW_LOG_WARN;
      break;
   case MONGOC_LOG_LEVEL_MESSAGE:
   case MONGOC_LOG_LEVEL_INFO:
      lv = FW_LOG_INFO;
      break;
   default:
      lv = FW_LOG_DEBUG;
      break;
   }
   if (fw_log_enabled (lv)) {
      fw_log (lv, NULL, "libmongoc %s: %s", domain ? domain : "", message ? message : "");
   }
}

/* flowwarden check SCRIPT [--uri URI] [--strict], the options before or after SCRIPT. */
static int
cmd_check (int argc, char **argv)
{
   const char *script = NULL, *uri = NULL;
   bool strict = false;
   int i;

   if (argc == 2 && strcmp (argv[1], "--help") == 0) {
      puts (
         "flowwarden check SCRIPT [--uri URI] [--strict]: validate SCRIPT without connecting "
         "and print each stream with its effective settings, then warnings. Exit 1 when SCRIPT "
         "is invalid; with --strict, also when there is a warning. --uri (else FLOWWARDEN_URI) "
         "is the URI run will be given: its path is the database of the streams that name "
         "none; without one, such a stream draws a warning.");
      return 0;
   }
   for (i = 1; i < argc; i++) {
      if (strcmp (argv[i], "--strict") == 0) {
         strict = true;
      } else if (strcmp (argv[i], "--uri") == 0) {
         if (++i >= argc) {
            return bad_usage ("check: --uri needs a value%s", "");
         }
         uri = argv[i];
      } else if (argv[i][0] == '-') {
         return bad_usage ("check: unknown option %s", argv[i]);
      } else if (script) {
         return bad_usage ("check: unexpected argument \"%s\"", argv[i]);
      } else {
         script = argv[i];
      }
   }
   if (!script) {
      return bad_usage ("check: missing SCRIPT%s", "");
   }
   return fw_runtime_check (script, uri, strict);
}

int
main (int argc, char **argv)
{
   sigset_t sigs;
   int rc;

   /* Before anything else: a SIGHUP or SIGTERM that arrives while starting
    * must wait for the runtime instead of killing the process. */
   sigemptyset (&sigs);
   sigaddset (&sigs, SIGINT);
   sigaddset (&sigs, SIGTERM);
   sigaddset (&sigs, SIGHUP);
   pthread_sigmask (SIG_BLOCK, &sigs, NULL);

   if (argc < 2) {
      return bad_usage ("missing command%s", "");
   }
   if (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0 ||
       strcmp (argv[1], "help") == 0) {
      fputs (usage_text, stdout);
      return 0;
   }
   if (strcmp (argv[1], "version") == 0 || strcmp (argv[1], "--version") == 0) {
      printf ("flowwarden %s (libmongoc %s, %s)\n", FW_VERSION, MONGOC_VERSION_S, LUA_RELEASE);
      return 0;
   }
   mongoc_log_set_handler (mongoc_log_to_fw, NULL);
   mongoc_init ();
   if (strcmp (argv[1], "run") == 0) {
      rc = cmd_run (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "check") == 0) {
      rc = cmd_check (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "doctor") == 0) {
      rc = fw_doctor_cli_main (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "test") == 0) {
      rc = fw_test_cli_main (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "replay") == 0) {
      rc = fw_replay_cli_main (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "record") == 0) {
      rc = fw_record_cli_main (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "dlq") == 0) {
      rc = fw_dlq_cli_main (argc - 1, argv + 1);
   } else if (strcmp (argv[1], "status") == 0 || strcmp (argv[1], "pause") == 0 ||
              strcmp (argv[1], "resume") == 0 || strcmp (argv[1], "restart") == 0 ||
              strcmp (argv[1], "reload") == 0 || strcmp (argv[1], "snapshot") == 0) {
      rc = fw_status_cli_main (argc - 1, argv + 1);
   } else {
      rc = bad_usage ("unknown command \"%s\"", argv[1]);
   }
   mongoc_cleanup ();
   return rc;
}
