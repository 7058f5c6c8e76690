/*
 * lease.c - a stream's leader lease in _fw_leases (see lease.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/mono_cond.h"
#include "runtime/ha/lease-private.h"
#include "runtime/ha/lease.h"

#define MIN_MARGIN_MS 200
/* A standby reads a held lease at least this often (a released one is taken
 * within it). */
#define STANDBY_READ_MS 250

/* --- clocks ---------------------------------------------------------------- */

static pthread_once_t skew_once = PTHREAD_ONCE_INIT;
static int64_t skew_ms;

/* FW_TEST_CLOCK_SKEW_MS, a test hook (docs/operations.md): shifts the wall
 * clock this module reads, as a host whose clock is off would. Read here and
 * nowhere else; leases never decide anything by it (only the reported
 * clock_offset_ms shows it), which is what the clock-skew test proves. */
static void
read_skew (void)
{
   const char *v = getenv ("FW_TEST_CLOCK_SKEW_MS");
   char *end = NULL;
   long long n;
   if (v && *v) {
      errno = 0;
      n = strtoll (v, &end, 10);
      if (errno == 0 && end && *end == '\0' && n > -86400000LL && n < 86400000LL) {
         skew_ms = (int64_t) n;
      }
   }
}

static int64_t
wall_ms (void)
{
   pthread_once (&skew_once, read_skew);
   return fw_now_ms () + skew_ms;
}

/* --- the owner id ------------------------------------------------------------ */

static pthread_once_t owner_once = PTHREAD_ONCE_INIT;
static char owner_id[200];

static void
make_owner_id (void)
{
   unsigned char r[16];
   char host[128] = "unknown-host";
   char hex[33];
   size_t got = 0;

   while (got < sizeof r) {
      ssize_t n = getrandom (r + got, sizeof r - got, 0);
      if (n <= 0) {
         break;
      }
      got += (size_t) n;
   }
   if (got < sizeof r) {
      /* No entropy source: time and pid still tell processes apart. */
      uint64_t x = (uint64_t) fw_mono_ms () ^ ((uint64_t) getpid () << 32) ^ (uint64_t) wall_ms ();
      for (size_t i = 0; i < sizeof r; i++) {
         x = x * 6364136223846793005ULL + 1442695040888963407ULL;
         r[i] = (unsigned char) (x >> 56);
      }
   }
   if (gethostname (host, sizeof host - 1) != 0) {
      snprintf (host, sizeof host, "unknown-host");
   }
   host[sizeof host - 1] = '\0';
   for (size_t i = 0; i < sizeof r; i++) {
      snprintf (hex + 2 * i, 3, "%02x", r[i]);
   }
   snprintf (owner_id, sizeof owner_id, "%.120s:%d:%.8s-%.4s-%.4s-%.4s-%.12s", host,
             (int) getpid (), hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

const char *
fw_lease_owner_id (void)
{
   pthread_once (&owner_once, make_owner_id);
   return owner_id;
}

int64_t
fw_lease_margin_ms (int64_t lease_ms)
{
   return lease_ms / 10 > MIN_MARGIN_MS ? lease_ms / 10 : MIN_MARGIN_MS;
}

const char *
fw_lease_role_name (fw_lease_role_t role)
{
   switch (role) {
   case FW_LEASE_LEADER:
      return "leader";
   case FW_LEASE_RELEASED:
      return "released";
   default:
      return "standby";
   }
}

/* --- the thread -------------------------------------------------------------- */

/* With the lock held: what a standby's read saw (issue 38: a live holder,
 * or since when none). seen NULL: nothing known (the view is forgotten). */
static void
note_seen (fw_lease_t *l, const fw_lease_doc_t *seen)
{
   int64_t now = fw_mono_ms ();
   bool live;

   if (!seen) {
      l->seen.read = l->seen.live = false;
      return;
   }
   live = seen->exists && seen->owner_is_string && seen->owner[0] &&
          strcmp (seen->owner, l->owner) != 0 && seen->has_expires && seen->has_now &&
          seen->expires_ms > seen->server_now_ms;
   if (live) {
      l->seen.expires_mono = now + (seen->expires_ms - seen->server_now_ms);
   } else if (!l->seen.read || l->seen.live) {
      /* Free since its expiresAt by the server's clock (a released lease's
       * is the release), else from now. */
      int64_t ago = seen->has_expires && seen->has_now && seen->server_now_ms > seen->expires_ms
                       ? seen->server_now_ms - seen->expires_ms
                       : 0;
      l->seen.free_since_mono = now - ago;
   }
   l->seen.live = live;
   l->seen.read = true;
}

static void
set_standby (fw_lease_t *l, const fw_lease_doc_t *seen)
{
   pthread_mutex_lock (&l->mu);
   if (l->role != FW_LEASE_RELEASED) {
      l->role = FW_LEASE_STANDBY;
   }
   l->holding = false;
   l->deadline_ms = 0;
   note_seen (l, seen);
   if (seen) {
      snprintf (l->holder, sizeof l->holder, "%s", seen->owner_is_string ? seen->owner : "");
      if (seen->has_epoch) {
         l->epoch = seen->epoch;
      }
   }
   pthread_cond_broadcast (&l->cond);
   pthread_mutex_unlock (&l->mu);
}

static void
note_offset (fw_lease_t *l, const fw_lease_doc_t *d)
{
   if (d->has_now) {
      pthread_mutex_lock (&l->mu);
      l->clock_offset_ms = d->server_now_ms - wall_ms ();
      pthread_mutex_unlock (&l->mu);
   }
}

/* The take succeeded (got: the lease as the server left it, seen: the read
 * before it, sent: when the take was sent, free_ms: how long the lease had
 * been without a live holder, -1: it had one): this instance leads.
 * Returns how long to wait before the first renewal. */
static int64_t
took_lease (fw_lease_t *l, const fw_lease_doc_t *seen, const fw_lease_doc_t *got, int64_t sent,
            int64_t free_ms)
{
   const char *me = l->owner;
   int64_t interval = l->lease_ms / 3;

   note_offset (l, got);
   pthread_mutex_lock (&l->mu);
   if (l->role == FW_LEASE_RELEASED) {
      pthread_mutex_unlock (&l->mu);
      return interval; /* given up meanwhile: the release step gives it back */
   }
   l->holding = true;
   l->epoch = got->epoch;
   l->deadline_ms = sent + l->lease_ms - l->margin_ms;
   l->role = FW_LEASE_LEADER;
   l->acquisitions++;
   note_seen (l, NULL);
   snprintf (l->holder, sizeof l->holder, "%.250s", me);
   pthread_cond_broadcast (&l->cond);
   pthread_mutex_unlock (&l->mu);
   {
      /* A lease taken from a holder that died (its lease expired, not given
       * up): how long the unit went unread, as the server's clock says. */
      char orphan[160] = "";
      if (seen->exists && seen->owner_is_string && seen->owner[0] &&
          strcmp (seen->owner, me) != 0 && free_ms >= 0) {
         snprintf (orphan, sizeof orphan,
                   "; it had no live holder for %lld ms since the lease "
                   "of %.80s expired",
                   (long long) (fw_mono_ms () - sent + free_ms), seen->owner);
      }
      fw_log (FW_LOG_INFO, l->stream,
              "role: leader (took the lease, epoch %lld, for %lld ms; renewing every %lld ms; "
              "this host's clock reads %+lld ms against the server's, which alone decides "
              "expiry%s)",
              (long long) got->epoch, (long long) l->lease_ms, (long long) interval,
              (long long) -l->clock_offset_ms, orphan);
   }
   /* The first renewal lease / 3 after the take was sent (see leader_step). */
   interval = sent + interval - fw_mono_ms ();
   return interval > 0 ? interval : 0;
}

/* Standby: read, and take the lease when the read says it can be taken.
 * Returns how long to wait before the next try. */
static int64_t
standby_step (fw_lease_t *l, mongoc_client_t *client, bool *warned)
{
   const char *me = l->owner;
   int64_t interval = l->lease_ms / 3;
   fw_lease_doc_t seen, got;
   bson_error_t berr;
   int64_t floor = 0, sent, free_ms;
   fw_lease_take_t t;

   if (!fw_lease__read (l, client, &seen, &berr)) {
      if (!*warned) {
         fw_log (FW_LOG_WARN, l->stream,
                 "cannot read the lease in %s.%s: %s; trying again every "
                 "%lld ms",
                 l->database, FW_LEASE_COLLECTION, berr.message, (long long) interval);
         *warned = true;
      }
      return interval;
   }
   note_offset (l, &seen);
   pthread_mutex_lock (&l->mu);
   note_seen (l, &seen);
   free_ms = l->seen.live ? -1 : fw_mono_ms () - l->seen.free_since_mono;
   pthread_mutex_unlock (&l->mu);
   if (seen.exists && seen.owner_is_string && strcmp (seen.owner, me) != 0 && seen.has_expires &&
       seen.has_now && seen.expires_ms > seen.server_now_ms) {
      /* Held: look again when it would expire (the server's time), and at
       * least every STANDBY_READ_MS, so that a released lease (SIGTERM on the
       * leader) is taken within that; reads only, never a failing update. */
      int64_t left = seen.expires_ms - seen.server_now_ms + 20;
      int64_t every = interval < STANDBY_READ_MS ? interval : STANDBY_READ_MS;
      set_standby (l, &seen);
      return left < every ? left : every;
   }
   if (l->gate.fn && !l->gate.fn (l->gate.ud)) {
      set_standby (l, &seen); /* takeable, but over this instance's share (shared mode) */
      return interval < STANDBY_READ_MS ? interval : STANDBY_READ_MS;
   }
   if (!fw_lease__read_fence_floor (l, client, &floor, &berr)) {
      fw_log (FW_LOG_WARN, l->stream, "cannot read the checkpoint's epoch: %s", berr.message);
      return interval;
   }
   sent = fw_mono_ms ();
   t = fw_lease__take (l, client, floor, &got, &berr);
   if (t == FW_LEASE_TAKE_ERROR) {
      if (!*warned) {
         fw_log (FW_LOG_WARN, l->stream,
                 "cannot take the lease: %s (code %u); trying again "
                 "every %lld ms",
                 berr.message, berr.code, (long long) interval);
         *warned = true;
      }
      return interval;
   }
   *warned = false;
   if (t == FW_LEASE_TAKE_HELD) {
      /* Lost a race: the take answered with the holder's lease. */
      set_standby (l, got.exists ? &got : NULL);
      return interval;
   }
   return took_lease (l, &seen, &got, sent, free_ms);
}

/* Leader: renew. Returns how long to wait before the next step: the next
 * renewal is sent lease / 3 after this one was sent, not after its answer
 * came, so that slow answers (up to the client's timeout, lease / 3) do not
 * add up: the server sees the renewals at most about 2 x lease / 3 apart,
 * not lease. */
static int64_t
leader_step (fw_lease_t *l, mongoc_client_t *client, int64_t epoch, bool *failing)
{
   int64_t interval = l->lease_ms / 3;
   int64_t retry = l->lease_ms / 10 > 100 ? l->lease_ms / 10 : 100;
   int64_t sent = fw_mono_ms (), left, next;
   bson_error_t berr;
   bool matched;

   if (fw_lease__update_held (l, client, epoch, false, &matched, &berr)) {
      if (!matched) {
         set_standby (l, NULL);
         fw_log (FW_LOG_WARN, l->stream,
                 "role: standby (the lease, epoch %lld, was taken by another instance: "
                 "handling stops)",
                 (long long) epoch);
         *failing = false;
         return 0;
      }
      pthread_mutex_lock (&l->mu);
      if (l->holding && l->epoch == epoch) {
         l->deadline_ms = sent + l->lease_ms - l->margin_ms;
      }
      pthread_mutex_unlock (&l->mu);
      if (*failing) {
         fw_log (FW_LOG_INFO, l->stream, "lease renewed again (epoch %lld)", (long long) epoch);
         *failing = false;
      }
      next = sent + interval - fw_mono_ms ();
      return next > 0 ? next : 0;
   }
   left = fw_lease_remaining_ms (l);
   if (left <= 0) {
      set_standby (l, NULL);
      fw_log (FW_LOG_WARN, l->stream,
              "role: standby (could not renew the lease, epoch %lld, before its deadline: %s; "
              "handling stopped %lld ms before the lease expires on the server)",
              (long long) epoch, berr.message, (long long) l->margin_ms);
      *failing = false;
      return 0;
   }
   fw_log (FW_LOG_WARN, l->stream,
           "cannot renew the lease (epoch %lld): %s (code %u); handling stops in %lld ms unless "
           "a renewal succeeds",
           (long long) epoch, berr.message, berr.code, (long long) left);
   *failing = true;
   return retry < left ? retry : left;
}

static void
release_step (fw_lease_t *l, mongoc_client_t *client)
{
   bson_error_t berr;
   bool matched = false, held, ok = true;
   int64_t epoch;

   pthread_mutex_lock (&l->mu);
   held = l->holding;
   epoch = l->epoch;
   pthread_mutex_unlock (&l->mu);
   if (held) {
      ok = fw_lease__update_held (l, client, epoch, true, &matched, &berr);
      if (!ok) {
         fw_log (FW_LOG_WARN, l->stream,
                 "cannot release the lease (epoch %lld): %s; a standby "
                 "takes over when it expires",
                 (long long) epoch, berr.message);
      } else {
         fw_log (FW_LOG_INFO, l->stream, "role: released (gave up the lease, epoch %lld%s)",
                 (long long) epoch, matched ? "" : ": it was no longer ours");
      }
   }
   pthread_mutex_lock (&l->mu);
   l->role = FW_LEASE_RELEASED;
   l->holding = false;
   l->deadline_ms = 0;
   l->release.done = true;
   l->release.ok = ok;
   pthread_cond_broadcast (&l->cond);
   pthread_mutex_unlock (&l->mu);
}

/* ha.mode = "shared": gives the lease up and stays a standby. */
static void
yield_step (fw_lease_t *l, mongoc_client_t *client)
{
   bson_error_t berr;
   bool matched = false, held;
   int64_t epoch;

   pthread_mutex_lock (&l->mu);
   held = l->holding;
   epoch = l->epoch;
   pthread_mutex_unlock (&l->mu);
   if (held && client && !fw_lease__update_held (l, client, epoch, true, &matched, &berr)) {
      fw_log (FW_LOG_WARN, l->stream,
              "cannot give the lease up (epoch %lld): %s; another "
              "instance takes it when it expires",
              (long long) epoch, berr.message);
   }
   pthread_mutex_lock (&l->mu);
   if (l->role != FW_LEASE_RELEASED) {
      l->role = FW_LEASE_STANDBY;
   }
   l->holding = false;
   l->deadline_ms = 0;
   l->holder[0] = '\0';
   note_seen (l, NULL);
   l->yield.asked = false;
   l->yield.done = true;
   pthread_cond_broadcast (&l->cond);
   pthread_mutex_unlock (&l->mu);
}

static void
wait_until (fw_lease_t *l, int64_t at_ms)
{
   pthread_mutex_lock (&l->mu);
   while (!l->stop && !(l->release.asked && !l->release.done) && !l->yield.asked &&
          fw_mono_ms () < at_ms) {
      fw_mono_cond_wait_until_ms (&l->cond, &l->mu, at_ms);
   }
   pthread_mutex_unlock (&l->mu);
}

static void *
lease_main (void *arg)
{
   fw_lease_t *l = arg;
   mongoc_client_t *client = mongoc_client_new_from_uri (l->uri);
   bool warned = false, failing = false;

   if (!client) {
      fw_log (FW_LOG_ERROR, l->stream,
              "cannot create the lease's MongoDB client: this instance "
              "stays a standby");
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      char app[128];
      /* One name per instance, so that a fail point can cut one leader off. */
      if (l->owner_given) {
         snprintf (app, sizeof app, "%s-%.100s", FW_LEASE_APPNAME, l->owner);
      } else {
         snprintf (app, sizeof app, "%s-%d", FW_LEASE_APPNAME, (int) getpid ());
      }
      if (!mongoc_client_set_appname (client, app)) {
         fw_log (FW_LOG_WARN, l->stream, "cannot set the lease client's appname \"%s\"", app);
      }
   }
   for (;;) {
      int64_t wait, epoch;
      bool holding, stop, release;

      pthread_mutex_lock (&l->mu);
      stop = l->stop;
      release = l->release.asked && !l->release.done;
      holding = l->holding;
      epoch = l->epoch;
      pthread_mutex_unlock (&l->mu);
      if (stop) {
         break;
      }
      if (release) {
         if (client) {
            release_step (l, client);
         } else {
            pthread_mutex_lock (&l->mu);
            l->role = FW_LEASE_RELEASED;
            l->release.done = l->release.ok = true;
            pthread_cond_broadcast (&l->cond);
            pthread_mutex_unlock (&l->mu);
         }
         continue;
      }
      pthread_mutex_lock (&l->mu);
      release = l->role == FW_LEASE_RELEASED;
      if (l->yield.asked && !release) {
         pthread_mutex_unlock (&l->mu);
         yield_step (l, client);
         continue;
      }
      pthread_mutex_unlock (&l->mu);
      if (!client || release) {
         wait = 60000;
      } else if (holding) {
         wait = leader_step (l, client, epoch, &failing);
      } else {
         wait = standby_step (l, client, &warned);
      }
      wait_until (l, fw_mono_ms () + wait);
   }
   if (client) {
      mongoc_client_destroy (client);
   }
   return NULL;
}

/* --- the interface ----------------------------------------------------------- */

static fw_lease_t *lease_start (const mongoc_uri_t *uri, const char *database, const char *stream,
                                int64_t lease_ms, const char *owner, fw_lease_gate_fn gate,
                                void *ud, fw_error_t *error);

fw_lease_t *
fw_lease_new (const mongoc_uri_t *uri, const char *database, const char *stream, int64_t lease_ms,
              const char *owner, fw_error_t *error)
{
   return lease_start (uri, database, stream, lease_ms, owner, NULL, NULL, error);
}

fw_lease_t *
fw_lease_new_gated (const mongoc_uri_t *uri, const char *database, const char *stream,
                    int64_t lease_ms, const char *owner, fw_lease_gate_fn gate, void *ud,
                    fw_error_t *error)
{
   return lease_start (uri, database, stream, lease_ms, owner, gate, ud, error);
}

static fw_lease_t *
lease_start (const mongoc_uri_t *uri, const char *database, const char *stream, int64_t lease_ms,
             const char *owner, fw_lease_gate_fn gate, void *ud, fw_error_t *error)
{
   fw_lease_t *l = calloc (1, sizeof *l);
   int32_t timeout_ms;
   int rc;
   bool locks_made;

   if (lease_ms < 1000) {
      lease_ms = 1000;
   }
   if (!l || !(l->database = strdup (database)) || !(l->stream = strdup (stream)) ||
       !(l->owner = strdup (owner ? owner : fw_lease_owner_id ())) ||
       !(l->uri = mongoc_uri_copy (uri))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory creating the lease of stream \"%s\"",
                    stream);
      if (l) {
         free (l->database);
         free (l->stream);
         free (l->owner);
      }
      free (l);
      return NULL;
   }
   /* A renewal that hangs must end before the leader's deadline passes
    * unnoticed: every wait of the lease's client is at most lease / 3. */
   timeout_ms = (int32_t) (lease_ms / 3 > 100 ? lease_ms / 3 : 100);
   if (!mongoc_uri_set_option_as_int32 (l->uri, MONGOC_URI_SOCKETTIMEOUTMS, timeout_ms) ||
       !mongoc_uri_set_option_as_int32 (l->uri, MONGOC_URI_CONNECTTIMEOUTMS, timeout_ms) ||
       !mongoc_uri_set_option_as_int32 (l->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, timeout_ms)) {
      fw_log (FW_LOG_WARN, stream,
              "the lease's client keeps the URI's timeouts: cannot set them "
              "to %d ms",
              (int) timeout_ms);
   }
   l->owner_given = owner != NULL;
   l->gate.fn = gate;
   l->gate.ud = ud;
   l->lease_ms = lease_ms;
   l->margin_ms = fw_lease_margin_ms (lease_ms);
   fw_lease_owner_id ();
   locks_made = (rc = fw_mono_lock_init (&l->mu, &l->cond)) == 0;
   if (!locks_made || (rc = pthread_create (&l->thread, NULL, lease_main, l)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the lease thread of stream \"%s\": %s",
                    stream, strerror (rc));
      if (locks_made) {
         fw_mono_lock_destroy (&l->mu, &l->cond);
      }
      mongoc_uri_destroy (l->uri);
      free (l->database);
      free (l->stream);
      free (l->owner);
      free (l);
      return NULL;
   }
   return l;
}

/* With the lock held. */
static bool
leading (fw_lease_t *l, int64_t now)
{
   return l->holding && l->role == FW_LEASE_LEADER && now < l->deadline_ms;
}

bool
fw_lease_is_leader (fw_lease_t *l, int64_t *epoch)
{
   bool yes;
   pthread_mutex_lock (&l->mu);
   yes = leading (l, fw_mono_ms ());
   if (yes && epoch) {
      *epoch = l->epoch;
   }
   pthread_mutex_unlock (&l->mu);
   return yes;
}

bool
fw_lease_wait_leader (fw_lease_t *l, int64_t ms, int64_t *epoch)
{
   int64_t end = fw_mono_ms () + (ms > 0 ? ms : 0);
   bool yes;

   pthread_mutex_lock (&l->mu);
   while (!(yes = leading (l, fw_mono_ms ())) && !l->stop && l->role != FW_LEASE_RELEASED &&
          fw_mono_ms () < end) {
      fw_mono_cond_wait_until_ms (&l->cond, &l->mu, end);
   }
   if (yes && epoch) {
      *epoch = l->epoch;
   }
   pthread_mutex_unlock (&l->mu);
   return yes;
}

int64_t
fw_lease_remaining_ms (fw_lease_t *l)
{
   int64_t now = fw_mono_ms (), left = 0;
   pthread_mutex_lock (&l->mu);
   if (leading (l, now)) {
      left = l->deadline_ms - now;
   }
   pthread_mutex_unlock (&l->mu);
   return left;
}

/* With l->mu held: stops the handlers now (whatever the server answers), raises
 * *asked for the lease thread and waits until *done or end_ms (CLOCK_MONOTONIC). */
static void
ask_thread_locked (fw_lease_t *l, bool *asked, const bool *done, int64_t end_ms)
{
   l->deadline_ms = 0;
   *asked = true;
   pthread_cond_broadcast (&l->cond);
   while (!*done && fw_mono_ms () < end_ms) {
      fw_mono_cond_wait_until_ms (&l->cond, &l->mu, end_ms);
   }
}

bool
fw_lease_release (fw_lease_t *l, int64_t wait_ms)
{
   int64_t end = fw_mono_ms () + wait_ms;
   bool ok;

   pthread_mutex_lock (&l->mu);
   ask_thread_locked (l, &l->release.asked, &l->release.done, end);
   ok = l->release.done && l->release.ok;
   pthread_mutex_unlock (&l->mu);
   return ok;
}

bool
fw_lease_yield (fw_lease_t *l, int64_t wait_ms)
{
   int64_t end = fw_mono_ms () + wait_ms;
   bool ok;

   pthread_mutex_lock (&l->mu);
   l->yield.done = false;
   ask_thread_locked (l, &l->yield.asked, &l->yield.done, end);
   ok = l->yield.done;
   pthread_mutex_unlock (&l->mu);
   return ok;
}

void
fw_lease_status (fw_lease_t *l, fw_lease_status_t *out)
{
   int64_t now = fw_mono_ms ();
   memset (out, 0, sizeof *out);
   pthread_mutex_lock (&l->mu);
   out->role = l->role == FW_LEASE_RELEASED ? FW_LEASE_RELEASED
               : leading (l, now)           ? FW_LEASE_LEADER
                                            : FW_LEASE_STANDBY;
   out->epoch = l->epoch;
   snprintf (out->holder, sizeof out->holder, "%s", l->holder);
   out->remaining_ms = out->role == FW_LEASE_LEADER ? l->deadline_ms - now : 0;
   out->clock_offset_ms = l->clock_offset_ms;
   out->acquisitions = l->acquisitions;
   out->free_ms = -1;
   if (out->role != FW_LEASE_LEADER && l->seen.read) {
      out->live_holder = l->seen.live;
      if (l->seen.live) {
         out->expires_in_ms = l->seen.expires_mono - now;
      } else {
         out->free_ms = now - l->seen.free_since_mono;
      }
   }
   pthread_mutex_unlock (&l->mu);
}

void
fw_lease_destroy (fw_lease_t *l)
{
   if (!l) {
      return;
   }
   pthread_mutex_lock (&l->mu);
   l->stop = true;
   pthread_cond_broadcast (&l->cond);
   pthread_mutex_unlock (&l->mu);
   pthread_join (l->thread, NULL);
   fw_mono_lock_destroy (&l->mu, &l->cond);
   mongoc_uri_destroy (l->uri);
   free (l->database);
   free (l->stream);
   free (l->owner);
   free (l);
}
