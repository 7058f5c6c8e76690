/*
 * dlq_admin.c - the DLQ collections a script names, and what `flowwarden
 * dlq` does to their entries (see dlq_admin.h). The query a filter makes and
 * time parsing are in dlq_filter.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/log.h"
#include "runtime/config/stream_config.h"
#include "runtime/dlq/dlq_admin-private.h"
#include "runtime/host/connections.h"
#include "runtime/host/lua_host.h"

/* --- loading the script ------------------------------------------------- */

typedef struct {
   fw_lua_host_t *host;
   fw_stream_config_t *cfgs;
   int n;
   char *run_uri;
   char **conn_names;
   char **conn_uris;
   int n_conns;
   fw_error_t *error;
   bool ok;
} load_args_t;

/* Runs protected: every string is copied straight into args, which owns it. */
static int
pload (lua_State *L)
{
   load_args_t *a = lua_touserdata (L, 1);
   lua_Integer n;

   fw_lua_host_push_uri (a->host);
   a->run_uri = strdup (lua_isstring (L, -1) ? lua_tostring (L, -1) : FW_DEFAULT_URI);
   lua_pop (L, 1);

   fw_lua_host_push_connections (a->host);
   n = (lua_Integer) lua_rawlen (L, -1);
   a->conn_names = calloc ((size_t) n + 1, sizeof (char *));
   a->conn_uris = calloc ((size_t) n + 1, sizeof (char *));
   if (!a->run_uri || !a->conn_names || !a->conn_uris) {
      return luaL_error (L, "out of memory");
   }
   for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti (L, -1, i);
      if (lua_getfield (L, -1, "name") == LUA_TSTRING &&
          lua_getfield (L, -2, "uri") == LUA_TSTRING) {
         a->conn_uris[a->n_conns] = strdup (lua_tostring (L, -1));
         a->conn_names[a->n_conns] = strdup (lua_tostring (L, -2));
         a->n_conns++; /* counted even when a copy failed: the cleanup frees both arrays */
         if (!a->conn_uris[a->n_conns - 1] || !a->conn_names[a->n_conns - 1]) {
            return luaL_error (L, "out of memory");
         }
      }
      lua_settop (L, 2);
   }
   lua_pop (L, 1);

   for (int i = 0; i < a->n; i++) {
      fw_lua_host_push_spec (a->host, i);
      /* The admin never opens a change stream: no other stream's DLQ to keep out. */
      if (!fw_stream_config_read (L, -1, 0, &a->cfgs[i], a->error)) {
         return 0;
      }
      lua_pop (L, 1);
   }
   a->ok = true;
   return 0;
}

char **
fw_dlq__push_string (char ***arr, int *n, const char *s)
{
   char **grown = realloc (*arr, (size_t) (*n + 1) * sizeof (char *));
   if (!grown) {
      return NULL;
   }
   *arr = grown;
   if (!(grown[*n] = strdup (s))) {
      return NULL;
   }
   (*n)++;
   return grown;
}

bool
fw_dlq__same (const char *a, const char *b)
{
   return strcmp (a, b) == 0;
}

/* Adds stream cfg to the target of its (URI, database, collection). */
static bool
add_target (fw_dlq_admin_t *admin, const fw_stream_config_t *cfg, const char *uri)
{
   const char *conn = cfg->dlq.connection ? cfg->dlq.connection : "default";
   fw_dlq_target_t *t = NULL;

   for (int i = 0; i < admin->n_targets && !t; i++) {
      fw_dlq_target_t *x = &admin->targets[i];
      if (fw_dlq__same (x->uri, uri) && fw_dlq__same (x->database, cfg->database) &&
          fw_dlq__same (x->collection, cfg->dlq.collection)) {
         t = x;
      }
   }
   if (!t) {
      fw_dlq_target_t *grown = realloc (admin->targets,
                                        (size_t) (admin->n_targets + 1) * sizeof *grown);
      if (!grown) {
         return false;
      }
      admin->targets = grown;
      t = &grown[admin->n_targets++];
      memset (t, 0, sizeof *t);
      t->uri = strdup (uri);
      t->connection = strdup (conn);
      t->database = strdup (cfg->database);
      t->collection = strdup (cfg->dlq.collection);
      if (!t->uri || !t->connection || !t->database || !t->collection) {
         return false;
      }
   }
   return fw_dlq__push_string (&t->streams, &t->n_streams, cfg->name) != NULL;
}

/* Loads the script into a->host and reads, protected, its URI, connections
 * and every stream's settings into a; false with error filled. */
static bool
read_script (load_args_t *a, const char *script, const char *option_uri, fw_error_t *error)
{
   lua_State *L = fw_lua_host_state (a->host);

   /* Only the settings are read and no handler runs: an fw.env variable the
    * operator does not have gives a placeholder (flowwarden/env.lua). */
   lua_pushboolean (L, 1);
   lua_setfield (L, LUA_REGISTRYINDEX, "flowwarden.env_placeholders");
   if (!fw_lua_host_load_script (a->host, script, option_uri, error)) {
      return false;
   }
   a->n = fw_lua_host_stream_count (a->host);
   if (a->n > 0 && !(a->cfgs = calloc ((size_t) a->n, sizeof *a->cfgs))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   }
   L = fw_lua_host_state (a->host);
   lua_pushcfunction (L, pload);
   lua_pushlightuserdata (L, a);
   if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "cannot read %s: %s", script, lua_tostring (L, -1));
      lua_pop (L, 1);
      return false;
   }
   return a->ok;
}

/* Adds every stream of a to admin: its name, a sequenced DLQ's stream, and
 * its DLQ collection on the URI of its connection; false with error filled. */
static bool
add_streams (fw_dlq_admin_t *admin, const load_args_t *a, fw_error_t *error)
{
   for (int i = 0; i < a->n; i++) {
      const fw_stream_config_t *cfg = &a->cfgs[i];
      const char *uri = a->run_uri;
      if (!fw_dlq__push_string (&admin->streams, &admin->n_streams, cfg->name)) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         return false;
      }
      if (!cfg->dlq.enabled) {
         continue;
      }
      if (cfg->dlq.sequenced &&
          !fw_dlq__push_string (&admin->seq_streams, &admin->n_seq_streams, cfg->name)) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         return false;
      }
      for (int c = 0; cfg->dlq.connection && c < a->n_conns; c++) {
         if (fw_dlq__same (a->conn_names[c], cfg->dlq.connection)) {
            uri = a->conn_uris[c];
         }
      }
      if (!add_target (admin, cfg, uri)) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         return false;
      }
   }
   return true;
}

/* Frees what a owns, the host included. */
static void
load_args_cleanup (load_args_t *a)
{
   for (int i = 0; i < a->n_conns; i++) {
      free (a->conn_names[i]);
      free (a->conn_uris[i]);
   }
   free (a->conn_names);
   free (a->conn_uris);
   for (int i = 0; a->cfgs && i < a->n; i++) {
      fw_stream_config_cleanup (&a->cfgs[i]);
   }
   free (a->cfgs);
   free (a->run_uri);
   fw_lua_host_destroy (a->host);
}

fw_dlq_admin_t *
fw_dlq_admin_new (const char *script, const char *option_uri, fw_error_t *error)
{
   load_args_t a = {0};
   fw_dlq_admin_t *admin = calloc (1, sizeof *admin);
   bool ok = false;

   a.error = error;
   if (!admin || !(a.host = fw_lua_host_new (error))) {
      goto done;
   }
   admin->only = -1;
   if (!read_script (&a, script, option_uri, error) || !add_streams (admin, &a, error)) {
      goto done;
   }
   if (admin->n_targets == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s declares no stream with a dead-letter queue (dlq = true), so there is "
                    "no DLQ to work on",
                    script);
      goto done;
   }
   ok = true;

done:
   load_args_cleanup (&a);
   if (!ok) {
      fw_dlq_admin_destroy (admin);
      return NULL;
   }
   return admin;
}

void
fw_dlq_admin_destroy (fw_dlq_admin_t *admin)
{
   if (!admin) {
      return;
   }
   for (int i = 0; i < admin->n_targets; i++) {
      fw_dlq_target_t *t = &admin->targets[i];
      free (t->uri);
      free (t->connection);
      free (t->database);
      free (t->collection);
      for (int s = 0; s < t->n_streams; s++) {
         free (t->streams[s]);
      }
      free (t->streams);
   }
   for (int i = 0; i < admin->n_streams; i++) {
      free (admin->streams[i]);
   }
   for (int i = 0; i < admin->n_seq_streams; i++) {
      free (admin->seq_streams[i]);
   }
   free (admin->seq_streams);
   for (int i = 0; admin->stores && i < admin->n_targets; i++) {
      fw_dlq_store_destroy (admin->stores[i]); /* before the clients they use */
   }
   free (admin->stores);
   for (int i = 0; i < admin->n_clients; i++) {
      mongoc_client_destroy (admin->clients[i].client);
      free (admin->clients[i].uri);
   }
   free (admin->clients);
   free (admin->streams);
   free (admin->targets);
   free (admin);
}

int
fw_dlq_admin_target_count (const fw_dlq_admin_t *admin)
{
   return admin->n_targets;
}

const fw_dlq_target_t *
fw_dlq_admin_target (const fw_dlq_admin_t *admin, int i)
{
   return i >= 0 && i < admin->n_targets ? &admin->targets[i] : NULL;
}

const fw_dlq_target_t *
fw_dlq_admin_target_of (const fw_dlq_admin_t *admin, const char *stream)
{
   for (int i = 0; i < admin->n_targets; i++) {
      for (int s = 0; s < admin->targets[i].n_streams; s++) {
         if (fw_dlq__same (admin->targets[i].streams[s], stream)) {
            return &admin->targets[i];
         }
      }
   }
   return NULL;
}

/* "a", "b", "c" into buf, for messages. */
void
fw_dlq__name_list (char *const *names, int n, char *buf, size_t len)
{
   size_t o = 0;
   buf[0] = '\0';
   for (int i = 0; i < n && o + 1 < len; i++) {
      int w = snprintf (buf + o, len - o, "%s\"%s\"", i ? ", " : "", names[i]);
      if (w < 0) {
         break;
      }
      o += (size_t) w;
   }
}

bool
fw_dlq_admin_restrict (fw_dlq_admin_t *admin, const char *stream, fw_error_t *error)
{
   const fw_dlq_target_t *t = fw_dlq_admin_target_of (admin, stream);
   char names[1024];

   if (t) {
      admin->only = (int) (t - admin->targets);
      admin->only_stream = stream;
      return true;
   }
   fw_dlq__name_list (admin->streams, admin->n_streams, names, sizeof names);
   for (int i = 0; i < admin->n_streams; i++) {
      if (fw_dlq__same (admin->streams[i], stream)) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "--stream: stream \"%s\" has no dead-letter queue (its dlq is off)", stream);
         return false;
      }
   }
   fw_error_set (error, FW_ERROR_INVALID,
                 "--stream: the script has no stream \"%s\" (its streams: %s)", stream, names);
   return false;
}

bool
fw_dlq__selected (const fw_dlq_admin_t *admin, int i)
{
   return admin->only < 0 || admin->only == i;
}

/* The client of target i's URI, made on first use (owned by the admin). */
static mongoc_client_t *
client_of (fw_dlq_admin_t *admin, int i, fw_error_t *error)
{
   fw_dlq_target_t *t = &admin->targets[i];
   mongoc_client_t *client = NULL;
   mongoc_uri_t *uri;
   bson_error_t berr;

   for (int c = 0; c < admin->n_clients && !client; c++) {
      if (fw_dlq__same (admin->clients[c].uri, t->uri)) {
         client = admin->clients[c].client;
      }
   }
   if (!client) {
      client_t *grown;
      /* The message never shows the URI: it may hold a password. */
      if (!(uri = mongoc_uri_new_with_error (t->uri, &berr))) {
         char why[512];
         fw_error_set (error, FW_ERROR_INVALID, "invalid MongoDB URI of connection \"%s\": %s",
                       t->connection,
                       fw_log_redact_uri_error (t->uri, berr.message, why, sizeof why));
         return NULL;
      }
      client = mongoc_client_new_from_uri_with_error (uri, &berr);
      mongoc_uri_destroy (uri);
      grown = realloc (admin->clients, (size_t) (admin->n_clients + 1) * sizeof *grown);
      if (!client || !grown) {
         fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                            "cannot create a client for connection \"%s\": %s", t->connection,
                            client ? "out of memory" : berr.message);
         mongoc_client_destroy (client);
         if (grown) {
            admin->clients = grown;
         }
         return NULL;
      }
      admin->clients = grown;
      if (!(grown[admin->n_clients].uri = strdup (t->uri))) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         mongoc_client_destroy (client);
         return NULL;
      }
      grown[admin->n_clients].client = client;
      admin->n_clients++;
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      if (!mongoc_client_set_appname (client, "flowwarden-dlq")) {
         fw_log (FW_LOG_WARN, NULL, "cannot set the appname of the DLQ client");
      }
   }
   return client;
}

fw_dlq_store_t *
fw_dlq__store (fw_dlq_admin_t *admin, int i, fw_error_t *error)
{
   const fw_dlq_target_t *t = &admin->targets[i];
   mongoc_client_t *client;

   if (!admin->stores &&
       !(admin->stores = calloc ((size_t) admin->n_targets, sizeof *admin->stores))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return NULL;
   }
   if (!admin->stores[i] && (client = client_of (admin, i, error))) {
      admin->stores[i] = fw_dlq_store_mongo_open (client, t->database, t->collection, t->connection,
                                                  error);
   }
   return admin->stores[i];
}

/* --- helpers the reading and changing files share ---------------------- */

/* The string at path in doc, or "?" when it is missing or not a string. */
const char *
fw_dlq__string_at (const bson_t *doc, const char *path)
{
   bson_iter_t it, f;
   if (bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, path, &f) &&
       BSON_ITER_HOLDS_UTF8 (&f)) {
      return bson_iter_utf8 (&f, NULL);
   }
   return "?";
}
