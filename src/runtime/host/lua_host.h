/*
 * lua_host.h - one sandboxed Lua state running an operator's script.
 *
 * A host owns a lua_State built with a counting allocator (so a per-state
 * memory limit can be enforced) and the flowwarden library preloaded: the
 * embedded Lua modules under lua/ and the C module "flowwarden.core". Loading
 * a script runs it and asks the Lua side (flowwarden.config) to validate the
 * declarations; the validated stream specs stay in the state's registry.
 *
 * A host is used by one thread at a time; it may be handed to another thread.
 */
#ifndef FLOWWARDEN_LUA_HOST_H
#define FLOWWARDEN_LUA_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "flowwarden/error.h"

typedef struct fw_lua_host fw_lua_host_t;

/* Why the host interrupted the last call, if it did. */
typedef enum { FW_LUA_STOP_NONE = 0, FW_LUA_STOP_TIMEOUT, FW_LUA_STOP_MEMORY } fw_lua_stop_t;

/* Creates a state with the flowwarden library. Returns NULL and fills error
 * on failure. The caller owns the host: fw_lua_host_destroy. */
fw_lua_host_t *fw_lua_host_new (fw_error_t *error);

/* Closes the state. NULL is a no-op. */
void fw_lua_host_destroy (fw_lua_host_t *host);

/* The state; valid until fw_lua_host_destroy. */
lua_State *fw_lua_host_state (fw_lua_host_t *host);

/* Sets the memory ceiling in bytes (0 = none). Allocations beyond it fail,
 * which Lua reports as "not enough memory"; the host records
 * FW_LUA_STOP_MEMORY so the error can be typed MemoryError. */
void fw_lua_host_set_memory_limit (fw_lua_host_t *host, size_t bytes);

/* Bytes currently allocated by the state. */
size_t fw_lua_host_memory_used (const fw_lua_host_t *host);

/* Runs the script at path (modules beside it can be require'd), then
 * validates its declarations. option_uri (--uri or FLOWWARDEN_URI, may be
 * NULL) wins over the script's fw.defaults { uri = ... }; the default
 * database comes from the effective URI's path. On failure error->message
 * holds every problem, one per line, each starting with SCRIPT:LINE. */
bool fw_lua_host_load_script (fw_lua_host_t *host, const char *path, const char *option_uri,
                              fw_error_t *error);

/* The loaded script's version: 12 hex digits of a hash over the script and
 * every module it required from disk. Valid for the host's life. */
const char *fw_lua_host_version (const fw_lua_host_t *host);

/* Number of streams the loaded script declared. */
int fw_lua_host_stream_count (fw_lua_host_t *host);

/* Pushes the validated spec table of stream i (0-based) onto the stack. */
void fw_lua_host_push_spec (fw_lua_host_t *host, int i);

/* Pushes the array of every stream's validated spec (the table, not a copy:
 * do not change it). */
void fw_lua_host_push_specs (fw_lua_host_t *host);

/* Pushes the effective URI (option, script or default) as a string. */
void fw_lua_host_push_uri (fw_lua_host_t *host);

/* Pushes the array of declared connections ({ name =, uri = } tables, see
 * flowwarden.config), empty when none. */
void fw_lua_host_push_connections (fw_lua_host_t *host);

/* Pushes the admin endpoint's settings from fw.defaults { admin = ... }: a
 * table { listen = string | nil, token = string | nil } (empty when the
 * script sets none). */
void fw_lua_host_push_admin (fw_lua_host_t *host);

/* Returns the text `flowwarden check` prints for the loaded script (streams
 * with effective settings, then warnings), and the number of warnings in
 * *warnings (may be NULL). Caller frees with free(). */
char *fw_lua_host_describe (fw_lua_host_t *host, int *warnings, fw_error_t *error);

/*
 * Calls the function below nargs arguments on the stack, protected, with a
 * wall-clock budget (timeout_ms, 0 = none) enforced by an instruction-count
 * hook. On success leaves nresults results and returns true. On failure
 * leaves ONE value, a table {value = <what was raised>, traceback = <text>},
 * sets *stop to why the host interrupted the call (or FW_LUA_STOP_NONE), and
 * returns false.
 */
bool fw_lua_host_call (fw_lua_host_t *host, int nargs, int nresults, int64_t timeout_ms,
                       fw_lua_stop_t *stop);

/* Pushes the arguments of a call and returns how many. May raise only by
 * failing to allocate, and allocates less than FW_LUA_PUSH_MAX_BYTES. */
typedef int (*fw_lua_push_fn) (lua_State *L, void *ud);
#define FW_LUA_PUSH_MAX_BYTES 4096

/*
 * As fw_lua_host_call, with more arguments after the nargs on the stack:
 * push (L, ud) adds them, inside a protected call when the state is within
 * FW_LUA_PUSH_MAX_BYTES of its memory limit (further below, it cannot
 * fail). If push raises, the function is not called and the failure is
 * reported as the call's own ({value, traceback}; *stop is
 * FW_LUA_STOP_MEMORY for an allocation failure).
 */
bool fw_lua_host_call_with (fw_lua_host_t *host, int nargs, fw_lua_push_fn push, void *ud,
                            int nresults, int64_t timeout_ms, fw_lua_stop_t *stop);

/*
 * Runs fn (ud) with a recovery point for a Lua panic (an error raised
 * outside every protected call: a bug, never a script's doing) in any state
 * the calling thread runs. Without one, Lua logs and aborts the process;
 * here the panic is logged, the state's host is marked panicked and false
 * returned at once (what fn's frames held is left behind), so the caller
 * can stop what used the state. Otherwise returns what fn returned. A
 * panicked host must not run Lua again; fw_lua_host_destroy still frees it.
 */
bool fw_lua_host_guard (bool (*fn) (void *ud), void *ud);

/* True once a panic hit the host's state. */
bool fw_lua_host_panicked (const fw_lua_host_t *host);

/* When the last fw_lua_host_call with a timeout began (CLOCK_MONOTONIC, as
 * fw_mono_ns), 0 when it had none: the clock read its deadline
 * needed, so a caller can time the call with one more read. */
int64_t fw_lua_host_call_started_ns (const fw_lua_host_t *host);

/* fw_lua_host_call_with, then *started_ns = fw_lua_host_call_started_ns (host):
 * a handler's call and its start in one. */
bool fw_lua_host_call_timed (fw_lua_host_t *host, int nargs, fw_lua_push_fn push, void *ud,
                             int nresults, int64_t timeout_ms, fw_lua_stop_t *stop,
                             int64_t *started_ns);

#endif
