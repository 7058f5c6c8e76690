/*
 * stream_lanes.c - per-key lanes (issue 16, lanes = N > 1): the stream's
 * thread reads and routes, N lane threads handle, the checkpoint follows the
 * watermark.
 *
 * Each event goes to the lane of hash(its sequence key): the sequenced DLQ's
 * key (dlq.sequence_key, else documentKey._id: fw_event_order_key, as
 * fw_dlq_sequence_id writes it), lane 0 for events without one. A lane is a thread with a
 * program of its own (a fw_stream_worker_t built by
 * fw_stream_worker_build_lanes: Lua state, handler refs, DLQ store, client,
 * open DLQ sequences, counts) that handles its events one at a time, in
 * order, through fw_event_dispatch as the stream's thread would: retries,
 * budgets, ctx, on_error, the DLQ and parking all work per lane. A key's
 * events and its DLQ sequence live in one lane, so parking holds; each lane
 * owns its own set of open sequences (no lock: a lane only looks up keys
 * routed to it).
 *
 * Every event read takes the next slot of a window of WINDOW tickets; the
 * watermark is the newest ticket that, with every earlier one, is done
 * (handled or dead-lettered), and its tokens become the position the
 * checkpoint saves. A key stuck in retries holds back its own lane and the
 * watermark; the other lanes go on until its lane's queue (LANE_QUEUE
 * events) or the window is full.
 *
 * Threads and ownership:
 * - the stream's thread owns fw_stream_lanes_t, every slot's tokens, the
 *   position, and its own Lua state (a custom sequence key runs there);
 * - lane i's thread owns lane i's program while the lanes run; the stream's
 *   thread touches a lane's program only when its thread is joined;
 * - a lane's queue is shared under the lane's mutex, the slots' done flags
 *   and the failure under the lanes' mutex.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/mono_cond.h"
#include "lua_api/mongo_lua.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_lanes-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_worker-private.h"

/* Events one lane holds before the reader waits for it. */
#define LANE_QUEUE 256
/* Events read past the watermark at most: with a key in retries, how far
 * the other lanes run ahead, and what a kill -9 may repeat beyond the
 * checkpoint writer's own bound (docs/reliability.md). */
#define WINDOW 4096
/* Waits are cut in slices this long so a shutdown is seen soon. */
#define WAIT_SLICE_MS 50

typedef struct {
   uint8_t *doc; /* the change event (raw BSON, malloc) */
   uint32_t len;
   uint64_t ticket;
} item_t;

typedef struct {
   struct fw_stream_lanes *ls;
   fw_dispatcher_t *d; /* the lane's dispatcher, borrowed from the stream's lane_d */
   mongoc_client_pool_t *pool;
   fw_shutdown_t *shutdown;
   fw_stream_metrics_t *metrics;
   pthread_t thread;
   bool started;
   pthread_mutex_t mu;
   pthread_cond_t has_items;
   pthread_cond_t has_room;
   item_t ring[LANE_QUEUE];
   int head;
   int count;
   bool stop;
} lane_t;

typedef struct {
   bson_t processed; /* the event's _id (stream's thread) */
   bson_t resume;    /* the change stream's token after it (stream's thread) */
   bool has_processed;
   bool done; /* under the lanes' mutex */
} slot_t;

struct fw_stream_lanes {
   fw_stream_worker_t *w;
   int n;
   lane_t *lane;
   bool custom_key; /* dlq.sequence_key: routed by it (stream's Lua state) */
   pthread_mutex_t mu;
   pthread_cond_t moved; /* a slot done, or a lane failed */
   slot_t *slot;         /* WINDOW slots, ticket % WINDOW */
   uint64_t base;        /* the oldest ticket not yet past the watermark */
   uint64_t next;        /* the next ticket */
   bool failed;
   char failure[sizeof ((fw_stream_worker_t *) 0)->failure];
};

bool
fw_stream_worker_build_lanes (fw_stream_worker_t *w, fw_stream_lane_loader_t load, void *ud,
                              fw_error_t *error)
{
   int n = w->cfg->lanes;

   /* A full Lua state is rebuilt the way its lanes are loaded. */
   fw_dispatcher_set_loader (w->d, load, ud);
   if (n <= 1) {
      return true;
   }
   if (!(w->lane.d = calloc ((size_t) n, sizeof *w->lane.d))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory building the lanes of stream \"%s\"",
                    w->cfg->name);
      return false;
   }
   for (int i = 0; i < n; i++) {
      fw_lua_host_t *host = load (ud, error);
      fw_dispatcher_t *ld = host ? fw_dispatcher_new (host, w->script.index, w->script.conns,
                                                      w->shutdown, error)
                                 : NULL;
      if (!ld) {
         return false; /* the lanes built so far go with w */
      }
      fw_dispatcher_set_loader (ld, load, ud);
      w->lane.d[w->lane.n++] = ld; /* fw.state is the stream's: shared below */
   }
   fw_stream_state_attach (w);
   return true;
}

/* Waits on cond (one of fw_mono_cond_init's) for a signal or at most one
 * slice; the caller looks again either way. */
static void
wait_slice (pthread_cond_t *cond, pthread_mutex_t *mu)
{
   (void) fw_mono_cond_wait_ms (cond, mu, WAIT_SLICE_MS);
}

/* Sets up a lock and one or two (b may be NULL) condition variables on the
 * monotonic clock: all or none. Returns 0 or the failing call's code. */
static int
sync_init (pthread_mutex_t *mu, pthread_cond_t *a, pthread_cond_t *b)
{
   int rc = fw_mono_lock_init (mu, a);

   if (rc == 0 && b && (rc = fw_mono_cond_init (b)) != 0) {
      fw_mono_lock_destroy (mu, a);
   }
   return rc;
}

/* --- a lane's thread ------------------------------------------------------ */

static void
lane_failed (fw_stream_lanes_t *ls, const char *why)
{
   pthread_mutex_lock (&ls->mu);
   if (!ls->failed) {
      ls->failed = true;
      snprintf (ls->failure, sizeof ls->failure, "%s", why);
   }
   pthread_cond_broadcast (&ls->moved);
   pthread_mutex_unlock (&ls->mu);
}

static void
lane_done (fw_stream_lanes_t *ls, uint64_t ticket)
{
   pthread_mutex_lock (&ls->mu);
   ls->slot[ticket % WINDOW].done = true;
   if (ticket == ls->base) {
      pthread_cond_signal (&ls->moved); /* only the oldest moves the watermark */
   }
   pthread_mutex_unlock (&ls->mu);
}

/* Under l->mu: takes the lane's oldest event into out, unless the lane is
 * to end or is empty. */
static bool
lane_take (lane_t *l, item_t *out)
{
   if (l->stop || !l->count || fw_shutdown_requested (l->shutdown)) {
      return false;
   }
   *out = l->ring[l->head];
   l->head = (l->head + 1) % LANE_QUEUE;
   l->count--;
   pthread_cond_signal (&l->has_room);
   return true;
}

/* The next event of the lane, or false when the lane must end. */
static bool
lane_pop (lane_t *l, item_t *out)
{
   bool ok;

   pthread_mutex_lock (&l->mu);
   while (!l->stop && !l->count && !fw_shutdown_requested (l->shutdown)) {
      wait_slice (&l->has_items, &l->mu);
   }
   ok = lane_take (l, out);
   pthread_mutex_unlock (&l->mu);
   return ok;
}

/* The next event of the lane if one comes by deadline_ms (CLOCK_MONOTONIC). */
static bool
lane_pop_by (lane_t *l, item_t *out, int64_t deadline_ms)
{
   bool ok;

   pthread_mutex_lock (&l->mu);
   while (!l->stop && !l->count && !fw_shutdown_requested (l->shutdown) &&
          fw_mono_ms () < deadline_ms) {
      /* Signalled, woken or timed out: the loop looks again. */
      (void) fw_mono_cond_wait_until_ms (&l->has_items, &l->mu, deadline_ms);
   }
   ok = lane_take (l, out);
   pthread_mutex_unlock (&l->mu);
   return ok;
}

/* Where a lane settles what it ran: its events' tickets are done, or the
 * lane fails; a stop ends the lane (the events stay after the watermark). */
typedef struct {
   lane_t *l;
   const item_t *items;
   int n;
} lane_place_t;

static fw_read_end_t
lane_finished (void *ud, const fw_outcome_t *o)
{
   lane_place_t *at = ud;
   (void) o; /* the DLQ's pending entries are the stream's thread's to count (idle_step) */
   for (int k = 0; k < at->n; k++) {
      lane_done (at->l->ls, at->items[k].ticket);
   }
   return FW_READ_NEXT;
}

static void
lane_fail (void *ud, const char *why)
{
   lane_failed (((lane_place_t *) ud)->l->ls, why);
}

/* Settles o for the n events items[0..n) of lane l: true to go on. */
static bool
lane_settle (lane_t *l, const item_t *items, int n, const fw_outcome_t *o)
{
   lane_place_t at = {l, items, n};
   fw_settle_place_t place = {l->d,
                              l->metrics,
                              lane_finished,
                              lane_fail,
                              NULL,
                              &at,
                              "a batch's event could not be dead-lettered"};
   return fw_stream_settle (&place, o) == FW_READ_NEXT;
}

/* on_batch (issue 30): first and the events that come behind it in the
 * lane within batch.max_wait, up to batch.max_events, as one batch; each
 * is done (and freed) once the batch is. False when the lane ends. */
static bool
lane_batch (lane_t *l, item_t *first, int max, int64_t wait_ms)
{
   item_t *items = malloc ((size_t) max * sizeof *items);
   bson_t *docs = malloc ((size_t) max * sizeof *docs);
   fw_event_t *evs = malloc ((size_t) max * sizeof *evs);
   const fw_event_t **ptrs = malloc ((size_t) max * sizeof *ptrs);
   int64_t deadline = fw_mono_ms () + wait_ms;
   bool go_on = false;
   int n = 0;

   if (items && docs && evs && ptrs) {
      fw_error_t err;
      items[n++] = *first;
      while (n < max && lane_pop_by (l, &items[n], deadline)) {
         n++;
      }
      for (int k = 0; k < n; k++) { /* the stream's thread parsed the same bytes */
         bson_init_static (&docs[k], items[k].doc, items[k].len);
         fw_event_parse (&docs[k], &evs[k], &err);
         ptrs[k] = &evs[k];
         fw_event_received (l->ls->w->metrics, &evs[k]);
      }
      fw_outcome_t o = fw_batch_dispatch (l->d, ptrs, (size_t) n, NULL);
      go_on = lane_settle (l, items, n, &o);
   } else {
      lane_failed (l->ls, "out of memory taking a batch"); /* the lane ends */
   }
   for (int k = 0; k < n; k++) {
      free (items[k].doc);
   }
   if (!n) {
      free (first->doc);
   }
   free (items);
   free (docs);
   free (evs);
   free (ptrs);
   return go_on;
}

/* Dispatches what the lane is given until it stops (run under
 * fw_lua_host_guard: true unless a panic ended it). */
static bool
lane_loop (void *arg)
{
   lane_t *l = arg;
   fw_dispatcher_t *d = l->d;
   item_t it;

   while (lane_pop (l, &it)) {
      bson_t doc;
      fw_event_t ev;
      fw_error_t err;
      fw_outcome_t o;
      int max;
      int64_t wait_ms;

      if (fw_dispatcher_batching (d, &max, &wait_ms)) { /* on_batch: this lane's batch */
         if (!lane_batch (l, &it, max, wait_ms)) {
            break;
         }
         continue;
      }
      if (!bson_init_static (&doc, it.doc, it.len) || !fw_event_parse (&doc, &ev, &err)) {
         /* The stream's thread parsed the same bytes: cannot happen. */
         free (it.doc);
         lane_failed (l->ls, "a lane could not read an event the stream read");
         break;
      }
      fw_event_received (l->ls->w->metrics, &ev);
      o = fw_event_dispatch (d, &ev);
      free (it.doc);
      if (!lane_settle (l, &it, 1, &o)) {
         break; /* shutdown (the event stays after the watermark), or the lane failed */
      }
   }
   return true;
}

static void *
lane_main (void *arg)
{
   lane_t *l = arg;
   fw_dispatcher_t *d = l->d;
   /* Clients are thread-bound: this thread's own, given back as it ends. */
   mongoc_client_t *client = mongoc_client_pool_pop (l->pool);

   fw_dispatcher_bind (d, client);
   if (fw_dispatcher_config (d)->dlq.enabled && !fw_dispatcher_open_dlq (d)) {
      goto done; /* only on shutdown */
   }
   if (!fw_dispatcher_load_sequences (d)) {
      goto done;
   }
   if (!fw_lua_host_guard (lane_loop, l)) {
      lane_failed (l->ls,
                   "a Lua panic (an error outside every protected call, logged above: a "
                   "flowwarden bug) stopped a lane");
   }
done:
   fw_dispatcher_release (d); /* closes fw.mongo's cursors before the client goes */
   mongoc_client_pool_push (l->pool, client);
   return NULL;
}

/* --- the stream's thread -------------------------------------------------- */

static void
lanes_free (fw_stream_lanes_t *ls)
{
   if (!ls) {
      return;
   }
   for (int i = 0; ls->lane && i < ls->n; i++) {
      lane_t *l = &ls->lane[i];
      for (int k = 0; k < l->count; k++) {
         free (l->ring[(l->head + k) % LANE_QUEUE].doc);
      }
      pthread_cond_destroy (&l->has_items);
      pthread_cond_destroy (&l->has_room);
      pthread_mutex_destroy (&l->mu);
   }
   for (int i = 0; ls->slot && i < WINDOW; i++) {
      bson_destroy (&ls->slot[i].processed);
      bson_destroy (&ls->slot[i].resume);
   }
   pthread_cond_destroy (&ls->moved);
   pthread_mutex_destroy (&ls->mu);
   free (ls->lane);
   free (ls->slot);
   free (ls);
}

/* Tells the lanes to end and joins them. */
static void
lanes_join (fw_stream_lanes_t *ls)
{
   for (int i = 0; i < ls->n; i++) {
      lane_t *l = &ls->lane[i];
      pthread_mutex_lock (&l->mu);
      l->stop = true;
      pthread_cond_broadcast (&l->has_items);
      pthread_mutex_unlock (&l->mu);
   }
   for (int i = 0; i < ls->n; i++) {
      if (ls->lane[i].started) {
         pthread_join (ls->lane[i].thread, NULL);
         ls->lane[i].started = false;
      }
   }
}

static bool
lanes_start (fw_stream_worker_t *w)
{
   fw_stream_lanes_t *ls = calloc (1, sizeof *ls);
   int n = w->lane.n;
   int rc;

   if (!ls || !(ls->lane = calloc ((size_t) n, sizeof *ls->lane)) ||
       !(ls->slot = calloc (WINDOW, sizeof *ls->slot))) {
      free (ls ? ls->lane : NULL);
      free (ls);
      snprintf (w->failure, sizeof w->failure, "out of memory starting %d lanes", n);
      return false;
   }
   if ((rc = sync_init (&ls->mu, &ls->moved, NULL)) != 0) {
      free (ls->lane);
      free (ls->slot);
      free (ls);
      snprintf (w->failure, sizeof w->failure, "cannot set up the wait of %d lanes: %s", n,
                strerror (rc));
      return false;
   }
   ls->w = w;
   ls->n = 0; /* counts the lanes set up, which lanes_free takes down */
   for (int i = 0; i < WINDOW; i++) {
      bson_init (&ls->slot[i].processed);
      bson_init (&ls->slot[i].resume);
   }
   ls->custom_key = fw_dispatcher_custom_key (w->d);
   for (int i = 0; i < n; i++) {
      lane_t *l = &ls->lane[i];
      l->ls = ls;
      l->d = w->lane.d[i];
      l->pool = w->pool;
      l->shutdown = w->shutdown;
      l->metrics = w->metrics;
      if ((rc = sync_init (&l->mu, &l->has_items, &l->has_room)) != 0) {
         lanes_free (ls);
         snprintf (w->failure, sizeof w->failure, "cannot set up the wait of lane %d of %d: %s", i,
                   n, strerror (rc));
         return false;
      }
      ls->n++;
      /* The lane stops with the stream, counts in its metrics block. */
      fw_dispatcher_set_shutdown (l->d, w->shutdown);
      fw_dispatcher_set_metrics (l->d, w->metrics);
   }
   for (int i = 0; i < n; i++) {
      if (pthread_create (&ls->lane[i].thread, NULL, lane_main, &ls->lane[i]) != 0) {
         lanes_join (ls);
         lanes_free (ls);
         snprintf (w->failure, sizeof w->failure, "cannot start the thread of lane %d of %d", i, n);
         return false;
      }
      ls->lane[i].started = true;
   }
   w->lane.run = ls;
   fw_log (FW_LOG_INFO, w->cfg->name,
           "%d lanes running script version %s: in order per key, keys in parallel", n,
           fw_lua_host_version (fw_dispatcher_host (w->d)));
   return true;
}

/* Copies the lanes' failure (if any) to w->failure; true when there was one. */
static bool
take_failure (fw_stream_lanes_t *ls)
{
   bool failed;

   pthread_mutex_lock (&ls->mu);
   failed = ls->failed;
   if (failed) {
      snprintf (ls->w->failure, sizeof ls->w->failure, "%s", ls->failure);
   }
   pthread_mutex_unlock (&ls->mu);
   return failed;
}

bool
fw_stream_lanes_advance (fw_stream_worker_t *w, fw_position_t *p)
{
   fw_stream_lanes_t *ls = w->lane.run;
   uint64_t moved = 0;
   bool empty;

   pthread_mutex_lock (&ls->mu);
   while (ls->base < ls->next && ls->slot[ls->base % WINDOW].done) {
      ls->base++;
      moved++;
   }
   empty = ls->base == ls->next;
   pthread_mutex_unlock (&ls->mu);
   if (moved) {
      /* Only this thread fills slots: the newest one passed stays as it is. */
      slot_t *s = &ls->slot[(ls->base - 1) % WINDOW];
      if (s->has_processed) {
         fw_position_set_token (&p->processed, &s->processed);
         p->has_processed = true;
      }
      if (!bson_empty (&s->resume)) {
         fw_position_set_token (&p->resume, &s->resume);
         p->has_resume = true;
      }
      p->dirty = true;
      p->since_save += (int) (moved < (uint64_t) WINDOW ? moved : WINDOW);
   }
   return empty;
}

/* Waits until every event read is done. False on shutdown or when a lane
 * failed (w->failure then says why). */
static bool
settle (fw_stream_worker_t *w, fw_position_t *p)
{
   fw_stream_lanes_t *ls = w->lane.run;

   while (!fw_stream_lanes_advance (w, p)) {
      if (fw_shutdown_requested (w->shutdown) || take_failure (ls)) {
         return false;
      }
      pthread_mutex_lock (&ls->mu);
      if (!ls->slot[ls->base % WINDOW].done && !ls->failed) {
         wait_slice (&ls->moved, &ls->mu);
      }
      pthread_mutex_unlock (&ls->mu);
   }
   return !take_failure (ls);
}

bool
fw_stream_lanes_settle (fw_stream_worker_t *w, fw_position_t *p)
{
   return !w->lane.run || settle (w, p);
}

void
fw_stream_lanes_stop (fw_stream_worker_t *w, fw_position_t *p)
{
   fw_stream_lanes_t *ls = w->lane.run;

   if (!ls) {
      return;
   }
   settle (w, p); /* lanes finish what they hold, unless a shutdown or failure came */
   lanes_join (ls);
   fw_stream_lanes_advance (w, p); /* what finished as the lanes stopped */
   lanes_free (ls);
   w->lane.run = NULL;
}

bool
fw_stream_lanes_boundary (fw_stream_worker_t *w, fw_position_t *p)
{
   if (__atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE)) {
      if (w->lane.run) {
         /* Every event read so far is handled by the old version, every
          * later one by the new, in all lanes. */
         if (!settle (w, p)) {
            fw_stream_lanes_stop (w, p);
            return false;
         }
         fw_stream_lanes_stop (w, p);
      }
      if (fw_stream_reload_apply (&w->pending) && w->lane.n > 1) {
         fw_log (FW_LOG_INFO, w->cfg->name,
                 "reload: all %d lanes switch to version %s after the same event (lanes drained)",
                 w->lane.n, fw_lua_host_version (fw_dispatcher_host (w->d)));
      }
   }
   if (!w->lane.run && w->lane.n > 1) {
      return lanes_start (w);
   }
   return true;
}

static uint64_t
hash_string (const char *s)
{
   uint64_t h = 1469598103934665603ULL;
   for (; *s; s++) {
      h = (h ^ (unsigned char) *s) * 1099511628211ULL;
   }
   return h;
}

/* The lane of ev: hash of its sequence key. */
static int
route (fw_stream_lanes_t *ls, const fw_event_t *ev)
{
   fw_stream_worker_t *w = ls->w;
   bson_t key;
   char *id = NULL;
   uint64_t h;

   if (ev->op == FW_OP_OTHER) {
      return 0; /* drop, rename, ...: no key */
   }
   if (ls->custom_key) {
      /* A key function that fails here fails in the lane too, under its
       * retry policy; meanwhile the documentKey routes the event. */
      id = fw_dispatcher_sequence_key (w->d, ev);
   }
   if (id) {
      h = hash_string (id);
      bson_free (id);
      return (int) (h % (uint64_t) ls->n);
   }
   if (fw_event_order_key (ev, &key)) {
      /* The key's bytes ({ _id }, not the shard key beside it): equal
       * exactly when its sequence id (fw_dlq_sequence_id, canonical Extended
       * JSON, which keeps types) is, without writing the JSON for every
       * event. */
      const uint8_t *data = bson_get_data (&key);
      h = 1469598103934665603ULL;
      for (uint32_t i = 0; i < key.len; i++) {
         h = (h ^ data[i]) * 1099511628211ULL;
      }
      bson_destroy (&key);
      return (int) (h % (uint64_t) ls->n);
   }
   return 0;
}

/* A stop asked while waiting for room: shutdown, or a lane failed. */
static fw_lanes_step_t
interrupted (fw_stream_lanes_t *ls)
{
   return take_failure (ls) ? FW_LANES_FAILED : FW_LANES_STOPPED;
}

static bool
must_stop (fw_stream_lanes_t *ls)
{
   bool failed;
   pthread_mutex_lock (&ls->mu);
   failed = ls->failed;
   pthread_mutex_unlock (&ls->mu);
   return failed || fw_shutdown_requested (ls->w->shutdown);
}

/* Takes the next ticket, waiting while the window is full. */
static fw_lanes_step_t
reserve (fw_stream_worker_t *w, fw_position_t *p, const fw_event_t *ev, const bson_t *token,
         bool done, uint64_t *ticket)
{
   fw_stream_lanes_t *ls = w->lane.run;
   slot_t *s;

   while (ls->next - ls->base >= WINDOW) {
      if (must_stop (ls)) {
         return interrupted (ls);
      }
      if (fw_stream_lanes_advance (w, p) || ls->next - ls->base < WINDOW) {
         break;
      }
      pthread_mutex_lock (&ls->mu);
      if (!ls->slot[ls->base % WINDOW].done && !ls->failed) {
         wait_slice (&ls->moved, &ls->mu);
      }
      pthread_mutex_unlock (&ls->mu);
   }
   *ticket = ls->next;
   s = &ls->slot[*ticket % WINDOW];
   s->has_processed = fw_position_set_event_token (&s->processed, ev);
   if (token) {
      fw_position_set_token (&s->resume, token);
   } else {
      bson_reinit (&s->resume);
   }
   pthread_mutex_lock (&ls->mu);
   s->done = done;
   ls->next++;
   pthread_mutex_unlock (&ls->mu);
   return FW_LANES_NEXT;
}

/* Hands the event of ticket to lane l, waiting while its queue is full. */
static fw_lanes_step_t
hand_over (fw_stream_worker_t *w, lane_t *l, const fw_event_t *ev, uint64_t ticket)
{
   fw_stream_lanes_t *ls = w->lane.run;
   item_t it = {NULL, ev->doc->len, ticket};

   if (!(it.doc = malloc (it.len))) {
      snprintf (w->failure, sizeof w->failure,
                "out of memory handing an event to its lane; the checkpoint stays before it");
      return FW_LANES_FAILED;
   }
   memcpy (it.doc, bson_get_data (ev->doc), it.len);
   pthread_mutex_lock (&l->mu);
   while (l->count == LANE_QUEUE) {
      pthread_mutex_unlock (&l->mu);
      if (must_stop (ls)) {
         free (it.doc);
         return interrupted (ls);
      }
      pthread_mutex_lock (&l->mu);
      if (l->count == LANE_QUEUE) {
         wait_slice (&l->has_room, &l->mu);
      }
   }
   l->ring[(l->head + l->count) % LANE_QUEUE] = it;
   l->count++;
   pthread_cond_signal (&l->has_items);
   pthread_mutex_unlock (&l->mu);
   return FW_LANES_NEXT;
}

/* The program a reload left pending has lanes too. */
static bool
pending_has_lanes (fw_stream_worker_t *w)
{
   bool lanes;
   pthread_mutex_lock (&w->pending.mu);
   lanes = w->pending.next && w->pending.next->lane.n > 1;
   pthread_mutex_unlock (&w->pending.mu);
   return lanes;
}

fw_lanes_step_t
fw_stream_lanes_take (fw_stream_worker_t *w, fw_position_t *p, const fw_event_t *ev, bool to_lane,
                      const bson_t *token)
{
   fw_stream_lanes_t *ls = w->lane.run;
   fw_lanes_step_t step;
   uint64_t ticket;

   if (__atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE) && pending_has_lanes (w)) {
      /* A reload came while the reader waited: this event runs the new
       * version, in every lane. (A reload to lanes = 1 applies at the next
       * boundary, after this event.) */
      if (!fw_stream_lanes_boundary (w, p)) {
         return fw_shutdown_requested (w->shutdown) ? FW_LANES_STOPPED : FW_LANES_FAILED;
      }
      ls = w->lane.run;
   }
   if ((step = reserve (w, p, ev, token, !to_lane, &ticket)) != FW_LANES_NEXT) {
      return step;
   }
   if (to_lane && (step = hand_over (w, &ls->lane[route (ls, ev)], ev, ticket)) != FW_LANES_NEXT) {
      return step;
   }
   fw_stream_lanes_advance (w, p);
   if (p->since_save >= w->cfg->save_every) {
      fw_position_save_async (&w->ckpt, p, "save_every");
   }
   if (ev->operation_type && strcmp (ev->operation_type, "invalidate") == 0) {
      /* The change stream ends here: every lane finishes first. */
      if (!settle (w, p)) {
         return take_failure (ls) ? FW_LANES_FAILED : FW_LANES_STOPPED;
      }
      p->invalidated = true;
      fw_position_save (&w->ckpt, p, "invalidate");
      return FW_LANES_INVALIDATED;
   }
   return FW_LANES_NEXT;
}
