/*
 * dlq_print.c - what `flowwarden dlq` prints: the list table, one entry,
 * the stats. Entries may have been edited by hand: every field is checked
 * for its type, and what cannot be printed prints as "?".
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlq_cli.h"

#define N_COLS 9
#define MAX_CELL 40

static const char *const headers[N_COLS] = {"ID",         "STREAM",   "OPERATION",
                                            "DOCUMENT KEY", "ERROR TYPE", "ATTEMPTS",
                                            "REPROCESSED", "AGE",      "STATUS"};

/* Fields that hold the event's documents: personal data, shown only with
 * --documents. */
static const char *const document_fields[] = {"fullDocument", "fullDocumentBeforeChange",
                                              "updateDescription"};

struct fw_dlq_table {
   char **cells; /* rows * N_COLS */
   int rows;
};

fw_dlq_table_t *
fw_dlq_table_new (void)
{
   return calloc (1, sizeof (fw_dlq_table_t));
}

void
fw_dlq_table_destroy (fw_dlq_table_t *table)
{
   if (!table) {
      return;
   }
   for (int i = 0; i < table->rows * N_COLS; i++) {
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
   snprintf (buf + strlen (buf), sizeof buf - strlen (buf), ".%03dZ", (int) (((ms % 1000) + 1000) % 1000));
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
   char **grown = realloc (table->cells, (size_t) (table->rows + 1) * N_COLS * sizeof (char *));
   char **row;
   bson_iter_t it;
   bool ok = true;

   if (!grown) {
      return false;
   }
   table->cells = grown;
   row = grown + table->rows * N_COLS;
   row[0] = bson_iter_init_find (&it, entry, "_id") ? cell (value_text (&it)) : strdup ("?");
   row[1] = string_cell (entry, "streamName");
   row[2] = string_cell (entry, "operationType");
   row[3] = key_cell (entry);
   row[4] = string_cell (entry, "error.type");
   row[5] = int_cell (entry, "attempts", "?");
   row[6] = int_cell (entry, "reprocessAttempts", "0");
   row[7] = age_cell (entry, now_ms);
   row[8] = string_cell (entry, "status");
   for (int c = 0; c < N_COLS; c++) {
      ok = ok && row[c];
   }
   table->rows++; /* freed with the table even when a cell is missing */
   return ok;
}

void
fw_dlq_table_print (const fw_dlq_table_t *table, FILE *out)
{
   int width[N_COLS];

   for (int c = 0; c < N_COLS; c++) {
      width[c] = (int) strlen (headers[c]);
      for (int r = 0; r < table->rows; r++) {
         int w = (int) strlen (table->cells[r * N_COLS + c]);
         width[c] = w > width[c] ? w : width[c];
      }
   }
   for (int r = -1; r < table->rows; r++) {
      for (int c = 0; c < N_COLS; c++) {
         const char *text = r < 0 ? headers[c] : table->cells[r * N_COLS + c];
         if (c == N_COLS - 1) {
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
}
