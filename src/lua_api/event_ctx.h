/*
 * event_ctx.h - the `ctx` object handlers receive.
 *
 * A ctx is a small userdata pointing at the stream's current dispatch. Values
 * are converted from BSON only when a handler asks for them, then cached for
 * the rest of the event (across retry attempts too). A ctx kept past its
 * event raises "ctx used after its event was handled" instead of showing
 * another event's data.
 */
#ifndef FLOWWARDEN_EVENT_CTX_H
#define FLOWWARDEN_EVENT_CTX_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

#include "bson/event.h"

#define FW_DLQ_REASON_MAX 1024

/* What the stream is doing right now; owned by the stream worker. */
typedef struct {
   const char *stream_name;
   const fw_event_t *event;
   int attempt; /* 1-based */
   bool dlq_enabled;
   bool dlq_requested; /* set by ctx:send_to_dlq */
   char dlq_reason[FW_DLQ_REASON_MAX];
   uint64_t generation;  /* bumped per event; stale ctx detection */
   int cache_ref;        /* registry ref of the per-event cache, or LUA_NOREF */
   uint32_t cache_slots; /* bit i: slot i of the cache holds a value of the current event */
   /* During a replay, the dead letter ctx:dead_letter() shows (Axon's
    * nullable DeadLetter parameter): { id, cause = { type, message },
    * diagnostics, enqueued_at, last_touched, reprocess_attempts } as BSON,
    * borrowed from the replay for the event's dispatch. NULL for live
    * events, and then ctx:dead_letter() returns nil. */
   const bson_t *dead_letter;
} fw_dispatch_t;

/* Registers the ctx metatable in L. Call once per state, protected. */
void fw_event_ctx_open (lua_State *L);

/* Starts a new event on d: bumps the generation and drops the old cache. */
void fw_event_ctx_begin (lua_State *L, fw_dispatch_t *d, const fw_event_t *ev);

/* Lets go of the values converted for the current event (they are
 * converted again when asked), but ctx:add_metadata's table, so the
 * collector can take them back. Allocates nothing: cannot raise. */
void fw_event_ctx_drop_values (lua_State *L, fw_dispatch_t *d);

/* Pushes the event's whole id (the resume token's _data, any length) and
 * returns true; pushes nothing and returns false when it has none or it
 * cannot be read. May raise (memory). */
bool fw_event_push_id (lua_State *L, const fw_event_t *ev);

/* Pushes a ctx for the current event of dispatch (an fw_dispatch_t *) and
 * returns 1. May raise (memory): call it protected, e.g. as the push
 * function of fw_lua_host_call_with. */
int fw_event_ctx_push (lua_State *L, void *dispatch);

/* Pushes the metadata table handlers filled with ctx:add_metadata (or nil). */
void fw_event_ctx_push_metadata (lua_State *L, fw_dispatch_t *d);

/* Pushes the table ctx:dead_letter() returns for d's current event (the same
 * table, converted once per event), or nil for a live event. May raise
 * (memory, or a letter that is not valid BSON). */
void fw_event_ctx_push_dead_letter (lua_State *L, fw_dispatch_t *d);

#endif
