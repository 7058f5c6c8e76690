/*
 * state_rebuild.h - a dispatcher's Lua state that stays full (issue 25):
 * after a handler call it is still over 90% of memory_limit once the
 * collector ran, so the script is loaded afresh (fw_dispatcher_set_loader)
 * and the program switched as a reload would, fw.state kept. Included by
 * dispatcher-private.h (its field) and used by event_dispatch.c.
 */
#ifndef FLOWWARDEN_STATE_REBUILD_H
#define FLOWWARDEN_STATE_REBUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/dispatch/dispatcher.h"

/* A dispatcher's part (d->rebuild). */
typedef struct {
   fw_dispatcher_loader_t load; /* NULL: never rebuilt */
   void *ud;
   int index;           /* the stream's index in the script */
   bool pending;        /* the state is full: rebuilt before the next attempt */
   bool refilled;       /* ... again, too soon: the stream stops (d->out.failure) */
   bool rebuilt;        /* the state running is a rebuilt one */
   uint64_t rebuilt_at; /* dispatch.generation of the first event it ran */
   size_t held;         /* bytes the full state held after a full collection */
} fw_state_rebuild_t;

/* What the rebuild reads and changes of its dispatcher (dispatcher_access.c):
 * its part, the failure that stops the stream (a printf format), a failed
 * attempt's type counted in the metrics and the attempt shown to
 * flowwarden test's recorder, if any. */
fw_state_rebuild_t *fw_dispatcher_rebuild (fw_dispatcher_t *d);
void fw_dispatcher_set_failure (fw_dispatcher_t *d, const char *fmt, ...) BSON_GNUC_PRINTF (2, 3);
void fw_dispatcher_count_handler_error (fw_dispatcher_t *d, const char *type);
bool fw_dispatcher_recording (const fw_dispatcher_t *d);
void fw_dispatcher_attempt_failed (fw_dispatcher_t *d, int attempt, const char *type,
                                   const char *message, const char *traceback, const char *action);

/* After a handler call: whether the state holds more than 90% of its
 * memory_limit (one comparison; false without a loader or a limit;
 * dispatcher_access.c). fw_state_past_mark (dispatcher-private.h) is the
 * same on a figure read. */
bool fw_state_over_mark (const fw_dispatcher_t *d);

typedef enum {
   FW_STATE_OK,   /* go on as usual (a rebuild may be pending for the next attempt) */
   FW_STATE_RETRY /* the call failed in a full state: its failure table is taken off the
                    * stack (its type in the metrics: a MemoryError; the caller counts the
                    * failed attempt in its outcome); the next attempt runs on a rebuilt
                    * state */
} fw_state_check_t;

/* Called when fw_state_over_mark: lets go of the event's converted values
 * (ctx's cache, but ctx:add_metadata's), collects, and when the state is
 * still over the mark, marks it for rebuilding, or as refilled too soon.
 * ok: whether the call returned (if not, its failure table is on top). */
fw_state_check_t fw_state_check (fw_dispatcher_t *d, bool ok, int attempt);

/* Before an attempt, with d->rebuild.pending: loads the script afresh and
 * switches d's program to it. False when the stream must stop instead
 * (refilled too soon, or the script cannot be loaded as it was): d->out.failure
 * says why. */
bool fw_state_rebuild (fw_dispatcher_t *d);

#endif
