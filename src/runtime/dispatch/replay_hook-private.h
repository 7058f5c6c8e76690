/*
 * replay_hook-private.h - a dead letter replayed through the dispatcher (replay/,
 * flowwarden.testing's replays) and what the dispatcher keeps of it.
 */
#ifndef FLOWWARDEN_REPLAY_HOOK_PRIVATE_H
#define FLOWWARDEN_REPLAY_HOOK_PRIVATE_H

#include <stdbool.h>

#include <lua.h>

#include "runtime/dispatch/dispatcher.h"

/* A dead letter's replay, the client that runs it through the dispatcher
 * (fw_dispatch_run_t's replay): the final failure ends the event as
 * FW_OUTCOME_GAVE_UP (the replay decides what becomes of its entry) instead
 * of becoming a new DLQ entry; it is never parked, never runs in an
 * exactly_once transaction, and goes to no outcome sink (its client hands
 * the outcome on when it counts as the stream's, fw_dispatcher_report). */
typedef struct fw_replay_hook {
   bool no_retry;    /* --no-retry: one attempt */
   bool retry_asked; /* filled: the last failure's decision was retry */
   /* Called before every retry attempt (extends the entry's claim). */
   void (*before_retry) (struct fw_replay_hook *hook);
   void *ud;
   /* The last failed attempt's error as on_error saw it (registry ref), for
    * the enqueue policy's err (fw_replay_hook_keep_error). */
   bool has_error_ref;
   int error_ref;
} fw_replay_hook_t;

/* dispatcher.c: while a dead letter is replayed, remembers the error table
 * at index of L (on_error's err: type, message, where, fields, traceback)
 * in hook for the enqueue policy, or forgets the one remembered (index 0:
 * the attempt ended without a Lua error, e.g. ctx:send_to_dlq). No-op when
 * hook is NULL (a change event). */
void fw_replay_hook_keep_error (fw_replay_hook_t *hook, lua_State *L, int index);

/* Drops what fw_replay_hook_keep_error remembered; the replay calls it once
 * the entry's outcome is decided. */
void fw_replay_hook_forget_error (fw_dispatcher_t *d, fw_replay_hook_t *hook);

/* dlq_replay.c: runs dlq.enqueue_policy for a replay that failed for good
 * (o, FW_OUTCOME_GAVE_UP, and hook's error table; ctx:dead_letter()'s
 * letter in d->dispatch). True: evict;
 * false: requeue, the diagnostics to merge in diagnostics (initialised by
 * the caller; emptied when the policy fails or they have no BSON form). */
bool fw_dlq_replay_policy (fw_dispatcher_t *d, const fw_replay_hook_t *hook, const fw_outcome_t *o,
                           bson_t *diagnostics);

#endif
