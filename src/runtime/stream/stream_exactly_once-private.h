/*
 * stream_exactly_once-private.h - exactly_once (issue 39, stream_exactly_once.c): the
 * dispatcher's transactions write the stream's position.
 */
#ifndef FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H
#define FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "flowwarden/stream_worker.h"

/* stream_exactly_once.c: exactly_once (issue 39) wires the dispatcher's
 * transactions to write the stream's position in them. */
void fw_stream_exactly_once_wire (fw_stream_worker_t *w);

/* At the start of a run (after the lease, before the change stream opens):
 * kills the server sessions recorded by an earlier holder of the checkpoint
 * (a killed process, a deposed leader), aborting the transaction it may
 * have left open; a failure is logged and the run goes on. */
void fw_stream_exactly_once_recover (fw_stream_worker_t *w);

#endif
