/*
 * doctor_streams.c - each stream's checks of `flowwarden doctor`: the
 * privileges it needs (connectionStatus), pre- and post-images on its
 * collection (listCollections), its checkpoint's age against the oplog.
 */
#include <stdio.h>
#include <string.h>

#include "doctor-private.h"
#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/collections/owned_collections.h"

/* maxWireVersion of MongoDB 6.0: changeStreamPreAndPostImages. */
#define WIRE_6_0 17

/* Does privilege resource res grant on db.coll (coll "": the whole database)? */
static bool
resource_covers (const bson_t *res, const char *db, const char *coll)
{
   bson_iter_t it;
   const char *rdb = NULL, *rcoll = NULL;

   if (bson_iter_init_find (&it, res, "anyResource") && bson_iter_as_bool (&it)) {
      return true;
   }
   if (bson_iter_init_find (&it, res, "db") && BSON_ITER_HOLDS_UTF8 (&it)) {
      rdb = bson_iter_utf8 (&it, NULL);
   }
   if (bson_iter_init_find (&it, res, "collection") && BSON_ITER_HOLDS_UTF8 (&it)) {
      rcoll = bson_iter_utf8 (&it, NULL);
   }
   if (!rdb || !rcoll) {
      return false;
   }
   if (*rdb && strcmp (rdb, db) != 0) {
      return false;
   }
   if (!*rdb && (strcmp (db, "local") == 0 || strcmp (db, "config") == 0)) {
      return false; /* {db: ""} is every database but local and config */
   }
   if (!*rcoll) {
      return strncmp (coll, "system.", 7) != 0;
   }
   return strcmp (rcoll, coll) == 0;
}

/* Is action granted on db.coll by the privileges array privs? */
static bool
granted (const bson_t *privs, const char *db, const char *coll, const char *action)
{
   bson_iter_t it, p, a;

   if (!bson_iter_init (&it, privs)) {
      return false;
   }
   while (bson_iter_next (&it)) {
      bson_t priv, res;
      uint32_t len;
      const uint8_t *data;
      bool covers = false, has = false;
      if (!BSON_ITER_HOLDS_DOCUMENT (&it)) {
         continue;
      }
      bson_iter_document (&it, &len, &data);
      if (!bson_init_static (&priv, data, len)) {
         continue;
      }
      if (bson_iter_init_find (&p, &priv, "resource") && BSON_ITER_HOLDS_DOCUMENT (&p)) {
         bson_iter_document (&p, &len, &data);
         covers = bson_init_static (&res, data, len) && resource_covers (&res, db, coll);
      }
      if (covers && bson_iter_init_find (&p, &priv, "actions") && BSON_ITER_HOLDS_ARRAY (&p) &&
          bson_iter_recurse (&p, &a)) {
         while (!has && bson_iter_next (&a)) {
            has = BSON_ITER_HOLDS_UTF8 (&a) &&
                  (strcmp (bson_iter_utf8 (&a, NULL), action) == 0 ||
                   strcmp (bson_iter_utf8 (&a, NULL), "anyAction") == 0);
         }
      }
      if (has) {
         return true;
      }
   }
   return false;
}

typedef struct {
   const bson_t *privs;
   char missing[1024];
   char fix[1024];
   const char *user;
} need_t;

/* Appends to n->missing "a, b on db.coll" for the actions not granted there. */
static void
need (need_t *n, const char *db, const char *coll, const char *const *actions, bool write)
{
   char lacking[128] = "";
   size_t used;

   for (const char *const *a = actions; *a; a++) {
      if (!granted (n->privs, db, coll, *a)) {
         used = strlen (lacking);
         snprintf (lacking + used, sizeof lacking - used, "%s%s", used ? "/" : "", *a);
      }
   }
   if (!lacking[0]) {
      return;
   }
   used = strlen (n->missing);
   snprintf (n->missing + used, sizeof n->missing - used, "%s%s on %s%s%s", used ? ", " : "",
             lacking, db, *coll ? "." : "", coll);
   if (!strstr (n->fix, db)) {
      used = strlen (n->fix);
      snprintf (n->fix + used, sizeof n->fix - used,
                "%sdb.getSiblingDB(\"admin\").grantRolesToUser(\"%s\", [{role: \"%s\", db: "
                "\"%s\"}])",
                used ? "; " : "", n->user, write ? "readWrite" : "read", db);
   }
}

static bool
need_owned (void *ud, const char *database, const char *collection)
{
   static const char *const writes[] = {"find", "insert", "update", "remove", "createIndex", NULL};
   need ((need_t *) ud, database, collection, writes, true);
   return true;
}

/* authInfo of connectionStatus {showPrivileges: true}: the privileges array
 * into privs and the first user's name into user; false when none. */
static bool
read_auth_info (const bson_t *reply, bson_t *privs, char *user, size_t len)
{
   bson_iter_t it, u;
   uint32_t dlen;
   const uint8_t *data;

   if (!bson_iter_init_find (&it, reply, "authInfo") || !BSON_ITER_HOLDS_DOCUMENT (&it) ||
       !bson_iter_recurse (&it, &u)) {
      return false;
   }
   if (!bson_iter_find_descendant (&u, "authenticatedUsers.0.user", &it) ||
       !BSON_ITER_HOLDS_UTF8 (&it)) {
      return false;
   }
   snprintf (user, len, "%s", bson_iter_utf8 (&it, NULL));
   bson_iter_init_find (&it, reply, "authInfo");
   bson_iter_recurse (&it, &u);
   if (!bson_iter_find (&u, "authenticatedUserPrivileges") || !BSON_ITER_HOLDS_ARRAY (&u)) {
      return false;
   }
   bson_iter_array (&u, &dlen, &data);
   return bson_init_static (privs, data, dlen);
}

/* No authenticated user: does the server enforce access control? A command
 * that needs a user (listCollections) says. */
static void
unauthenticated (mongoc_client_t *client, const char *database, fw_doctor_report_t *r)
{
   bson_t *cmd = BCON_NEW ("listCollections", BCON_INT32 (1), "nameOnly", BCON_BOOL (true),
                           "filter", "{", "name", BCON_UTF8 (FW_CHECKPOINT_COLLECTION), "}");
   bson_t reply;
   bson_error_t berr;

   if (mongoc_client_command_simple (client, database, cmd, NULL, &reply, &berr)) {
      fw_doctor_add (r, NULL, "privileges", FW_DOCTOR_OK, NULL,
                     "no authenticated user: the server does not enforce access control");
   } else if (berr.code == 13) {
      fw_doctor_add (r, NULL, "privileges", FW_DOCTOR_FAIL,
                     "put the user in the URI (mongodb://USER:PASSWORD@HOST/...?authSource=admin)",
                     "the server requires authentication and the URI has no credentials: %s",
                     berr.message);
   } else {
      fw_doctor_add (r, NULL, "privileges", FW_DOCTOR_WARN, NULL,
                     "no authenticated user, and listCollections on %s failed: %s", database,
                     berr.message);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
}

void
fw_doctor_privileges (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
                      fw_doctor_report_t *r)
{
   static const char *const watch[] = {"changeStream", "find", NULL};
   bson_t cmd = BSON_INITIALIZER, reply, privs;
   bson_error_t berr;
   char user[256];

   BSON_APPEND_INT32 (&cmd, "connectionStatus", 1);
   BSON_APPEND_BOOL (&cmd, "showPrivileges", true);
   if (!mongoc_client_command_simple (client, "admin", &cmd, NULL, &reply, &berr)) {
      fw_doctor_add (r, NULL, "privileges", FW_DOCTOR_WARN, NULL,
                     "cannot read this user's privileges (connectionStatus): %s", berr.message);
   } else if (!read_auth_info (&reply, &privs, user, sizeof user)) {
      unauthenticated (client, n ? cfgs[0].database : "admin", r);
   } else {
      for (size_t i = 0; i < n; i++) {
         need_t nd;
         memset (&nd, 0, sizeof nd);
         nd.privs = &privs;
         nd.user = user;
         need (&nd, cfgs[i].database, cfgs[i].collection ? cfgs[i].collection : "", watch, false);
         fw_owned_collections_each (&cfgs[i], need_owned, &nd);
         if (nd.missing[0]) {
            fw_doctor_add (r, cfgs[i].name, "privileges", FW_DOCTOR_FAIL, nd.fix,
                           "user %s lacks %s", user, nd.missing);
         } else {
            fw_doctor_add (r, cfgs[i].name, "privileges", FW_DOCTOR_OK, NULL,
                           "user %s has changeStream and find on the watched namespace and "
                           "writes flowwarden's collections",
                           user);
         }
      }
   }
   bson_destroy (&reply);
   bson_destroy (&cmd);
}

static bool
doc_pre_images (const bson_t *doc)
{
   bson_iter_t it;
   return bson_iter_init (&it, doc) &&
          bson_iter_find_descendant (&it, "options.changeStreamPreAndPostImages.enabled", &it) &&
          bson_iter_as_bool (&it);
}

/* 1: enabled, 0: not, -1: no such collection, -2: error (in berr). */
static int
pre_images_enabled (mongoc_client_t *client, const char *db, const char *coll, bson_error_t *berr)
{
   mongoc_database_t *d = mongoc_client_get_database (client, db);
   bson_t *opts = BCON_NEW ("filter", "{", "name", BCON_UTF8 (coll), "}");
   mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts (d, opts);
   const bson_t *doc;
   int state = -1;

   if (mongoc_cursor_next (cur, &doc)) {
      state = doc_pre_images (doc) ? 1 : 0;
   }
   if (mongoc_cursor_error (cur, berr)) {
      state = -2;
   }
   mongoc_cursor_destroy (cur);
   bson_destroy (opts);
   mongoc_database_destroy (d);
   return state;
}

typedef struct {
   const char *name;
   bool owned;
} owned_probe_t;

static bool
is_owned (void *ud, const char *database, const char *collection)
{
   owned_probe_t *p = ud;
   (void) database;
   if (strcmp (p->name, collection) == 0) {
      p->owned = true;
      return false;
   }
   return true;
}

/* The collections of a database-wide stream's database (not system.*, not
 * flowwarden's) without pre-images, into missing ("a, b, ..."); -1 on error. */
static int
database_without_pre_images (mongoc_client_t *client, const fw_stream_config_t *cfg, char *missing,
                             size_t len, bson_error_t *berr)
{
   mongoc_database_t *d = mongoc_client_get_database (client, cfg->database);
   mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts (d, NULL);
   const bson_t *doc;
   bson_iter_t it;
   int count = 0;

   missing[0] = '\0';
   while (mongoc_cursor_next (cur, &doc)) {
      owned_probe_t probe = {NULL, false};
      if (!bson_iter_init_find (&it, doc, "name") || !BSON_ITER_HOLDS_UTF8 (&it)) {
         continue;
      }
      probe.name = bson_iter_utf8 (&it, NULL);
      fw_owned_collections_each (cfg, is_owned, &probe);
      if (probe.owned || strncmp (probe.name, "system.", 7) == 0 || doc_pre_images (doc)) {
         continue;
      }
      if (count++ < 8) {
         size_t used = strlen (missing);
         snprintf (missing + used, len - used, "%s%s", used ? ", " : "", probe.name);
      }
   }
   if (mongoc_cursor_error (cur, berr)) {
      count = -1;
   }
   mongoc_cursor_destroy (cur);
   mongoc_database_destroy (d);
   return count;
}

static void
database_pre_images (mongoc_client_t *client, const fw_stream_config_t *cfg, bool required,
                     fw_doctor_report_t *r)
{
   bson_error_t berr;
   char missing[512], fix[768];
   int count = database_without_pre_images (client, cfg, missing, sizeof missing, &berr);

   if (count < 0) {
      fw_doctor_add (r, cfg->name, "pre_images", FW_DOCTOR_WARN, NULL,
                     "cannot list the collections of %s: %s", cfg->database, berr.message);
   } else if (count == 0) {
      fw_doctor_add (r, cfg->name, "pre_images", FW_DOCTOR_OK, NULL,
                     "every collection of %s has changeStreamPreAndPostImages enabled (a "
                     "collection created later needs it too)",
                     cfg->database);
   } else {
      snprintf (fix, sizeof fix,
                "for each: db.getSiblingDB(\"%s\").runCommand({collMod: NAME, "
                "changeStreamPreAndPostImages: {enabled: true}})",
                cfg->database);
      fw_doctor_add (r, cfg->name, "pre_images", required ? FW_DOCTOR_FAIL : FW_DOCTOR_WARN, fix,
                     "%d collection(s) of %s without changeStreamPreAndPostImages: %s%s", count,
                     cfg->database, missing, count > 8 ? ", ..." : "");
   }
}

void
fw_doctor_pre_images (mongoc_client_t *client, const fw_stream_config_t *cfg,
                      const fw_doctor_server_t *srv, fw_doctor_report_t *r)
{
   bool post = cfg->full_document && (strcmp (cfg->full_document, "required") == 0 ||
                                      strcmp (cfg->full_document, "whenAvailable") == 0);
   bool pre = cfg->full_document_before_change &&
              strcmp (cfg->full_document_before_change, "off") != 0;
   bool required = (post && strcmp (cfg->full_document, "required") == 0) ||
                   (pre && strcmp (cfg->full_document_before_change, "required") == 0);
   bson_error_t berr;
   char fix[512];
   int state;

   if (!post && !pre) {
      return;
   }
   if (srv->max_wire < WIRE_6_0) {
      fw_doctor_add (r, cfg->name, "pre_images", FW_DOCTOR_FAIL,
                     "upgrade to MongoDB 6.0+, or use full_document = \"updateLookup\" and "
                     "full_document_before_change = \"off\"",
                     "the server (maxWireVersion %d) has no pre- and post-images (6.0+)",
                     (int) srv->max_wire);
      return;
   }
   if (!cfg->collection) {
      database_pre_images (client, cfg, required, r);
      return;
   }
   snprintf (fix, sizeof fix,
             "db.getSiblingDB(\"%s\").runCommand({collMod: \"%s\", "
             "changeStreamPreAndPostImages: {enabled: true}})",
             cfg->database, cfg->collection);
   state = pre_images_enabled (client, cfg->database, cfg->collection, &berr);
   if (state == 1) {
      fw_doctor_add (r, cfg->name, "pre_images", FW_DOCTOR_OK, NULL,
                     "%s.%s has changeStreamPreAndPostImages enabled", cfg->database,
                     cfg->collection);
   } else if (state == -2) {
      fw_doctor_add (r, cfg->name, "pre_images", FW_DOCTOR_WARN, NULL,
                     "cannot list the collections of %s: %s", cfg->database, berr.message);
   } else {
      fw_doctor_add (r, cfg->name, "pre_images", required ? FW_DOCTOR_FAIL : FW_DOCTOR_WARN, fix,
                     "%s.%s %s changeStreamPreAndPostImages enabled: %s", cfg->database,
                     cfg->collection, state < 0 ? "does not exist yet, so has not" : "has not",
                     required ? "events fail the stream (\"required\")"
                              : "events come without the document (\"whenAvailable\")");
   }
}

/* updatedAt of the stream's checkpoint (ms), 0 when none, -1 on error. */
static int64_t
checkpoint_time (mongoc_client_t *client, const fw_stream_config_t *cfg, bson_error_t *berr)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, cfg->database,
                                                             FW_CHECKPOINT_COLLECTION);
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (cfg->name));
   bson_t *opts = BCON_NEW ("projection", "{", "updatedAt", BCON_INT32 (1), "}", "limit",
                            BCON_INT64 (1));
   mongoc_cursor_t *cur = mongoc_collection_find_with_opts (coll, filter, opts, NULL);
   const bson_t *doc;
   bson_iter_t it;
   int64_t at = 0;

   if (mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "updatedAt") &&
       BSON_ITER_HOLDS_DATE_TIME (&it)) {
      at = bson_iter_date_time (&it);
   }
   if (mongoc_cursor_error (cur, berr)) {
      at = -1;
   }
   mongoc_cursor_destroy (cur);
   bson_destroy (opts);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
   return at;
}

/* No checkpoint and checkpoint.start_at: is that time still in the oplog? */
static void
check_start_at (const fw_stream_config_t *cfg, const fw_doctor_server_t *srv, int64_t now_s,
                fw_doctor_report_t *r)
{
   int64_t t = (int64_t) (cfg->start_at >> 32);

   if (!srv->has_oplog) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_INFO, NULL,
                     "no checkpoint yet: the stream starts at checkpoint.start_at, %lld s ago "
                     "(the oplog window is unknown)",
                     (long long) (now_s - t));
   } else if (t < srv->oplog_first_s) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_FAIL,
                     "choose a later start_at (the oplog reaches back to its first entry)",
                     "no checkpoint yet, and checkpoint.start_at (%lld s ago) is older than the "
                     "oplog's first entry (%lld s ago): the stream will start with history lost "
                     "and %s",
                     (long long) (now_s - t), (long long) (now_s - srv->oplog_first_s),
                     cfg->resume_from_now ? "start from now (on_history_lost = "
                                            "\"resume_from_now\")"
                                          : "stop (on_history_lost = \"fail\")");
   } else {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_OK, NULL,
                     "no checkpoint yet: the stream starts at checkpoint.start_at, %lld s ago, "
                     "within the oplog window (%lld s)",
                     (long long) (now_s - t), (long long) (now_s - srv->oplog_first_s));
   }
}

void
fw_doctor_checkpoint (mongoc_client_t *client, const fw_stream_config_t *cfg,
                      const fw_doctor_server_t *srv, fw_doctor_report_t *r)
{
   bson_error_t berr;
   int64_t at = checkpoint_time (client, cfg, &berr);
   int64_t now_s = fw_now_ms () / 1000, age, window;

   if (at < 0) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_WARN, NULL,
                     "cannot read the checkpoint: %s", berr.message);
      return;
   }
   if (at == 0 && cfg->start_at) {
      check_start_at (cfg, srv, now_s, r);
      return;
   }
   if (at == 0) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_OK, NULL,
                     "no checkpoint yet: the stream starts at its start_position");
      return;
   }
   age = now_s - at / 1000;
   if (!srv->has_oplog) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_INFO, NULL,
                     "the checkpoint is %lld s old (the oplog window is unknown)", (long long) age);
      return;
   }
   window = now_s - srv->oplog_first_s;
   if (at / 1000 < srv->oplog_first_s) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_FAIL,
                     cfg->resume_from_now
                        ? "accept the gap, or recover the missed changes from a backup"
                        : "set on_history_lost = \"resume_from_now\" to accept the gap, or "
                          "remove the checkpoint to start afresh; recover the missed changes "
                          "from a backup",
                     "the checkpoint is %lld s old, older than the oplog window (%lld s): the "
                     "stream will start with history lost and %s",
                     (long long) age, (long long) window,
                     cfg->resume_from_now ? "resume from now (on_history_lost = "
                                            "\"resume_from_now\"), skipping the gap"
                                          : "stop (on_history_lost = \"fail\")");
   } else if (age * 2 > window) {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_WARN,
                     "start the stream soon, or enlarge the oplog (replSetResizeOplog)",
                     "the checkpoint is %lld s old, more than half the oplog window (%lld s)",
                     (long long) age, (long long) window);
   } else {
      fw_doctor_add (r, cfg->name, "checkpoint", FW_DOCTOR_OK, NULL,
                     "the checkpoint is %lld s old, within the oplog window (%lld s)",
                     (long long) age, (long long) window);
   }
}
