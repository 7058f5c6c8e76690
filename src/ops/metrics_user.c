/*
 * metrics_user.c - metrics scripts define with fw.metrics: the naming rules
 * (those of `promtool check metrics`, so the exposition always lints clean),
 * definitions that survive a reload, and their series.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/log.h"
#include "metrics-private.h"

static const double default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

static const char *const type_names[] = {"counter", "gauge", "histogram"};

const char *
fw_metric_type_name (fw_metric_type_t type)
{
   return (unsigned) type <= FW_METRIC_HISTOGRAM ? type_names[type] : "untyped";
}

/* --- names --------------------------------------------------------------- */

static bool
ends_with (const char *s, const char *suffix)
{
   size_t n = strlen (s), k = strlen (suffix);
   return n >= k && strcmp (s + n - k, suffix) == 0;
}

static bool
has_camel_case (const char *s)
{
   for (; s[0] && s[1]; s++) {
      if (islower ((unsigned char) s[0]) && isupper ((unsigned char) s[1])) {
         return true;
      }
   }
   return false;
}

/* True when "_word_" is inside lower or lower ends with "_word". */
static bool
has_word (const char *lower, const char *word)
{
   char mid[64], end[64];
   snprintf (mid, sizeof mid, "_%s_", word);
   snprintf (end, sizeof end, "_%s", word);
   return strstr (lower, mid) || ends_with (lower, end);
}

static const struct {
   const char *unit;
   const char *base;
} units[] = {
   {"amperes", "amperes"},    {"bytes", "bytes"},     {"celsius", "celsius"},
   {"grams", "grams"},        {"joules", "joules"},   {"kelvin", "kelvin"},
   {"meters", "meters"},      {"metres", "metres"},   {"seconds", "seconds"},
   {"volts", "volts"},        {"minutes", "seconds"}, {"hours", "seconds"},
   {"days", "seconds"},       {"weeks", "seconds"},   {"kelvins", "kelvin"},
   {"fahrenheit", "celsius"}, {"rankine", "celsius"}, {"inches", "meters"},
   {"yards", "meters"},       {"miles", "meters"},    {"bits", "bytes"},
   {"calories", "joules"},    {"pounds", "grams"},    {"ounces", "grams"},
};

static const char *const unit_prefixes[] = {
   "",     "pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo",
   "kibi", "mega", "mibi", "giga",  "gibi",  "tera",  "tebi", "peta", "pebi"};

static const char *const unit_abbreviations[] = {"s",  "ms", "us", "ns", "sec", "b", "kb",
                                                 "mb", "gb", "tb", "pb", "m",   "h", "d"};

/* A part of the name between underscores that is a unit other than its
 * base unit ("milliseconds", "kilobytes", "hours"): fills unit and base. */
static bool
non_base_unit (const char *name, char *unit, size_t len, const char **base)
{
   char copy[256];
   char *save = NULL;

   snprintf (copy, sizeof copy, "%s", name);
   for (char *part = strtok_r (copy, "_", &save); part; part = strtok_r (NULL, "_", &save)) {
      for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
         for (size_t p = 0; p < sizeof unit_prefixes / sizeof unit_prefixes[0]; p++) {
            char candidate[64];
            snprintf (candidate, sizeof candidate, "%s%s", unit_prefixes[p], units[u].unit);
            if (strcmp (part, candidate) == 0 && strcmp (candidate, units[u].base) != 0) {
               snprintf (unit, len, "%s", candidate);
               *base = units[u].base;
               return true;
            }
         }
      }
   }
   return false;
}

/* Prometheus's name syntax as flowwarden narrows it: 1 to 200 letters,
 * digits and '_', no ':', no leading digit or "__", snake_case. */
static bool
check_syntax (const char *name, size_t n, fw_error_t *error)
{
   if (n == 0 || n > 200) {
      fw_error_set (error, FW_ERROR_INVALID, "metric name must be 1 to 200 characters, got %zu", n);
      return false;
   }
   for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char) name[i];
      if (c == ':') {
         fw_error_set (error, FW_ERROR_INVALID,
                       "invalid metric name \"%s\": ':' is reserved for recording rules; use '_'",
                       name);
         return false;
      }
      if (!(isalpha (c) || c == '_' || (i > 0 && isdigit (c))) || c >= 0x80) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "invalid metric name \"%s\": use letters, digits and '_' (not starting "
                       "with a digit), e.g. \"orders_processed_total\"",
                       name);
         return false;
      }
   }
   if (strncmp (name, "__", 2) == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "invalid metric name \"%s\": names starting with \"__\" are reserved", name);
      return false;
   }
   if (has_camel_case (name)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "invalid metric name \"%s\": write it in snake_case (e.g. \"orders_total\"), "
                    "not camelCase",
                    name);
      return false;
   }
   return true;
}

/* The suffixes a metric's type claims: _total for counters only, _bucket,
 * _count and _sum for histograms only. */
static bool
check_type_suffix (const char *name, fw_metric_type_t type, fw_error_t *error)
{
   if (type == FW_METRIC_COUNTER && !ends_with (name, "_total")) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "counter name \"%s\" must end in _total (Prometheus convention): use "
                    "\"%s_total\"",
                    name, name);
      return false;
   }
   if (type != FW_METRIC_COUNTER && ends_with (name, "_total")) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s name \"%s\" must not end in _total (only counters do)",
                    fw_metric_type_name (type), name);
      return false;
   }
   if (type != FW_METRIC_HISTOGRAM &&
       (ends_with (name, "_bucket") || ends_with (name, "_count") || ends_with (name, "_sum"))) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s name \"%s\" must not end in _bucket, _count or _sum (histograms use "
                    "those)",
                    fw_metric_type_name (type), name);
      return false;
   }
   return true;
}

/* The words a name must not hold (lower: the name in lower case): a type
 * word, a unit other than the base one, an abbreviated unit. */
static bool
check_words (const char *name, const char *lower, fw_error_t *error)
{
   static const char *const type_words[] = {"counter", "gauge", "histogram", "summary",
                                            "gauge_histogram"};
   char unit[64];
   const char *base;

   for (size_t i = 0; i < sizeof type_words / sizeof type_words[0]; i++) {
      if (has_word (lower, type_words[i])) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "metric name \"%s\" must not contain the type word \"%s\"", name,
                       type_words[i]);
         return false;
      }
   }
   if (non_base_unit (lower, unit, sizeof unit, &base)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric name \"%s\": use the base unit \"%s\" instead of \"%s\"", name, base,
                    unit);
      return false;
   }
   for (size_t i = 0; i < sizeof unit_abbreviations / sizeof unit_abbreviations[0]; i++) {
      if (has_word (lower, unit_abbreviations[i])) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "metric name \"%s\" must not contain the abbreviated unit \"%s\" "
                       "(spell it out in base units: seconds, bytes)",
                       name, unit_abbreviations[i]);
         return false;
      }
   }
   return true;
}

bool
fw_metrics_check_name (const char *name, fw_metric_type_t type, fw_error_t *error)
{
   char lower[256];
   size_t n = name ? strlen (name) : 0;

   if (!check_syntax (name, n, error)) {
      return false;
   }
   for (size_t i = 0; i <= n; i++) {
      lower[i] = (char) tolower ((unsigned char) name[i]);
   }
   if (strncmp (lower, "flowwarden_", 11) == 0 || strncmp (lower, "process_", 8) == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric name \"%s\" is reserved: flowwarden_* and process_* are flowwarden's "
                    "own metrics; choose a name of your own, e.g. \"shop_%s\"",
                    name, name);
      return false;
   }
   return check_type_suffix (name, type, error) && check_words (name, lower, error);
}

static bool
check_label_name (const char *metric, const char *label, fw_metric_type_t type, fw_error_t *error)
{
   size_t n = label ? strlen (label) : 0;
   bool ok = n > 0 && n <= 100;

   for (size_t i = 0; ok && i < n; i++) {
      unsigned char c = (unsigned char) label[i];
      ok = (isalpha (c) || c == '_' || (i > 0 && isdigit (c))) && c < 0x80;
   }
   if (!ok) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric %s: invalid label name \"%s\" (letters, digits and '_', not starting "
                    "with a digit)",
                    metric, label ? label : "");
      return false;
   }
   if (strncmp (label, "__", 2) == 0 || strcmp (label, "stream") == 0 ||
       strcmp (label, "le") == 0 || strcmp (label, "quantile") == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric %s: label name \"%s\" is reserved (flowwarden adds \"stream\"; %s)",
                    metric, label,
                    type == FW_METRIC_HISTOGRAM ? "histograms use \"le\""
                                                : "\"le\", \"quantile\" and \"__*\" belong to "
                                                  "Prometheus");
      return false;
   }
   if (has_camel_case (label)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric %s: write label name \"%s\" in snake_case, not camelCase", metric,
                    label);
      return false;
   }
   return true;
}

/* --- definitions --------------------------------------------------------- */

static void
free_metric (fw_metric_t *x)
{
   fw_metric_series_t *s, *next;

   for (s = x->series; s; s = next) {
      next = s->next;
      for (int i = 0; i < x->n_labels; i++) {
         free (s->values[i]);
      }
      free (s->values);
      free (s->buckets);
      free (s);
   }
   for (int i = 0; i < x->n_labels; i++) {
      free (x->labels[i]);
   }
   free (x->labels);
   free (x->buckets);
   free (x->name);
   free (x->help);
   pthread_mutex_destroy (&x->mu);
   free (x);
}

void
fw_metrics_free_user (fw_metrics_t *m)
{
   fw_metric_t *x, *next;

   for (x = m->metrics; x; x = next) {
      next = x->next;
      free_metric (x);
   }
   m->metrics = NULL;
}

static bool
same_labels (const fw_metric_t *x, const fw_metric_spec_t *spec)
{
   if (x->n_labels != spec->n_labels) {
      return false;
   }
   for (int i = 0; i < spec->n_labels; i++) {
      bool found = false;
      for (int j = 0; j < x->n_labels && !found; j++) {
         found = strcmp (x->labels[j], spec->labels[i]) == 0;
      }
      if (!found) {
         return false;
      }
   }
   return true;
}

static void
describe_labels (char *buf, size_t len, const char *const *labels, int n)
{
   size_t used = 0;

   used += (size_t) snprintf (buf, len, "{");
   for (int i = 0; i < n && used < len; i++) {
      used += (size_t) snprintf (buf + used, len - used, "%s%s", i ? ", " : "", labels[i]);
   }
   if (used < len) {
      snprintf (buf + used, len - used, "}");
   }
}

/* Set by fw_metrics_define_own on its thread for the call it makes. */
static __thread bool own_definition;

static bool
check_spec (const fw_metric_spec_t *spec, const double **buckets, int *n_buckets, fw_error_t *error)
{
   /* flowwarden's own (fw_metrics_define_own) skip the name rule reserving flowwarden_*. */
   if (!(own_definition && strncmp (spec->name, "flowwarden_", 11) == 0) &&
       !fw_metrics_check_name (spec->name, spec->type, error)) {
      return false;
   }
   if (!spec->help || !*spec->help || !fw_utf8_valid (spec->help, strlen (spec->help))) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "metric %s: help must be a non-empty UTF-8 text saying what it counts",
                    spec->name);
      return false;
   }
   if (spec->n_labels < 0 || spec->n_labels > FW_METRIC_MAX_LABELS) {
      fw_error_set (error, FW_ERROR_INVALID, "metric %s: at most %d labels, got %d", spec->name,
                    FW_METRIC_MAX_LABELS, spec->n_labels);
      return false;
   }
   for (int i = 0; i < spec->n_labels; i++) {
      if (!check_label_name (spec->name, spec->labels[i], spec->type, error)) {
         return false;
      }
      for (int j = 0; j < i; j++) {
         if (strcmp (spec->labels[i], spec->labels[j]) == 0) {
            fw_error_set (error, FW_ERROR_INVALID, "metric %s: label \"%s\" is declared twice",
                          spec->name, spec->labels[i]);
            return false;
         }
      }
   }
   *buckets = NULL;
   *n_buckets = 0;
   if (spec->type != FW_METRIC_HISTOGRAM) {
      if (spec->n_buckets) {
         fw_error_set (error, FW_ERROR_INVALID, "metric %s: only histograms have buckets",
                       spec->name);
         return false;
      }
      return true;
   }
   *buckets = spec->buckets ? spec->buckets : default_buckets;
   *n_buckets = spec->buckets ? spec->n_buckets
                              : (int) (sizeof default_buckets / sizeof default_buckets[0]);
   if (*n_buckets < 1 || *n_buckets > FW_METRIC_MAX_BUCKETS) {
      fw_error_set (error, FW_ERROR_INVALID, "histogram %s: give 1 to %d buckets, got %d",
                    spec->name, FW_METRIC_MAX_BUCKETS, *n_buckets);
      return false;
   }
   for (int i = 0; i < *n_buckets; i++) {
      double b = (*buckets)[i];
      if (!isfinite (b) || (i > 0 && b <= (*buckets)[i - 1])) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "histogram %s: buckets must be finite upper bounds in increasing order "
                       "(bucket %d is %g%s); +Inf is added by itself",
                       spec->name, i + 1, b,
                       i > 0 && isfinite (b) ? ", not above the one before" : "");
         return false;
      }
   }
   return true;
}

static fw_metric_t *
new_metric (const fw_metric_spec_t *spec, const double *buckets, int n_buckets, bool pending)
{
   fw_metric_t *x = calloc (1, sizeof *x);
   bool ok = x != NULL;

   if (!ok || pthread_mutex_init (&x->mu, NULL) != 0) {
      free (x);
      return NULL;
   }
   x->type = spec->type;
   x->state = pending ? METRIC_PENDING : METRIC_COMMITTED;
   ok = (x->name = strdup (spec->name)) && (x->help = strdup (spec->help));
   if (ok && spec->n_labels) {
      ok = (x->labels = calloc ((size_t) spec->n_labels, sizeof *x->labels)) != NULL;
      for (int i = 0; ok && i < spec->n_labels; i++) {
         ok = (x->labels[i] = strdup (spec->labels[i])) != NULL;
         x->n_labels = i + 1;
      }
   }
   if (ok && n_buckets) {
      ok = (x->buckets = malloc ((size_t) n_buckets * sizeof *x->buckets)) != NULL;
      if (ok) {
         memcpy (x->buckets, buckets, (size_t) n_buckets * sizeof *buckets);
         x->n_buckets = n_buckets;
      }
   }
   if (!ok) {
      free_metric (x);
      return NULL;
   }
   return x;
}

fw_metric_t *
fw_metrics_define_own (fw_metrics_t *m, const fw_metric_spec_t *spec, fw_error_t *error)
{
   fw_metric_t *x;
   own_definition = true;
   x = fw_metrics_define (m, spec, false, error);
   own_definition = false;
   return x;
}

fw_metric_t *
fw_metrics_define (fw_metrics_t *m, const fw_metric_spec_t *spec, bool pending, fw_error_t *error)
{
   const double *buckets;
   int n_buckets;
   fw_metric_t *x, **tail;

   if (!check_spec (spec, &buckets, &n_buckets, error)) {
      return NULL;
   }
   pthread_mutex_lock (&m->mu);
   for (tail = &m->metrics; (x = *tail); tail = &x->next) {
      if (x->state != METRIC_RETIRED && strcmp (x->name, spec->name) == 0) {
         break;
      }
   }
   if (x) {
      bool same = x->type == spec->type && same_labels (x, spec) && x->n_buckets == n_buckets;
      for (int i = 0; same && i < n_buckets; i++) {
         same = x->buckets[i] == buckets[i];
      }
      if (!same) {
         char had[256], want[256];
         describe_labels (had, sizeof had, (const char *const *) x->labels, x->n_labels);
         describe_labels (want, sizeof want, spec->labels, spec->n_labels);
         fw_error_set (error, FW_ERROR_INVALID,
                       "metric %s is already defined as a %s with labels %s%s; it cannot become "
                       "a %s with labels %s%s while flowwarden runs (keep the definition, or "
                       "restart flowwarden to change it)",
                       spec->name, fw_metric_type_name (x->type), had,
                       x->type == FW_METRIC_HISTOGRAM ? " and its buckets" : "",
                       fw_metric_type_name (spec->type), want,
                       spec->type == FW_METRIC_HISTOGRAM && x->type == spec->type &&
                             same_labels (x, spec)
                          ? " and other buckets"
                          : "");
         x = NULL;
      } else if (!pending) {
         __atomic_store_n (&x->state, METRIC_COMMITTED, __ATOMIC_RELEASE);
      }
   } else if ((x = new_metric (spec, buckets, n_buckets, pending))) {
      __atomic_store_n (tail, x, __ATOMIC_RELEASE);
   } else {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory defining metric %s", spec->name);
   }
   pthread_mutex_unlock (&m->mu);
   return x;
}

static void
settle_pending (fw_metrics_t *m, metric_state_t to)
{
   pthread_mutex_lock (&m->mu);
   for (fw_metric_t *x = m->metrics; x; x = x->next) {
      if (x->state == METRIC_PENDING) {
         __atomic_store_n (&x->state, to, __ATOMIC_RELEASE);
      }
   }
   pthread_mutex_unlock (&m->mu);
}

void
fw_metrics_commit (fw_metrics_t *m)
{
   settle_pending (m, METRIC_COMMITTED);
}

void
fw_metrics_rollback (fw_metrics_t *m)
{
   settle_pending (m, METRIC_RETIRED);
}

const char *
fw_metric_name (const fw_metric_t *metric)
{
   return metric->name;
}

fw_metric_type_t
fw_metric_type (const fw_metric_t *metric)
{
   return metric->type;
}

int
fw_metric_label_count (const fw_metric_t *metric)
{
   return metric->n_labels;
}

const char *
fw_metric_label_name (const fw_metric_t *metric, int i)
{
   return i >= 0 && i < metric->n_labels ? metric->labels[i] : NULL;
}

/* --- series -------------------------------------------------------------- */

bool
fw_metrics_label_value_ok (const char *value, size_t len)
{
   return fw_utf8_valid (value, len);
}

static bool
series_matches (const fw_metric_t *x, const fw_metric_series_t *s,
                const fw_stream_metrics_t *stream, const char *const *values)
{
   if (s->stream != stream) {
      return false;
   }
   for (int i = 0; i < x->n_labels; i++) {
      if (strcmp (s->values[i], values[i]) != 0) {
         return false;
      }
   }
   return true;
}

static fw_metric_series_t *
find_series (const fw_metric_t *x, const fw_stream_metrics_t *stream, const char *const *values)
{
   for (fw_metric_series_t *s = __atomic_load_n (&x->series, __ATOMIC_ACQUIRE); s;
        s = __atomic_load_n (&s->next, __ATOMIC_ACQUIRE)) {
      if (series_matches (x, s, stream, values)) {
         return s;
      }
   }
   return NULL;
}

static fw_metric_series_t *
new_series (const fw_metric_t *x, fw_stream_metrics_t *stream, const char *const *values)
{
   fw_metric_series_t *s = calloc (1, sizeof *s);
   bool ok = s != NULL;

   if (!ok) {
      return NULL;
   }
   s->stream = stream;
   s->metric = x;
   if (x->n_labels) {
      ok = (s->values = calloc ((size_t) x->n_labels, sizeof *s->values)) != NULL;
      for (int i = 0; ok && i < x->n_labels; i++) {
         ok = (s->values[i] = strdup (values[i])) != NULL;
      }
   }
   if (ok && x->type == FW_METRIC_HISTOGRAM) {
      ok = (s->buckets = calloc ((size_t) x->n_buckets + 1, sizeof *s->buckets)) != NULL;
   }
   if (!ok) {
      for (int i = 0; s->values && i < x->n_labels; i++) {
         free (s->values[i]);
      }
      free (s->values);
      free (s);
      return NULL;
   }
   return s;
}

fw_metric_series_t *
fw_metric_series_get (fw_metric_t *x, fw_stream_metrics_t *stream, const char *const *values)
{
   fw_metric_series_t *s = find_series (x, stream, values), **tail;

   if (s) {
      return s;
   }
   pthread_mutex_lock (&x->mu);
   for (tail = &x->series; (s = *tail); tail = &s->next) {
      if (series_matches (x, s, stream, values)) {
         break;
      }
   }
   if (!s) {
      if (x->n_series >= FW_METRIC_MAX_SERIES) {
         if (!x->cap_logged) {
            x->cap_logged = true;
            fw_log (FW_LOG_ERROR, stream ? stream->name : NULL,
                    "metric %s has %d series (streams x label values) already: updates of new "
                    "label values are dropped. Labels must take few values: never an id, a "
                    "document key or a URL path",
                    x->name, FW_METRIC_MAX_SERIES);
         }
      } else if ((s = new_series (x, stream, values))) {
         x->n_series++;
         __atomic_store_n (tail, s, __ATOMIC_RELEASE);
      }
   }
   pthread_mutex_unlock (&x->mu);
   return s;
}

void
fw_metric_series_add (fw_metric_series_t *s, double v)
{
   /* Compare-and-swap: a stream's lanes (issue 16) add from several threads. */
   uint64_t old = __atomic_load_n (&s->value_bits, __ATOMIC_RELAXED);
   while (!__atomic_compare_exchange_n (&s->value_bits, &old,
                                        double_to_bits (bits_to_double (old) + v), true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
   }
}

void
fw_metric_series_set (fw_metric_series_t *s, double v)
{
   __atomic_store_n (&s->value_bits, double_to_bits (v), __ATOMIC_RELAXED);
}

void
fw_metric_series_observe (fw_metric_series_t *s, double v)
{
   const fw_metric_t *x = s->metric;
   int i = 0;

   while (i < x->n_buckets && v > x->buckets[i]) {
      i++;
   }
   count_add (&s->buckets[i], 1);
   fw_metric_series_add (s, v);
}

double
fw_metric_series_value (const fw_metric_series_t *s, uint64_t *count)
{
   if (count) {
      const fw_metric_t *x = s->metric;
      *count = 0;
      for (int i = 0; s->buckets && i <= x->n_buckets; i++) {
         *count += count_get (&s->buckets[i]);
      }
   }
   return bits_to_double (__atomic_load_n (&s->value_bits, __ATOMIC_RELAXED));
}
