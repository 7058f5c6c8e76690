/*
 * owned_collections.h - every collection flowwarden writes, listed in one
 * place. A stream without `collection` watches its whole database and must
 * never see flowwarden's own writes there (they would feed back into it), so
 * its pipeline excludes all of them (stream_config.c). A collection
 * flowwarden starts writing (members, retry stores, ...) joins
 * fw_owned_collections_each, and database-wide streams exclude it from then on.
 */
#ifndef FLOWWARDEN_OWNED_COLLECTIONS_H
#define FLOWWARDEN_OWNED_COLLECTIONS_H

#include <stdbool.h>

#include "runtime/config/stream_config.h"

/* Called with a collection and its database; both strings are valid during
 * the call only. Returning false stops the walk. */
typedef bool (*fw_owned_collection_fn) (void *ud, const char *database, const char *collection);

/* Calls fn for each collection flowwarden writes for the stream cfg:
 * _fw_checkpoints, _fw_leases and _fw_snapshot_marks (snapshot.h) in
 * cfg->database; the stream's DLQ and its
 * sequences collection (dlq_sequence.h) in the DLQ's database, and so the
 * script's default DLQ that ctx:send_to_dlq writes for a stream without
 * one. A DLQ kept in memory (store = "memory") writes no collection. A DLQ on
 * another connection is listed too: that connection may reach the same
 * server. Returns false when fn stopped the walk (or out of memory). */
bool fw_owned_collections_each (const fw_stream_config_t *cfg, fw_owned_collection_fn fn, void *ud);

/* "<dlq_collection>_sequences", the sequenced DLQ's collection. Owned by
 * the caller (bson_free); NULL when out of memory. */
char *fw_dlq_sequences_name (const char *dlq_collection);

#endif
