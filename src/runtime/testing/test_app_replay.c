/*
 * test_app_replay.c - flowwarden.testing's dead-letter side (test_app.h):
 * replaying one letter through the real dispatcher, the in-memory DLQ a spec
 * reads and fills, and a sequenced DLQ's sequences for replay_dlq.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/replay_hook-private.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/testing/test_app-private.h"
#include "runtime/testing/test_app.h"

/* --- replaying a dead letter --------------------------------------------------- */

/* What replay_dlq reports of a replayed dead letter's outcome. */
static const char *
replay_result_name (fw_outcome_kind_t kind)
{
   switch (kind) {
   case FW_OUTCOME_HANDLED:
      return "ok";
   case FW_OUTCOME_SKIPPED:
      return "skipped";
   case FW_OUTCOME_NO_HANDLER:
      return "no_handler";
   case FW_OUTCOME_STOPPED:
   case FW_OUTCOME_HELD:
      return "stopped";
   case FW_OUTCOME_GAVE_UP:
      return "failed";
   default:
      return "no_handler"; /* as before: a dispatcher that cannot go on ran nothing */
   }
}

/* core.replay_one(app, stream, event, letter, no_retry) */
int
fw_test__replay_one (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_dispatcher_t *d = fw_test__find_worker (L, app, "replay_dlq", luaL_checkstring (L, 2));
   fw_replay_hook_t hook = {0};
   bool evict = false;
   fw_test_capture_ud_t *u;
   fw_outcome_t r;
   fw_event_t ev;
   fw_error_t err;
   int t;

   u = fw_test__push_capture (L);
   fw_test__event_arg (L, 3, "replay_dlq", &u->event);
   luaL_checktype (L, 4, LUA_TTABLE);
   if (!(u->letter = bson_new ()) || !(u->diagnostics = bson_new ())) {
      return luaL_error (L, "not enough memory");
   }
   if (!fw_bson_lua_to_bson (L, 4, "letter", u->letter, &err)) {
      return luaL_error (L, "replay_dlq: %s", err.message);
   }
   if (!fw_event_parse (u->event, &ev, &err)) {
      lua_createtable (L, 0, 2);
      lua_pushliteral (L, "invalid");
      lua_setfield (L, -2, "result");
      lua_pushstring (L, err.message);
      lua_setfield (L, -2, "why");
      return 1;
   }
   hook.no_retry = lua_toboolean (L, 5);
   fw_dispatch_run_t run = {0, &hook};
   fw_dispatcher_view (d)->dead_letter = u->letter;
   fw_test__begin_capture (app, u);
   r = fw_event_dispatch_run (d, &ev, &run);
   if (r.kind == FW_OUTCOME_GAVE_UP) {
      evict = fw_dlq_replay_policy (d, &hook, &r, u->diagnostics);
   }
   fw_replay_hook_forget_error (d, &hook);
   fw_test__end_capture (app);
   fw_dispatcher_view (d)->dead_letter = NULL;

   lua_createtable (L, 0, 8);
   t = lua_gettop (L);
   lua_pushstring (L, replay_result_name (r.kind));
   lua_setfield (L, t, "result");
   lua_pushinteger (L, r.attempts);
   lua_setfield (L, t, "attempts");
   if (r.kind == FW_OUTCOME_GAVE_UP) {
      lua_createtable (L, 0, 2);
      lua_pushstring (L, r.error_type);
      lua_setfield (L, -2, "type");
      lua_pushstring (L, r.error);
      lua_setfield (L, -2, "message");
      lua_setfield (L, t, "error");
      lua_pushboolean (L, evict);
      lua_setfield (L, t, "evict");
      if (!fw_bson_lua_push_document (L, u->diagnostics, "diagnostics", &err)) {
         return luaL_error (L, "replay_dlq: %s", err.message);
      }
      lua_setfield (L, t, "diagnostics");
   }
   fw_test__push_capture_fields (L, t, &u->c);
   return 1;
}

/* --- the in-memory DLQ ------------------------------------------------------------ */

/* What the in-memory store read into *all (ok: it did) as a Lua array; the
 * copy lives in u (the capture on the stack) so a raise frees it. what
 * names the call in messages. */
static int
push_read_array (lua_State *L, fw_test_capture_ud_t *u, bson_t *all, bool ok, const char *what)
{
   fw_error_t err;

   ok = ok && (u->entry = bson_copy (all)) != NULL;
   bson_destroy (all);
   if (!ok) {
      return luaL_error (L, "%s: cannot read the in-memory DLQ", what);
   }
   if (!fw_bson_lua_push_array (L, u->entry, what, &err)) {
      return luaL_error (L, "%s: %s", what, err.message);
   }
   return 1;
}

int
fw_test__dlq_entries (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   const char *stream = luaL_optstring (L, 2, NULL);
   fw_test_capture_ud_t *u = fw_test__push_capture (L);
   bson_t all; /* initialised by the store (see core_deliver) */
   fw_error_t err;
   bool ok = app->store->find_by_stream (app->store, stream, &all, &err);

   return push_read_array (L, u, &all, ok, "dlq");
}

int
fw_test__dlq_put (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_test_capture_ud_t *u = fw_test__push_capture (L);
   fw_error_t err;
   bool inserted;

   luaL_checktype (L, 2, LUA_TTABLE);
   if (!(u->entry = bson_new ()) || !fw_bson_lua_to_bson (L, 2, "entry", u->entry, &err) ||
       !app->store->put (app->store, u->entry, &inserted, &err)) {
      return luaL_error (L, "dlq: %s", u->entry ? err.message : "not enough memory");
   }
   return 0;
}

/* --- a sequenced DLQ's sequences, for replay_dlq ------------------------------ */

/* core.seq_read(app, stream, id) -> { exists, open, next, inflight } */
int
fw_test__seq_read (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   const char *stream = luaL_checkstring (L, 2);
   const char *id = luaL_checkstring (L, 3);
   fw_seq_state_t st;
   fw_error_t err;

   if (!app->store->seq_read (app->store, stream, id, &st, &err)) {
      return luaL_error (L, "replay_dlq: %s", err.message);
   }
   lua_createtable (L, 0, 4);
   lua_pushboolean (L, st.exists);
   lua_setfield (L, -2, "exists");
   lua_pushboolean (L, st.open);
   lua_setfield (L, -2, "open");
   lua_pushinteger (L, (lua_Integer) st.next);
   lua_setfield (L, -2, "next");
   lua_pushinteger (L, (lua_Integer) st.inflight);
   lua_setfield (L, -2, "inflight");
   return 1;
}

/* core.seq_close(app, stream, id, expected_next) -> closed: the replay's
 * conditional close (dlq_sequence.h); a closed sequence leaves the stream's
 * open sequences at once, as a replay inside run does. */
int
fw_test__seq_close (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_dispatcher_t *d = fw_test__find_worker (L, app, "replay_dlq", luaL_checkstring (L, 2));
   const char *id = luaL_checkstring (L, 3);
   lua_Integer next = luaL_checkinteger (L, 4);
   fw_error_t err;
   bool closed;

   if (!app->store->seq_close (app->store, fw_dispatcher_config (d)->name, id, (int64_t) next,
                               &closed, &err)) {
      return luaL_error (L, "replay_dlq: %s", err.message);
   }
   if (closed) {
      fw_dispatcher_sequence_closed (d, id);
   }
   lua_pushboolean (L, closed);
   return 1;
}

/* core.dlq_sequences(app [, stream]) -> the sequence documents */
int
fw_test__dlq_sequences (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   const char *stream = luaL_optstring (L, 2, NULL);
   fw_test_capture_ud_t *u = fw_test__push_capture (L);
   bson_t all; /* initialised by the store (see core_deliver) */
   bool ok = fw_dlq_store_memory_sequences (app->store, stream, &all);

   return push_read_array (L, u, &all, ok, "dlq_sequences");
}
