/*
 * connections.c - named connection pools and each stream's clients (see
 * connections.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/io_deadline.h"
#include "flowwarden/log.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"

typedef struct entry {
   char *name;
   char *uri;
   mongoc_client_pool_t *pool;
   struct entry *next; /* newer entries first: the first match is current */
} entry_t;

struct fw_connections {
   pthread_mutex_t mu;
   entry_t *entries;
};

fw_connections_t *
fw_connections_new (void)
{
   fw_connections_t *conns = calloc (1, sizeof *conns);
   if (conns && pthread_mutex_init (&conns->mu, NULL) != 0) {
      free (conns);
      conns = NULL;
   }
   return conns;
}

void
fw_connections_destroy (fw_connections_t *conns)
{
   if (!conns) {
      return;
   }
   for (entry_t *e = conns->entries, *next; e; e = next) {
      next = e->next;
      mongoc_client_pool_destroy (e->pool);
      free (e->name);
      free (e->uri);
      free (e);
   }
   pthread_mutex_destroy (&conns->mu);
   free (conns);
}

/* The current entry of name; the caller holds mu. */
static entry_t *
current (fw_connections_t *conns, const char *name)
{
   for (entry_t *e = conns->entries; e; e = e->next) {
      if (strcmp (e->name, name) == 0) {
         return e;
      }
   }
   return NULL;
}

bool
fw_connections_set (fw_connections_t *conns, const char *name, const char *uri, fw_error_t *error)
{
   entry_t *e;
   mongoc_uri_t *parsed;
   bson_error_t berr;
   bool same;

   if (strncmp (uri, "mongodb://", 10) != 0 && strncmp (uri, "mongodb+srv://", 14) != 0) {
      return true; /* Redis or PostgreSQL: fw.redis and fw.pg connect themselves */
   }
   pthread_mutex_lock (&conns->mu);
   e = current (conns, name);
   same = e && strcmp (e->uri, uri) == 0;
   pthread_mutex_unlock (&conns->mu);
   if (same) {
      return true;
   }
   if (!(parsed = mongoc_uri_new_with_error (uri, &berr))) {
      char why[512];
      fw_error_set (error, FW_ERROR_INVALID, "connection \"%s\": invalid MongoDB URI: %s", name,
                    fw_log_redact_uri_error (uri, berr.message, why, sizeof why));
      return false;
   }
   e = calloc (1, sizeof *e);
   if (!e || !(e->name = strdup (name)) || !(e->uri = strdup (uri)) ||
       !(e->pool = mongoc_client_pool_new (parsed))) {
      fw_error_set (error, FW_ERROR_NOMEM, "connection \"%s\": cannot create its client pool",
                    name);
      if (e) {
         free (e->name);
         free (e->uri);
         free (e);
      }
      mongoc_uri_destroy (parsed);
      return false;
   }
   mongoc_uri_destroy (parsed);
   mongoc_client_pool_set_error_api (e->pool, MONGOC_ERROR_API_VERSION_2);
   /* Apart from the runtime's own "flowwarden" (change streams,
    * checkpoints): server logs and fail points can tell handler IO from it. */
   if (!mongoc_client_pool_set_appname (e->pool, "flowwarden-io")) {
      fw_log (FW_LOG_WARN, NULL, "connection \"%s\": cannot set the appname of its pool", name);
   }
   pthread_mutex_lock (&conns->mu);
   e->next = conns->entries;
   conns->entries = e;
   pthread_mutex_unlock (&conns->mu);
   return true;
}

bool
fw_connections_set_declared (fw_connections_t *conns, fw_lua_host_t *host, fw_error_t *error)
{
   lua_State *L = fw_lua_host_state (host);
   bool ok = true;

   fw_lua_host_push_connections (host);
   for (lua_Integer i = 1; ok && i <= (lua_Integer) lua_rawlen (L, -1); i++) {
      lua_rawgeti (L, -1, i);
      lua_getfield (L, -1, "name");
      lua_getfield (L, -2, "uri");
      if (lua_type (L, -2) == LUA_TSTRING && lua_type (L, -1) == LUA_TSTRING) {
         ok = fw_connections_set (conns, lua_tostring (L, -2), lua_tostring (L, -1), error);
      }
      lua_pop (L, 3);
   }
   lua_pop (L, 1);
   return ok;
}

/* --- a stream's clients ---------------------------------------------------- */

typedef struct {
   entry_t *entry; /* the pool the client came from */
   mongoc_client_t *client;
} held_t;

struct fw_connection_clients {
   fw_connections_t *conns;
   held_t *held;
   size_t n;
   size_t cap;
};

fw_connection_clients_t *
fw_connection_clients_new (fw_connections_t *conns)
{
   fw_connection_clients_t *set = calloc (1, sizeof *set);
   if (set) {
      set->conns = conns;
   }
   return set;
}

mongoc_client_t *
fw_connection_clients_get (fw_connection_clients_t *set, const char *name, fw_error_t *error)
{
   entry_t *e = NULL;
   held_t *slot = NULL;
   mongoc_client_t *client;

   if (set->conns) {
      pthread_mutex_lock (&set->conns->mu);
      e = current (set->conns, name);
      pthread_mutex_unlock (&set->conns->mu);
   }
   if (!e) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "unknown connection \"%s\" (declare it with fw.connection { name = \"%s\", "
                    "uri = ... }, or omit connection to use the run URI)",
                    name, name);
      return NULL;
   }
   for (size_t i = 0; i < set->n; i++) {
      if (strcmp (set->held[i].entry->name, name) == 0) {
         if (set->held[i].entry == e) {
            return set->held[i].client;
         }
         /* A reload changed the URI: give the old client back. */
         mongoc_client_pool_push (set->held[i].entry->pool, set->held[i].client);
         slot = &set->held[i];
         break;
      }
   }
   if (!slot) {
      if (set->n == set->cap) {
         size_t cap = set->cap ? set->cap * 2 : 4;
         held_t *grown = realloc (set->held, cap * sizeof *grown);
         if (!grown) {
            fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
            return NULL;
         }
         set->held = grown;
         set->cap = cap;
      }
      slot = &set->held[set->n++];
   }
   client = mongoc_client_pool_pop (e->pool);
   if (!client || !fw_io_deadline_install (client, error)) {
      if (client) {
         mongoc_client_pool_push (e->pool, client);
      } else {
         fw_error_set (error, FW_ERROR_IO, "connection \"%s\": no client available", name);
      }
      *slot = set->held[--set->n];
      return NULL;
   }
   slot->entry = e;
   slot->client = client;
   return client;
}

fw_connections_t *
fw_connection_clients_registry (const fw_connection_clients_t *set)
{
   return set ? set->conns : NULL;
}

void
fw_connection_clients_release (fw_connection_clients_t *set)
{
   if (!set) {
      return;
   }
   for (size_t i = 0; i < set->n; i++) {
      mongoc_client_pool_push (set->held[i].entry->pool, set->held[i].client);
   }
   set->n = 0;
}

void
fw_connection_clients_destroy (fw_connection_clients_t *set)
{
   if (!set) {
      return;
   }
   fw_connection_clients_release (set);
   free (set->held);
   free (set);
}
