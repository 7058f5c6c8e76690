/*
 * txn_sessions.h - exactly_once (issue 39): the "<checkpoint id>#sessions"
 * document in _fw_checkpoints, the server sessions a stream runs its
 * transactions on, recorded before their first use so that the next holder
 * of the checkpoint (a restart, or a new leader under ha) can kill them and
 * with them the transaction a killed process left open.
 */
#ifndef FLOWWARDEN_TXN_SESSIONS_H
#define FLOWWARDEN_TXN_SESSIONS_H

#include <stdbool.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "flowwarden/error.h"

/* Adds lsid's id (lsid: the session's {id: UUID}, borrowed) to the record
 * of checkpoint id in database. False with error set. */
bool fw_txn_sessions_record (mongoc_client_t *client, const char *database, const char *id,
                             const bson_t *lsid, fw_error_t *error);

/* Kills every session recorded for checkpoint id with killSessions (their
 * open transactions are aborted at once) and removes them from the record.
 * *killed: how many. False with error set (the record is left as it was). */
bool fw_txn_sessions_kill (mongoc_client_t *client, const char *database, const char *id,
                           int *killed, fw_error_t *error);

/* On the stream's own deployment (client): adds sink, the name of the
 * connection whose deployment the stream's transactions now run on
 * (exactly_once = { connection = sink }), to the record's "sinks", so that
 * a later start with another setting (true, another sink) knows where
 * sessions may be left to kill. False with error set. */
bool fw_txn_sessions_note_sink (mongoc_client_t *client, const char *database, const char *id,
                                const char *sink, fw_error_t *error);

/* For each sink noted in the record of checkpoint id on client: done(ud,
 * sink) (true: its sessions are ended, the name leaves the record). False
 * with error set when the record cannot be read or changed. */
bool fw_txn_sessions_each_sink (mongoc_client_t *client, const char *database, const char *id,
                                bool (*done) (void *ud, const char *sink), void *ud,
                                fw_error_t *error);

/* Takes lsid's id (lsid borrowed) off the record of checkpoint id: a
 * session whose transactions are all over (a replay's, after its entry).
 * False with error set. */
bool fw_txn_sessions_forget (mongoc_client_t *client, const char *database, const char *id,
                             const bson_t *lsid, fw_error_t *error);

/* The record id of `flowwarden dlq replay`'s sessions for the stream named
 * by stream's first n bytes (a unit "<stream>#k/N": its "<stream>"):
 * "<stream>#replay", whose document is "<stream>#replay#sessions". Kept
 * apart from the stream's own record: a replay starting while the stream
 * runs must not kill the stream's session.
 * False when out is too short. */
bool fw_txn_sessions_replay_id (char *out, size_t len, const char *stream, size_t n);

#endif
