/*
 * stream_circuit-private.h - the breaker kept across restarts (issue 37,
 * stream_circuit.c).
 */
#ifndef FLOWWARDEN_STREAM_CIRCUIT_PRIVATE_H
#define FLOWWARDEN_STREAM_CIRCUIT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/stream/stream_worker.h"

/* Gives w's dispatcher (and so its lanes) the hooks keeping its breaker in
 * "<w's checkpoint id>#circuit" (circuit_doc.h). */
void fw_stream_circuit_keep (fw_stream_worker_t *w);

/* At a start: a breaker kept by the last run is put back open (logged);
 * none, a read error (logged) or circuit off (the document is deleted)
 * leaves it closed. On the stream's thread, with its client. */
void fw_stream_circuit_restore (fw_stream_worker_t *w);

#endif
