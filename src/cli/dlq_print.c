/*
 * dlq_print.c - what `flowwarden dlq` prints: the list tables (entries, or
 * sequences), one entry, the stats. Entries may have been edited by hand:
 * every field is checked for its type, and what cannot be printed prints
 * as "?".
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlq_cli.h"
#include "runtime/dlq/dlq_entry.h"

#define MAX_CELL 40

/* The sequence columns come last, so a DLQ with no sequence prints the
 * table it always did and the others keep their column positions. */
#define N_ENTRY_COLS 11
#define N_PLAIN_COLS 9
static const char *const entry_headers[N_ENTRY_COLS] = {
   "ID",          "STREAM", "OPERATION", "DOCUMENT KEY", "ERROR TYPE", "ATTEMPTS",
   "REPROCESSED", "AGE",    "STATUS",    "SEQUENCE",     "INDEX"};

#define N_SEQUENCE_COLS 8
static const char *const sequence_headers[N_SEQUENCE_COLS] = {
   "SEQUENCE", "STREAM", "STATE", "SIZE", "HEAD", "ERROR TYPE", "MESSAGE", "AGE"};

/* Fields that hold the event's documents: personal data, shown only with
 * --documents. */
static const char *const document_fields[] = {"fullDocument", "fullDocumentBeforeChange",
                                              "updateDescription"};

struct fw_dlq_table {
   const char *const *headers;
   int n_cols;   /* cells per row */
   int n_shown;  /* columns printed: an entry table's sequence columns once a row has one */
   char **cells; /* rows * n_cols */
   int rows;
};

static fw_dlq_table_t *
table_new (const char *const *headers, int n_cols, int n_shown)
{
   fw_dlq_table_t *table = calloc (1, sizeof (fw_dlq_table_t));
   if (table) {
      table->headers = headers;
      table->n_cols = n_cols;
      table->n_shown = n_shown;
   }
   return table;
}

fw_dlq_table_t *
fw_dlq_table_new (void)
{
   return table_new (entry_headers, N_ENTRY_COLS, N_PLAIN_COLS);
}

fw_dlq_table_t *
fw_dlq_sequence_table_new (void)
{
   return table_new (sequence_headers, N_SEQUENCE_COLS, N_SEQUENCE_COLS);
}

/* A new row of NULL cells, counted (so freed with the table); NULL when out
 * of memory. */
static char **
add_row (fw_dlq_table_t *table)
{
   size_t n = (size_t) (table->rows + 1) * (size_t) table->n_cols;
   char **grown = realloc (table->cells, n * sizeof (char *));
   char **row;

   if (!grown) {
      return NULL;
   }
   table->cells = grown;
   row = grown + (size_t) table->rows * (size_t) table->n_cols;
   memset (row, 0, (size_t) table->n_cols * sizeof (char *));
   table->rows++;
   return row;
}

static bool
row_complete (const fw_dlq_table_t *table, char **row)
{
   for (int c = 0; c < table->n_cols; c++) {
      if (!row[c]) {
         return false;
      }
   }
   return true;
}

void
fw_dlq_table_destroy (fw_dlq_table_t *table)
{
   if (!table) {
      return;
   }
   for (int i = 0; i < table->rows * table->n_cols; i++) {
      free (table->cells[i]);
   }
   free (table->cells);
   free (table);
}

int
fw_dlq_table_rows (const fw_dlq_table_t *table)
{
   return table->rows;
}

void
fw_dlq_print_json (const bson_t *doc, FILE *out)
{
   char *json = bson_as_relaxed_extended_json (doc, NULL);
   fprintf (out, "%s\n", json ? json : "?");
   bson_free (json);
}

/* The value at it as relaxed Extended JSON (a one-field document, cut). */
static char *
value_json (const bson_iter_t *it)
{
   bson_t one = BSON_INITIALIZER;
   char *json, *out;
   size_t len;

   bson_append_iter (&one, "v", 1, it);
   json = bson_as_relaxed_extended_json (&one, &len);
   bson_destroy (&one);
   /* '{ "v" : ' ... ' }' */
   if (!json || len < 10) {
      bson_free (json);
      return strdup ("?");
   }
   out = strndup (json + 8, len - 10);
   bson_free (json);
   return out;
}

static char *
iso_date (int64_t ms)
{
   char buf[64];
   struct tm tm;
   time_t t = (time_t) (ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
   if (!gmtime_r (&t, &tm)) {
      return strdup ("?");
   }
   strftime (buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
   snprintf (buf + strlen (buf), sizeof buf - strlen (buf), ".%03dZ",
             (int) (((ms % 1000) + 1000) % 1000));
   return strdup (buf);
}

/* A scalar as an operator reads it: strings bare, numbers, dates in ISO
 * form, ObjectIds in hex; anything else as relaxed Extended JSON. */
static char *
value_text (const bson_iter_t *it)
{
   char buf[64];
   switch (bson_iter_type (it)) {
   case BSON_TYPE_UTF8:
      return strdup (bson_iter_utf8 (it, NULL));
   case BSON_TYPE_INT32:
   case BSON_TYPE_INT64:
      snprintf (buf, sizeof buf, "%lld", (long long) bson_iter_as_int64 (it));
      return strdup (buf);
   case BSON_TYPE_DATE_TIME:
      return iso_date (bson_iter_date_time (it));
   case BSON_TYPE_OID:
      bson_oid_to_string (bson_iter_oid (it), buf);
      return strdup (buf);
   case BSON_TYPE_NULL:
      return strdup ("null");
   default:
      return value_json (it);
   }
}

/* Control characters of hand-edited strings would break the table. */
static char *
cell (char *text)
{
   size_t len;
   if (!text) {
      return NULL;
   }
   for (char *p = text; *p; p++) {
      if ((unsigned char) *p < 0x20) {
         *p = ' ';
      }
   }
   len = strlen (text);
   if (len > MAX_CELL) {
      strcpy (text + MAX_CELL - 3, "...");
   }
   return text;
}

static char *
string_cell (const bson_t *entry, const char *path)
{
   bson_iter_t it, f;
   if (bson_iter_init (&it, entry) && bson_iter_find_descendant (&it, path, &f) &&
       BSON_ITER_HOLDS_UTF8 (&f)) {
      return cell (strdup (bson_iter_utf8 (&f, NULL)));
   }
   return strdup ("?");
}

static char *
int_cell (const bson_t *entry, const char *key, const char *missing)
{
   bson_iter_t it;
   char buf[32];
   if (!bson_iter_init_find (&it, entry, key)) {
      return strdup (missing);
   }
   if (!BSON_ITER_HOLDS_INT32 (&it) && !BSON_ITER_HOLDS_INT64 (&it)) {
      return strdup ("?");
   }
   snprintf (buf, sizeof buf, "%lld", (long long) bson_iter_as_int64 (&it));
   return strdup (buf);
}

static char *
key_cell (const bson_t *entry)
{
   bson_iter_t it, sub;
   if (!bson_iter_init_find (&it, entry, "documentKey")) {
      return strdup ("?");
   }
   if (BSON_ITER_HOLDS_NULL (&it)) {
      return strdup ("-");
   }
   if (!BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return strdup ("?");
   }
   /* { _id: X } (the usual case) prints as X. */
   if (bson_iter_recurse (&it, &sub) && bson_iter_next (&sub) &&
       strcmp (bson_iter_key (&sub), "_id") == 0) {
      bson_iter_t rest = sub;
      if (!bson_iter_next (&rest)) {
         return cell (value_text (&sub));
      }
   }
   return cell (value_json (&it));
}

static char *
age_text (int64_t ms)
{
   char buf[32];
   int64_t s = ms < 0 ? 0 : ms / 1000;
   if (s < 60) {
      snprintf (buf, sizeof buf, "%llds", (long long) s);
   } else if (s < 3600) {
      snprintf (buf, sizeof buf, "%lldm", (long long) (s / 60));
   } else if (s < 86400) {
      snprintf (buf, sizeof buf, "%lldh%02lldm", (long long) (s / 3600),
                (long long) (s % 3600 / 60));
   } else {
      snprintf (buf, sizeof buf, "%lldd%02lldh", (long long) (s / 86400),
                (long long) (s % 86400 / 3600));
   }
   return strdup (buf);
}

static char *
age_cell (const bson_t *entry, int64_t now_ms)
{
   bson_iter_t it;
   if (bson_iter_init_find (&it, entry, "createdAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      return age_text (now_ms - bson_iter_date_time (&it));
   }
   return strdup ("?");
}

bool
fw_dlq_table_add (fw_dlq_table_t *table, const bson_t *entry, int64_t now_ms)
{
   char **row = add_row (table);
   bson_iter_t it;
   bool in_sequence = bson_iter_init_find (&it, entry, "sequenceId");

   if (!row) {
      return false;
   }
   row[0] = bson_iter_init_find (&it, entry, "_id") ? cell (value_text (&it)) : strdup ("?");
   row[1] = fw_dlq_entry_stream (entry) ? cell (strdup (fw_dlq_entry_stream (entry)))
                                        : strdup ("?");
   row[2] = string_cell (entry, "operationType");
   row[3] = key_cell (entry);
   /* Parked behind its sequence's head, the entry has no error of its own. */
   row[4] = in_sequence && !bson_iter_init_find (&it, entry, "error")
               ? strdup ("(parked)")
               : string_cell (entry, "error.type");
   row[5] = int_cell (entry, "attempts", "?");
   row[6] = int_cell (entry, "reprocessAttempts", "0");
   row[7] = age_cell (entry, now_ms);
   row[8] = string_cell (entry, "status");
   row[9] = in_sequence ? string_cell (entry, "sequenceId") : strdup ("-");
   row[10] = int_cell (entry, "sequenceIndex", "-");
   if (in_sequence) {
      table->n_shown = N_ENTRY_COLS;
   }
   return row_complete (table, row);
}

/* The head's cell at path: "-" when nothing waits, parked when the head has
 * no error, else the string there or "?". */
static char *
head_cell (const bson_t *seq, const char *path, const char *parked)
{
   bson_iter_t it, f;
   if (!bson_iter_init_find (&it, seq, "head") || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return strdup ("-");
   }
   if (strncmp (path, "head.error.", 11) == 0 && bson_iter_init (&it, seq) &&
       bson_iter_find_descendant (&it, "head.error", &f) && BSON_ITER_HOLDS_NULL (&f)) {
      return strdup (parked);
   }
   if (strcmp (path, "head._id") == 0 && bson_iter_init (&it, seq) &&
       bson_iter_find_descendant (&it, path, &f)) {
      return cell (value_text (&f));
   }
   return string_cell (seq, path);
}

bool
fw_dlq_sequence_table_add (fw_dlq_table_t *table, const bson_t *seq)
{
   char **row = add_row (table);
   bson_iter_t it;

   if (!row) {
      return false;
   }
   row[0] = string_cell (seq, "sequenceId");
   row[1] = string_cell (seq, "streamName");
   row[2] = strdup (!bson_iter_init_find (&it, seq, "open") || !BSON_ITER_HOLDS_BOOL (&it) ? "?"
                    : bson_iter_bool (&it)                                                 ? "open"
                                           : "closed");
   row[3] = int_cell (seq, "size", "?");
   row[4] = head_cell (seq, "head._id", "-");
   row[5] = head_cell (seq, "head.error.type", "(parked)");
   row[6] = head_cell (seq, "head.error.message", "-");
   row[7] = bson_iter_init_find (&it, seq, "ageSeconds") && BSON_ITER_HOLDS_INT64 (&it)
               ? age_text (bson_iter_int64 (&it) * 1000)
               : strdup ("-");
   return row_complete (table, row);
}

void
fw_dlq_table_print (const fw_dlq_table_t *table, FILE *out)
{
   int width[N_ENTRY_COLS > N_SEQUENCE_COLS ? N_ENTRY_COLS : N_SEQUENCE_COLS];
   int n = table->n_shown;

   for (int c = 0; c < n; c++) {
      width[c] = (int) strlen (table->headers[c]);
      for (int r = 0; r < table->rows; r++) {
         const char *text = table->cells[r * table->n_cols + c];
         int w = text ? (int) strlen (text) : 1;
         width[c] = w > width[c] ? w : width[c];
      }
   }
   for (int r = -1; r < table->rows; r++) {
      for (int c = 0; c < n; c++) {
         const char *text = r < 0 ? table->headers[c] : table->cells[r * table->n_cols + c];
         text = text ? text : "?";
         if (c == n - 1) {
            fprintf (out, "%s\n", text);
         } else {
            fprintf (out, "%-*s  ", width[c], text);
         }
      }
   }
}

static bool
is_document_field (const char *key)
{
   for (size_t i = 0; i < sizeof document_fields / sizeof *document_fields; i++) {
      if (strcmp (key, document_fields[i]) == 0) {
         return true;
      }
   }
   return false;
}

/* "key   value"; a value of several lines goes below its key, indented. */
static void
print_field (FILE *out, const char *key, const char *value)
{
   if (strchr (value, '\n')) {
      const char *p = value;
      fprintf (out, "%s\n", key);
      while (*p) {
         size_t len = strcspn (p, "\n");
         fprintf (out, "    %.*s\n", (int) len, p);
         p += len + (p[len] == '\n');
      }
   } else {
      fprintf (out, "%-22s %s\n", key, value);
   }
}

void
fw_dlq_print_entry (const bson_t *entry, bool json, bool documents, FILE *out)
{
   bson_iter_t it;

   if (json) {
      bson_t shown = BSON_INITIALIZER;
      if (documents) {
         fw_dlq_print_json (entry, out);
      } else {
         bson_copy_to_excluding_noinit (entry, &shown, document_fields[0], document_fields[1],
                                        document_fields[2], NULL);
         fw_dlq_print_json (&shown, out);
      }
      bson_destroy (&shown);
      return;
   }
   if (!bson_iter_init (&it, entry)) {
      fprintf (out, "?\n");
      return;
   }
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      bson_iter_t sub;
      char *text;

      if (!documents && is_document_field (key)) {
         print_field (out, key, "(hidden: --documents shows it)");
         continue;
      }
      if ((strcmp (key, "error") == 0 || strcmp (key, "lastReprocessError") == 0) &&
          BSON_ITER_HOLDS_DOCUMENT (&it) && bson_iter_recurse (&it, &sub)) {
         while (bson_iter_next (&sub)) {
            char *path = bson_strdup_printf ("%s.%s", key, bson_iter_key (&sub));
            text = value_text (&sub);
            print_field (out, path, text ? text : "?");
            free (text);
            bson_free (path);
         }
         continue;
      }
      if (strcmp (key, "history") == 0 && BSON_ITER_HOLDS_ARRAY (&it) &&
          bson_iter_recurse (&it, &sub)) {
         fprintf (out, "history\n");
         while (bson_iter_next (&sub)) {
            text = value_json (&sub);
            fprintf (out, "    %s\n", text ? text : "?");
            free (text);
         }
         continue;
      }
      text = value_text (&it);
      print_field (out, key, text ? text : "?");
      free (text);
   }
}

static void
print_counts (const bson_t *stats, const char *key, const char *title, FILE *out)
{
   bson_iter_t it, sub;
   fprintf (out, "\n%-30s %s\n", title, "ENTRIES");
   if (bson_iter_init_find (&it, stats, key) && bson_iter_recurse (&it, &sub)) {
      while (bson_iter_next (&sub)) {
         fprintf (out, "%-30s %lld\n", bson_iter_key (&sub), (long long) bson_iter_as_int64 (&sub));
      }
   }
}

static int64_t
int_at (const bson_iter_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_recurse (doc, &it) && bson_iter_find (&it, key) && BSON_ITER_HOLDS_NUMBER (&it)
             ? bson_iter_as_int64 (&it)
             : 0;
}

/* The per-stream sequence figures, when fw_dlq_admin_stats gave any. */
static void
print_sequences (const bson_t *stats, FILE *out)
{
   bson_iter_t it, sub;
   if (!bson_iter_init_find (&it, stats, "sequences") || !bson_iter_recurse (&it, &sub)) {
      return;
   }
   fprintf (out, "\n%-30s %-15s %-15s %s\n", "SEQUENCED STREAM", "OPEN SEQUENCES", "PARKED ENTRIES",
            "LARGEST");
   while (bson_iter_next (&sub)) {
      fprintf (out, "%-30s %-15lld %-15lld %lld\n", bson_iter_key (&sub),
               (long long) int_at (&sub, "open"), (long long) int_at (&sub, "parked"),
               (long long) int_at (&sub, "largest"));
   }
}

void
fw_dlq_print_stats (const bson_t *stats, bool json, FILE *out)
{
   bson_iter_t it;
   char *age = NULL;

   if (json) {
      fw_dlq_print_json (stats, out);
      return;
   }
   fprintf (out, "entries: %lld\n",
            bson_iter_init_find (&it, stats, "total") ? (long long) bson_iter_as_int64 (&it) : 0);
   if (bson_iter_init_find (&it, stats, "oldest_pending_age_s") && BSON_ITER_HOLDS_INT64 (&it)) {
      age = age_text (bson_iter_int64 (&it) * 1000);
      fprintf (out, "oldest PENDING: %s ago (%lld s)\n", age, (long long) bson_iter_int64 (&it));
      free (age);
   } else {
      fprintf (out, "oldest PENDING: none\n");
   }
   print_counts (stats, "by_stream", "STREAM", out);
   print_counts (stats, "by_status", "STATUS", out);
   print_counts (stats, "by_error_type", "ERROR TYPE", out);
   print_sequences (stats, out);
}
