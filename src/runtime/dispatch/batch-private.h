/*
 * batch-private.h - what the per-event path (event_dispatch.c) and the
 * dispatcher (dispatcher.c) call of batch.c.
 */
#ifndef FLOWWARDEN_BATCH_PRIVATE_H
#define FLOWWARDEN_BATCH_PRIVATE_H

#include "runtime/dispatch/dispatcher-private.h"

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
