/*
 * event_txn.h - exactly_once (issue 39): a handler attempt's transaction
 * (event_txn.c), used by event_dispatch.c only.
 */
#ifndef FLOWWARDEN_EVENT_TXN_H
#define FLOWWARDEN_EVENT_TXN_H

#include <stdbool.h>

#include <lua.h>

#include "flowwarden/dispatcher.h"
#include "flowwarden/mongo_lua.h"

typedef enum {
   FW_TXN_COMMITTED,
   FW_TXN_FAILED, /* a failure table is on top of L's stack */
   FW_TXN_FENCED, /* a newer leader holds the checkpoint: nothing committed */
} fw_txn_end_t;

/* Whether d's attempts on change events run in transactions (exactly_once;
 * a replay's never do: fw_dispatch_run_t). */
bool fw_txn_wanted (const fw_dispatcher_t *d);

/* Starts the attempt's transaction (on d's kept session, started and
 * recorded first when there is none) and joins fw.mongo to them
 * through *join (the caller's, alive until fw_txn_end). False with a failure
 * table pushed when it cannot. */
bool fw_txn_begin (fw_dispatcher_t *d, lua_State *L, fw_mongo_txn_t *join);

/* Writes the position past ev in the transaction and commits it; the
 * transaction is over whatever happens (the session is kept). */
fw_txn_end_t fw_txn_commit (fw_dispatcher_t *d, lua_State *L, const fw_event_t *ev);

/* Aborts the transaction (if any); the session is kept for the next one. */
void fw_txn_end (fw_dispatcher_t *d);

/* Ends d's kept session (before its client goes). */
void fw_txn_release (fw_dispatcher_t *d);

#endif
