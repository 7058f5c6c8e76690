#include <string.h>

#include "flowwarden/duration.h"

#define EXPECTED "expected a number followed by ms, s, m, h, d or w, e.g. \"500ms\""

static const struct {
   const char *unit;
   int64_t ms;
} units[] = {{"ms", 1},
             {"s", 1000},
             {"m", 60 * 1000},
             {"h", 3600 * 1000},
             {"d", 24 * 3600 * 1000LL},
             {"w", 7 * 24 * 3600 * 1000LL}};

static bool
is_digit (char c)
{
   return c >= '0' && c <= '9';
}

/* The milliseconds of a unit's name [s, s + len), or 0. */
static int64_t
unit_ms (const char *s, size_t len)
{
   for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
      if (strlen (units[i].unit) == len && memcmp (units[i].unit, s, len) == 0) {
         return units[i].ms;
      }
   }
   return 0;
}

bool
fw_duration_parse (const char *text, int64_t *out_ms, fw_error_t *error)
{
   const char *p = text, *int_end, *frac = NULL, *frac_end = NULL;
   int64_t scale, whole = 0, part = 0, divisor = 1;
   size_t frac_len;

   while (is_digit (*p)) {
      p++;
   }
   int_end = p;
   if (*p == '.') {
      frac = ++p;
      while (is_digit (*p)) {
         p++;
      }
      frac_end = p;
   }
   scale = unit_ms (p, strlen (p));
   if (int_end == text || (frac && frac == frac_end) || scale == 0) {
      fw_error_set (error, 1, "invalid duration \"%s\" (" EXPECTED ")", text);
      return false;
   }
   /* The whole part is bounded before it is multiplied, so nothing wraps. */
   for (const char *d = text; d < int_end; d++) {
      whole = whole * 10 + (*d - '0');
      if (whole > FW_DURATION_MAX_MS / scale) {
         fw_error_set (error, 1, "invalid duration \"%s\" (too large)", text);
         return false;
      }
   }
   whole *= scale;
   while (frac && frac_end > frac && frac_end[-1] == '0') {
      frac_end--;
   }
   frac_len = frac ? (size_t) (frac_end - frac) : 0;
   if (frac_len > 0) {
      /* A unit is at most 2^10 * 3^3 * 5^5 * 7 ms: a fraction of more than
       * 10 significant decimals never comes to whole milliseconds (and
       * part * scale stays below 2^63). */
      if (frac_len > 10) {
         fw_error_set (error, 1, "invalid duration \"%s\" (not a whole number of milliseconds)",
                       text);
         return false;
      }
      for (const char *d = frac; d < frac_end; d++) {
         part = part * 10 + (*d - '0');
         divisor *= 10;
      }
      if ((part * scale) % divisor != 0) {
         fw_error_set (error, 1, "invalid duration \"%s\" (not a whole number of milliseconds)",
                       text);
         return false;
      }
      part = part * scale / divisor;
   }
   if (whole + part > FW_DURATION_MAX_MS) {
      fw_error_set (error, 1, "invalid duration \"%s\" (too large)", text);
      return false;
   }
   *out_ms = whole + part;
   return true;
}
