/*
 * group_start.h - ha.mode = "shared": where a stream starts in its group.
 *
 * A unit that no member has opened yet (no checkpoint of its own) would
 * start at its own open, after whatever was written between the group's
 * start and that open (another member's units already running, this one's
 * not yet taken). Its group records one start per stream instead, in
 * <database>._fw_checkpoints:
 *
 *   { _id: "<stream>#start", startAt: Timestamp, startedAt: <date>,
 *     by: "host:pid:uuid", aliveUntil: <date> }
 *
 * written by the first member to start the stream (a conditional upsert:
 * the others read what it wrote) and kept alive by every member running
 * the stream's units (aliveUntil = the server's $$NOW + lease, pushed by
 * each member's members thread). Once no member has kept it alive for a
 * lease, the group is over and the next start records a new one. Each unit
 * without a checkpoint opens with startAtOperationTime = startAt.
 */
#ifndef FLOWWARDEN_GROUP_START_H
#define FLOWWARDEN_GROUP_START_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"

/* The record's _id for stream (the script's stream: a partitioned stream's
 * base name) into out[len]; false when it does not fit. */
bool fw_group_start_id (const char *stream, size_t stream_len, char *out, size_t len);

/* What fw_group_start_take found or recorded. */
typedef struct {
   uint64_t at;        /* startAt: (t << 32) | i */
   int64_t started_ms; /* startedAt (wall clock of the server) */
   bool began;         /* this call recorded it: this member started the group */
} fw_group_start_t;

/* Reads the record id in database (client: the caller's, borrowed) and,
 * when there is none or it was not kept alive, records a new start: the
 * operationTime of that read (the oplog's newest entry then: every write
 * after the record is later). Also keeps it alive for lease_ms. False
 * (error set) on a server error or a reply without operationTime (a
 * standalone server). */
bool fw_group_start_take (mongoc_client_t *client, const char *database, const char *id,
                          int64_t lease_ms, fw_group_start_t *out, fw_error_t *error);

/* Keeps the records ids[0..n) alive for lease_ms, each only while it holds
 * the start ats[j] this member took (a record a later group replaced is
 * left alone; one that lapsed while this member ran is kept again: the
 * group never stopped). One update command; records that do not exist stay
 * missing. The members thread, every lease / 3. */
bool fw_group_start_renew (mongoc_client_t *client, const char *database, const char *const *ids,
                           const uint64_t *ats, int n, int64_t lease_ms, bson_error_t *berr);

#endif
