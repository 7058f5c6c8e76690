/*
 * cli_client.c - the one-shot commands' MongoDB client (see cli_client.h).
 */
#include <stdio.h>

#include <lua.h>

#include "cli_client.h"
#include "flowwarden/log.h"
#include "runtime/host/connections.h"
#include "runtime/host/server_probe.h"

/* Sets option name to value unless the URI has it; false when it cannot. */
static bool
bound (mongoc_uri_t *uri, const char *name, int32_t value, bson_error_t *berr)
{
   if (mongoc_uri_has_option (uri, name) || mongoc_uri_set_option_as_int32 (uri, name, value)) {
      return true;
   }
   bson_set_error (berr, 0, 0, "cannot set %s", name);
   return false;
}

mongoc_client_t *
fw_cli_connect (fw_lua_host_t *host, const char *verb, const char *appname, int32_t selection_ms)
{
   lua_State *L = fw_lua_host_state (host);
   mongoc_client_t *client = NULL;
   bson_error_t berr;
   mongoc_uri_t *uri;
   const char *text;
   char why[512];

   fw_lua_host_push_uri (host);
   text = lua_isstring (L, -1) ? lua_tostring (L, -1) : FW_DEFAULT_URI;
   uri = mongoc_uri_new_with_error (text, &berr);
   if (uri && selection_ms > 0 &&
       (!bound (uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, selection_ms, &berr) ||
        !bound (uri, MONGOC_URI_CONNECTTIMEOUTMS, FW_PROBE_CONNECT_TIMEOUT_MS, &berr))) {
      mongoc_uri_destroy (uri);
      uri = NULL;
   }
   if (!uri || !(client = mongoc_client_new_from_uri_with_error (uri, &berr))) {
      fprintf (stderr, "flowwarden: %s: %s\n", verb,
               fw_log_redact_uri_error (text, berr.message, why, sizeof why));
      lua_pop (L, 1);
      mongoc_uri_destroy (uri);
      return NULL;
   }
   lua_pop (L, 1);
   mongoc_uri_destroy (uri);
   if (!mongoc_client_set_appname (client, appname)) {
      fprintf (stderr, "flowwarden: %s: cannot set the client's appname\n", verb);
      mongoc_client_destroy (client);
      return NULL;
   }
   return client;
}
