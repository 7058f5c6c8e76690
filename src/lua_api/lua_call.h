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
   int io_timeout;      /* an IO wait bounded by the deadline ran out in this call
                         * (fw_lua_call_io_timed_out); the host clears it */
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
 * For an IO function whose wait, bounded by the handler's deadline (budget
 * less the IO margin), has just run out: marks the call so that the typed
 * timeout it raises next with fw_lua_raise_typed (Http.Timeout,
 * Mongo.Timeout) stays the call's outcome when the deadline's hook fires
 * meanwhile. Without it, which of the two errors a hung server gives would
 * depend on the machine's load (issue 25). Never raises.
 */
void fw_lua_call_io_timed_out (lua_State *L);

/*
 * Pushes the error raised after fw_lua_call_io_timed_out in the current
 * call and returns true; false, pushing nothing, while there is none (not
 * marked, or the error is still being built). Never raises.
 */
bool fw_lua_call_push_io_timeout (lua_State *L);

/* Forgets the mark and the error of fw_lua_call_io_timed_out (the host,
 * around each call). Never raises. */
void fw_lua_call_clear_io_timeout (lua_State *L);

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

/*
 * Runs fn(ud) protected (fn receives ud as a light userdata at index 1) and
 * leaves L's stack as it was. True when it returned; false with why set to
 * its error's message (a typed error's `message`, or the error string). For
 * a connection probe (doctor) that must not raise into its caller.
 */
/*
 * The userdata of `size` bytes named `name` in the table at
 * registry[key] (both made when missing: the userdata zeroed, with
 * metatable `mt`). Pushes that table and the userdata (2 values); the
 * userdata is owned by L. For a Lua state's connections by name (fw.pg,
 * fw.redis). Raises on out of memory.
 */
void *fw_lua_named_userdata (lua_State *L, const void *key, const char *name, size_t size,
                             const char *mt);

bool fw_lua_call_protected (lua_State *L, lua_CFunction fn, void *ud, char *why, size_t len);

#endif
