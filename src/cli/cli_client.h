/*
 * cli_client.h - the one-shot commands' MongoDB client (record, doctor).
 */
#ifndef FLOWWARDEN_CLI_CLIENT_H
#define FLOWWARDEN_CLI_CLIENT_H

#include <mongoc/mongoc.h>

#include "runtime/host/lua_host.h"

/* A single-threaded client for the URI the script in host resolved (--uri,
 * FLOWWARDEN_URI, fw.defaults, else FW_DEFAULT_URI), named appname. With
 * selection_ms > 0, server selection and connecting are bounded (selection_ms,
 * FW_PROBE_CONNECT_TIMEOUT_MS) unless the URI sets its own. NULL after saying
 * why on stderr as "flowwarden: VERB: ..." (the URI's secrets redacted). The
 * caller owns the client (mongoc_client_destroy). */
mongoc_client_t *fw_cli_connect (fw_lua_host_t *host, const char *verb, const char *appname,
                                 int32_t selection_ms);

#endif
