/*
 * circuit_doc.h - a stream's open circuit breaker kept across restarts
 * (issue 37): one document in <database>._fw_checkpoints, _id
 * "<checkpoint id>#circuit" (a partition's unit: its own checkpoint id's),
 * next to the stream's checkpoint:
 *
 *   stream       the checkpoint id it belongs to
 *   state        "open"
 *   errorType    the error that opened it (the last probe's)
 *   openedAt     when it first opened this outage (date)
 *   openForMs    the current pause
 *   nextProbeAt  when it probes next (date)
 *   probes       probes run this outage
 *   epoch        ha.mode = "leader": the lease epoch of the leader that
 *                wrote it (a deposed leader's write moves nothing); 0 else
 *   writerGen    without ha: the writer generation of the run that wrote it
 *                (checkpoint_store.h; an earlier run's late write moves
 *                nothing)
 *   updatedAt
 *
 * Written when the breaker opens and after each failed probe, deleted when
 * it closes; a stop leaves it.
 */
#ifndef FLOWWARDEN_CIRCUIT_DOC_H
#define FLOWWARDEN_CIRCUIT_DOC_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/dispatch/circuit.h"

/* Writes "<id>#circuit" as v (an open or half-open breaker) says. With
 * epoch > 0 only over a document written with an epoch not above it, with
 * gen > 0 (the run's writer generation, without ha) only over one written
 * with a generation not above it: a newer leader's or run's document
 * stays, and *fenced says so (false returned, error naming why). */
bool fw_circuit_doc_save (mongoc_client_t *client, const char *database, const char *id,
                          const fw_circuit_view_t *v, int64_t epoch, int64_t gen, bool *fenced,
                          fw_error_t *error);

/* Deletes "<id>#circuit" (with epoch > 0: unless a newer leader wrote it;
 * with gen > 0: unless a newer run did). A missing document is not an
 * error. */
bool fw_circuit_doc_delete (mongoc_client_t *client, const char *database, const char *id,
                            int64_t epoch, int64_t gen, fw_error_t *error);

/* Reads "<id>#circuit" into *out (state FW_CIRCUIT_OPEN) with *found true;
 * *found false when there is none or it is not a breaker's (a field
 * missing or of the wrong type: *bad says which, logged by the caller). */
bool fw_circuit_doc_load (mongoc_client_t *client, const char *database, const char *id,
                          fw_circuit_view_t *out, bool *found, char *bad, size_t bad_len,
                          fw_error_t *error);

#endif
