/*
 * dlq_entry.h - builds the dead-letter document of seed 002 for one event.
 *
 * Event fields (documentKey, fullDocument, the resume token, clusterTime, and
 * what a replay needs to hand the event over again: updateDescription,
 * fullDocumentBeforeChange, wallTime, txnNumber, lsid) are copied from the
 * event's BSON as they are, never through Lua, so every BSON type survives.
 *
 * The entry is the document as first inserted: status PENDING, lastTouched =
 * createdAt, reprocessAttempts 0, diagnostics {}, and a one-item history
 * [{at, action: "enqueued", actor, result: error.type}]. The store turns it
 * into an upsert when the same event was dead-lettered before.
 */
#ifndef FLOWWARDEN_DLQ_ENTRY_H
#define FLOWWARDEN_DLQ_ENTRY_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/config/stream_config.h"

typedef struct {
   const char *stream_name;
   const char *error_type; /* NULL: parked behind its sequence, no error (issue 14) */
   const char *error_message;
   const char *stack_trace; /* may be NULL */
   int error_status;        /* err.fields.status of an HTTP error (error.status); 0: none */
   const char *error_body;  /* with it, the reply's first bytes (error.body), or NULL */
   int attempts;
   int64_t first_attempt_ms; /* wall clock, ms since the epoch */
   int64_t last_attempt_ms;
   int64_t created_ms;
   const char *script_version; /* may be NULL */
   const bson_t *metadata;     /* may be NULL: stored as {} */
   const char *actor;          /* history[].actor; NULL: fw_dlq_actor () */
   const bson_t *raw_event;    /* an event the runtime could not read: stored whole as
                                 * rawEvent (a document, or binary when it is not valid
                                 * BSON; left out when the entry must be slimmed) */
   const char *sequence_id;    /* a sequenced DLQ: sequenceId, or NULL */
   int64_t sequence_index;     /* sequenceIndex, with sequence_id */
   int64_t epoch;              /* ha.mode = "leader": the lease epoch of the instance that
                                 * wrote it (lease.h), stored as epoch; 0: left out */
} fw_dlq_failure_t;

/* Keeps the last FW_DLQ_HISTORY_MAX items of an entry's history. */
#define FW_DLQ_HISTORY_MAX 20

/* Initialises out and fills it. The caller owns out (bson_destroy). */
bool fw_dlq_entry_build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
                         const fw_dlq_failure_t *f, fw_error_t *error);

/* The entry's streamName, or NULL when it has none that is a string.
 * Borrowed from entry. */
const char *fw_dlq_entry_stream (const bson_t *entry);

/* Writes "INSERT", "UPDATE", "DROP_DATABASE"...: seed 002's spelling of a
 * MongoDB operation type. */
void fw_dlq_operation_type (const char *op, char *buf, size_t len);

/* Writes "<hostname>:<pid>", who acted on an entry as history[].actor says
 * it, into buf (truncated to len). */
void fw_dlq_actor (char *buf, size_t len);

/* Rewrites entry (the caller's, as fw_dlq_entry_build made it) into a
 * scheduled retry (retry.mode = "deferred"): status SCHEDULED,
 * nextAttemptAt next_ms after it. False when out of memory (entry
 * unchanged). */
bool fw_dlq_entry_schedule (bson_t *entry, int64_t next_ms);

#endif
