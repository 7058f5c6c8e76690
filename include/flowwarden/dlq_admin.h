/*
 * dlq_admin.h - what `flowwarden dlq` works on: the DLQ collections a script
 * names, and the entries a set of filters selects in them.
 *
 * The entry's life (issue 12): status PENDING -> REPROCESSING (claimed) ->
 * RESOLVED, back to PENDING after a failed replay, or DISCARDED. Fields
 * beside seed 002's: eventId, ns, clusterTime, scriptVersion, lastTouched,
 * reprocessAttempts, lastReprocessAt, lastReprocessError {type, message},
 * resolvedAt, resolution, discardedAt, discardReason, claimedBy, claimedUntil,
 * diagnostics, history [{at, action, actor, result}] (last 20),
 * updateDescription, fullDocumentBeforeChange, wallTime, txnNumber, lsid.
 */
#ifndef FLOWWARDEN_DLQ_ADMIN_H
#define FLOWWARDEN_DLQ_ADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>

#include "flowwarden/error.h"

#define FW_DLQ_MAX_IDS 64

/* The filters every `flowwarden dlq` verb shares. Strings are borrowed
 * (usually argv). Zero/NULL fields filter nothing. */
typedef struct {
   const char *stream;           /* --stream NAME */
   const char *status;           /* --status S: PENDING, REPROCESSING, RESOLVED, DISCARDED;
                                  * may be a comma-separated list */
   const char *error_type;       /* --error-type T: T and its subtypes (T.*) */
   int64_t since_ms;             /* --since: createdAt >= (ms since the epoch); 0 = none */
   int64_t until_ms;             /* --until: createdAt < ; 0 = none */
   const char *ids[FW_DLQ_MAX_IDS]; /* --id ID, repeatable */
   int n_ids;
   int64_t limit;                /* --limit N; 0 = none */
   const char *filter_json;      /* --filter JSON: Extended JSON query, ANDed with the rest */
} fw_dlq_filter_t;

/*
 * Appends the MongoDB query selecting filter's entries to query (an
 * initialised, empty document the caller owns). default_status is used when
 * filter->status is NULL (NULL: any status). Returns false with error filled
 * for a bad status name or --filter that is not a JSON object.
 */
bool fw_dlq_filter_to_query (const fw_dlq_filter_t *filter, const char *default_status,
                             bson_t *query, fw_error_t *error);

/*
 * Parses --since / --until: a duration back from now_ms ("2h", "30m", "7d",
 * "500ms") or an ISO-8601 date ("2026-01-15", "2026-01-15T10:30:00Z").
 * Returns false with error filled (naming the option) when it is neither.
 */
bool fw_dlq_parse_time (const char *option, const char *text, int64_t now_ms, int64_t *out_ms,
                        fw_error_t *error);

#endif
