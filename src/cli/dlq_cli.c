/*
 * dlq_cli.c - `flowwarden dlq VERB SCRIPT [options]`: list, show, stats,
 * discard, purge, export and import dead letters (replay is dlq_replay.c's).
 * Every failure exits 1, bad usage included (the rule for dlq).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlq_cli.h"
#include "flowwarden/clock.h"
#include "flowwarden/suggest.h"
#include "runtime/dlq/dlq_admin.h"
#include "runtime/replay/dlq_replay.h"

static const char dlq_help[] =
   "usage: flowwarden dlq VERB SCRIPT [options]\n"
   "\n"
   "  list SCRIPT              one line per entry: id, stream, operation, document key,\n"
   "                           error type, attempts, reprocess attempts, age, status\n"
   "                           (and sequence id and index, for a sequenced DLQ)\n"
   "  list SCRIPT --sequences  one line per open sequence: id, stream, state, size, head\n"
   "                           entry, its error type and message, age\n"
   "  show SCRIPT ID           the whole entry (ID: its _id, or the event id a log line names)\n"
   "  stats SCRIPT             counts by stream, status and error type; oldest PENDING age;\n"
   "                           open sequences, parked entries, largest sequence\n"
   "  discard SCRIPT --reason TEXT   mark entries DISCARDED (default: PENDING ones)\n"
   "  purge SCRIPT [--older-than 7d] delete entries (default: RESOLVED and DISCARDED ones)\n"
   "  export SCRIPT [--out FILE]     canonical Extended JSON, one entry a line, lossless\n"
   "  import SCRIPT FILE       upsert exported entries by _id (FILE - reads stdin)\n"
   "  replay SCRIPT            hand entries back to their handlers (flowwarden dlq replay --help)\n"
   "\n"
   "  --uri URI            MongoDB connection string (else FLOWWARDEN_URI, else the script's);\n"
   "                       a DLQ on a fw.connection uses that connection's URI\n"
   "These verbs read only the streams' DLQ settings and run no handler: an fw.env variable\n"
   "that is not set gives \"<unset NAME>\" instead of an error, so the script's secrets are\n"
   "not needed (replay runs handlers and needs them).\n"
   "  --json               JSON lines (relaxed Extended JSON) instead of a table\n"
   "  --documents          list, show: print fullDocument, fullDocumentBeforeChange and\n"
   "                       updateDescription (hidden by default: they may hold personal data)\n"
   "  --yes                discard, purge: do not ask for confirmation\n"
   "  --sequences          list: the sequences of a sequenced DLQ instead of entries;\n"
   "                       --stream and --limit select sequences, the other filters\n"
   "                       select them by their head entry\n"
   "filters (every verb but import, which takes only --stream):\n"
   "  --stream NAME        one stream's entries\n"
   "  --status S[,S...]    PENDING, REPROCESSING, RESOLVED or DISCARDED\n"
   "  --error-type T       error type T and its subtypes (T.*)\n"
   "  --since WHEN         created at or after WHEN: a duration back from now (2h, 7d) or\n"
   "  --until WHEN         an ISO date (2026-01-15, 2026-01-15T10:30:00Z); --until: before\n"
   "  --id ID              this entry: its _id or its event id (repeatable)\n"
   "  --limit N            at most N entries (oldest first)\n"
   "  --filter JSON        any MongoDB query on the entry, in Extended JSON\n"
   "\n"
   "exit codes: 0 success; 1 bad usage, bad input, a refused confirmation or a server error\n";

enum {
   O_URI = 1 << 0,
   O_JSON = 1 << 1,
   O_DOCS = 1 << 2,
   O_YES = 1 << 3,
   O_REASON = 1 << 4,
   O_OLDER = 1 << 5,
   O_OUT = 1 << 6,
   O_STREAM = 1 << 7,
   O_FILTERS = 1 << 8,
   O_SEQS = 1 << 9
};

typedef struct {
   const char *name;
   int options;     /* O_* the verb takes */
   int positionals; /* after SCRIPT */
   const char *default_status;
} verb_t;

#define COMMON (O_URI | O_JSON | O_STREAM | O_FILTERS)
static const verb_t verbs[] = {
   {"list", COMMON | O_DOCS | O_SEQS, 0, NULL},
   {"show", COMMON | O_DOCS, 1, NULL},
   {"stats", COMMON, 0, NULL},
   {"discard", COMMON | O_REASON | O_YES, 0, "PENDING"},
   {"purge", COMMON | O_OLDER | O_YES, 0, "RESOLVED,DISCARDED"},
   {"export", COMMON | O_OUT, 0, NULL},
   {"import", O_URI | O_JSON | O_STREAM, 1, NULL},
   {"replay", 0, 0, NULL},
};
#define N_VERBS ((int) (sizeof verbs / sizeof *verbs))

typedef struct {
   const verb_t *verb;
   const char *script;
   const char *arg; /* show's ID, import's FILE */
   const char *uri;
   const char *reason;
   const char *out;
   bool json, documents, yes, sequences;
   fw_dlq_filter_t filter;
   int64_t now_ms;
} opts_t;

static int fail (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

static int
fail (const char *fmt, ...)
{
   va_list ap;
   fprintf (stderr, "flowwarden dlq: ");
   va_start (ap, fmt);
   vfprintf (stderr, fmt, ap);
   va_end (ap);
   fputc ('\n', stderr);
   return 1;
}

static int
usage_error (const char *fmt, const char *arg)
{
   fprintf (stderr, "flowwarden dlq: ");
   fprintf (stderr, fmt, arg);
   fprintf (stderr, "\n(flowwarden dlq --help lists the verbs and options)\n");
   return 1;
}

static int
unknown_verb (const char *name)
{
   const char *names[N_VERBS + 1], *hint;

   for (int i = 0; i < N_VERBS; i++) {
      names[i] = verbs[i].name;
   }
   names[N_VERBS] = NULL;
   if ((hint = fw_suggest (name, names))) {
      return fail ("unknown verb \"%s\" (did you mean \"%s\"?)", name, hint);
   }
   return fail (
      "unknown verb \"%s\" (use list, show, stats, discard, purge, export, import or "
      "replay; flowwarden dlq --help)",
      name);
}

static const struct option longopts[] = {
   {"uri", required_argument, NULL, 'u'},    {"json", no_argument, NULL, 'j'},
   {"documents", no_argument, NULL, 'D'},    {"yes", no_argument, NULL, 'y'},
   {"reason", required_argument, NULL, 'r'}, {"older-than", required_argument, NULL, 'o'},
   {"out", required_argument, NULL, 'O'},    {"stream", required_argument, NULL, 's'},
   {"status", required_argument, NULL, 'S'}, {"error-type", required_argument, NULL, 'e'},
   {"since", required_argument, NULL, 'a'},  {"until", required_argument, NULL, 'b'},
   {"id", required_argument, NULL, 'i'},     {"limit", required_argument, NULL, 'l'},
   {"filter", required_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'},
   {"sequences", no_argument, NULL, 'Q'},    {NULL, 0, NULL, 0}};

/* True when the verb takes option c (the value getopt_long returned for it). */
static bool
verb_takes (const verb_t *verb, int c)
{
   static const struct {
      int c;
      int flag;
   } needs[] = {{'u', O_URI},     {'j', O_JSON},    {'D', O_DOCS},    {'y', O_YES},
                {'r', O_REASON},  {'o', O_OLDER},   {'O', O_OUT},     {'s', O_STREAM},
                {'S', O_FILTERS}, {'e', O_FILTERS}, {'a', O_FILTERS}, {'b', O_FILTERS},
                {'i', O_FILTERS}, {'l', O_FILTERS}, {'f', O_FILTERS}, {'Q', O_SEQS}};

   for (size_t k = 0; k < sizeof needs / sizeof *needs; k++) {
      if (needs[k].c == c && !(verb->options & needs[k].flag)) {
         return false;
      }
   }
   return true;
}

/* SCRIPT, then show's ID or import's FILE, from argv[optind] on; returns -1
 * when they are all there and nothing follows, else the exit code. */
static int
parse_positionals (int argc, char **argv, opts_t *o)
{
   if (optind >= argc) {
      return fail ("%s: missing SCRIPT (flowwarden dlq %s SCRIPT%s)", o->verb->name, o->verb->name,
                   strcmp (o->verb->name, "show") == 0     ? " ID"
                   : strcmp (o->verb->name, "import") == 0 ? " FILE"
                                                           : "");
   }
   o->script = argv[optind++];
   if (o->verb->positionals == 1) {
      if (optind >= argc) {
         return fail ("%s: missing %s", o->verb->name,
                      strcmp (o->verb->name, "show") == 0 ? "ID" : "FILE");
      }
      o->arg = argv[optind++];
   }
   if (optind < argc) {
      return fail ("%s: unexpected argument \"%s\"", o->verb->name, argv[optind]);
   }
   return -1;
}

/* The options that are wrong together or missing; the filters checked
 * before the script is even loaded. Returns -1 when all is well, else the
 * exit code. */
static int
check_options (opts_t *o)
{
   fw_error_t err;

   if (o->sequences && o->documents) {
      return fail (
         "list --sequences does not take --documents (it prints no entry; "
         "flowwarden dlq list --documents does)");
   }
   if (strcmp (o->verb->name, "discard") == 0 && (!o->reason || !*o->reason)) {
      return fail ("discard: --reason TEXT is required (it is stored as discardReason)");
   }
   /* Bad filters are reported before the script is even loaded. */
   if (!fw_dlq_filter_check (&o->filter, NULL, &err)) {
      return fail ("%s", err.message);
   }
   return -1;
}

/* Parses argv (argv[0] is the verb) into o; returns -1 on success, else the
 * exit code. */
static int
parse (int argc, char **argv, opts_t *o)
{
   fw_error_t err;
   int64_t older = 0;
   int c, idx = 0, rc;

   opterr = 0;
   optind = 1;
   while ((c = getopt_long (argc, argv, ":h", longopts, &idx)) != -1) {
      if (!verb_takes (o->verb, c)) {
         return fail ("%s does not take --%s", o->verb->name, longopts[idx].name);
      }
      switch (c) {
      case 'u':
         o->uri = optarg;
         break;
      case 'j':
         o->json = true;
         break;
      case 'D':
         o->documents = true;
         break;
      case 'y':
         o->yes = true;
         break;
      case 'Q':
         o->sequences = true;
         break;
      case 'r':
         o->reason = optarg;
         break;
      case 'O':
         o->out = optarg;
         break;
      case 's':
      case 'S':
      case 'e':
      case 'f':
      case 'a':
      case 'b':
      case 'i':
      case 'l':
         if (!fw_dlq_filter_option (&o->filter, longopts[idx].name, optarg, o->now_ms, &err)) {
            return fail ("%s", err.message);
         }
         break;
      case 'o':
         if (!fw_dlq_parse_time ("--older-than", optarg, o->now_ms, &older, &err)) {
            return fail ("%s", err.message);
         }
         break;
      case 'h':
         fputs (dlq_help, stdout);
         return 0;
      case ':':
         return usage_error ("option %s needs a value", argv[optind - 1]);
      default:
         return usage_error ("unknown option %s", argv[optind - 1]);
      }
   }
   if (older && (!o->filter.until_ms || older < o->filter.until_ms)) {
      o->filter.until_ms = older;
   }
   if ((rc = parse_positionals (argc, argv, o)) >= 0) {
      return rc;
   }
   return check_options (o);
}

/* --- the verbs ------------------------------------------------------------ */

static bool
list_visit (const bson_t *entry, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   opts_t *o = ((void **) ud)[0];
   fw_dlq_table_t *table = ((void **) ud)[1];
   (void) t;
   if (o->json) {
      fw_dlq_print_entry (entry, true, o->documents, stdout);
      return true;
   }
   if (!fw_dlq_table_add (table, entry, o->now_ms)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   }
   return true;
}

static bool
sequence_visit (const bson_t *seq, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   opts_t *o = ((void **) ud)[0];
   fw_dlq_table_t *table = ((void **) ud)[1];
   (void) t;
   if (o->json) {
      fw_dlq_print_json (seq, stdout);
      return true;
   }
   if (!fw_dlq_sequence_table_add (table, seq)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   }
   return true;
}

static int
cmd_list_sequences (fw_dlq_admin_t *admin, opts_t *o)
{
   fw_dlq_table_t *table = fw_dlq_sequence_table_new ();
   void *ud[2] = {o, table};
   fw_error_t err;
   int rc = 0;

   if (!table) {
      return fail ("out of memory");
   }
   if (!fw_dlq_admin_sequences (admin, &o->filter, o->now_ms, sequence_visit, ud, &err)) {
      rc = fail ("%s", err.message);
   } else if (!o->json) {
      fw_dlq_table_print (table, stdout);
   }
   fw_dlq_table_destroy (table);
   return rc;
}

static int
cmd_list (fw_dlq_admin_t *admin, opts_t *o)
{
   fw_dlq_table_t *table = fw_dlq_table_new ();
   void *ud[2] = {o, table};
   fw_error_t err;
   int rc = 0;

   if (!table) {
      return fail ("out of memory");
   }
   if (!fw_dlq_admin_find (admin, &o->filter, NULL, o->documents, list_visit, ud, &err)) {
      rc = fail ("%s", err.message);
   } else if (!o->json) {
      fw_dlq_table_print (table, stdout);
   }
   fw_dlq_table_destroy (table);
   return rc;
}

static bool
show_visit (const bson_t *entry, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   opts_t *o = ud;
   (void) t;
   (void) error;
   fw_dlq_print_entry (entry, o->json, o->documents, stdout);
   o->filter.limit = -1; /* found */
   return true;
}

static int
cmd_show (fw_dlq_admin_t *admin, opts_t *o)
{
   fw_error_t err;
   if (o->filter.n_ids == FW_DLQ_MAX_IDS) {
      return fail ("--id: at most %d ids (select more with --filter)", FW_DLQ_MAX_IDS);
   }
   o->filter.ids[o->filter.n_ids++] = o->arg;
   o->filter.limit = 1;
   /* Fetched whole, so the table can say which document fields it hides. */
   if (!fw_dlq_admin_find (admin, &o->filter, NULL, true, show_visit, o, &err)) {
      return fail ("%s", err.message);
   }
   if (o->filter.limit != -1) {
      return fail ("no DLQ entry with _id or eventId \"%s\"%s%s", o->arg,
                   o->filter.stream ? " in stream " : "", o->filter.stream ? o->filter.stream : "");
   }
   return 0;
}

static int
cmd_stats (fw_dlq_admin_t *admin, opts_t *o)
{
   fw_error_t err;
   bson_t stats;
   int rc = 0;

   if (!fw_dlq_admin_stats (admin, &o->filter, NULL, o->now_ms, &stats, &err)) {
      rc = fail ("%s", err.message);
   } else {
      fw_dlq_print_stats (&stats, o->json, stdout);
   }
   bson_destroy (&stats);
   return rc;
}

/* "cli:<user>@<host>", as history items name who acted. */
static void
actor (char *buf, size_t len)
{
   struct passwd *pw = getpwuid (geteuid ());
   const char *user = pw ? pw->pw_name : getenv ("USER");
   char host[HOST_NAME_MAX + 1] = "?";
   gethostname (host, sizeof host);
   host[sizeof host - 1] = '\0';
   snprintf (buf, len, "cli:%s@%s", user ? user : "?", host);
}

/* Discard or purge: select, confirm, apply, say how many. */
static int
cmd_change (fw_dlq_admin_t *admin, opts_t *o, bool discard)
{
   const char *verb = discard ? "discard" : "purge";
   fw_dlq_selection_t *sel;
   fw_error_t err;
   int64_t n, touched = 0;
   char who[512];
   bool ok;

   sel = fw_dlq_admin_select (admin, &o->filter, o->verb->default_status, &err);
   if (!sel) {
      return fail ("%s", err.message);
   }
   n = fw_dlq_selection_size (sel);
   if (n > 0 && !o->yes) {
      char answer[16] = "";
      if (!isatty (STDIN_FILENO) || !isatty (STDERR_FILENO)) {
         fw_dlq_selection_destroy (sel);
         return fail (
            "%s would touch %lld %s: add --yes to confirm (there is no terminal "
            "to ask); nothing was changed",
            verb, (long long) n, n == 1 ? "entry" : "entries");
      }
      fprintf (stderr, "%s %lld %s? [y/N] ", verb, (long long) n, n == 1 ? "entry" : "entries");
      fflush (stderr);
      if (!fgets (answer, sizeof answer, stdin) ||
          (strcmp (answer, "y\n") != 0 && strcmp (answer, "yes\n") != 0)) {
         fw_dlq_selection_destroy (sel);
         return fail ("%s not confirmed; nothing was changed", verb);
      }
   }
   if (discard) {
      actor (who, sizeof who);
      ok = fw_dlq_admin_discard (admin, sel, o->reason, who, fw_now_ms (), &touched, &err);
   } else {
      ok = fw_dlq_admin_purge (admin, sel, &touched, &err);
   }
   fw_dlq_selection_destroy (sel);
   if (o->json) {
      printf ("{ \"selected\" : %lld, \"%s\" : %lld }\n", (long long) n,
              discard ? "discarded" : "purged", (long long) touched);
   } else {
      printf ("%s %lld %s", discard ? "discarded" : "purged", (long long) touched,
              touched == 1 ? "entry" : "entries");
      if (touched < n) {
         printf (" (%lld of the %lld selected changed meanwhile and were left alone)",
                 (long long) (n - touched), (long long) n);
      }
      printf ("\n");
   }
   if (!ok) {
      return fail ("%s", err.message);
   }
   return 0;
}

typedef struct {
   FILE *out;
   int64_t n;
} export_t;

static bool
export_visit (const bson_t *entry, const fw_dlq_target_t *t, void *ud, fw_error_t *error)
{
   export_t *x = ud;
   size_t len;
   char *json = bson_as_canonical_extended_json (entry, &len);
   bool ok;
   (void) t;
   ok = json && fwrite (json, 1, len, x->out) == len && fputc ('\n', x->out) != EOF;
   bson_free (json);
   if (!ok) {
      fw_error_set (error, FW_ERROR_IO, "cannot write the export: %s", strerror (errno));
   }
   x->n++;
   return ok;
}

static int
cmd_export (fw_dlq_admin_t *admin, opts_t *o)
{
   export_t x = {stdout, 0};
   fw_error_t err;
   bool ok;

   if (o->out && !(x.out = fopen (o->out, "w"))) {
      return fail ("export: cannot write %s: %s", o->out, strerror (errno));
   }
   ok = fw_dlq_admin_find (admin, &o->filter, NULL, true, export_visit, &x, &err);
   if (o->out && fclose (x.out) != 0 && ok) {
      fw_error_set (&err, FW_ERROR_IO, "cannot write %s: %s", o->out, strerror (errno));
      ok = false;
   }
   if (!ok) {
      return fail ("%s", err.message);
   }
   fprintf (stderr, "exported %lld %s%s%s\n", (long long) x.n, x.n == 1 ? "entry" : "entries",
            o->out ? " to " : "", o->out ? o->out : "");
   return 0;
}

static int
cmd_import (fw_dlq_admin_t *admin, opts_t *o)
{
   FILE *in = strcmp (o->arg, "-") == 0 ? stdin : fopen (o->arg, "r");
   int64_t counts[3] = {0}, failed = 0, line_no = 0;
   char *line = NULL;
   size_t cap = 0;
   ssize_t len;

   if (!in) {
      return fail ("import: cannot read %s: %s", o->arg, strerror (errno));
   }
   while ((len = getline (&line, &cap, in)) >= 0) {
      fw_dlq_import_result_t result;
      bson_error_t berr;
      fw_error_t err;
      bson_t entry;

      line_no++;
      if (strspn (line, " \t\r\n") == (size_t) len) {
         continue;
      }
      if (!bson_init_from_json (&entry, line, len, &berr)) {
         fprintf (stderr, "flowwarden dlq: %s:%lld: not an Extended JSON document: %s\n", o->arg,
                  (long long) line_no, berr.message);
         failed++;
         continue;
      }
      if (fw_dlq_admin_import (admin, &entry, &result, &err)) {
         counts[result]++;
      } else {
         fprintf (stderr, "flowwarden dlq: %s:%lld: %s\n", o->arg, (long long) line_no,
                  err.message);
         failed++;
      }
      bson_destroy (&entry);
   }
   free (line);
   if (in != stdin) {
      fclose (in);
   }
   if (o->json) {
      printf (
         "{ \"inserted\" : %lld, \"replaced\" : %lld, \"skipped\" : %lld, \"failed\" : "
         "%lld }\n",
         (long long) counts[FW_DLQ_IMPORT_INSERTED], (long long) counts[FW_DLQ_IMPORT_REPLACED],
         (long long) counts[FW_DLQ_IMPORT_SKIPPED], (long long) failed);
   } else {
      printf (
         "imported %lld entries from %s: %lld new, %lld replaced, %lld skipped (other "
         "streams), %lld failed\n",
         (long long) (counts[FW_DLQ_IMPORT_INSERTED] + counts[FW_DLQ_IMPORT_REPLACED]), o->arg,
         (long long) counts[FW_DLQ_IMPORT_INSERTED], (long long) counts[FW_DLQ_IMPORT_REPLACED],
         (long long) counts[FW_DLQ_IMPORT_SKIPPED], (long long) failed);
   }
   return failed ? 1 : 0;
}

int
fw_dlq_cli_main (int argc, char **argv)
{
   opts_t o = {0};
   fw_dlq_admin_t *admin;
   fw_error_t err;
   const char *env = getenv ("FLOWWARDEN_URI");
   int rc;

   if (argc < 2) {
      return usage_error ("missing verb%s", "");
   }
   if (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0 ||
       strcmp (argv[1], "help") == 0) {
      fputs (dlq_help, stdout);
      return 0;
   }
   for (int i = 0; i < N_VERBS && !o.verb; i++) {
      if (strcmp (argv[1], verbs[i].name) == 0) {
         o.verb = &verbs[i];
      }
   }
   if (!o.verb) {
      return unknown_verb (argv[1]);
   }
   if (strcmp (o.verb->name, "replay") == 0) {
      return fw_dlq_replay_main (argc - 1, argv + 1);
   }
   o.now_ms = fw_now_ms ();
   if ((rc = parse (argc - 1, argv + 1, &o)) >= 0) {
      return rc;
   }
   admin = fw_dlq_admin_new (o.script, o.uri ? o.uri : (env && *env ? env : NULL), &err);
   if (!admin) {
      return fail ("%s", err.message);
   }
   if (o.filter.stream && !fw_dlq_admin_restrict (admin, o.filter.stream, &err)) {
      fw_dlq_admin_destroy (admin);
      return fail ("%s", err.message);
   }
   if (strcmp (o.verb->name, "list") == 0) {
      rc = o.sequences ? cmd_list_sequences (admin, &o) : cmd_list (admin, &o);
   } else if (strcmp (o.verb->name, "show") == 0) {
      rc = cmd_show (admin, &o);
   } else if (strcmp (o.verb->name, "stats") == 0) {
      rc = cmd_stats (admin, &o);
   } else if (strcmp (o.verb->name, "discard") == 0 || strcmp (o.verb->name, "purge") == 0) {
      rc = cmd_change (admin, &o, strcmp (o.verb->name, "discard") == 0);
   } else if (strcmp (o.verb->name, "export") == 0) {
      rc = cmd_export (admin, &o);
   } else {
      rc = cmd_import (admin, &o);
   }
   fw_dlq_admin_destroy (admin);
   return rc;
}
