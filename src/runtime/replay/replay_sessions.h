/*
 * replay_sessions.h - exactly_once (issue 39) for `flowwarden dlq replay`:
 * the server sessions its transactions run on, recorded before their first
 * use (txn_sessions.h, record "<stream>#replay"), so that the next start of
 * a replay or of the stream kills the transaction of a replay killed inside
 * it, instead of leaving the documents it wrote locked until the server's
 * transactionLifetimeLimitSeconds.
 */
#ifndef FLOWWARDEN_REPLAY_SESSIONS_H
#define FLOWWARDEN_REPLAY_SESSIONS_H

#include <stdbool.h>

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "runtime/dispatch/dispatcher.h"

typedef struct {
   fw_dispatcher_t *d;      /* borrowed */
   mongoc_client_t *client; /* the transactions' client the session is recorded on, borrowed */
   bson_t *lsid;            /* the recorded session's lsid while there is one, owned */
   char id[512];            /* the record's id; "" when the stream has no MongoDB transactions */
} fw_replay_sessions_t;

/* For a dispatcher that only replays (no stream runs on it): when its
 * stream has exactly_once on a MongoDB deployment, kills the sessions an
 * earlier replay recorded (their open transactions are aborted; logged) and
 * has d record each session it starts. A failed kill is logged and the
 * replay goes on (it may then meet WriteConflict until the server aborts
 * the transaction). rs (the caller's) must outlive d's use of it. */
void fw_replay_sessions_start (fw_replay_sessions_t *rs, fw_dispatcher_t *d);

/* After an entry's replay: ends d's session and takes it off the record, so
 * the record holds only the session of an entry being replayed. On d's
 * thread. Safe on a zeroed rs. */
void fw_replay_sessions_end (fw_replay_sessions_t *rs);

#endif
