/*
 * metrics_lua.h - fw.metrics: metrics a script defines and its handlers
 * update, exposed with flowwarden's own on the admin endpoint.
 *
 *   local orders = fw.metrics.counter("shop_orders_total", "Orders seen.",
 *                                     { labels = { "kind" } })
 *   orders:inc(1, { kind = "paid" })              -- counters: inc([n] [, labels])
 *   fw.metrics.gauge(name, help [, opts])         -- :set(v [, labels]), :add(v [, labels])
 *   fw.metrics.histogram(name, help, { buckets = { 0.1, 1, 10 } })  -- :observe(v [, labels])
 *
 * Every series also carries the label stream (the stream whose handler
 * updated it), so updates work inside handlers only. Definitions go to the
 * process's registry (metrics.h) when the runtime attached one before the
 * script loaded, else to a registry of the state's own (flowwarden check,
 * tests), which still applies every naming rule.
 */
#ifndef FLOWWARDEN_METRICS_LUA_H
#define FLOWWARDEN_METRICS_LUA_H

#include <lua.h>

#include "ops/metrics.h"

/* Sets `metrics` (counter, gauge, histogram) in the table at module_idx.
 * May raise (memory). */
void fw_metrics_lua_open (lua_State *L, int module_idx);

/* Makes L define its metrics in registry (borrowed: it must outlive L).
 * Call before the script runs; definitions made while no stream is bound
 * are pending in the registry (see fw_metrics_define). Never raises. */
void fw_metrics_lua_attach (lua_State *L, fw_metrics_t *registry);

/* Binds L to the block of the stream whose handlers run in it (borrowed,
 * lives as long as its registry): updates go to that stream's series, and
 * definitions made from now on are committed at once. NULL unbinds. Never
 * raises. */
void fw_metrics_lua_bind_stream (lua_State *L, fw_stream_metrics_t *stream);

/* The block bound to L, or NULL: fw.mongo and fw.http count their calls in
 * it. Never raises. */
fw_stream_metrics_t *fw_metrics_lua_stream (lua_State *L);

#endif
