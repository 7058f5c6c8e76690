/*
 * lua_call.h - what the functions scripts call (fw.mongo, fw.http, ...) know
 * about the call running in their state, and how they raise typed errors.
 *
 * The Lua host (a layer above) owns one fw_lua_call_t per state and attaches
 * it with fw_lua_call_attach; it sets in_call while a handler or on_error
 * runs and deadline_ns while that call has a time budget. IO functions ask
 * fw_lua_call_budget_ms how long they may take, so that a slow server costs
 * the handler a typed timeout error rather than the whole budget.
 */
#ifndef FLOWWARDEN_LUA_CALL_H
#define FLOWWARDEN_LUA_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

typedef struct {
   int in_call;         /* a handler or on_error runs now (IO allowed) */
   int64_t deadline_ns; /* CLOCK_MONOTONIC end of its budget; 0 = none (atomic) */
} fw_lua_call_t;

/* Stores call (borrowed: it must outlive the state) in L's registry. */
void fw_lua_call_attach (lua_State *L, fw_lua_call_t *call);

/* The call attached to L, or NULL. Never raises. */
fw_lua_call_t *fw_lua_call_get (lua_State *L);

/*
 * For an IO function named what ("fw.mongo", "fw.http"): raises
 * "<what> is available inside handlers only" when no handler runs in L.
 * Otherwise returns the milliseconds left of the handler's budget (at least
 * 1 while any is left), 0 when it is spent, or -1 when the call has no
 * deadline.
 */
int64_t fw_lua_call_budget_ms (lua_State *L, const char *what);

/*
 * How long before the handler's deadline an IO function with budget_ms left
 * (> 0) must give up its own wait: 10 ms, or a quarter of a smaller budget.
 * The watchdog arms the handler's timeout hook up to 5 ms after the
 * deadline; ending IO earlier lets the IO function raise its typed timeout
 * (Mongo.Timeout, Http.Timeout) before that hook can replace it.
 */
int64_t fw_lua_call_io_margin_ms (int64_t budget_ms);

/*
 * Raises a typed flowwarden error (the same object fw.error builds, so
 * retry_on, no_retry_on and on_error see it like any other): type is a dotted
 * name ("Mongo.Timeout"), the message is printf-style, and fields_idx is the
 * stack index of a table of extra fields (0 for none). The error's `where` is
 * the script line that called the C function. Never returns. No memory the
 * caller malloc'd may be live: this longjmps.
 */
int fw_lua_raise_typed (lua_State *L, const char *type, int fields_idx, const char *fmt, ...)
   __attribute__ ((format (printf, 4, 5)));

#endif
