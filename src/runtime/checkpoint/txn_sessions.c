/*
 * txn_sessions.c - the "<checkpoint id>#sessions" document (txn_sessions.h):
 * {_id, lsids: [UUID, ...], sinks: [connection name, ...]} (sinks: on the
 * stream's own deployment only, the sinks its transactions ran on).
 *
 * killSessions (MongoDB manual, "killSessions"): takes [{id: <UUID>}, ...],
 * kills those sessions, aborting their open transactions and operations at
 * once, and replies {ok: 1}; a session that is not there is no error. With
 * access control on, MongoDB pairs each UUID with the hash of the
 * authenticated user, so a user kills its own sessions without the
 * killAnySession privilege (which only other users' sessions need): the
 * same user that ran the transactions kills them here.
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/collection_names.h"
#include "runtime/checkpoint/txn_sessions.h"

#define SUFFIX "#sessions"
#define MAX_KILLED 1000 /* read per start; a record never holds nearly as many */

static bool
doc_id (char *out, size_t len, const char *id, fw_error_t *error)
{
   if ((size_t) snprintf (out, len, "%s" SUFFIX, id) >= len) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "stream \"%s\": its name is too long for a "
                    "sessions document",
                    id);
      return false;
   }
   return true;
}

static void
set_mongo_error (fw_error_t *error, const char *what, const char *id, const bson_error_t *berr)
{
   fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\": %s: %s", id, what, berr->message);
   error->code = (int) berr->code;
}

/* Adds lsid's id to the record's lsids ($addToSet, creating the record) or
 * takes it out ($pull). what names the step in an error. */
static bool
update_lsids (mongoc_client_t *client, const char *database, const char *id, const bson_t *lsid,
              bool add, const char *what, fw_error_t *error)
{
   char did[512];
   bson_iter_t it;
   mongoc_collection_t *coll;
   bson_t sel = BSON_INITIALIZER, update = BSON_INITIALIZER, op, opts = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok = false;

   if (!doc_id (did, sizeof did, id, error)) {
      return false;
   }
   if (!bson_iter_init_find (&it, lsid, "id") || !BSON_ITER_HOLDS_BINARY (&it)) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\": a session without an id", id);
      return false;
   }
   BSON_APPEND_UTF8 (&sel, "_id", did);
   BSON_APPEND_DOCUMENT_BEGIN (&update, add ? "$addToSet" : "$pull", &op);
   bson_append_iter (&op, "lsids", -1, &it);
   bson_append_document_end (&update, &op);
   BSON_APPEND_BOOL (&opts, "upsert", add);
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   if (!coll) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
   } else if (!(ok = mongoc_collection_update_one (coll, &sel, &update, &opts, NULL, &berr))) {
      set_mongo_error (error, what, id, &berr);
   }
   mongoc_collection_destroy (coll);
   bson_destroy (&sel);
   bson_destroy (&update);
   bson_destroy (&opts);
   return ok;
}

bool
fw_txn_sessions_record (mongoc_client_t *client, const char *database, const char *id,
                        const bson_t *lsid, fw_error_t *error)
{
   return update_lsids (client, database, id, lsid, true, "cannot record its transaction session",
                        error);
}

/* Appends the record's lsids to ids (as a BSON array) and the killSessions
 * patterns {id} to kill; *n: how many. False with error set. */
static bool
read_record (mongoc_collection_t *coll, const char *did, const char *id, bson_t *ids, bson_t *kill,
             int *n, fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER;
   mongoc_cursor_t *cur;
   const bson_t *doc;
   bson_iter_t it, arr;
   bson_error_t berr;
   char key[16];
   bool ok = true;

   BSON_APPEND_UTF8 (&filter, "_id", did);
   cur = mongoc_collection_find_with_opts (coll, &filter, NULL, NULL);
   bson_destroy (&filter);
   if (!cur) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
      return false;
   }
   if (mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "lsids") &&
       BSON_ITER_HOLDS_ARRAY (&it) && bson_iter_recurse (&it, &arr)) {
      while (bson_iter_next (&arr) && *n < MAX_KILLED) {
         bson_t pat;
         if (!BSON_ITER_HOLDS_BINARY (&arr)) {
            continue;
         }
         snprintf (key, sizeof key, "%d", *n);
         bson_append_iter (ids, key, -1, &arr);
         BSON_APPEND_DOCUMENT_BEGIN (kill, key, &pat);
         bson_append_iter (&pat, "id", -1, &arr);
         bson_append_document_end (kill, &pat);
         (*n)++;
      }
   }
   if (mongoc_cursor_error (cur, &berr)) {
      set_mongo_error (error, "cannot read its transaction sessions", id, &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cur);
   return ok;
}

bool
fw_txn_sessions_kill (mongoc_client_t *client, const char *database, const char *id, int *killed,
                      fw_error_t *error)
{
   char did[512];
   mongoc_collection_t *coll;
   bson_t ids = BSON_INITIALIZER, cmd = BSON_INITIALIZER, kill, sel = BSON_INITIALIZER;
   bson_t update = BSON_INITIALIZER, pull;
   bson_error_t berr;
   bool ok = false;
   int n = 0;

   *killed = 0;
   if (!doc_id (did, sizeof did, id, error)) {
      return false;
   }
   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   if (!coll) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
      return false;
   }
   BSON_APPEND_ARRAY_BEGIN (&cmd, "killSessions", &kill);
   if (!read_record (coll, did, id, &ids, &kill, &n, error)) {
      bson_append_array_end (&cmd, &kill);
      goto done;
   }
   bson_append_array_end (&cmd, &kill);
   if (n == 0) {
      ok = true;
      goto done;
   }
   if (!mongoc_client_command_simple (client, "admin", &cmd, NULL, NULL, &berr)) {
      set_mongo_error (error, "killSessions failed", id, &berr);
      goto done;
   }
   /* Only those killed leave the record: a session recorded meanwhile (a
    * deposed leader's) stays for the next start. */
   BSON_APPEND_UTF8 (&sel, "_id", did);
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$pullAll", &pull);
   BSON_APPEND_ARRAY (&pull, "lsids", &ids);
   bson_append_document_end (&update, &pull);
   if (!mongoc_collection_update_one (coll, &sel, &update, NULL, NULL, &berr)) {
      set_mongo_error (error, "cannot clear its transaction sessions", id, &berr);
      goto done;
   }
   *killed = n;
   ok = true;
done:
   mongoc_collection_destroy (coll);
   bson_destroy (&ids);
   bson_destroy (&cmd);
   bson_destroy (&sel);
   bson_destroy (&update);
   return ok;
}

bool
fw_txn_sessions_forget (mongoc_client_t *client, const char *database, const char *id,
                        const bson_t *lsid, fw_error_t *error)
{
   return update_lsids (client, database, id, lsid, false, "cannot clear its transaction session",
                        error);
}

bool
fw_txn_sessions_replay_id (char *out, size_t len, const char *stream, size_t n)
{
   return n < 400 && (size_t) snprintf (out, len, "%.*s#replay", (int) n, stream) < len;
}

/* $addToSet (add) or $pull (else) name to the record's sinks. */
static bool
change_sinks (mongoc_collection_t *coll, const char *did, const char *id, const char *name,
              bool add, fw_error_t *error)
{
   bson_t sel = BSON_INITIALIZER, update = BSON_INITIALIZER, op, opts = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_UTF8 (&sel, "_id", did);
   BSON_APPEND_DOCUMENT_BEGIN (&update, add ? "$addToSet" : "$pull", &op);
   BSON_APPEND_UTF8 (&op, "sinks", name);
   bson_append_document_end (&update, &op);
   BSON_APPEND_BOOL (&opts, "upsert", add);
   if (!(ok = mongoc_collection_update_one (coll, &sel, &update, &opts, NULL, &berr))) {
      set_mongo_error (error, "cannot note the sink of its transaction sessions", id, &berr);
   }
   bson_destroy (&sel);
   bson_destroy (&update);
   bson_destroy (&opts);
   return ok;
}

bool
fw_txn_sessions_note_sink (mongoc_client_t *client, const char *database, const char *id,
                           const char *sink, fw_error_t *error)
{
   char did[512];
   mongoc_collection_t *coll;
   bool ok;

   if (!doc_id (did, sizeof did, id, error)) {
      return false;
   }
   if (!(coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION))) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
      return false;
   }
   ok = change_sinks (coll, did, id, sink, true, error);
   mongoc_collection_destroy (coll);
   return ok;
}

#define MAX_SINKS 16

bool
fw_txn_sessions_each_sink (mongoc_client_t *client, const char *database, const char *id,
                           bool (*done) (void *ud, const char *sink), void *ud, fw_error_t *error)
{
   char did[512], *names[MAX_SINKS];
   int n = 0;
   mongoc_collection_t *coll;
   mongoc_cursor_t *cur;
   bson_t filter = BSON_INITIALIZER;
   const bson_t *doc;
   bson_iter_t it, arr;
   bson_error_t berr;
   bool ok = true;

   if (!doc_id (did, sizeof did, id, error)) {
      return false;
   }
   if (!(coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION))) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
      return false;
   }
   BSON_APPEND_UTF8 (&filter, "_id", did);
   cur = mongoc_collection_find_with_opts (coll, &filter, NULL, NULL);
   if (cur && mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "sinks") &&
       BSON_ITER_HOLDS_ARRAY (&it) && bson_iter_recurse (&it, &arr)) {
      while (bson_iter_next (&arr) && n < MAX_SINKS) {
         if (BSON_ITER_HOLDS_UTF8 (&arr) &&
             (names[n] = bson_strdup (bson_iter_utf8 (&arr, NULL)))) {
            n++;
         }
      }
   }
   if (!cur || mongoc_cursor_error (cur, &berr)) {
      if (cur) {
         set_mongo_error (error, "cannot read its transaction sessions", id, &berr);
      } else {
         fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", id);
      }
      ok = false;
   }
   mongoc_cursor_destroy (cur);
   for (int i = 0; i < n; i++) {
      if (ok && done (ud, names[i])) {
         ok = change_sinks (coll, did, id, names[i], false, error);
      }
      bson_free (names[i]);
   }
   bson_destroy (&filter);
   mongoc_collection_destroy (coll);
   return ok;
}
