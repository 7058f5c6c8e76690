/*
 * state_store.h - the key-value store behind fw.state: one per stream, kept
 * by the runtime across hot reloads (not across restarts).
 *
 * Keys are byte strings; values are nil-free scalars (boolean, integer,
 * float, string). The store is a hash table plus a least-recently-used list,
 * so every operation is O(1) (amortised over table growth). Its size is the
 * sum of each entry's key, string value and a fixed per-entry overhead
 * (FW_STATE_ENTRY_OVERHEAD); when a write takes it beyond max_bytes, the
 * least recently used entries are evicted. Entries may carry a time to live:
 * an expired entry is removed when it is next touched, and every operation
 * also sweeps a few hash buckets, so expired entries nobody reads go away
 * too.
 *
 * Thread-safe: every function takes the store's mutex, so several threads
 * (lanes of one stream) may share a store.
 */
#ifndef FLOWWARDEN_STATE_STORE_H
#define FLOWWARDEN_STATE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flowwarden/error.h"

typedef struct fw_state_store fw_state_store_t;

/* What each entry costs beyond its key and string bytes (bookkeeping). */
#define FW_STATE_ENTRY_OVERHEAD 64

typedef enum {
   FW_STATE_NONE = 0, /* no value (get: missing or expired) */
   FW_STATE_BOOL,
   FW_STATE_INT,
   FW_STATE_DOUBLE,
   FW_STATE_STRING
} fw_state_type_t;

typedef struct {
   fw_state_type_t type;
   bool b;
   int64_t i;
   double d;
   const char *s; /* FW_STATE_STRING: len bytes (set: borrowed; get: see below) */
   size_t len;
} fw_state_value_t;

typedef struct {
   uint64_t entries, bytes, max_bytes, hits, misses, evictions, expired;
} fw_state_stats_t;

/* A clock in milliseconds; the default reads CLOCK_MONOTONIC. */
typedef int64_t (*fw_state_clock_t) (void *ud);

/* A new empty store bounded by max_bytes (> 0). NULL when out of memory (or
 * its lock cannot be set up).
 * The caller owns it: fw_state_store_destroy. */
fw_state_store_t *fw_state_store_new (size_t max_bytes);

/* Frees the store and its entries. NULL is a no-op. */
void fw_state_store_destroy (fw_state_store_t *store);

/* Changes the bound (a reload may); evicts at once if the store is over it. */
void fw_state_store_set_max_bytes (fw_state_store_t *store, size_t max_bytes);

/* Names the stream in the store's log records (copied; may be NULL). */
void fw_state_store_set_label (fw_state_store_t *store, const char *label);

/* Replaces the clock (tests inject one so TTLs expire without sleeping).
 * NULL restores the default. */
void fw_state_store_set_clock (fw_state_store_t *store, fw_state_clock_t clock, void *ud);

/*
 * Looks key up. Found: fills *out and returns true; for a string, out->s is a
 * malloc'd copy (NUL-terminated) the caller frees. Missing or expired:
 * out->type is FW_STATE_NONE and it returns true. Returns false only when the
 * copy cannot be allocated (error filled).
 */
bool fw_state_store_get (fw_state_store_t *store, const char *key, size_t key_len,
                         fw_state_value_t *out, fw_error_t *error);

/*
 * Stores value under key (copied), replacing any old value and expiry.
 * ttl_ms > 0 makes the entry expire that long from now; 0 means never.
 * value->type FW_STATE_NONE deletes. Returns false (store unchanged) when the
 * entry alone is larger than max_bytes or memory runs out.
 */
bool fw_state_store_set (fw_state_store_t *store, const char *key, size_t key_len,
                         const fw_state_value_t *value, int64_t ttl_ms, fw_error_t *error);

/*
 * Adds by to the integer at key and stores the sum in *result. A missing (or
 * expired) key counts as 0 and is created with ttl_ms (0: no expiry); an
 * existing entry keeps its expiry. Fails (store unchanged) when the value is
 * not an integer or the sum overflows.
 */
bool fw_state_store_incr (fw_state_store_t *store, const char *key, size_t key_len, int64_t by,
                          int64_t ttl_ms, int64_t *result, fw_error_t *error);

/* Removes key; returns true if it was there (and not expired). */
bool fw_state_store_delete (fw_state_store_t *store, const char *key, size_t key_len);

/* Copies the counters. */
void fw_state_store_stats (fw_state_store_t *store, fw_state_stats_t *out);

#endif
