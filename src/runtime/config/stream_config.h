/*
 * stream_config.h - one stream's effective settings, read from the spec the
 * Lua side validated (flowwarden.config). The C runtime never re-validates
 * the script; it only copies what it needs out of the Lua state.
 */
#ifndef FLOWWARDEN_STREAM_CONFIG_H
#define FLOWWARDEN_STREAM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bson/bson.h>
#include <lua.h>

#include "flowwarden/error.h"
#include "runtime/dispatch/backoff.h"
#include "runtime/dispatch/circuit.h"
#include "runtime/dispatch/rate_limit.h"

typedef struct {
   bool enabled;
   char *collection;
   int ttl_days; /* 0 = keep forever */
   bool include_original_document;
   bool include_stack_trace;
   char *write_concern_tag; /* "majority", or NULL when w is a number */
   int write_concern_w;
   char *connection;          /* fw.connection name, NULL: the run URI */
   char *database;            /* NULL: the stream's database */
   bool sequenced;            /* seed 004's sequenced DLQ (dlq_sequence.h) */
   int64_t max_sequences;     /* open sequences at most (1024) */
   int64_t max_sequence_size; /* entries of one open sequence at most (1024) */
   bool memory;               /* store = "memory": in the process, lost at exit */
} fw_dlq_config_t;

typedef struct {
   char *name;
   char *declared_at; /* "SCRIPT:LINE" */
   char *database;
   char *collection;                  /* NULL: the whole database */
   bson_t *pipeline;                  /* stages after $changeStream; heap-allocated so
                                     * the struct can be moved (a reload swaps it) */
   char *full_document;               /* "default" ... */
   char *full_document_before_change; /* "off" ... */
   bool split_large_events;           /* append $changeStreamSplitLargeEvent (issue 18) */
   bool oversize_skip;                /* oversize = "skip" (else "fail") */
   int64_t oversize_threshold;        /* bytes: "skip" dead-letters events above it */
   int save_every;
   int64_t save_interval_ms;
   int64_t idle_heartbeat_ms;
   /* checkpoint.max_unsaved: the async crash bound's time allowance; 0: the
    * count bound alone (stream_position.c) */
   int64_t max_unsaved_ms;
   bool exactly_once;     /* issue 39: handler writes + checkpoint in one transaction */
   char *exactly_once_pg; /* issue 40: exactly_once = { connection = name } naming
                                     * a PostgreSQL connection (then exactly_once is false),
                                     * or NULL */
   bool checkpoint_sync;  /* checkpoint.mode = "sync": written on the handler's path */
   bool start_latest;     /* start_position = "latest" */
   bool resume_from_now;  /* on_history_lost = "resume_from_now" */
   uint64_t start_at;     /* checkpoint.start_at: (t << 32) | i of the Timestamp a
                                     * stream without a checkpoint starts at; 0: from now */
   struct {
      bool at_start;      /* start_position = "snapshot" (issue 28) */
      int64_t chunk_size; /* rows read per chunk */
      int64_t pause_ms;   /* between chunks */
      int read_mode;      /* mongoc_read_mode_t of read_preference */
   } snapshot;
   /* exactly_once = { connection = name } naming a MongoDB connection other
    * than "default" (the sink: transactions and checkpoint there; exactly_once
    * is true), or NULL */
   char *exactly_once_connection;
   fw_backoff_t restart;
   fw_backoff_t retry;
   bool retry_deferred; /* retry.mode = "deferred" (issue 29): a failed event waits
                                     * in the DLQ as SCHEDULED (deferred_retry.h) */
   fw_dlq_config_t dlq;
   fw_dlq_config_t dlq_fallback; /* a stream without a DLQ: the script's default DLQ
                                     * (the first stream declaring one), used only by
                                     * ctx:send_to_dlq; enabled = false when none */
   int lanes;                    /* Lua states and threads handling keys in parallel (1..64,
                                     * issue 16; 1: the stream's own thread handles events) */
   int64_t timeout_ms;
   size_t memory_limit;
   size_t state_max_bytes;            /* fw.state's bound (fw.defaults { state = ... }) */
   bool ha_leader;                    /* ha.mode = "leader": one instance holds the stream's
                                     * lease and handles its events (lease.h, issue 17) */
   int64_t ha_lease_ms;               /* ha.lease */
   fw_circuit_config_t circuit;       /* circuit = { ... } (issue 29); enabled false: none */
   fw_rate_limit_config_t rate_limit; /* rate_limit = "N/s" (issue 29); count 0: none */
   bool ha_shared;                    /* ha.mode = "shared" (issue 31): ha_leader too, each unit's
                                     * lease gated by the instance's share (shared_units.h) */
   int partitions;                    /* issue 31: this is unit `partition` (0-based) of a stream
                                     * with partitions = N (name "<stream>#k/N"); 0: none */
   int partition;
   int batch_max_events;      /* on_batch (issue 30): events per call at most; 0: no on_batch */
   int64_t batch_max_wait_ms; /* batch.max_wait: how long a batch waits for more events */
} fw_stream_config_t;

/* Fills cfg from the spec table at stack index idx. Must run inside a
 * protected call (it may raise); on a malformed spec returns false. cfg is
 * owned by the caller and released with fw_stream_config_cleanup.
 * specs: the stack index of the script's array of specs (0: none), or a
 * database-wide stream cannot keep out the DLQs other streams write in its
 * database (owned_collections.h); the stream's own collections are always
 * kept out. */
bool fw_stream_config_read (lua_State *L, int idx, int specs, fw_stream_config_t *cfg,
                            fw_error_t *error);

/* Frees what fw_stream_config_read allocated. Safe on a zeroed struct. */
void fw_stream_config_cleanup (fw_stream_config_t *cfg);

#endif
