/*
 * oplog_window.h - how much history the deployment's oplog holds: read from
 * its first and last entries (local.oplog.rs), once by `flowwarden doctor`
 * and every minute by `flowwarden run` (flowwarden_oplog_window_seconds,
 * issue 27).
 *
 * Reading local.oplog.rs needs find on it (clusterMonitor, backup or root
 * give it); mongos and a standalone server have no oplog to read. Where it
 * cannot be read the window is unknown: the metric is absent and one log line
 * says why and what to do.
 */
#ifndef FLOWWARDEN_OPLOG_WINDOW_H
#define FLOWWARDEN_OPLOG_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "ops/metrics.h"

/* How often `run` samples the window, unless FW_TEST_OPLOG_WINDOW_INTERVAL_MS
 * (a test hook, docs/testing.md) says otherwise. */
#define FW_OPLOG_WINDOW_INTERVAL_MS 60000

/*
 * The ts (seconds) of the oplog's first and last entries, read through client
 * (borrowed; used by the calling thread only). Returns 1 when both were read,
 * 0 when the oplog is empty or absent (a standalone server), -1 with error
 * filled when the server refused or failed (no privilege, mongos, network).
 */
int fw_oplog_window_read (mongoc_client_t *client, int64_t *first_s, int64_t *last_s,
                          bson_error_t *error);

/* A thread sampling the window into a metrics registry. */
typedef struct fw_oplog_sampler fw_oplog_sampler_t;

/*
 * Starts a thread that reads the window at once and then every interval_ms
 * (<= 0: FW_OPLOG_WINDOW_INTERVAL_MS or the test hook), on a client of its
 * own for uri (copied; one server scan per read, connect and socket
 * timeouts of at most 2 s and 7 s whatever the URI says), and sets it in metrics
 * (fw_metrics_set_oplog_window). metrics is borrowed: it must outlive
 * fw_oplog_sampler_stop. Returns NULL with error filled when the client or
 * the thread cannot be made.
 */
fw_oplog_sampler_t *fw_oplog_sampler_start (const mongoc_uri_t *uri, fw_metrics_t *metrics,
                                            int64_t interval_ms, fw_error_t *error);

/* Stops the thread (at once, unless a read is in flight: that ends within the
 * client's timeouts above), joins and frees it. NULL is a no-op. */
void fw_oplog_sampler_stop (fw_oplog_sampler_t *s);

#endif
