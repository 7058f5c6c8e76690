/*
 * shared_units.c - ha.mode = "shared" (issue 31, shared_units.h): this
 * instance's membership in <database>._fw_members, renewed and counted on
 * its own thread and client, and the share of the units it may lead.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/write_reply.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/mono_cond.h"
#include "runtime/ha/group_start.h"
#include "runtime/ha/shared_units.h"

#define MAX_UNITS 4096
#define MAX_MEMBERS 64

struct fw_shared_group {
   fw_shared_group_t *next; /* the process's groups (registry below) */
   int refs;
   mongoc_uri_t *uri;
   char *database;
   int64_t lease_ms;
   pthread_t thread;
   pthread_mutex_t mu;
   pthread_cond_t cond; /* CLOCK_MONOTONIC */
   /* Under mu: */
   bool stop;
   fw_lease_t *leases[MAX_UNITS];
   char *starts[MAX_UNITS];      /* each unit's stream's start record (group_start.h), or NULL, */
   uint64_t start_at[MAX_UNITS]; /* ... and the start taken there (0: not yet) */
   bool yielding[MAX_UNITS];
   int n;
   int members;        /* 0: not counted yet (no lease is taken before) */
   char (*live)[256];  /* the live members' ids at the last count (issue 38) */
   int n_live;         /* -1: not counted yet */
   int64_t live_at_ms; /* CLOCK_MONOTONIC: when that count was sent */
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static fw_shared_group_t *registry;

/* --- the members thread ----------------------------------------------------- */

static bool
renew (fw_shared_group_t *g, mongoc_client_t *client, bson_error_t *berr)
{
   bson_t *cmd = BCON_NEW ("update", BCON_UTF8 (FW_MEMBERS_COLLECTION), "updates", "[", "{", "q",
                           "{", "_id", BCON_UTF8 (fw_lease_owner_id ()), "}", "u", "[", "{", "$set",
                           "{", "renewedAt", BCON_UTF8 ("$$NOW"), "expiresAt", "{", "$add", "[",
                           BCON_UTF8 ("$$NOW"), BCON_INT64 (g->lease_ms), "]", "}", "}", "}", "]",
                           "upsert", BCON_BOOL (true), "}", "]");
   bson_t reply;
   bool ok;

   if (!cmd) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      return false;
   }
   /* ok: 1 with writeErrors (a validator, an index refusing the upsert) is
    * a refused renew, not a renewed one. */
   ok = fw_write_reply_ok (
      mongoc_client_write_command_with_opts (client, g->database, cmd, NULL, &reply, berr), &reply,
      berr);
   bson_destroy (&reply);
   bson_destroy (cmd);
   return ok;
}

/* Removes the documents of members gone for more than an hour (their
 * processes' ids never come back), once when this instance joins. */
static void
sweep (fw_shared_group_t *g, mongoc_client_t *client)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, g->database,
                                                             FW_MEMBERS_COLLECTION);
   bson_t *filter = BCON_NEW ("$expr", "{", "$lt", "[", BCON_UTF8 ("$expiresAt"), "{", "$subtract",
                              "[", BCON_UTF8 ("$$NOW"), BCON_INT64 (3600000), "]", "}", "]", "}");
   bson_error_t berr;

   if (filter && !mongoc_collection_delete_many (coll, filter, NULL, NULL, &berr)) {
      fw_log (FW_LOG_WARN, NULL, "shared: cannot remove old members from %s.%s: %s", g->database,
              FW_MEMBERS_COLLECTION, berr.message);
   }
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
}

/* The live members (expiresAt after the server's $$NOW), sorted by id. */
static int
count (fw_shared_group_t *g, mongoc_client_t *client, char (*ids)[256], bson_error_t *berr)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, g->database,
                                                             FW_MEMBERS_COLLECTION);
   bson_t *pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "$expr", "{", "$gt", "[",
                                BCON_UTF8 ("$expiresAt"), BCON_UTF8 ("$$NOW"), "]", "}", "}", "}",
                                "{", "$project", "{", "_id", BCON_INT32 (1), "}", "}", "{", "$sort",
                                "{", "_id", BCON_INT32 (1), "}", "}", "]");
   mongoc_cursor_t *cur;
   const bson_t *doc;
   bson_iter_t it;
   int n = 0;

   if (!pipeline) {
      mongoc_collection_destroy (coll);
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      return -1;
   }
   cur = mongoc_collection_aggregate (coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   while (mongoc_cursor_next (cur, &doc)) {
      if (n < MAX_MEMBERS && bson_iter_init_find (&it, doc, "_id") && BSON_ITER_HOLDS_UTF8 (&it)) {
         snprintf (ids[n++], 256, "%s", bson_iter_utf8 (&it, NULL));
      }
   }
   if (mongoc_cursor_error (cur, berr)) {
      n = -1;
   }
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (pipeline);
   return n;
}

static void
note_members (fw_shared_group_t *g, char (*ids)[256], int n, int64_t sent_ms)
{
   int before, units;
   pthread_mutex_lock (&g->mu);
   if (g->live) {
      memcpy (g->live, ids, (size_t) n * sizeof *ids);
      g->n_live = n;
      g->live_at_ms = sent_ms;
   }
   before = g->members;
   g->members = n > 0 ? n : 1; /* this instance counts itself once announced */
   units = g->n;
   pthread_mutex_unlock (&g->mu);
   if (before != g->members) {
      char list[1024] = "";
      size_t used = 0;
      for (int i = 0; i < n && used + 1 < sizeof list; i++) {
         int w = snprintf (list + used, sizeof list - used, "%s%s", i ? ", " : "", ids[i]);
         used += w > 0 ? (size_t) w : 0;
      }
      fw_log (FW_LOG_INFO, NULL,
              "shared: %d member%s in %s.%s (%s); this instance's share: %d of %d unit%s",
              g->members, g->members == 1 ? "" : "s", g->database, FW_MEMBERS_COLLECTION, list,
              (units + g->members - 1) / g->members, units, units == 1 ? "" : "s");
   }
}

/* Keeps the start records of the streams this instance runs units of
 * alive (group_start.h): the group goes on while one member runs them. */
static bool
renew_starts (fw_shared_group_t *g, mongoc_client_t *client, bson_error_t *berr)
{
   const char **ids;
   char **copies;
   uint64_t *ats;
   int n = 0;
   bool ok = true;

   pthread_mutex_lock (&g->mu);
   ids = calloc ((size_t) g->n + 1, sizeof *ids);
   copies = calloc ((size_t) g->n + 1, sizeof *copies);
   ats = calloc ((size_t) g->n + 1, sizeof *ats);
   for (int i = 0; ids && copies && ats && i < g->n; i++) {
      bool seen = !g->starts[i] || !g->start_at[i];
      for (int j = 0; !seen && j < n; j++) {
         seen = strcmp (ids[j], g->starts[i]) == 0 && ats[j] == g->start_at[i];
      }
      if (!seen && !(ids[n] = copies[n] = strdup (g->starts[i]))) {
         ok = false;
         break;
      }
      if (!seen) {
         ats[n++] = g->start_at[i];
      }
   }
   pthread_mutex_unlock (&g->mu);
   if (!ids || !copies || !ats || !ok) {
      bson_set_error (berr, MONGOC_ERROR_BSON, 0, "out of memory");
      ok = false;
   } else if (n > 0) {
      ok = fw_group_start_renew (client, g->database, ids, ats, n, g->lease_ms, berr);
   }
   for (int j = 0; copies && j < n; j++) {
      free (copies[j]);
   }
   free (copies);
   free (ids);
   free (ats);
   return ok;
}

static void *
members_main (void *arg)
{
   fw_shared_group_t *g = arg;
   mongoc_client_t *client = mongoc_client_new_from_uri (g->uri);
   char (*mine)[256] = calloc (MAX_MEMBERS, 256);
   bool warned = false;

   if (!client || !mine) {
      fw_log (FW_LOG_ERROR, NULL,
              "shared: cannot create the members' client: this instance "
              "takes no unit");
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      if (!mongoc_client_set_appname (client, "flowwarden-members")) {
         fw_log (FW_LOG_WARN, NULL, "shared: cannot set the members' client's appname");
      }
      sweep (g, client);
   }
   pthread_mutex_lock (&g->mu);
   while (!g->stop) {
      int64_t next = fw_mono_ms () + g->lease_ms / 3;
      pthread_mutex_unlock (&g->mu);
      if (client && mine) {
         bson_error_t berr;
         int n = -1;
         int64_t sent = 0;
         bool ok = renew (g, client, &berr) &&
                   (sent = fw_mono_ms (), n = count (g, client, mine, &berr)) >= 0;
         if (ok) {
            note_members (g, mine, n, sent);
            ok = renew_starts (g, client, &berr);
         }
         if (ok) {
            warned = false;
         } else if (!warned) {
            fw_log (FW_LOG_WARN, NULL,
                    "shared: cannot renew or count the members in %s.%s (or keep the "
                    "streams' starts alive): %s; trying again every %lld ms",
                    g->database, FW_MEMBERS_COLLECTION, berr.message,
                    (long long) (g->lease_ms / 3));
            warned = true;
         }
      }
      pthread_mutex_lock (&g->mu);
      while (!g->stop && fw_mono_ms () < next) {
         fw_mono_cond_wait_until_ms (&g->cond, &g->mu, next);
      }
   }
   pthread_mutex_unlock (&g->mu);
   if (client) {
      /* Leaving: the others count one member less at once. */
      bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (fw_lease_owner_id ()));
      mongoc_collection_t *coll = mongoc_client_get_collection (client, g->database,
                                                                FW_MEMBERS_COLLECTION);
      bson_error_t berr;
      if (filter && !mongoc_collection_delete_one (coll, filter, NULL, NULL, &berr)) {
         fw_log (FW_LOG_WARN, NULL,
                 "shared: cannot remove this member from %s.%s: %s (it "
                 "expires after the lease)",
                 g->database, FW_MEMBERS_COLLECTION, berr.message);
      }
      bson_destroy (filter);
      mongoc_collection_destroy (coll);
      mongoc_client_destroy (client);
   }
   free (mine);
   return NULL;
}

/* --- the share ---------------------------------------------------------------- */

/* Units this instance leads, less those being given up; with g->mu held. */
static int
held_locked (fw_shared_group_t *g)
{
   int held = 0;
   for (int i = 0; i < g->n; i++) {
      if (!g->yielding[i] && fw_lease_is_leader (g->leases[i], NULL)) {
         held++;
      }
   }
   return held;
}

static int
share_locked (fw_shared_group_t *g)
{
   return g->members > 0 ? (g->n + g->members - 1) / g->members : 0;
}

/* The lease's gate: take one more unit only below the share. */
static bool
gate (void *ud)
{
   fw_shared_group_t *g = ud;
   bool ok;
   pthread_mutex_lock (&g->mu);
   ok = g->members > 0 && held_locked (g) < share_locked (g);
   pthread_mutex_unlock (&g->mu);
   return ok;
}

bool
fw_shared_should_yield (fw_shared_group_t *g, fw_lease_t *lease)
{
   bool yield = false;
   pthread_mutex_lock (&g->mu);
   for (int i = 0; i < g->n; i++) {
      if (g->leases[i] != lease) {
         continue;
      }
      if (g->yielding[i]) {
         yield = true;
      } else if (g->members > 0 && fw_lease_is_leader (lease, NULL) &&
                 held_locked (g) > share_locked (g)) {
         g->yielding[i] = yield = true;
      }
      break;
   }
   pthread_mutex_unlock (&g->mu);
   return yield;
}

void
fw_shared_yield (fw_shared_group_t *g, fw_lease_t *lease, const char *unit)
{
   fw_shared_figures_t f;
   bool ok = fw_lease_yield (lease, 2000);

   pthread_mutex_lock (&g->mu);
   for (int i = 0; i < g->n; i++) {
      if (g->leases[i] == lease) {
         g->yielding[i] = false;
      }
   }
   pthread_mutex_unlock (&g->mu);
   fw_shared_group_figures (g, &f);
   fw_log (ok ? FW_LOG_INFO : FW_LOG_WARN, unit,
           "shared: released the unit%s (over this instance's share: %d of %d units among %d "
           "members; now holding %d); its checkpoint is saved",
           ok ? "" : " (no answer yet: it expires with its lease)", f.share, f.units, f.members,
           f.held);
}

/* --- the group ------------------------------------------------------------------ */

static fw_shared_group_t *
group_new (const mongoc_uri_t *uri, const char *database, int64_t lease_ms, fw_error_t *error)
{
   fw_shared_group_t *g = calloc (1, sizeof *g);
   bool locks_made;
   int rc;

   if (!g || !(g->uri = mongoc_uri_copy (uri)) || !(g->database = strdup (database))) {
      if (g) {
         mongoc_uri_destroy (g->uri);
      }
      free (g);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory joining the shared units");
      return NULL;
   }
   g->lease_ms = lease_ms < 1000 ? 1000 : lease_ms;
   g->n_live = -1;
   if (!(g->live = calloc (MAX_MEMBERS, sizeof *g->live))) {
      mongoc_uri_destroy (g->uri);
      free (g->database);
      free (g);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory joining the shared units");
      return NULL;
   }
   locks_made = (rc = fw_mono_lock_init (&g->mu, &g->cond)) == 0;
   if (!locks_made || (rc = pthread_create (&g->thread, NULL, members_main, g)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the members thread: %s", strerror (rc));
      if (locks_made) {
         fw_mono_lock_destroy (&g->mu, &g->cond);
      }
      mongoc_uri_destroy (g->uri);
      free (g->live);
      free (g->database);
      free (g);
      return NULL;
   }
   return g;
}

fw_shared_group_t *
fw_shared_group_join (const mongoc_uri_t *uri, const char *database, int64_t lease_ms,
                      fw_error_t *error)
{
   fw_shared_group_t *g;

   pthread_mutex_lock (&registry_mu);
   for (g = registry; g && strcmp (g->database, database) != 0; g = g->next) {
   }
   if (!g && (g = group_new (uri, database, lease_ms, error))) {
      g->next = registry;
      registry = g;
   }
   if (g) {
      g->refs++;
   }
   pthread_mutex_unlock (&registry_mu);
   return g;
}

fw_lease_t *
fw_shared_group_lease (fw_shared_group_t *g, const mongoc_uri_t *uri, const char *unit,
                       const char *start_id, fw_error_t *error)
{
   fw_lease_t *l;
   char *start = NULL;

   if (start_id && !(start = strdup (start_id))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory joining the shared units");
      return NULL;
   }
   pthread_mutex_lock (&g->mu);
   if (g->n >= MAX_UNITS) {
      pthread_mutex_unlock (&g->mu);
      free (start);
      fw_error_set (error, FW_ERROR_INVALID, "more than %d shared units", MAX_UNITS);
      return NULL;
   }
   pthread_mutex_unlock (&g->mu);
   /* Until it is in the list it is counted neither as a unit nor as held:
    * the share is smaller for that moment, never larger. */
   l = fw_lease_new_gated (uri, g->database, unit, g->lease_ms, NULL, gate, g, error);
   pthread_mutex_lock (&g->mu);
   if (l && g->n >= MAX_UNITS) {
      pthread_mutex_unlock (&g->mu);
      fw_lease_destroy (l);
      free (start);
      fw_error_set (error, FW_ERROR_INVALID, "more than %d shared units", MAX_UNITS);
      return NULL;
   }
   if (l) {
      g->yielding[g->n] = false;
      g->starts[g->n] = start;
      g->start_at[g->n] = 0;
      g->leases[g->n++] = l;
      start = NULL;
   }
   pthread_mutex_unlock (&g->mu);
   free (start);
   return l;
}

void
fw_shared_group_remove (fw_shared_group_t *g, fw_lease_t *lease)
{
   pthread_mutex_lock (&g->mu);
   for (int i = 0; i < g->n; i++) {
      if (g->leases[i] == lease) {
         free (g->starts[i]);
         g->leases[i] = g->leases[g->n - 1];
         g->yielding[i] = g->yielding[g->n - 1];
         g->starts[i] = g->starts[g->n - 1];
         g->start_at[i] = g->start_at[g->n - 1];
         g->starts[g->n - 1] = NULL;
         g->n--;
         break;
      }
   }
   pthread_mutex_unlock (&g->mu);
}

void
fw_shared_group_started (fw_shared_group_t *g, fw_lease_t *lease, uint64_t at)
{
   pthread_mutex_lock (&g->mu);
   for (int i = 0; i < g->n; i++) {
      if (g->leases[i] == lease) {
         g->start_at[i] = at;
      }
   }
   pthread_mutex_unlock (&g->mu);
}

void
fw_shared_group_figures (fw_shared_group_t *g, fw_shared_figures_t *out)
{
   pthread_mutex_lock (&g->mu);
   out->members = g->members;
   out->units = g->n;
   out->held = held_locked (g);
   out->share = share_locked (g);
   pthread_mutex_unlock (&g->mu);
}

void
fw_shared_group_leave (fw_shared_group_t *g)
{
   fw_shared_group_t **pp;
   bool last;

   if (!g) {
      return;
   }
   pthread_mutex_lock (&registry_mu);
   last = --g->refs == 0;
   if (last) {
      for (pp = &registry; *pp && *pp != g; pp = &(*pp)->next) {
      }
      if (*pp) {
         *pp = g->next;
      }
   }
   pthread_mutex_unlock (&registry_mu);
   if (!last) {
      return;
   }
   pthread_mutex_lock (&g->mu);
   g->stop = true;
   pthread_cond_broadcast (&g->cond);
   pthread_mutex_unlock (&g->mu);
   pthread_join (g->thread, NULL);
   fw_mono_lock_destroy (&g->mu, &g->cond);
   mongoc_uri_destroy (g->uri);
   free (g->live);
   free (g->database);
   free (g);
}

int
fw_shared_group_member_live (fw_shared_group_t *g, const char *id, int64_t *counted_ms)
{
   int live = -1;
   pthread_mutex_lock (&g->mu);
   *counted_ms = g->live_at_ms;
   if (g->n_live >= 0) {
      live = 0;
      for (int i = 0; i < g->n_live && !live; i++) {
         live = strcmp (g->live[i], id) == 0;
      }
   }
   pthread_mutex_unlock (&g->mu);
   return live;
}
