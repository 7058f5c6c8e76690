/*
 * test_app-private.h - what test_app.c (the app: load, deliver, replay) and
 * test_bridge.c (the script states' side: fakes, clock, env) share.
 */
#ifndef FLOWWARDEN_TEST_APP_PRIVATE_H
#define FLOWWARDEN_TEST_APP_PRIVATE_H

#include <lua.h>

#include "ops/metrics.h"
#include "runtime/dispatch/dispatcher_access-private.h"
#include "runtime/dlq/dlq_store.h"
#include "runtime/host/connections.h"

/* What one deliver or replay saw, owned by a userdata of the spec's state
 * (so nothing leaks when pushing the result raises). */
typedef struct {
   int64_t *delays; /* ms, in order */
   size_t n_delays, cap_delays;
   char **errors; /* per failed attempt: "attempt\ttype\tmessage\taction\ttraceback" */
   size_t n_errors, cap_errors;
   char **logs; /* "level\tstream\tmessage" */
   size_t n_logs, cap_logs;
   int last_attempt;
} fw_test_capture_t;

typedef struct fw_test_app {
   char *script;
   fw_dispatcher_t **disp; /* one per stream, each its own Lua state */
   fw_shutdown_t shutdown; /* never asked: the dispatchers' waits are the virtual clock's */
   bool has_shutdown;      /* shutdown is initialised */
   int n;
   fw_dlq_store_t *store; /* every stream's DLQ: one in-memory store */
   fw_metrics_t *metrics;
   fw_connections_t *conns; /* opts.mongo_uri: a real server for fw.mongo, else NULL */
   int64_t now_ms;          /* the virtual clock */
   int64_t capture_from_ms; /* now_ms when the deliver or replay running began */
   fw_dispatch_hooks_t hooks;
   fw_test_capture_t *capture; /* the deliver or replay running, else NULL */
   lua_State *bridge;          /* a thread of the spec's state, for the fakes */
   int bridge_ref;             /* registry ref of that thread (spec's state) */
   int dispatch_ref;           /* registry ref of opts.bridge (spec's state) */
   lua_State *spec;            /* the spec's main state, owner of the refs */
   int env_ref;                /* registry ref of opts.env (spec's state), or LUA_NOREF */
   char *uri;                  /* opts.uri as load was given it (malloc), or NULL */
   bool jitter;                /* opts.jitter: retry jitter stays on */
} fw_test_app_t;

/* Registry key (its address) of the app in each script state. */
extern const char fw_test_app_key;

/* Makes the state of host ready for the script: the app's clock for fw.date,
 * fw.mongo on the fake (unless the app has a real server), fw.http on the
 * stubs, fw.env on the spec's env table (at env_idx of the spec's state L,
 * or 0). Returns false with error filled. */
bool fw_test_bridge_install (fw_test_app_t *app, lua_State *L, int env_idx, fw_lua_host_t *host,
                             fw_error_t *error);

/* fwt.events_from(path): see test_app.h. */
int fw_test_events_from (lua_State *L);

/* Appends one record to the capture: false when out of memory. */
bool fw_test_capture_add (char ***list, size_t *n, size_t *cap, char *line);

/* What a delivery or replay saw, owned by a userdata on the Lua stack (so a
 * raise frees it): the records and the BSON documents behind the result. */
typedef struct {
   fw_test_capture_t c;
   bson_t *entry;  /* the DLQ entry the delivery wrote */
   bson_t *event;  /* the event delivered */
   bson_t *letter; /* a replay's dead letter */
   bson_t *diagnostics;
} fw_test_capture_ud_t;

/* --- test_app.c's helpers for test_app_replay.c ------------------------------- */

/* The app at idx; raises when it is not a loaded app. */
fw_test_app_t *fw_test__check_app (lua_State *L, int idx);

/* Pushes a new, empty capture userdata (freed by the collector). */
fw_test_capture_ud_t *fw_test__push_capture (lua_State *L);

/* The dispatcher of stream name; raises "<call>: unknown stream ..." naming the
 * script's streams otherwise. */
fw_dispatcher_t *fw_test__find_worker (lua_State *L, fw_test_app_t *app, const char *call,
                                       const char *name);

/* Routes logs and the dispatcher's records into u until end_capture. */
void fw_test__begin_capture (fw_test_app_t *app, fw_test_capture_ud_t *u);
void fw_test__end_capture (fw_test_app_t *app);

/* The event table at idx as BSON into *out (owned by the capture); raises
 * naming call on a non-table or an unconvertible value. */
void fw_test__event_arg (lua_State *L, int idx, const char *call, bson_t **out);

/* Sets delays, errors and logs of the result table at t from c. */
void fw_test__push_capture_fields (lua_State *L, int t, const fw_test_capture_t *c);

/* --- test_app.c: core functions flowwarden.testing calls ----------------------- */

int fw_test__load (lua_State *L);    /* core.load(script, opts) -> app */
int fw_test__streams (lua_State *L); /* core.streams(app) -> names */
int fw_test__deliver (lua_State *L); /* core.deliver(app, stream, event) */
int fw_test__deliver_batch (
   lua_State *L);                    /* core.deliver_batch(app, stream, events): test_app_batch.c */
int fw_test__now (lua_State *L);     /* core.now(app) -> ms */
int fw_test__advance (lua_State *L); /* core.advance(app, ms) -> ms */
int fw_test__metrics_text (lua_State *L); /* core.metrics_text(app) */

/* --- test_check.c ------------------------------------------------------------ */

/* core.check_document(value, root) -> nil | "<where> <problem>" */
int fw_test__check_document (lua_State *L);

/* Registers the app's and the capture's metatables (their __gc). */
void fw_test__open_metatables (lua_State *L);

/* --- test_app_replay.c: core functions flowwarden.testing calls ---------------- */

int fw_test__replay_one (lua_State *L);  /* core.replay_one(app, stream, event, letter, no_retry) */
int fw_test__dlq_entries (lua_State *L); /* core.dlq_entries(app[, stream]) */
int fw_test__dlq_put (lua_State *L);     /* core.dlq_put(app, entry) */
int fw_test__seq_read (lua_State *L);    /* core.seq_read(app, stream, id) */
int fw_test__seq_close (lua_State *L);   /* core.seq_close(app, stream, id) */
int fw_test__dlq_sequences (lua_State *L); /* core.dlq_sequences(app, stream) */

#endif
