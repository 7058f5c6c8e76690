/*
 * rate_limit.c - the token bucket behind a stream's rate_limit
 * (rate_limit.h). Tokens are kept as a double: the refill of a few ns adds
 * a fraction of one.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dispatch/rate_limit.h"

struct fw_rate_limit {
   pthread_mutex_t mu;
   fw_rate_limit_config_t cfg;
   double tokens;
   int64_t last_ns;
};

#define MAX_COUNT 1000000000LL

bool
fw_rate_limit_parse (const char *text, fw_rate_limit_config_t *out, fw_error_t *error)
{
   int64_t n = 0;
   const char *p = text;

   memset (out, 0, sizeof *out);
   while (p && *p >= '0' && *p <= '9' && n <= MAX_COUNT) {
      n = n * 10 + (*p++ - '0');
   }
   if (!p || p == text || n < 1 || n > MAX_COUNT || p[0] != '/' || !p[1] ||
       (p[1] != 's' && p[1] != 'm') || p[2]) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "\"%s\" is not a rate (expected \"N/s\" or \"N/m\", N a whole number from 1 "
                    "to %lld, such as \"200/s\" or \"12000/m\")",
                    text ? text : "(null)", (long long) MAX_COUNT);
      return false;
   }
   out->count = n;
   out->per_ms = p[1] == 's' ? 1000 : 60000;
   return true;
}

int64_t
fw_rate_limit_burst (const fw_rate_limit_config_t *cfg)
{
   int64_t b;

   if (cfg->has_burst) {
      return cfg->burst + 1;
   }
   b = cfg->per_ms > 0 ? cfg->count * 1000 / cfg->per_ms : 0;
   return b < 1 ? 1 : b;
}

/* Tokens per ns. */
static double
rate_ns (const fw_rate_limit_config_t *cfg)
{
   return (double) cfg->count / ((double) cfg->per_ms * 1e6);
}

fw_rate_limit_t *
fw_rate_limit_new (const fw_rate_limit_config_t *cfg, int64_t now_ns)
{
   fw_rate_limit_t *rl = calloc (1, sizeof *rl);

   if (!rl) {
      return NULL;
   }
   if (pthread_mutex_init (&rl->mu, NULL) != 0) {
      free (rl);
      return NULL;
   }
   rl->cfg = *cfg;
   rl->tokens = cfg->count > 0 ? (double) fw_rate_limit_burst (cfg) : 0;
   rl->last_ns = now_ns;
   return rl;
}

void
fw_rate_limit_destroy (fw_rate_limit_t *rl)
{
   if (!rl) {
      return;
   }
   pthread_mutex_destroy (&rl->mu);
   free (rl);
}

void
fw_rate_limit_set (fw_rate_limit_t *rl, const fw_rate_limit_config_t *cfg, int64_t now_ns)
{
   pthread_mutex_lock (&rl->mu);
   if (rl->cfg.count != cfg->count || rl->cfg.per_ms != cfg->per_ms ||
       fw_rate_limit_burst (&rl->cfg) != fw_rate_limit_burst (cfg)) {
      bool was_off = rl->cfg.count == 0;
      double burst = cfg->count > 0 ? (double) fw_rate_limit_burst (cfg) : 0;
      rl->cfg = *cfg;
      rl->tokens = was_off || rl->tokens > burst ? burst : rl->tokens;
      rl->last_ns = now_ns;
   }
   pthread_mutex_unlock (&rl->mu);
}

int64_t
fw_rate_limit_take (fw_rate_limit_t *rl, int64_t now_ns)
{
   int64_t wait = 0;

   pthread_mutex_lock (&rl->mu);
   if (rl->cfg.count > 0) {
      double burst = (double) fw_rate_limit_burst (&rl->cfg);
      double r = rate_ns (&rl->cfg);
      if (now_ns > rl->last_ns) {
         rl->tokens += (double) (now_ns - rl->last_ns) * r;
      }
      /* Time never runs back; a caller switching clocks (flowwarden test's
       * virtual one) starts over from its now. */
      rl->last_ns = now_ns;
      if (rl->tokens > burst) {
         rl->tokens = burst;
      }
      if (rl->tokens >= 1.0) {
         rl->tokens -= 1.0;
      } else {
         wait = (int64_t) ((1.0 - rl->tokens) / r) + 1;
      }
   }
   pthread_mutex_unlock (&rl->mu);
   return wait;
}

fw_rate_limit_config_t
fw_rate_limit_config (fw_rate_limit_t *rl)
{
   fw_rate_limit_config_t cfg;

   pthread_mutex_lock (&rl->mu);
   cfg = rl->cfg;
   pthread_mutex_unlock (&rl->mu);
   return cfg;
}
