/*
 * batch-private.h - a dispatcher's on_batch state (batch_state.c), what
 * the per-event path (event_dispatch.c), the dispatcher (dispatcher.c) and
 * the batch path (batch.c) share of it.
 */
#ifndef FLOWWARDEN_BATCH_PRIVATE_H
#define FLOWWARDEN_BATCH_PRIVATE_H

#include "lua_api/batch_lua.h"
#include "runtime/dispatch/batch_run.h"
#include "runtime/dispatch/dispatcher-private.h"

/* A dispatcher's on_batch state (d->batch): the items of its calls and the
 * batch in hand (batch.c). */
typedef struct fw_batch_state {
   fw_batch_view_t view;  /* the batch object's view: lives as long as d */
   fw_dispatch_t **items; /* cap ctx states, each its own allocation */
   size_t cap;
   fw_dispatch_t *one; /* fw_batch_call_one's single item: d->dispatch */
   bool one_marked;
   fw_dispatcher_t *d;
   const fw_event_t *const *evs; /* the batch in hand */
   size_t n;
   fw_outcome_kind_t *outcomes; /* the caller's, or NULL */
   fw_outcome_t result;         /* why the batch ended early; HANDLED: it did not */
   char last_error[512];        /* the last failed call's error, for the log */
   fw_batch_stats_t stats;      /* batch_run's counts over d's life (splits go to the metrics) */
   struct {
      int failed;  /* the batch in hand's calls that failed, and the retries it */
      int retries; /* waited out: to the stream's summary as the batch ends */
   } calls;
} fw_batch_state_t;

/* d's batch state with room for n events; NULL when out of memory. Items
 * are never moved: a stale ctx may still point at one. */
fw_batch_state_t *fw_batch_state_for (fw_dispatcher_t *d, size_t n);

/* The handler ref is on_batch: calls it (at the top of L's stack) with a
 * batch of one over d->dispatch, with the stream's timeout. True when it
 * returned without batch:fail(1, ...); otherwise false with the failure
 * table {value, traceback} on top of the stack (batch:fail's error as the
 * value), as fw_lua_host_call leaves it. */
bool fw_batch_call_one (fw_dispatcher_t *d, fw_lua_stop_t *stop);

/* The program changed (a reload, a rebuilt state): the items' cache tables
 * lived in the old Lua state. NULL: no-op. */
void fw_batch_state_forget (struct fw_batch_state *s);

/* Frees d's batch state (NULL: none). */
void fw_batch_state_free (struct fw_batch_state *s);

#endif
