/*
 * stream_connect-private.h - waiting for a writable server (stream_connect.c).
 */
#ifndef FLOWWARDEN_STREAM_CONNECT_PRIVATE_H
#define FLOWWARDEN_STREAM_CONNECT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/stream/stream_worker.h"

/* Probes the deployment until a writable server answers (stream_connect.c):
 * each new reason logged once, in status (in state) meanwhile. False on
 * shutdown. */
bool fw_stream_wait_server (fw_stream_worker_t *w, fw_stream_state_t state);

#endif
