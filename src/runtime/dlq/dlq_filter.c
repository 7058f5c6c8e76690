/*
 * dlq_filter.c - the filters of `flowwarden dlq` as a MongoDB query, and the
 * times --since / --until / --older-than take (see dlq_admin.h).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "flowwarden/duration.h"
#include "runtime/dlq/dlq_admin.h"
#include "runtime/dlq/dlq_sequence.h"

static const char *const statuses[] = {"PENDING", "REPROCESSING", "RESOLVED", "DISCARDED",
                                       "SCHEDULED"};

/* Appends status: {$in: [...]} for a comma-separated list of statuses (any
 * case); false for a name that is not a status. */
static bool
append_status (bson_t *query, const char *list, fw_error_t *error)
{
   bson_t in, arr;
   uint32_t n = 0;
   const char *p = list;

   BSON_APPEND_DOCUMENT_BEGIN (query, "status", &in);
   BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
   for (;;) {
      size_t len = strcspn (p, ",");
      const char *match = NULL;
      for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) {
         if (len == strlen (statuses[i]) && strncasecmp (p, statuses[i], len) == 0) {
            match = statuses[i];
         }
      }
      if (!match) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "--status: unknown status \"%.*s\" (use PENDING, REPROCESSING, RESOLVED, "
                       "DISCARDED or SCHEDULED, or several separated by commas)",
                       (int) len, p);
         bson_append_array_end (&in, &arr);
         bson_append_document_end (query, &in);
         return false;
      }
      char key[16];
      const char *k;
      bson_uint32_to_string (n++, &k, key, sizeof key);
      BSON_APPEND_UTF8 (&arr, k, match);
      if (p[len] == '\0') {
         break;
      }
      p += len + 1;
   }
   bson_append_array_end (&in, &arr);
   bson_append_document_end (query, &in);
   return true;
}

/* error.type T and its subtypes: T itself, or a string in ["T.", "T/"),
 * which is exactly the strings starting with "T." ('/' follows '.'), with no
 * regular expression to escape. */
static void
append_error_type (bson_t *query, const char *type)
{
   bson_t or, alt, range;
   char *lo = bson_strdup_printf ("%s.", type);
   char *hi = bson_strdup_printf ("%s/", type);

   BSON_APPEND_ARRAY_BEGIN (query, "$or", & or);
   BSON_APPEND_DOCUMENT_BEGIN (& or, "0", &alt);
   BSON_APPEND_UTF8 (&alt, "error.type", type);
   bson_append_document_end (& or, &alt);
   BSON_APPEND_DOCUMENT_BEGIN (& or, "1", &alt);
   BSON_APPEND_DOCUMENT_BEGIN (&alt, "error.type", &range);
   BSON_APPEND_UTF8 (&range, "$gte", lo);
   BSON_APPEND_UTF8 (&range, "$lt", hi);
   bson_append_document_end (&alt, &range);
   bson_append_document_end (& or, &alt);
   bson_append_array_end (query, & or);
   bson_free (lo);
   bson_free (hi);
}

static bool append_ids_and_user (const fw_dlq_filter_t *filter, bson_t *query, fw_error_t *error);
static bool parse_user_filter (const char *json, bson_t *user, fw_error_t *error);

bool
fw_dlq_filter_to_query (const fw_dlq_filter_t *filter, const char *default_status, bson_t *query,
                        fw_error_t *error)
{
   const char *status = filter->status ? filter->status : default_status;

   if (filter->stream) {
      BSON_APPEND_UTF8 (query, "streamName", filter->stream);
   }
   if (status && !append_status (query, status, error)) {
      return false;
   }
   if (filter->error_type) {
      append_error_type (query, filter->error_type);
   }
   if (filter->since_ms || filter->until_ms) {
      bson_t range;
      BSON_APPEND_DOCUMENT_BEGIN (query, "createdAt", &range);
      if (filter->since_ms) {
         BSON_APPEND_DATE_TIME (&range, "$gte", filter->since_ms);
      }
      if (filter->until_ms) {
         BSON_APPEND_DATE_TIME (&range, "$lt", filter->until_ms);
      }
      bson_append_document_end (query, &range);
   }
   return append_ids_and_user (filter, query, error);
}

/* --id ID matches an entry's _id or its eventId (the id a log line names). */
static void
append_ids (const fw_dlq_filter_t *filter, bson_t *and, const char *key)
{
   static const char *const fields[] = {"_id", "eventId"};
   bson_t cond, or, alt, in, arr;

   BSON_APPEND_DOCUMENT_BEGIN (and, key, &cond);
   BSON_APPEND_ARRAY_BEGIN (&cond, "$or", & or);
   for (int f = 0; f < 2; f++) {
      BSON_APPEND_DOCUMENT_BEGIN (& or, f == 0 ? "0" : "1", &alt);
      BSON_APPEND_DOCUMENT_BEGIN (&alt, fields[f], &in);
      BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
      for (int i = 0; i < filter->n_ids; i++) {
         char k[16];
         const char *kp;
         bson_uint32_to_string ((uint32_t) i, &kp, k, sizeof k);
         BSON_APPEND_UTF8 (&arr, kp, filter->ids[i]);
      }
      bson_append_array_end (&in, &arr);
      bson_append_document_end (&alt, &in);
      bson_append_document_end (& or, &alt);
   }
   bson_append_array_end (&cond, & or);
   bson_append_document_end (and, &cond);
}

/* The conditions that cannot sit at the query's top level beside the
 * others (an $or of their own, a user's query) go into one $and. */
static bool
append_ids_and_user (const fw_dlq_filter_t *filter, bson_t *query, fw_error_t *error)
{
   bson_t user = BSON_INITIALIZER, and;

   if (filter->filter_json && !parse_user_filter (filter->filter_json, &user, error)) {
      bson_destroy (&user);
      return false;
   }
   if (filter->n_ids > 0 || filter->filter_json) {
      /* In an $and, so a user's streamName or $or never overrides ours. */
      BSON_APPEND_ARRAY_BEGIN (query, "$and", &and);
      const char *user_key = filter->n_ids > 0 ? "1" : "0";
      if (filter->n_ids > 0) {
         append_ids (filter, &and, "0");
      }
      if (filter->filter_json) {
         BSON_APPEND_DOCUMENT (&and, user_key, &user);
      }
      bson_append_array_end (query, &and);
   }
   bson_destroy (&user);
   return true;
}

/* --filter JSON: an Extended JSON object into *user (initialised). */
static bool
parse_user_filter (const char *json, bson_t *user, fw_error_t *error)
{
   const char *p = json;
   bson_error_t berr;

   while (isspace ((unsigned char) *p)) {
      p++;
   }
   if (*p != '{') {
      fw_error_set (error, FW_ERROR_INVALID,
                    "--filter: expected a JSON object (a MongoDB query such as "
                    "'{\"attempts\": {\"$gte\": 3}}'), got: %s",
                    json);
      return false;
   }
   bson_destroy (user);
   if (!bson_init_from_json (user, json, -1, &berr)) {
      bson_init (user);
      fw_error_set (error, FW_ERROR_INVALID, "--filter: not valid Extended JSON: %s", berr.message);
      return false;
   }
   return true;
}

/* "2026-01-15", "2026-01-15T10:30", "2026-01-15T10:30:00[.123]", each
 * optionally followed by "Z" or an offset ("+02:00", "+0200"); no zone
 * means UTC. */
static bool
parse_iso_date (const char *text, int64_t *out_ms)
{
   static const char *const forms[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"};
   struct tm tm, check;
   const char *rest = NULL;
   int64_t ms = 0;
   long offset_s = 0;
   time_t t;

   for (size_t i = 0; i < sizeof forms / sizeof *forms && !rest; i++) {
      memset (&tm, 0, sizeof tm);
      rest = strptime (text, forms[i], &tm);
      /* "%Y-%m-%d" also reads the date of "2026-01-15T1": only a complete
       * form counts. */
      if (rest && i == 2 && *rest == 'T') {
         rest = NULL;
      }
   }
   if (!rest) {
      return false;
   }
   if (*rest == '.') {
      int digits = 0;
      rest++;
      while (isdigit ((unsigned char) *rest)) {
         if (digits++ < 3) {
            ms = ms * 10 + (*rest - '0');
         }
         rest++;
      }
      if (digits == 0) {
         return false;
      }
      for (; digits < 3; digits++) {
         ms *= 10;
      }
   }
   if (*rest == 'Z') {
      rest++;
   } else if (*rest == '+' || *rest == '-') {
      struct tm zone;
      memset (&zone, 0, sizeof zone);
      rest = strptime (rest, "%z", &zone);
      if (!rest) {
         return false;
      }
      offset_s = zone.tm_gmtoff;
   }
   if (*rest != '\0') {
      return false;
   }
   check = tm;
   t = timegm (&tm);
   /* timegm normalises "2026-02-31" to March 3rd: refuse what it changed. */
   if (t == (time_t) -1 || tm.tm_mday != check.tm_mday || tm.tm_mon != check.tm_mon ||
       tm.tm_year != check.tm_year || tm.tm_hour != check.tm_hour || tm.tm_min != check.tm_min ||
       tm.tm_sec != check.tm_sec) {
      return false;
   }
   *out_ms = ((int64_t) t - offset_s) * 1000 + ms;
   return true;
}

bool
fw_dlq_parse_time (const char *option, const char *text, int64_t now_ms, int64_t *out_ms,
                   fw_error_t *error)
{
   int64_t ms;

   if (fw_duration_parse (text, &ms, NULL)) {
      *out_ms = now_ms - ms;
      return true;
   }
   if (parse_iso_date (text, out_ms)) {
      return true;
   }
   fw_error_set (error, FW_ERROR_INVALID,
                 "%s: \"%s\" is neither a duration (a number and ms, s, m, h, d or w, e.g. "
                 "\"2h\" or \"7d\") nor an ISO date (e.g. \"2026-01-15\" or "
                 "\"2026-01-15T10:30:00Z\")",
                 option, text);
   return false;
}

bool
fw_dlq_filter_option (fw_dlq_filter_t *filter, const char *name, const char *value, int64_t now_ms,
                      fw_error_t *error)
{
   if (strcmp (name, "stream") == 0) {
      filter->stream = value;
   } else if (strcmp (name, "status") == 0) {
      filter->status = value;
   } else if (strcmp (name, "error-type") == 0) {
      filter->error_type = value;
   } else if (strcmp (name, "filter") == 0) {
      filter->filter_json = value;
   } else if (strcmp (name, "since") == 0) {
      return fw_dlq_parse_time ("--since", value, now_ms, &filter->since_ms, error);
   } else if (strcmp (name, "until") == 0) {
      return fw_dlq_parse_time ("--until", value, now_ms, &filter->until_ms, error);
   } else if (strcmp (name, "id") == 0) {
      if (filter->n_ids == FW_DLQ_MAX_IDS) {
         fw_error_set (error, FW_ERROR_INVALID, "--id: at most %d ids (select more with --filter)",
                       FW_DLQ_MAX_IDS);
         return false;
      }
      filter->ids[filter->n_ids++] = value;
   } else if (strcmp (name, "limit") == 0) {
      char *end;
      long long n;
      errno = 0;
      n = strtoll (value, &end, 10);
      if (errno || end == value || *end || n <= 0) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "--limit: expected a positive whole number, got \"%s\"", value);
         return false;
      }
      filter->limit = n;
   } else {
      fw_error_set (error, FW_ERROR_INVALID, "--%s is not a filter option", name);
      return false;
   }
   return true;
}

/* --- the same filter, matched in memory ---------------------------------- */

/* Whether status is in list (dlq --status's comma-separated names, any
 * case); false with error filled for a name that is not a status. */
static bool
status_in (const char *list, const char *status, bool *in, fw_error_t *error)
{
   bson_t scratch = BSON_INITIALIZER;
   bool ok = append_status (&scratch, list, error); /* validates the names */
   const char *p = list;

   bson_destroy (&scratch);
   *in = false;
   while (ok && status) {
      size_t len = strcspn (p, ",");
      if (len == strlen (status) && strncasecmp (p, status, len) == 0 &&
          strspn (status, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == len) {
         *in = true;
      }
      if (p[len] == '\0') {
         break;
      }
      p += len + 1;
   }
   return ok;
}

static const char *
utf8_at (const bson_t *doc, const char *path)
{
   bson_iter_t it, f;
   return bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, path, &f) &&
                BSON_ITER_HOLDS_UTF8 (&f)
             ? bson_iter_utf8 (&f, NULL)
             : NULL;
}

/* error.type T or one of its subtypes ("T." and more). */
static bool
error_type_matches (const bson_t *entry, const char *type)
{
   const char *t = utf8_at (entry, "error.type");
   size_t len = strlen (type);
   return t && strncmp (t, type, len) == 0 && (t[len] == '\0' || t[len] == '.');
}

static bool
created_in (const bson_t *entry, int64_t since_ms, int64_t until_ms)
{
   bson_iter_t it;
   int64_t at;
   if (!since_ms && !until_ms) {
      return true;
   }
   if (!bson_iter_init_find (&it, entry, "createdAt") || !BSON_ITER_HOLDS_DATE_TIME (&it)) {
      return false;
   }
   at = bson_iter_date_time (&it);
   return (!since_ms || at >= since_ms) && (!until_ms || at < until_ms);
}

/* Whether entry's _id is one of ids (an array document): the same value,
 * compared by its canonical Extended JSON. */
static bool
id_in (const bson_t *entry, const bson_t *ids)
{
   bson_iter_t id, it;
   char *mine;
   bool in = false;

   if (!bson_iter_init_find (&id, entry, "_id") || !bson_iter_init (&it, ids) ||
       !(mine = fw_dlq_sequence_id (bson_iter_value (&id)))) {
      return false;
   }
   while (!in && bson_iter_next (&it)) {
      char *other = fw_dlq_sequence_id (bson_iter_value (&it));
      in = other && strcmp (mine, other) == 0;
      bson_free (other);
   }
   bson_free (mine);
   return in;
}

/* --id: the entry's _id or its eventId. */
static bool
filter_ids_match (const fw_dlq_filter_t *f, const bson_t *entry)
{
   const char *id = utf8_at (entry, "_id");
   const char *event_id = utf8_at (entry, "eventId");
   for (int i = 0; i < f->n_ids; i++) {
      if ((id && strcmp (f->ids[i], id) == 0) || (event_id && strcmp (f->ids[i], event_id) == 0)) {
         return true;
      }
   }
   return f->n_ids == 0;
}

bool
fw_dlq_query_matches (const fw_dlq_query_t *q, const bson_t *entry, bool *match, fw_error_t *error)
{
   static const fw_dlq_filter_t none;
   const fw_dlq_filter_t *f = q->filter ? q->filter : &none;
   const char *status = f->status ? f->status : q->default_status;
   const char *stream = utf8_at (entry, "streamName");
   bool in = true;

   *match = false;
   if (f->filter_json) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "--filter: a MongoDB query, which the in-memory DLQ store cannot run");
      return false;
   }
   if (status && !status_in (status, utf8_at (entry, "status"), &in, error)) {
      return false;
   }
   *match = in && (!f->stream || (stream && strcmp (stream, f->stream) == 0)) &&
            (!f->error_type || error_type_matches (entry, f->error_type)) &&
            created_in (entry, f->since_ms, f->until_ms) && filter_ids_match (f, entry) &&
            (!q->ids || id_in (entry, q->ids));
   return true;
}

bool
fw_dlq_filter_check (const fw_dlq_filter_t *filter, const char *default_status, fw_error_t *error)
{
   bson_t scratch = BSON_INITIALIZER;
   bool ok = fw_dlq_filter_to_query (filter, default_status, &scratch, error);
   bson_destroy (&scratch);
   return ok;
}
