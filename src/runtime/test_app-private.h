/*
 * test_app-private.h - what test_app.c (the app: load, deliver, replay) and
 * test_bridge.c (the script states' side: fakes, clock, env) share.
 */
#ifndef FLOWWARDEN_TEST_APP_PRIVATE_H
#define FLOWWARDEN_TEST_APP_PRIVATE_H

#include <lua.h>

#include "flowwarden/connections.h"
#include "flowwarden/dlq_store.h"
#include "flowwarden/metrics.h"
#include "stream_worker-private.h"

/* What one deliver or replay saw, owned by a userdata of the spec's state
 * (so nothing leaks when pushing the result raises). */
typedef struct {
   int64_t *delays; /* ms, in order */
   size_t n_delays, cap_delays;
   char **errors;   /* per failed attempt: "attempt\ttype\tmessage\taction\ttraceback" */
   size_t n_errors, cap_errors;
   char **logs;     /* "level\tstream\tmessage" */
   size_t n_logs, cap_logs;
   int last_attempt;
} fw_test_capture_t;

typedef struct fw_test_app {
   char *script;
   fw_stream_worker_t **workers;
   int n;
   fw_dlq_store_t *store;      /* every stream's DLQ: one in-memory store */
   fw_metrics_t *metrics;
   fw_connections_t *conns;    /* opts.mongo_uri: a real server for fw.mongo, else NULL */
   int64_t now_ms;             /* the virtual clock */
   fw_dispatch_hooks_t hooks;
   fw_test_capture_t *capture; /* the deliver or replay running, else NULL */
   lua_State *bridge;          /* a thread of the spec's state, for the fakes */
   int bridge_ref;             /* registry ref of that thread (spec's state) */
   int dispatch_ref;           /* registry ref of opts.bridge (spec's state) */
   lua_State *spec;            /* the spec's main state, owner of the refs */
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

#endif
