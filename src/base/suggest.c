#include <stdint.h>
#include <string.h>

#include "flowwarden/suggest.h"

#define MAX_LEN 63

size_t
fw_edit_distance (const char *a, const char *b)
{
   /* Three rows of the table: two back for a swap, the one before, this one. */
   size_t rows[3][MAX_LEN + 1], la = strlen (a), lb = strlen (b), i, j;
   size_t *back2 = rows[0], *back = rows[1], *row = rows[2], *spare;

   if (la > MAX_LEN || lb > MAX_LEN) {
      return SIZE_MAX;
   }
   for (j = 0; j <= lb; j++) {
      back[j] = j;
   }
   for (i = 1; i <= la; i++) {
      row[0] = i;
      for (j = 1; j <= lb; j++) {
         size_t best = back[j - 1] + (a[i - 1] != b[j - 1]);
         if (back[j] + 1 < best) {
            best = back[j] + 1;
         }
         if (row[j - 1] + 1 < best) {
            best = row[j - 1] + 1;
         }
         if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
             back2[j - 2] + 1 < best) {
            best = back2[j - 2] + 1;
         }
         row[j] = best;
      }
      spare = back2;
      back2 = back;
      back = row;
      row = spare;
   }
   return back[lb];
}

const char *
fw_suggest (const char *word, const char *const *names)
{
   const char *best = NULL;
   size_t best_d = SIZE_MAX;

   for (; *names; names++) {
      size_t d = fw_edit_distance (word, *names);
      if (d < best_d) {
         best_d = d;
         best = *names;
      }
   }
   if (best && best_d <= 2 && best_d * 2 < strlen (word)) {
      return best;
   }
   return NULL;
}
