/*
 * state_store.c - fw.state's store: a chained hash table whose entries are
 * also on a doubly linked LRU list (head = most recently used).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/state_store.h"

#define INITIAL_BUCKETS 64
#define SWEEP_BUCKETS 4 /* buckets inspected for expired entries per operation */
#define EVICTION_LOG_INTERVAL_MS 60000

typedef struct entry {
   struct entry *hnext;         /* next in the bucket */
   struct entry *newer, *older; /* LRU list */
   uint64_t hash;
   int64_t expires_ms; /* 0: never */
   fw_state_type_t type;
   bool b;
   int64_t i;
   double d;
   size_t key_len, str_len;
   char *str; /* points into the same allocation, after the key */
   char key[];
} entry_t;

struct fw_state_store {
   pthread_mutex_t mu;
   entry_t **buckets;
   size_t nbuckets; /* a power of two */
   size_t sweep_at; /* next bucket the sweep looks at */
   entry_t *newest, *oldest;
   size_t max_bytes;
   fw_state_stats_t st;
   fw_state_clock_t clock;
   void *clock_ud;
   int64_t evictions_logged_at; /* ms on the clock; 0: never */
   uint64_t evictions_unlogged;
   char label[128];
};

static int64_t
monotonic_ms (void *ud)
{
   (void) ud;
   return fw_mono_ms ();
}

static uint64_t
hash_key (const char *key, size_t len)
{
   uint64_t h = 1469598103934665603ULL;
   for (size_t i = 0; i < len; i++) {
      h = (h ^ (unsigned char) key[i]) * 1099511628211ULL;
   }
   return h;
}

static size_t
entry_bytes (const entry_t *e)
{
   return FW_STATE_ENTRY_OVERHEAD + e->key_len + e->str_len;
}

fw_state_store_t *
fw_state_store_new (size_t max_bytes)
{
   fw_state_store_t *s = calloc (1, sizeof *s);

   if (!s) {
      return NULL;
   }
   s->buckets = calloc (INITIAL_BUCKETS, sizeof *s->buckets);
   if (!s->buckets) {
      free (s);
      return NULL;
   }
   s->nbuckets = INITIAL_BUCKETS;
   s->max_bytes = max_bytes ? max_bytes : 1;
   s->clock = monotonic_ms;
   if (pthread_mutex_init (&s->mu, NULL) != 0) {
      free (s->buckets);
      free (s);
      return NULL;
   }
   return s;
}

void
fw_state_store_destroy (fw_state_store_t *store)
{
   entry_t *e, *next;

   if (!store) {
      return;
   }
   for (e = store->newest; e; e = next) {
      next = e->older;
      free (e);
   }
   free (store->buckets);
   pthread_mutex_destroy (&store->mu);
   free (store);
}

/* --- list and table, called with the mutex held --------------------------- */

static void
lru_unlink (fw_state_store_t *s, entry_t *e)
{
   if (e->newer) {
      e->newer->older = e->older;
   } else {
      s->newest = e->older;
   }
   if (e->older) {
      e->older->newer = e->newer;
   } else {
      s->oldest = e->newer;
   }
   e->newer = e->older = NULL;
}

static void
lru_push_newest (fw_state_store_t *s, entry_t *e)
{
   e->older = s->newest;
   e->newer = NULL;
   if (s->newest) {
      s->newest->newer = e;
   } else {
      s->oldest = e;
   }
   s->newest = e;
}

static entry_t **
find_slot (fw_state_store_t *s, const char *key, size_t len, uint64_t h)
{
   entry_t **slot = &s->buckets[h & (s->nbuckets - 1)];

   while (*slot && !((*slot)->hash == h && (*slot)->key_len == len &&
                     memcmp ((*slot)->key, key, len) == 0)) {
      slot = &(*slot)->hnext;
   }
   return slot;
}

/* Unlinks and frees the entry at *slot. */
static void
remove_at (fw_state_store_t *s, entry_t **slot)
{
   entry_t *e = *slot;

   *slot = e->hnext;
   lru_unlink (s, e);
   s->st.bytes -= entry_bytes (e);
   s->st.entries--;
   free (e);
}

static bool
expired (const fw_state_store_t *s, const entry_t *e, int64_t now)
{
   (void) s;
   return e->expires_ms != 0 && now >= e->expires_ms;
}

/* Bounded sweeping: a few buckets per operation, round-robin. */
static void
sweep (fw_state_store_t *s, int64_t now)
{
   for (int n = 0; n < SWEEP_BUCKETS; n++) {
      entry_t **slot = &s->buckets[s->sweep_at];
      while (*slot) {
         if (expired (s, *slot, now)) {
            remove_at (s, slot);
            s->st.expired++;
         } else {
            slot = &(*slot)->hnext;
         }
      }
      s->sweep_at = (s->sweep_at + 1) & (s->nbuckets - 1);
   }
}

/* Doubles the table when it holds more entries than buckets. Failure to
 * grow only costs speed. */
static void
maybe_grow (fw_state_store_t *s)
{
   size_t n = s->nbuckets * 2;
   entry_t **b;

   if (s->st.entries <= s->nbuckets || n > SIZE_MAX / sizeof *b || !(b = calloc (n, sizeof *b))) {
      return;
   }
   for (entry_t *e = s->newest; e; e = e->older) {
      e->hnext = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
   }
   free (s->buckets);
   s->buckets = b;
   s->nbuckets = n;
   s->sweep_at = 0;
}

/* Evicts from the old end until the store fits, sparing keep. Returns the
 * number evicted. */
static uint64_t
evict (fw_state_store_t *s, const entry_t *keep)
{
   uint64_t n = 0;

   while (s->st.bytes > s->max_bytes && s->oldest && s->oldest != keep) {
      entry_t *e = s->oldest;
      remove_at (s, find_slot (s, e->key, e->key_len, e->hash));
      n++;
   }
   s->st.evictions += n;
   return n;
}

/* Called with the mutex held; returns how many evictions to log now (0: none). */
static uint64_t
evictions_to_log (fw_state_store_t *s, uint64_t evicted, int64_t now)
{
   uint64_t n;

   s->evictions_unlogged += evicted;
   if (!s->evictions_unlogged ||
       (s->evictions_logged_at && now - s->evictions_logged_at < EVICTION_LOG_INTERVAL_MS)) {
      return 0;
   }
   n = s->evictions_unlogged;
   s->evictions_unlogged = 0;
   s->evictions_logged_at = now ? now : 1;
   return n;
}

static void
log_evictions (const char *label, uint64_t n, size_t max_bytes)
{
   if (n) {
      fw_log (FW_LOG_WARN, label[0] ? label : NULL,
              "fw.state: evicted %llu least recently used entries to stay within state.max_bytes "
              "= %zu (raise it in fw.defaults { state = { max_bytes = ... } } or give entries a "
              "ttl); logged at most once a minute",
              (unsigned long long) n, max_bytes);
   }
}

/* --- public ---------------------------------------------------------------- */

void
fw_state_store_set_max_bytes (fw_state_store_t *store, size_t max_bytes)
{
   uint64_t n;
   char label[sizeof store->label];

   pthread_mutex_lock (&store->mu);
   store->max_bytes = max_bytes ? max_bytes : 1;
   n = evictions_to_log (store, evict (store, NULL), store->clock (store->clock_ud));
   memcpy (label, store->label, sizeof label);
   pthread_mutex_unlock (&store->mu);
   log_evictions (label, n, max_bytes);
}

void
fw_state_store_set_label (fw_state_store_t *store, const char *label)
{
   pthread_mutex_lock (&store->mu);
   snprintf (store->label, sizeof store->label, "%s", label ? label : "");
   pthread_mutex_unlock (&store->mu);
}

void
fw_state_store_set_clock (fw_state_store_t *store, fw_state_clock_t clock, void *ud)
{
   pthread_mutex_lock (&store->mu);
   store->clock = clock ? clock : monotonic_ms;
   store->clock_ud = clock ? ud : NULL;
   pthread_mutex_unlock (&store->mu);
}

/* Finds key, removing it if expired. Mutex held. */
static entry_t *
lookup (fw_state_store_t *s, const char *key, size_t len, int64_t now)
{
   entry_t **slot = find_slot (s, key, len, hash_key (key, len));

   if (*slot && expired (s, *slot, now)) {
      remove_at (s, slot);
      s->st.expired++;
   }
   return *slot;
}

bool
fw_state_store_get (fw_state_store_t *store, const char *key, size_t key_len, fw_state_value_t *out,
                    fw_error_t *error)
{
   bool ok = true;
   entry_t *e;
   int64_t now;

   memset (out, 0, sizeof *out);
   pthread_mutex_lock (&store->mu);
   now = store->clock (store->clock_ud);
   sweep (store, now);
   e = lookup (store, key, key_len, now);
   if (!e) {
      store->st.misses++;
      goto done;
   }
   store->st.hits++;
   lru_unlink (store, e);
   lru_push_newest (store, e);
   out->type = e->type;
   out->b = e->b;
   out->i = e->i;
   out->d = e->d;
   if (e->type == FW_STATE_STRING) {
      char *copy = malloc (e->str_len + 1);
      if (!copy) {
         fw_error_set (error, FW_ERROR_NOMEM, "fw.state.get: out of memory");
         out->type = FW_STATE_NONE;
         ok = false;
         goto done;
      }
      memcpy (copy, e->str, e->str_len);
      copy[e->str_len] = '\0';
      out->s = copy;
      out->len = e->str_len;
   }
done:
   pthread_mutex_unlock (&store->mu);
   return ok;
}

/* Inserts a new entry for key (none may exist), mutex held. */
static bool
insert (fw_state_store_t *s, const char *key, size_t key_len, const fw_state_value_t *v,
        int64_t expires_ms, uint64_t *evicted, fw_error_t *error)
{
   size_t str_len = v->type == FW_STATE_STRING ? v->len : 0;
   size_t need = FW_STATE_ENTRY_OVERHEAD + key_len + str_len;
   entry_t *e;
   entry_t **slot;

   if (need > s->max_bytes || key_len > SIZE_MAX / 4 || str_len > SIZE_MAX / 4) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "fw.state: an entry of %zu bytes does not fit in state.max_bytes = %zu", need,
                    s->max_bytes);
      return false;
   }
   e = malloc (sizeof *e + key_len + 1 + str_len + 1);
   if (!e) {
      fw_error_set (error, FW_ERROR_NOMEM, "fw.state: out of memory");
      return false;
   }
   memset (e, 0, sizeof *e);
   e->hash = hash_key (key, key_len);
   e->expires_ms = expires_ms;
   e->type = v->type;
   e->b = v->b;
   e->i = v->i;
   e->d = v->d;
   e->key_len = key_len;
   memcpy (e->key, key, key_len);
   e->key[key_len] = '\0';
   e->str = e->key + key_len + 1;
   e->str_len = str_len;
   if (str_len) {
      memcpy (e->str, v->s, str_len);
   }
   e->str[str_len] = '\0';
   slot = find_slot (s, key, key_len, e->hash);
   e->hnext = NULL;
   *slot = e;
   lru_push_newest (s, e);
   s->st.entries++;
   s->st.bytes += need;
   *evicted += evict (s, e);
   maybe_grow (s);
   return true;
}

bool
fw_state_store_set (fw_state_store_t *store, const char *key, size_t key_len,
                    const fw_state_value_t *value, int64_t ttl_ms, fw_error_t *error)
{
   bool ok = true;
   uint64_t evicted = 0, to_log;
   entry_t **slot;
   int64_t now;
   size_t need = FW_STATE_ENTRY_OVERHEAD + key_len +
                 (value->type == FW_STATE_STRING ? value->len : 0);
   char label[sizeof store->label];

   pthread_mutex_lock (&store->mu);
   now = store->clock (store->clock_ud);
   sweep (store, now);
   if (value->type != FW_STATE_NONE && need > store->max_bytes) {
      /* Refuse before touching the old value: the store stays unchanged. */
      fw_error_set (error, FW_ERROR_INVALID,
                    "fw.state.set: an entry of %zu bytes does not fit in state.max_bytes = %zu",
                    need, store->max_bytes);
      ok = false;
      goto done;
   }
   slot = find_slot (store, key, key_len, hash_key (key, key_len));
   if (*slot) {
      remove_at (store, slot);
   }
   if (value->type != FW_STATE_NONE) {
      ok = insert (store, key, key_len, value, ttl_ms > 0 ? now + ttl_ms : 0, &evicted, error);
   }
done:
   to_log = evictions_to_log (store, evicted, now);
   memcpy (label, store->label, sizeof label);
   need = store->max_bytes;
   pthread_mutex_unlock (&store->mu);
   log_evictions (label, to_log, need);
   return ok;
}

bool
fw_state_store_incr (fw_state_store_t *store, const char *key, size_t key_len, int64_t by,
                     int64_t ttl_ms, int64_t *result, fw_error_t *error)
{
   static const char *const names[] = {"nothing", "a boolean", "an integer", "a float", "a string"};
   bool ok = true;
   uint64_t evicted = 0, to_log;
   entry_t *e;
   int64_t now;
   size_t max_bytes;
   char label[sizeof store->label];

   pthread_mutex_lock (&store->mu);
   now = store->clock (store->clock_ud);
   sweep (store, now);
   e = lookup (store, key, key_len, now);
   if (e && e->type != FW_STATE_INT) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "fw.state.incr: the value of key \"%.*s\" is %s, not an integer",
                    (int) (key_len > 200 ? 200 : key_len), key, names[e->type]);
      ok = false;
   } else if (e) {
      if ((by > 0 && e->i > INT64_MAX - by) || (by < 0 && e->i < INT64_MIN - by)) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "fw.state.incr: integer overflow adding %lld to key \"%.*s\"",
                       (long long) by, (int) (key_len > 200 ? 200 : key_len), key);
         ok = false;
      } else {
         e->i += by;
         *result = e->i;
         lru_unlink (store, e);
         lru_push_newest (store, e);
      }
   } else {
      fw_state_value_t v = {.type = FW_STATE_INT, .i = by};
      ok = insert (store, key, key_len, &v, ttl_ms > 0 ? now + ttl_ms : 0, &evicted, error);
      *result = by;
   }
   to_log = evictions_to_log (store, evicted, now);
   memcpy (label, store->label, sizeof label);
   max_bytes = store->max_bytes;
   pthread_mutex_unlock (&store->mu);
   log_evictions (label, to_log, max_bytes);
   return ok;
}

bool
fw_state_store_delete (fw_state_store_t *store, const char *key, size_t key_len)
{
   bool found = false;
   entry_t **slot;
   int64_t now;

   pthread_mutex_lock (&store->mu);
   now = store->clock (store->clock_ud);
   sweep (store, now);
   slot = find_slot (store, key, key_len, hash_key (key, key_len));
   if (*slot) {
      found = !expired (store, *slot, now);
      if (!found) {
         store->st.expired++;
      }
      remove_at (store, slot);
   }
   pthread_mutex_unlock (&store->mu);
   return found;
}

void
fw_state_store_stats (fw_state_store_t *store, fw_state_stats_t *out)
{
   pthread_mutex_lock (&store->mu);
   *out = store->st;
   out->max_bytes = store->max_bytes;
   pthread_mutex_unlock (&store->mu);
}
