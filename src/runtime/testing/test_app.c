/*
 * test_app.c - flowwarden.testing's C core (test_app.h): loads a script the
 * way run does, one worker per stream with no MongoDB client, and drives
 * events through the real dispatcher on a virtual clock, recording what
 * happened. Dead-letter replays are in test_app_replay.c, the module table
 * in test_app_open.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/log.h"
#include "lua_api/metrics_lua.h"
#include "lua_api/state_store.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/host/lua_host.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/stream/event_settle.h"
#include "runtime/testing/test_app-private.h"
#include "runtime/testing/test_app.h"

#define APP_MT "flowwarden.testing.app"
#define CAPTURE_MT "flowwarden.testing.capture"

/* How much virtual time one delivery may wait (issue 29's breaker). */
#define FW_TEST_MAX_WAIT_MS (7LL * 24 * 3600 * 1000)

/* 2024-01-01T00:00:00Z: where the virtual clock starts unless opts.now_ms. */
#define FW_TEST_EPOCH_MS 1704067200000LL

/* --- what a delivery saw ---------------------------------------------------- */

static void
free_list (char **list, size_t n)
{
   for (size_t i = 0; i < n; i++) {
      free (list[i]);
   }
   free (list);
}

static int
capture_gc (lua_State *L)
{
   fw_test_capture_ud_t *u = luaL_checkudata (L, 1, CAPTURE_MT);
   free (u->c.delays);
   free_list (u->c.errors, u->c.n_errors);
   free_list (u->c.logs, u->c.n_logs);
   bson_destroy (u->entry);
   bson_destroy (u->event);
   bson_destroy (u->letter);
   bson_destroy (u->diagnostics);
   memset (u, 0, sizeof *u);
   return 0;
}

fw_test_capture_ud_t *
fw_test__push_capture (lua_State *L)
{
   fw_test_capture_ud_t *u = lua_newuserdatauv (L, sizeof *u, 0);
   memset (u, 0, sizeof *u);
   luaL_setmetatable (L, CAPTURE_MT);
   return u;
}

bool
fw_test_capture_add (char ***list, size_t *n, size_t *cap, char *line)
{
   if (!line) {
      return false;
   }
   if (*n == *cap) {
      size_t grown_cap = *cap ? *cap * 2 : 8;
      char **grown = realloc (*list, grown_cap * sizeof *grown);
      if (!grown) {
         free (line);
         return false;
      }
      *list = grown;
      *cap = grown_cap;
   }
   (*list)[(*n)++] = line;
   return true;
}

static char *
joined (const char *const *parts, int n)
{
   size_t len = 1;
   char *out, *p;
   for (int i = 0; i < n; i++) {
      len += strlen (parts[i] ? parts[i] : "") + 1;
   }
   if (!(out = malloc (len))) {
      return NULL;
   }
   p = out;
   for (int i = 0; i < n; i++) {
      size_t k = strlen (parts[i] ? parts[i] : "");
      memcpy (p, parts[i] ? parts[i] : "", k);
      p += k;
      *p++ = i + 1 < n ? '\t' : '\0';
   }
   if (n == 0) {
      *p = '\0';
   }
   return out;
}

/* --- the hooks the dispatcher calls ------------------------------------------- */

static int64_t
hook_now_ms (void *ud)
{
   return ((fw_test_app_t *) ud)->now_ms;
}

static int64_t
state_clock (void *ud)
{
   return ((fw_test_app_t *) ud)->now_ms;
}

/* A retry's backoff: the virtual clock moves, nothing sleeps. */
static bool
hook_wait_ms (void *ud, int64_t ms)
{
   fw_test_app_t *app = ud;
   fw_test_capture_t *c = app->capture;

   app->now_ms += ms;
   /* A circuit breaker whose dependency never comes back would hold the
    * event for ever: a delivery ends ("stopped") after a virtual week. */
   if (c && app->now_ms - app->capture_from_ms > FW_TEST_MAX_WAIT_MS) {
      return true;
   }
   if (c) {
      if (c->n_delays == c->cap_delays) {
         size_t cap = c->cap_delays ? c->cap_delays * 2 : 8;
         int64_t *grown = realloc (c->delays, cap * sizeof *grown);
         if (!grown) {
            return false;
         }
         c->delays = grown;
         c->cap_delays = cap;
      }
      c->delays[c->n_delays++] = ms;
   }
   return false;
}

static void
hook_attempt_failed (void *ud, int attempt, const char *type, const char *message,
                     const char *traceback, const char *action)
{
   fw_test_app_t *app = ud;
   fw_test_capture_t *c = app->capture;
   char n[16];
   const char *parts[5];

   if (!c) {
      return;
   }
   snprintf (n, sizeof n, "%d", attempt);
   parts[0] = n;
   parts[1] = type;
   parts[2] = message;
   parts[3] = action;
   parts[4] = traceback;
   fw_test_capture_add (&c->errors, &c->n_errors, &c->cap_errors, joined (parts, 5));
}

static void
log_sink (void *ud, fw_log_level_t level, const char *stream, const char *message)
{
   static const char *const names[] = {"debug", "info", "warn", "error"};
   fw_test_app_t *app = ud;
   fw_test_capture_t *c = app->capture;
   const char *parts[3];

   if (!c) {
      return;
   }
   parts[0] = (unsigned) level < 4 ? names[level] : "info";
   parts[1] = stream ? stream : "";
   parts[2] = message;
   fw_test_capture_add (&c->logs, &c->n_logs, &c->cap_logs, joined (parts, 3));
}

/* --- the app ------------------------------------------------------------------ */

fw_test_app_t *
fw_test__check_app (lua_State *L, int idx)
{
   fw_test_app_t *app = luaL_checkudata (L, idx, APP_MT);
   if (!app->disp) {
      luaL_error (L, "flowwarden.testing: this app was not loaded (or is closed)");
   }
   return app;
}

static void
app_free (lua_State *L, fw_test_app_t *app)
{
   for (int i = 0; i < app->n; i++) {
      fw_dispatcher_destroy (app->disp[i]);
   }
   free (app->disp);
   app->disp = NULL;
   if (app->has_shutdown) {
      fw_shutdown_cleanup (&app->shutdown);
      app->has_shutdown = false;
   }
   app->n = 0;
   fw_dlq_store_destroy (app->store);
   app->store = NULL;
   fw_metrics_destroy (app->metrics);
   app->metrics = NULL;
   fw_connections_destroy (app->conns);
   app->conns = NULL;
   free (app->script);
   app->script = NULL;
   free (app->uri);
   app->uri = NULL;
   luaL_unref (L, LUA_REGISTRYINDEX, app->bridge_ref);
   luaL_unref (L, LUA_REGISTRYINDEX, app->dispatch_ref);
   luaL_unref (L, LUA_REGISTRYINDEX, app->env_ref);
   app->bridge_ref = app->dispatch_ref = app->env_ref = LUA_NOREF;
   app->bridge = NULL;
}

static int
app_gc (lua_State *L)
{
   app_free (L, luaL_checkudata (L, 1, APP_MT));
   return 0;
}

fw_dispatcher_t *
fw_test__find_worker (lua_State *L, fw_test_app_t *app, const char *call, const char *name)
{
   luaL_Buffer b;

   for (int i = 0; i < app->n; i++) {
      if (strcmp (fw_dispatcher_config (app->disp[i])->name, name) == 0) {
         return app->disp[i];
      }
   }
   luaL_buffinit (L, &b);
   for (int i = 0; i < app->n; i++) {
      luaL_addstring (&b, i ? ", \"" : "\"");
      luaL_addstring (&b, fw_dispatcher_config (app->disp[i])->name);
      luaL_addstring (&b, "\"");
   }
   luaL_pushresult (&b);
   luaL_error (L, "%s: unknown stream \"%s\" (%s declares %s)", call, name, app->script,
               lua_tostring (L, -1));
   return NULL;
}

/* A new host with the script loaded as run loads it (metrics to the app's
 * registry, the fakes in place), or NULL with error filled. */
static fw_lua_host_t *
load_host (fw_test_app_t *app, lua_State *L, int env_idx, const char *uri, fw_error_t *error)
{
   fw_lua_host_t *host = fw_lua_host_new (error);
   if (!host) {
      return NULL;
   }
   fw_metrics_lua_attach (fw_lua_host_state (host), app->metrics);
   if (!fw_test_bridge_install (app, L, env_idx, host, error) ||
       !fw_lua_host_load_script (host, app->script, uri, error)) {
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host;
}

/* Protected: retry.jitter off in every spec of the state (opts.jitter). */
static int
pno_jitter (lua_State *L)
{
   int specs = lua_gettop (L);
   for (lua_Integer i = 1; i <= (lua_Integer) lua_rawlen (L, specs); i++) {
      if (lua_rawgeti (L, specs, i) == LUA_TTABLE && lua_getfield (L, -1, "retry") == LUA_TTABLE) {
         lua_pushboolean (L, 0);
         lua_setfield (L, -2, "jitter");
      }
      lua_settop (L, specs);
   }
   return 0;
}

/* A dispatcher's loader when its Lua state is full (state_rebuild.c): the
 * script loaded as load did (opts.env pushed on the bridge thread, a thread
 * of the spec's state that runs nothing meanwhile), jitter as the app has it. */
static fw_lua_host_t *
rebuild_load (void *ud, fw_error_t *error)
{
   fw_test_app_t *app = ud;
   lua_State *S = app->bridge;
   int top = lua_gettop (S), env_idx = 0;
   fw_lua_host_t *host;

   if (!lua_checkstack (S, LUA_MINSTACK)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory loading %s", app->script);
      return NULL;
   }
   if (app->env_ref != LUA_NOREF) {
      lua_rawgeti (S, LUA_REGISTRYINDEX, app->env_ref);
      env_idx = lua_gettop (S);
   }
   host = load_host (app, S, env_idx, app->uri, error);
   lua_settop (S, top);
   if (host && !app->jitter) {
      lua_State *L = fw_lua_host_state (host);
      lua_pushcfunction (L, pno_jitter);
      fw_lua_host_push_specs (host);
      if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory loading %s", app->script);
         fw_lua_host_destroy (host);
         return NULL;
      }
   }
   return host;
}

static bool
opt_bool (lua_State *L, int t, const char *key)
{
   bool v;
   lua_getfield (L, t, key);
   v = lua_toboolean (L, -1);
   lua_pop (L, 1);
   return v;
}

/* What core.load's opts say beyond what goes into the app itself. The
 * strings stay on the Lua stack for the whole call. */
typedef struct {
   bool jitter;
   lua_Integer seed;
   const char *uri, *mongo_uri;
   int env_idx; /* opts.env's stack index, or 0 */
} load_opts_t;

/* Reads the opts table at 2: the virtual clock's start and the bridge go into
 * app, the rest into o (values pushed on the stack to keep them alive). */
static void
read_load_opts (lua_State *L, fw_test_app_t *app, load_opts_t *o)
{
   memset (o, 0, sizeof *o);
   o->seed = 1;
   o->jitter = opt_bool (L, 2, "jitter");
   if (lua_getfield (L, 2, "seed") != LUA_TNIL) {
      o->seed = luaL_checkinteger (L, -1);
   }
   app->now_ms = FW_TEST_EPOCH_MS;
   if (lua_getfield (L, 2, "now_ms") != LUA_TNIL) {
      app->now_ms = luaL_checkinteger (L, -1);
   }
   if (lua_getfield (L, 2, "mongo_uri") == LUA_TSTRING) {
      o->mongo_uri = lua_tostring (L, -1);
   }
   /* The run URI, as --uri: the scripts' default database comes from its
    * path. Without opts.mongo it is never connected to. */
   if (lua_getfield (L, 2, "uri") == LUA_TSTRING) {
      o->uri = lua_tostring (L, -1);
   } else {
      o->uri = o->mongo_uri;
   }
   if (lua_getfield (L, 2, "env") == LUA_TTABLE) {
      o->env_idx = lua_gettop (L);
   }
   lua_getfield (L, 2, "bridge");
   luaL_checktype (L, -1, LUA_TFUNCTION);
   app->dispatch_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   app->bridge = lua_newthread (L);
   app->bridge_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   lua_rawgeti (L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
   app->spec = lua_tothread (L, -1);
   lua_pop (L, 1);
}

/* Gives app its script path, DLQ store, metrics, fw.mongo connection (with
 * opts.mongo_uri), what a rebuild loads with (opts.env, uri, jitter) and the
 * dispatcher's hooks; raises when it cannot. */
static void
init_app (lua_State *L, fw_test_app_t *app, const char *path, const load_opts_t *o)
{
   const char *mongo_uri = o->mongo_uri;
   fw_error_t err;

   if (fw_shutdown_init (&app->shutdown) != 0) {
      luaL_error (L, "flowwarden.testing: cannot set up %s's shutdown flag", path);
   }
   app->has_shutdown = true;
   app->script = strdup (path);
   app->jitter = o->jitter;
   if (o->env_idx) {
      lua_pushvalue (L, o->env_idx);
      app->env_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   }
   if (o->uri && !(app->uri = strdup (o->uri))) {
      luaL_error (L, "flowwarden.testing: out of memory loading %s", path);
   }
   app->store = fw_dlq_store_memory_new (&err);
   app->metrics = fw_metrics_new ();
   if (!app->script || !app->store || !app->metrics) {
      luaL_error (L, "flowwarden.testing: out of memory loading %s", path);
   }
   if (mongo_uri) {
      if (!(app->conns = fw_connections_new ()) ||
          !fw_connections_set (app->conns, "default", mongo_uri, &err)) {
         luaL_error (L, "fwt.load: opts.mongo: %s", app->conns ? err.message : "out of memory");
      }
   }
   app->hooks.attempt_failed = hook_attempt_failed;
   app->hooks.ud = app;
}

/* As run: the script once to validate it (its message is check's), then
 * once more per stream, each in a fresh state, each made a worker the app
 * owns; raises with the load's message when one fails. */
static void
build_app_dispatchers (lua_State *L, fw_test_app_t *app, const load_opts_t *o, const char *path)
{
   fw_lua_host_t *first;
   fw_error_t err;
   int n;

   if (!(first = load_host (app, L, o->env_idx, o->uri, &err))) {
      fw_metrics_rollback (app->metrics);
      lua_pushstring (L, err.message);
      lua_error (L);
   }
   if (app->conns && !fw_connections_set_declared (app->conns, first, &err)) {
      fw_lua_host_destroy (first);
      lua_pushstring (L, err.message);
      lua_error (L);
   }
   app->n = 0;
   n = fw_lua_host_stream_count (first);
   if (n == 0 || !(app->disp = calloc ((size_t) n, sizeof *app->disp))) {
      fw_lua_host_destroy (first);
      luaL_error (L, "%s declares no stream (use fw.stream { ... })", path);
   }
   for (int i = 0; i < n; i++) {
      fw_lua_host_t *host = i == 0 ? first : load_host (app, L, o->env_idx, o->uri, &err);
      fw_dispatcher_t *d = host ? fw_dispatcher_new (host, i, app->conns, &app->shutdown, &err)
                                : NULL;
      if (!d) {
         fw_metrics_rollback (app->metrics);
         lua_pushstring (L, err.message);
         lua_error (L);
      }
      app->disp[app->n++] = d;
   }
}

/* An event's outcome: its log line and counts, as the stream's settle makes
 * them (ud: the dispatcher's metrics block). */
static void
settled (void *ud, const char *stream, const fw_event_t *ev, const fw_outcome_t *o)
{
   fw_event_settle (ud, NULL, stream, ev, o);
}

/* Puts the app's dispatchers on its metrics, clock, hooks and in-memory DLQ. */
static void
wire_app_dispatchers (fw_test_app_t *app, const load_opts_t *o)
{
   fw_metrics_commit (app->metrics);
   for (int i = 0; i < app->n; i++) {
      fw_dispatcher_t *d = app->disp[i];
      fw_dispatcher_set_metrics (d,
                                 fw_metrics_stream (app->metrics, fw_dispatcher_config (d)->name));
      fw_dispatcher_set_outcome_sink (
         d, settled, fw_dispatcher_metrics (d)); /* logged and counted as run does */
      fw_dispatcher_set_hooks (d, &app->hooks);
      fw_dispatcher_set_clock (d, &(fw_stream_clock_t){hook_now_ms, hook_wait_ms, app, true});
      /* a sequenced DLQ's sequences live beside the entries */
      fw_dispatcher_set_dlq_store (d, app->store);
      /* Jitter off under test unless asked, and then from a fixed seed. */
      fw_dispatcher_set_seed (d, (uint64_t) o->seed + (uint64_t) i, o->jitter);
      fw_state_store_set_clock (fw_dispatcher_state (d), state_clock, app);
      fw_dispatcher_set_loader (d, rebuild_load, app);
   }
}

/* core.load(path, opts) */
int
fw_test__load (lua_State *L)
{
   const char *path = luaL_checkstring (L, 1);
   fw_test_app_t *app;
   load_opts_t o;
   int app_idx;

   luaL_checktype (L, 2, LUA_TTABLE);
   lua_settop (L, 2);
   app = lua_newuserdatauv (L, sizeof *app, 0);
   memset (app, 0, sizeof *app);
   app->bridge_ref = app->dispatch_ref = app->env_ref = LUA_NOREF;
   luaL_setmetatable (L, APP_MT);
   app_idx = lua_gettop (L);

   read_load_opts (L, app, &o);
   init_app (L, app, path, &o);
   build_app_dispatchers (L, app, &o, path);
   wire_app_dispatchers (app, &o);
   lua_pushvalue (L, app_idx);
   return 1;
}

int
fw_test__streams (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   lua_createtable (L, app->n, 0);
   for (int i = 0; i < app->n; i++) {
      const fw_stream_config_t *cfg = fw_dispatcher_config (app->disp[i]);
      lua_createtable (L, 0, 3);
      lua_pushstring (L, cfg->name);
      lua_setfield (L, -2, "name");
      lua_pushstring (L, cfg->database);
      lua_setfield (L, -2, "database");
      lua_pushstring (L, cfg->collection); /* NULL: the whole database (nil) */
      lua_setfield (L, -2, "collection");
      lua_rawseti (L, -2, i + 1);
   }
   return 1;
}

/* Pushes one tab-separated record as a table with the given field names;
 * an "attempt" field becomes an integer. */
static void
push_record (lua_State *L, const char *line, const char *const *names, int n)
{
   const char *p = line;
   lua_createtable (L, 0, n);
   for (int i = 0; i < n; i++) {
      const char *tab = i + 1 < n ? strchr (p, '\t') : NULL;
      size_t len = tab ? (size_t) (tab - p) : strlen (p);
      if (strcmp (names[i], "attempt") == 0) {
         lua_pushinteger (L, strtol (p, NULL, 10));
      } else {
         lua_pushlstring (L, p, len);
      }
      lua_setfield (L, -2, names[i]);
      if (!tab) {
         break;
      }
      p = tab + 1;
   }
}

/* Fills the fields every result has: attempts, delays, errors, logs. */
void
fw_test__push_capture_fields (lua_State *L, int t, const fw_test_capture_t *c)
{
   static const char *const error_names[] = {"attempt", "type", "message", "action", "traceback"};
   static const char *const log_names[] = {"level", "stream", "message"};

   lua_createtable (L, (int) c->n_delays, 0);
   for (size_t i = 0; i < c->n_delays; i++) {
      lua_pushnumber (L, (lua_Number) c->delays[i] / 1000.0);
      lua_rawseti (L, -2, (lua_Integer) i + 1);
   }
   lua_setfield (L, t, "delays");
   lua_createtable (L, (int) c->n_errors, 0);
   for (size_t i = 0; i < c->n_errors; i++) {
      push_record (L, c->errors[i], error_names, 5);
      lua_rawseti (L, -2, (lua_Integer) i + 1);
   }
   lua_setfield (L, t, "errors");
   lua_createtable (L, (int) c->n_logs, 0);
   for (size_t i = 0; i < c->n_logs; i++) {
      push_record (L, c->logs[i], log_names, 3);
      lua_rawseti (L, -2, (lua_Integer) i + 1);
   }
   lua_setfield (L, t, "logs");
}

/* Converts the table at idx (an event built by fwt.insert ...) into *out,
 * owned by the capture. */
void
fw_test__event_arg (lua_State *L, int idx, const char *call, bson_t **out)
{
   fw_error_t err;

   if (!lua_istable (L, idx)) {
      luaL_error (L,
                  "%s: event must be a table (build one with fwt.insert, fwt.update, fwt.replace "
                  "or fwt.delete), got %s",
                  call, luaL_typename (L, idx));
   }
   if (!(*out = bson_new ())) {
      luaL_error (L, "not enough memory");
   }
   if (!fw_bson_lua_to_bson (L, idx, "event", *out, &err)) {
      luaL_error (L, "%s: %s", call, err.message);
   }
}

void
fw_test__begin_capture (fw_test_app_t *app, fw_test_capture_ud_t *u)
{
   bson_t junk;
   app->capture = &u->c;
   app->capture_from_ms = app->now_ms;
   fw_log_set_sink (log_sink, app);
   fw_dlq_store_memory_take_last (app->store, &junk);
   bson_destroy (&junk);
}

void
fw_test__end_capture (fw_test_app_t *app)
{
   fw_log_set_sink (NULL, NULL);
   app->capture = NULL;
}

/* The status of the in-memory DLQ's entry id (a copy into out, which the
 * caller initialises and owns), or NULL when it is gone. */
static const char *
entry_status (fw_dispatcher_t *d, const char *id, bson_t *out)
{
   bson_t found_doc;
   bson_iter_t it;
   fw_error_t err;
   fw_dlq_store_t *dlq = fw_dispatcher_dlq_store (d);
   bool found = false;

   if (!dlq->find_by_id (dlq, id, &found_doc, &found, &err) || !found) {
      bson_destroy (&found_doc);
      return NULL;
   }
   bson_reinit (out);
   bson_concat (out, &found_doc);
   bson_destroy (&found_doc);
   return bson_iter_init_find (&it, out, "status") && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

/* retry.mode = "deferred": the event waits in the in-memory DLQ as a
 * scheduled retry, as under run. The delivery runs the stream's due retries
 * (fw_deferred_tick, as the stream's thread does between events) on the
 * virtual clock, each wait one of r.delays, until the entry is resolved or
 * dead-lettered (PENDING, in *entry: the caller's, initialised). r becomes
 * what became of the event: HANDLED or SKIPPED (resolved), DEAD_LETTERED,
 * or still DEFERRED when a virtual week passed first. */
static void
run_deferred (fw_test_app_t *app, fw_dispatcher_t *d, fw_outcome_t *r, bson_t *entry)
{
   char id[128];
   const char *status;
   bson_iter_t it;

   snprintf (id, sizeof id, "%s", r->entry_id);
   while ((status = entry_status (d, id, entry)) && strcmp (status, "SCHEDULED") == 0) {
      int64_t due = bson_iter_init_find (&it, entry, "nextAttemptAt") &&
                          BSON_ITER_HOLDS_DATE_TIME (&it)
                       ? bson_iter_date_time (&it)
                       : app->now_ms;
      if (due > app->now_ms && hook_wait_ms (app, due - app->now_ms)) {
         return; /* a virtual week passed */
      }
      fw_dispatcher_set_deferred_check_at (d, 0); /* the stream looks now */
      fw_deferred_tick (d);
   }
   if (status && strcmp (status, "RESOLVED") == 0) {
      const char *how = bson_iter_init_find (&it, entry, "resolution") && BSON_ITER_HOLDS_UTF8 (&it)
                           ? bson_iter_utf8 (&it, NULL)
                           : "";
      r->kind = strcmp (how, "SKIPPED") == 0 ? FW_OUTCOME_SKIPPED : FW_OUTCOME_HANDLED;
   } else if (status && strcmp (status, "PENDING") == 0) {
      r->kind = FW_OUTCOME_DEAD_LETTERED;
   }
}

/* Runs the event through w's dispatcher (the unreadable path when it did not
 * parse, why saying how) with what it does recorded in u. A deferred retry
 * runs to its end (run_deferred); *final gets its entry as it ended. */
static fw_outcome_t
dispatch_captured (fw_test_app_t *app, fw_dispatcher_t *d, fw_test_capture_ud_t *u, fw_event_t *ev,
                   bool parsed, const char *why, bson_t *final)
{
   fw_outcome_t r;

   fw_dispatcher_view (d)->attempt = 0;
   fw_test__begin_capture (app, u);
   r = parsed ? fw_event_dispatch (d, ev) : fw_event_dispatch_unreadable (d, ev, why);
   if (r.kind == FW_OUTCOME_DEFERRED) {
      run_deferred (app, d, &r, final);
   }
   if (r.kind == FW_OUTCOME_FAILED) {
      /* As run logs it; the next deliver goes on (run's restart would). */
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name, "STREAM STOPPED: %s",
              fw_dispatcher_failure (d));
   }
   fw_test__end_capture (app);
   return r;
}

/* Moves the DLQ entry the delivery wrote, if any, into u->entry. */
static void
take_dlq_entry (lua_State *L, fw_test_app_t *app, fw_test_capture_ud_t *u)
{
   /* The store initialises what it fills, so it gets a stack document:
    * bson_init on a bson_new'd one would orphan the struct. */
   bson_t last;

   if (fw_dlq_store_memory_take_last (app->store, &last) && !(u->entry = bson_copy (&last))) {
      bson_destroy (&last);
      luaL_error (L, "deliver: not enough memory");
   }
   bson_destroy (&last);
}

/* What became of the delivered event, by its outcome; *ran: a handler
 * attempt counts (it starts as whether the event parsed). */
static const char *
deliver_outcome (const fw_outcome_t *r, const fw_test_capture_ud_t *u, bool *ran)
{
   switch (r->kind) {
   case FW_OUTCOME_NO_DLQ:
   case FW_OUTCOME_FAILED:
      /* run would stop the stream before the event: an unreadable event and
       * no DLQ, or a sequenced DLQ's overflow (fw_dispatcher_failure (d) says which): in
       * opening a sequence after failed attempts, or in parking before any. */
      *ran = *ran && u->c.n_errors > 0;
      return "stopped";
   case FW_OUTCOME_PARKED:
      *ran = false;
      return "parked"; /* behind an open sequence */
   case FW_OUTCOME_NO_HANDLER:
      *ran = false;
      return "no_handler"; /* the script has no handler for this operation type */
   case FW_OUTCOME_HANDLED:
   case FW_OUTCOME_SKIPPED:
   case FW_OUTCOME_DEAD_LETTERED:
   case FW_OUTCOME_LOST:
   case FW_OUTCOME_DEFERRED: /* still scheduled after a virtual week */
      return fw_outcome_name (r->kind);
   default:
      return "stopped"; /* a stop came first, or held behind the breaker */
   }
}

/* Pushes deliver's result table: outcome, attempts, event_id, the capture's
 * records, failure and dlq_entry. */
static void
push_delivery (lua_State *L, fw_dispatcher_t *d, const fw_outcome_t *r, const char *outcome,
               bool ran, const fw_event_t *ev, const fw_test_capture_ud_t *u)
{
   fw_error_t err;
   int t;

   lua_createtable (L, 0, 8);
   t = lua_gettop (L);
   lua_pushstring (L, outcome);
   lua_setfield (L, t, "outcome");
   /* Attempts made: none when no handler ran (no handler, unreadable, or
    * parked behind its sequence). */
   lua_pushinteger (L, ran ? fw_dispatcher_view (d)->attempt : 0);
   lua_setfield (L, t, "attempts");
   /* The whole id, however long the token. */
   if (!fw_event_push_id (L, ev)) {
      lua_pushliteral (L, "");
   }
   lua_setfield (L, t, "event_id");
   fw_test__push_capture_fields (L, t, &u->c);
   if (r->kind == FW_OUTCOME_FAILED) {
      lua_pushstring (L, r->error);
      lua_setfield (L, t, "failure");
   }
   if (u->entry) {
      if (!fw_bson_lua_push_document (L, u->entry, "dlq_entry", &err)) {
         luaL_error (L, "deliver: %s", err.message);
      }
      lua_setfield (L, t, "dlq_entry");
   }
}

/* core.deliver(app, stream, event) */
int
fw_test__deliver (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_dispatcher_t *d = fw_test__find_worker (L, app, "deliver", luaL_checkstring (L, 2));
   fw_test_capture_ud_t *u;
   fw_outcome_t r;
   fw_event_t ev;
   fw_error_t err;
   const char *outcome;
   bool parsed, ran; /* ran: a handler attempt was made */

   u = fw_test__push_capture (L);
   fw_test__event_arg (L, 3, "deliver", &u->event);
   memset (&ev, 0, sizeof ev);
   parsed = fw_event_parse (u->event, &ev, &err);
   if (!parsed && !fw_event_has (&ev, FW_EV_ID)) {
      return luaL_error (L, "deliver: the event is not a change event: %s", err.message);
   }
   bson_t final = BSON_INITIALIZER;
   r = dispatch_captured (app, d, u, &ev, parsed, err.message, &final);
   take_dlq_entry (L, app, u);
   if (!bson_empty (&final)) {
      /* a deferred retry's entry, as its last attempt left it: the dead
       * letter (or the retry still scheduled); none once resolved */
      bson_destroy (u->entry);
      u->entry = NULL;
      if ((r.kind == FW_OUTCOME_DEAD_LETTERED || r.kind == FW_OUTCOME_DEFERRED) &&
          !(u->entry = bson_copy (&final))) {
         bson_destroy (&final);
         return luaL_error (L, "deliver: not enough memory");
      }
   }
   bson_destroy (&final);
   ran = parsed;
   outcome = deliver_outcome (&r, u, &ran);
   push_delivery (L, d, &r, outcome, ran, &ev, u);
   return 1;
}

/* --- the clock, the metrics ----------------------------------------------------- */

int
fw_test__now (lua_State *L)
{
   lua_pushinteger (L, fw_test__check_app (L, 1)->now_ms);
   return 1;
}

int
fw_test__advance (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   lua_Integer ms = luaL_checkinteger (L, 2);
   luaL_argcheck (L, ms >= 0, 2, "the clock only moves forward");
   app->now_ms += ms;
   lua_pushinteger (L, app->now_ms);
   return 1;
}

int
fw_test__metrics_text (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_test_capture_ud_t *u = fw_test__push_capture (L); /* owns the text while it is pushed */
   size_t len;
   char *text = fw_metrics_render (app->metrics, &len);

   if (!fw_test_capture_add (&u->c.logs, &u->c.n_logs, &u->c.cap_logs, text)) {
      return luaL_error (L, "metrics: out of memory");
   }
   lua_pushlstring (L, text, len);
   return 1;
}

void
fw_test__open_metatables (lua_State *L)
{
   luaL_newmetatable (L, APP_MT);
   lua_pushcfunction (L, app_gc);
   lua_setfield (L, -2, "__gc");
   luaL_newmetatable (L, CAPTURE_MT);
   lua_pushcfunction (L, capture_gc);
   lua_setfield (L, -2, "__gc");
   lua_pop (L, 2);
}
