/*
 * stream_connect-private.h - waiting for a writable server (stream_connect.c).
 */
#ifndef FLOWWARDEN_STREAM_CONNECT_PRIVATE_H
#define FLOWWARDEN_STREAM_CONNECT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/shutdown.h"
#include "ops/metrics.h"
#include "runtime/stream/stream_worker.h"

/* Probes client's deployment until a writable server answers
 * (stream_connect.c): each new reason logged once for the stream name, in
 * status (metrics, may be NULL: in state) meanwhile. False when stop came
 * first. All borrowed. */
bool fw_stream_wait_server (mongoc_client_t *client, const char *name, fw_shutdown_t *stop,
                            fw_stream_metrics_t *metrics, fw_stream_state_t state);

#endif
