#include <math.h>

#include "runtime/dispatch/backoff.h"

int64_t
fw_backoff_delay_ms (const fw_backoff_t *b, int attempt, double unit_random)
{
   double delay;

   if (attempt < 1) {
      attempt = 1;
   }
   delay = (double) b->initial_delay_ms * pow (b->multiplier, attempt - 1);
   if (!(delay < (double) b->max_delay_ms)) { /* also catches inf */
      delay = (double) b->max_delay_ms;
   }
   if (b->jitter) {
      delay *= 0.8 + 0.4 * unit_random;
   }
   return (int64_t) llround (delay);
}

double
fw_backoff_random (uint64_t *state)
{
   /* splitmix64: small, fast and good enough to spread retries apart. */
   uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
   z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
   z ^= z >> 31;
   return (double) (z >> 11) * (1.0 / 9007199254740992.0);
}
