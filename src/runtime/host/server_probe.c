/*
 * server_probe.c - a bounded reachability check of a MongoDB URI (see
 * server_probe.h).
 */
#include <stdio.h>
#include <string.h>

#include "runtime/host/server_probe.h"

void
fw_server_describe (const mongoc_uri_t *uri, char *out, size_t len)
{
   const char *srv = mongoc_uri_get_srv_hostname (uri);
   const char *rs = mongoc_uri_get_replica_set (uri);
   size_t used = 0;

   out[0] = '\0';
   if (srv) {
      used = (size_t) snprintf (out, len, "SRV %s", srv);
   } else {
      for (const mongoc_host_list_t *h = mongoc_uri_get_hosts (uri); h && used < len; h = h->next) {
         used += (size_t) snprintf (out + used, len - used, "%s%s", used ? "," : "",
                                    h->host_and_port);
      }
   }
   if (rs && used < len) {
      snprintf (out + used, len - used, " (replica set %s)", rs);
   }
}

mongoc_server_description_t *
fw_server_probe_select (const mongoc_uri_t *uri, char *why, size_t len)
{
   mongoc_uri_t *copy = mongoc_uri_copy (uri);
   mongoc_client_t *client = NULL;
   mongoc_server_description_t *sd = NULL;
   bson_error_t berr;

   if (!copy) {
      snprintf (why, len, "out of memory");
      return NULL;
   }
   /* One scan, then an answer: the single-threaded client's selection. */
   if (!mongoc_uri_has_option (copy, MONGOC_URI_CONNECTTIMEOUTMS)) {
      mongoc_uri_set_option_as_int32 (copy, MONGOC_URI_CONNECTTIMEOUTMS,
                                      FW_PROBE_CONNECT_TIMEOUT_MS);
   }
   mongoc_uri_set_option_as_bool (copy, MONGOC_URI_SERVERSELECTIONTRYONCE, true);
   if (!(client = mongoc_client_new_from_uri_with_error (copy, &berr))) {
      snprintf (why, len, "%s", berr.message);
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      mongoc_client_set_appname (client, "flowwarden");
      if (!(sd = mongoc_client_select_server (client, true, NULL, &berr))) {
         snprintf (why, len, "%s", berr.message);
      }
   }
   /* The description is a copy: it outlives the client. */
   mongoc_client_destroy (client);
   mongoc_uri_destroy (copy);
   return sd;
}

bool
fw_server_probe (const mongoc_uri_t *uri, char *why, size_t len)
{
   mongoc_server_description_t *sd = fw_server_probe_select (uri, why, len);
   bool ok = sd != NULL;

   mongoc_server_description_destroy (sd);
   return ok;
}
