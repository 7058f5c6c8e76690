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

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/dlq/dlq_store.h"

/*
 * Appends the MongoDB query selecting filter's entries to query (an
 * initialised, empty document the caller owns). default_status is used when
 * filter->status is NULL (NULL: any status). Returns false with error filled
 * for a bad status name or --filter that is not a JSON object.
 */
bool fw_dlq_filter_to_query (const fw_dlq_filter_t *filter, const char *default_status,
                             bson_t *query, fw_error_t *error);

/* Whether filter is valid (a known status, a --filter that is a JSON
 * object): false with error filled as fw_dlq_filter_to_query does. */
bool fw_dlq_filter_check (const fw_dlq_filter_t *filter, const char *default_status,
                          fw_error_t *error);

/*
 * Applies one filter option of the command line to filter: name is its long
 * name without dashes ("stream", "status", "error-type", "since", "until",
 * "id", "limit", "filter"), value is borrowed (it must outlive filter).
 * Returns false with error filled (naming the option) for a bad value or
 * name. now_ms anchors --since / --until durations.
 */
bool fw_dlq_filter_option (fw_dlq_filter_t *filter, const char *name, const char *value,
                           int64_t now_ms, fw_error_t *error);

/*
 * Parses --since / --until: a duration back from now_ms ("2h", "30m", "7d",
 * "500ms") or an ISO-8601 date ("2026-01-15", "2026-01-15T10:30:00Z").
 * Returns false with error filled (naming the option) when it is neither.
 */
bool fw_dlq_parse_time (const char *option, const char *text, int64_t now_ms, int64_t *out_ms,
                        fw_error_t *error);

/* --- the script's DLQs and the operations of `flowwarden dlq` ------------ */

/* One DLQ collection a script names: every stream whose dlq setting leads to
 * the same (URI, database, collection) shares one target, and its entries are
 * told apart by streamName. */
typedef struct {
   char *uri;        /* the effective URI of the DLQ's connection */
   char *connection; /* "default" (the run URI) or the fw.connection name */
   char *database;
   char *collection;
   char **streams; /* names of the streams writing here, script order */
   int n_streams;
} fw_dlq_target_t;

typedef struct fw_dlq_admin fw_dlq_admin_t;

/*
 * Loads script (option_uri: --uri or FLOWWARDEN_URI, may be NULL; the
 * script's and the default URI apply as for `run`) and collects the DLQ
 * targets of its streams, deduplicated. Connects to nothing yet. NULL with
 * error filled when the script is invalid or declares no stream with a DLQ.
 * The caller owns the result: fw_dlq_admin_destroy.
 */
fw_dlq_admin_t *fw_dlq_admin_new (const char *script, const char *option_uri, fw_error_t *error);

/* Closes the clients and frees everything. NULL is a no-op. */
void fw_dlq_admin_destroy (fw_dlq_admin_t *admin);

/* Number of targets, and target i (borrowed, valid for the admin's life). */
int fw_dlq_admin_target_count (const fw_dlq_admin_t *admin);
const fw_dlq_target_t *fw_dlq_admin_target (const fw_dlq_admin_t *admin, int i);

/*
 * Restricts every later operation to the target of stream name. Returns
 * false with error naming the script's streams when the script has no such
 * stream, or when that stream has no DLQ.
 */
bool fw_dlq_admin_restrict (fw_dlq_admin_t *admin, const char *stream, fw_error_t *error);

/* The target stream name writes to, or NULL. Borrowed. */
const fw_dlq_target_t *fw_dlq_admin_target_of (const fw_dlq_admin_t *admin, const char *stream);

/* Called for every entry found; entry is borrowed for the call. Returning
 * false stops the search (the visitor fills error). */
typedef bool (*fw_dlq_visit_fn) (const bson_t *entry, const fw_dlq_target_t *target, void *ud,
                                 fw_error_t *error);

/*
 * Visits the entries filter selects in every (restricted) target, oldest
 * first (createdAt, then _id) within a target, at most filter->limit in all.
 * Unless with_documents, fullDocument, fullDocumentBeforeChange and
 * updateDescription are left out by the server (they may hold personal
 * data). Returns false with error filled on a bad filter, a server error,
 * or when visit returns false.
 */
bool fw_dlq_admin_find (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                        const char *default_status, bool with_documents, fw_dlq_visit_fn visit,
                        void *ud, fw_error_t *error);

/*
 * Counts the selected entries into out (initialised by the callee, owned by
 * the caller): { total: int64, by_stream: {name: int64}, by_status: {...},
 * by_error_type: {...}, oldest_pending_age_s: int64 or null }. A value that
 * is missing or not a string is counted under "?", but an entry of a
 * sequence with no error (parked) under "(parked)". filter->limit is ignored.
 * When a stream in scope declares a sequenced DLQ, or sequences are found,
 * out also has sequences: { stream: { open: int64 (sequence documents with
 * open: true), parked: int64 (waiting entries behind their sequence's
 * head), largest: int64 (the most waiting entries of one sequence) } },
 * which only filter->stream narrows (they describe what waits now).
 */
bool fw_dlq_admin_stats (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                         const char *default_status, int64_t now_ms, bson_t *out,
                         fw_error_t *error);

/* --- the sequences of a sequenced DLQ (issue 14, dlq_sequence.h) --------- */

/*
 * Visits the sequences of the (restricted) targets: every sequence whose
 * document in "<collection>_sequences" does not say open: false (a
 * malformed one included), and every sequence that still has waiting
 * entries (PENDING or REPROCESSING, with a string sequenceId). Each is given
 * to visit as a document, borrowed for the call:
 *
 *   { streamName, sequenceId,
 *     open: true, false, or null (no sequence document, or open not a bool),
 *     size: int64 (waiting entries), parked: int64 (those behind the head),
 *     head: null (nothing waits) or the waiting entry with the lowest
 *           sequenceIndex: { _id, sequenceIndex, status,
 *                            error: { type, message } or null (parked; what
 *                            the entry holds when it is not a document),
 *                            createdAt },
 *     ageSeconds: int64 since the head's createdAt, or null }
 *
 * A string missing from a malformed document is "?". filter->stream selects
 * one stream's sequences and filter->limit caps their number; the other
 * filters select sequences by their head entry, as replay does (a sequence
 * with nothing waiting is then left out). Oldest head first within a
 * target, sequences with no head last. False with error filled on a bad
 * filter, a server error, or when visit returns false.
 */
bool fw_dlq_admin_sequences (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter, int64_t now_ms,
                             fw_dlq_visit_fn visit, void *ud, fw_error_t *error);

/* The _ids a filter selects now, per target: what discard and purge touch,
 * and what the operator confirms. */
typedef struct fw_dlq_selection fw_dlq_selection_t;

/*
 * Selects (at most filter->limit) entries. With filter->ids, an id that
 * selects nothing is an error ("no DLQ entry with _id ..."), so a typo
 * never passes for "0 entries". The selection keeps filter's and
 * default_status's strings borrowed: they must outlive it. The caller owns
 * the result: fw_dlq_selection_destroy.
 */
fw_dlq_selection_t *fw_dlq_admin_select (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                                         const char *default_status, fw_error_t *error);
int64_t fw_dlq_selection_size (const fw_dlq_selection_t *selection);
void fw_dlq_selection_destroy (fw_dlq_selection_t *selection);

/*
 * Marks the selected entries that still match the filter DISCARDED
 * (discardedAt, discardReason, lastTouched, and a history item
 * {at, action: "discarded", actor, result: reason}, the last 20 kept).
 * *touched: how many were changed.
 */
bool fw_dlq_admin_discard (fw_dlq_admin_t *admin, const fw_dlq_selection_t *selection,
                           const char *reason, const char *actor, int64_t now_ms, int64_t *touched,
                           fw_error_t *error);

/* Deletes the selected entries that still match the filter. */
bool fw_dlq_admin_purge (fw_dlq_admin_t *admin, const fw_dlq_selection_t *selection,
                         int64_t *touched, fw_error_t *error);

typedef enum {
   FW_DLQ_IMPORT_INSERTED, /* the _id was new */
   FW_DLQ_IMPORT_REPLACED, /* an entry with this _id was there: now it is this one */
   FW_DLQ_IMPORT_SKIPPED   /* the entry's stream is not the one fw_dlq_admin_restrict chose */
} fw_dlq_import_result_t;

/*
 * Upserts entry by _id into the DLQ collection of its streamName, replacing
 * the whole document byte for byte (no client-side validation), so importing
 * twice changes nothing. False with error filled when the entry has no _id,
 * no string streamName, one the script does not know, or the server refuses.
 */
bool fw_dlq_admin_import (fw_dlq_admin_t *admin, const bson_t *entry,
                          fw_dlq_import_result_t *result, fw_error_t *error);

#endif
