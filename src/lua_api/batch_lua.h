/*
 * batch_lua.h - the `batch` object on_batch receives (issue 30): #batch,
 * batch:events() (i, ctx in stream order), batch:get(i) and
 * batch:fail(i, err). Each item is the usual ctx over its own
 * fw_dispatch_t. The object is valid for its call only: used later it
 * raises "batch used after its call returned".
 */
#ifndef FLOWWARDEN_BATCH_LUA_H
#define FLOWWARDEN_BATCH_LUA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "lua_api/event_ctx.h"

/* One call's batch, owned by the caller (the dispatcher), which keeps it
 * valid for the call. */
typedef struct {
   fw_dispatch_t **items; /* borrowed: each event's ctx state, in stream order */
   size_t n;
   bool *marked;        /* borrowed, n entries: set by batch:fail(i) */
   int errors_ref;      /* registry ref of { [i] = err } batch:fail kept, or LUA_NOREF */
   uint64_t generation; /* bumped by fw_batch_lua_end: older objects refuse use */
} fw_batch_view_t;

/* Registers the batch metatable in L. Call once per state, protected. */
void fw_batch_lua_open (lua_State *L);

/* Pushes a batch object over view (an fw_batch_view_t *) and returns 1; a
 * push function for fw_lua_host_call_with. May raise (memory). */
int fw_batch_lua_push (lua_State *L, void *view);

/* Pushes the error batch:fail(i, err) gave item i (1-based), or nil. */
void fw_batch_lua_push_error (lua_State *L, const fw_batch_view_t *view, size_t i);

/* The call is over: objects pushed for view refuse use from now on, and
 * what batch:fail kept is let go. Cannot raise. */
void fw_batch_lua_end (lua_State *L, fw_batch_view_t *view);

#endif
