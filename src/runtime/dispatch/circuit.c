/*
 * circuit.c - the circuit breaker's state machine (circuit.h). One mutex
 * guards it: the holder (the thread whose event opened it) moves it on,
 * the lanes read whether it is closed, and the admin endpoint's thread asks
 * for a probe.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dispatch/circuit.h"

struct fw_circuit {
   pthread_mutex_t mu;
   fw_circuit_state_t state;
   char error_type[128];
   int64_t since_ms;
   int64_t next_probe_ms;
   int64_t open_for_ms;
   int probes;
   bool probe_asked;
   bool orphan; /* restored, no event holds it yet */
};

bool
fw_circuit_config_matches (const fw_circuit_config_t *cfg, const char *type)
{
   size_t tlen = type ? strlen (type) : 0;

   if (!cfg || !cfg->enabled || !type) {
      return false;
   }
   for (int i = 0; i < cfg->n_on; i++) {
      size_t n = strlen (cfg->on[i]);
      if (tlen >= n && memcmp (type, cfg->on[i], n) == 0 && (tlen == n || type[n] == '.')) {
         return true;
      }
   }
   return false;
}

void
fw_circuit_config_cleanup (fw_circuit_config_t *cfg)
{
   if (!cfg) {
      return;
   }
   for (int i = 0; i < cfg->n_on; i++) {
      free (cfg->on[i]);
   }
   free (cfg->on);
   memset (cfg, 0, sizeof *cfg);
}

fw_circuit_t *
fw_circuit_new (void)
{
   fw_circuit_t *c = calloc (1, sizeof *c);

   if (c && pthread_mutex_init (&c->mu, NULL) != 0) {
      free (c);
      return NULL;
   }
   return c;
}

void
fw_circuit_destroy (fw_circuit_t *c)
{
   if (!c) {
      return;
   }
   pthread_mutex_destroy (&c->mu);
   free (c);
}

static void
set_type (fw_circuit_t *c, const char *type)
{
   size_t n = type ? strlen (type) : 0;

   n = n >= sizeof c->error_type ? sizeof c->error_type - 1 : n;
   memcpy (c->error_type, type ? type : "", n);
   c->error_type[n] = '\0';
}

bool
fw_circuit_open (fw_circuit_t *c, const fw_circuit_config_t *cfg, const char *type, int64_t now_ms)
{
   bool opened = false;

   pthread_mutex_lock (&c->mu);
   if (c->state == FW_CIRCUIT_CLOSED) {
      c->state = FW_CIRCUIT_OPEN;
      set_type (c, type);
      c->since_ms = now_ms;
      c->open_for_ms = cfg->open_for_ms > 0 ? cfg->open_for_ms : 1;
      c->next_probe_ms = now_ms + c->open_for_ms;
      c->probes = 0;
      c->probe_asked = false;
      c->orphan = false;
      opened = true;
   }
   pthread_mutex_unlock (&c->mu);
   return opened;
}

fw_circuit_step_t
fw_circuit_next (fw_circuit_t *c, const fw_circuit_config_t *cfg, int64_t now_ms, int64_t *wait_ms)
{
   fw_circuit_step_t step = FW_CIRCUIT_PROBE;
   int64_t give_up_at;

   *wait_ms = 0;
   pthread_mutex_lock (&c->mu);
   if (c->state != FW_CIRCUIT_OPEN) {
      goto done;
   }
   give_up_at = cfg->give_up_after_ms > 0 ? c->since_ms + cfg->give_up_after_ms : INT64_MAX;
   if (now_ms >= give_up_at) {
      step = FW_CIRCUIT_GIVE_UP;
   } else if (c->probe_asked || now_ms >= c->next_probe_ms) {
      c->state = FW_CIRCUIT_HALF_OPEN;
      c->probe_asked = false;
      c->probes++;
   } else {
      step = FW_CIRCUIT_WAIT;
      *wait_ms = (c->next_probe_ms < give_up_at ? c->next_probe_ms : give_up_at) - now_ms;
   }
done:
   pthread_mutex_unlock (&c->mu);
   return step;
}

void
fw_circuit_probe_failed (fw_circuit_t *c, const fw_circuit_config_t *cfg, const char *type,
                         int64_t now_ms)
{
   pthread_mutex_lock (&c->mu);
   if (c->state != FW_CIRCUIT_CLOSED) {
      int64_t max = cfg->max_open_for_ms > 0 ? cfg->max_open_for_ms : c->open_for_ms;
      c->state = FW_CIRCUIT_OPEN;
      set_type (c, type);
      c->open_for_ms = c->open_for_ms > max / 2 ? max : c->open_for_ms * 2;
      c->next_probe_ms = now_ms + c->open_for_ms;
   }
   pthread_mutex_unlock (&c->mu);
}

fw_circuit_state_t
fw_circuit_close (fw_circuit_t *c)
{
   fw_circuit_state_t was;

   pthread_mutex_lock (&c->mu);
   was = c->state;
   c->state = FW_CIRCUIT_CLOSED;
   c->error_type[0] = '\0';
   c->since_ms = 0;
   c->next_probe_ms = 0;
   c->probe_asked = false;
   c->orphan = false;
   pthread_mutex_unlock (&c->mu);
   return was;
}

bool
fw_circuit_probe_now (fw_circuit_t *c)
{
   bool open;

   pthread_mutex_lock (&c->mu);
   open = c->state == FW_CIRCUIT_OPEN;
   if (open) {
      c->probe_asked = true;
   }
   pthread_mutex_unlock (&c->mu);
   return open;
}

fw_circuit_state_t
fw_circuit_state (fw_circuit_t *c)
{
   fw_circuit_state_t s;

   pthread_mutex_lock (&c->mu);
   s = c->state;
   pthread_mutex_unlock (&c->mu);
   return s;
}

void
fw_circuit_view (fw_circuit_t *c, fw_circuit_view_t *out)
{
   pthread_mutex_lock (&c->mu);
   out->state = c->state;
   memcpy (out->error_type, c->error_type, sizeof out->error_type);
   out->since_ms = c->state == FW_CIRCUIT_CLOSED ? 0 : c->since_ms;
   out->next_probe_ms = c->state == FW_CIRCUIT_OPEN ? c->next_probe_ms : 0;
   out->open_for_ms = c->open_for_ms;
   out->probes = c->probes;
   out->probe_asked = c->probe_asked;
   pthread_mutex_unlock (&c->mu);
}

bool
fw_circuit_restore (fw_circuit_t *c, const fw_circuit_view_t *saved)
{
   bool done = false;

   if (!saved || saved->state != FW_CIRCUIT_OPEN || saved->open_for_ms <= 0) {
      return false;
   }
   pthread_mutex_lock (&c->mu);
   if (c->state == FW_CIRCUIT_CLOSED) {
      c->state = FW_CIRCUIT_OPEN;
      set_type (c, saved->error_type);
      c->since_ms = saved->since_ms;
      c->open_for_ms = saved->open_for_ms;
      c->next_probe_ms = saved->next_probe_ms;
      c->probes = saved->probes > 0 ? saved->probes : 0;
      c->probe_asked = false;
      c->orphan = true;
      done = true;
   }
   pthread_mutex_unlock (&c->mu);
   return done;
}

bool
fw_circuit_adopt (fw_circuit_t *c)
{
   bool adopted;

   pthread_mutex_lock (&c->mu);
   adopted = c->state == FW_CIRCUIT_OPEN && c->orphan;
   c->orphan = false;
   pthread_mutex_unlock (&c->mu);
   return adopted;
}
