/*
 * stream_connect.c - before a stream's thread makes its first MongoDB call
 * (and before each re-open after a failure), it waits for a writable server
 * with bounded probes (server_probe.h), so that an unreachable deployment
 * is reported within seconds, in the log and in status, and a stop is
 * honoured between probes instead of after a 30 s server selection.
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/host/server_probe.h"
#include "runtime/stream/stream_connect-private.h"

/* Between two probes of an unreachable deployment. */
#define PROBE_EVERY_MS 1000

bool
fw_stream_wait_server (mongoc_client_t *client, const char *name, fw_shutdown_t *stop,
                       fw_stream_metrics_t *metrics, fw_stream_state_t state)
{
   const mongoc_uri_t *uri = mongoc_client_get_uri (client);
   char where[512], why[1024], last[1024] = "";
   int64_t since = fw_mono_ms ();

   fw_server_describe (uri, where, sizeof where);
   fw_log (FW_LOG_DEBUG, name, "probing MongoDB at %s", where);
   while (!fw_shutdown_requested (stop)) {
      if (fw_server_probe (uri, why, sizeof why)) {
         if (last[0]) {
            fw_log (FW_LOG_INFO, name, "reached MongoDB at %s after %lld s", where,
                    (long long) ((fw_mono_ms () - since) / 1000));
         }
         return true;
      }
      /* Logged once per reason; status shows it the whole time. */
      if (strcmp (why, last) != 0) {
         fw_log (FW_LOG_WARN, name, "cannot reach MongoDB at %s: %s; trying again every %d s",
                 where, why, PROBE_EVERY_MS / 1000);
         memcpy (last, why, sizeof last);
      }
      if (metrics) {
         char reason[1700];
         snprintf (reason, sizeof reason, "cannot reach MongoDB at %s for %lld s: %s%s", where,
                   (long long) ((fw_mono_ms () - since) / 1000), why,
                   state == FW_STREAM_RESTARTING ? "; re-opening the change stream once it answers"
                                                 : "");
         fw_stream_metrics_set_state (metrics, state, reason);
      }
      if (fw_shutdown_wait_ms (stop, PROBE_EVERY_MS)) {
         break;
      }
   }
   return false;
}
