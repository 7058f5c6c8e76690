/*
 * test_app.h - the C core of flowwarden.testing (issue 15): a script loaded
 * as `run` loads it, with no MongoDB, no network and a virtual clock, whose
 * events go through the real dispatcher (fw_event_dispatch: retry policy,
 * on_error, budgets, the DLQ entry builder).
 *
 * An app owns one worker per stream (a Lua state each, as in run), an
 * in-memory DLQ store (fw_dlq_store_memory_new) shared by its streams, a
 * metrics registry and a clock in milliseconds that only moves when told to
 * (retry waits advance it instead of sleeping). fw.mongo and fw.http in the
 * script's states reach fakes that live in the spec's state (the Lua state
 * that called load): arguments and results cross over as BSON, so the two
 * states never share a Lua value.
 *
 * Everything runs on the thread that calls into the module; an app is used
 * by one thread.
 */
#ifndef FLOWWARDEN_TEST_APP_H
#define FLOWWARDEN_TEST_APP_H

#include <lua.h>

/*
 * lua_CFunction for package.preload["flowwarden.testing.core"], the module
 * lua/flowwarden/testing.lua builds on:
 *
 *   load(path, opts) -> app       opts: env (table), jitter, seed, now_ms, uri,
 *                                 mongo_uri, bridge = function(channel, args)
 *   streams(app) -> { { name, database, collection }, ... }
 *   deliver(app, stream, event) -> { outcome, attempts, delays, errors,
 *                                    dlq_entry, logs, event_id }
 *   replay_one(app, stream, event, letter, no_retry) -> { result, attempts,
 *                                    error, evict, diagnostics, logs }
 *   now(app), advance(app, ms)
 *   dlq_entries(app [, stream]), dlq_put(app, entry)
 *   metrics_text(app) -> the Prometheus exposition
 *   events_from(path) -> { event, ... }   Extended JSON, one document a line
 */
int fw_test_app_open (lua_State *L);

#endif
