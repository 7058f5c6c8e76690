/*
 * stream_exactly_once_sessions-private.h - exactly_once (issue 39): the
 * server sessions an earlier run left elsewhere (stream_exactly_once_sessions.c).
 */
#ifndef FLOWWARDEN_STREAM_EXACTLY_ONCE_SESSIONS_PRIVATE_H
#define FLOWWARDEN_STREAM_EXACTLY_ONCE_SESSIONS_PRIVATE_H

#include <mongoc/mongoc.h>

#include "runtime/config/stream_config.h"
#include "runtime/dispatch/dispatcher.h"

/* By fw_stream_exactly_once_recover after it killed the sessions recorded
 * on client (the transactions' deployment): kills those left elsewhere,
 * where an earlier run's transactions may still hold documents: a killed
 * `dlq replay`'s (on client), the stream's own deployment's record (on own,
 * the stream's client, or NULL: none) when the transactions now run on a
 * sink (an earlier exactly_once = true), and the record of each sink an
 * earlier run noted there other than the current one (an earlier
 * { connection = ... }, reached through d). Failures are logged. cfg, d and
 * the clients are borrowed. */
void fw_stream_exactly_once_kill_elsewhere (const fw_stream_config_t *cfg, fw_dispatcher_t *d,
                                            mongoc_client_t *own, mongoc_client_t *client);

#endif
