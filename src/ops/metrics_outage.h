/*
 * metrics_outage.h - a stream block's circuit breaker and rate limit part
 * (issue 29). Strings and the opened counters are under the block's mutex
 * (they change at most at an outage's edges); the rate-limit wait is an
 * atomic counter.
 */
#ifndef FLOWWARDEN_METRICS_OUTAGE_H
#define FLOWWARDEN_METRICS_OUTAGE_H

#include <stdbool.h>
#include <stdint.h>

#define FW_OUTAGE_MAX_TYPES 16

typedef struct {
   bool circuit;
   int circuit_state;
   char circuit_type[128];
   int64_t circuit_since_ms;
   int64_t circuit_next_probe_ms;
   char opened_types[FW_OUTAGE_MAX_TYPES][64];
   uint64_t opened[FW_OUTAGE_MAX_TYPES + 1]; /* last: "other" */
   int n_opened_types;
   char rate_limit[32];
   uint64_t rate_wait_ns;
} fw_outage_block_t;

#endif
