/*
 * write_reply.c (issue 37): a write command's reply with ok: 1 and writeErrors
 * or a writeConcernError is a failed write. The check alone, then the shared
 * members' renew against the stand-in: refused by a unique index (a write
 * error in an ok: 1 reply, as mongod answers an update: MongoDB manual,
 * "update" command, Output: writeErrors) and answered with a write concern
 * error (failCommand's writeConcernError).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "bson/write_reply.h"
#include "flowwarden/log.h"
#include "runtime/ha/shared_units.h"
#include "standin_process.h"

static standin_t g_standin;

static bool
check_json (const char *json, bson_error_t *error)
{
   bson_error_t perr;
   bson_t *reply = bson_new_from_json ((const uint8_t *) json, -1, &perr);
   bool ok;

   assert_non_null (reply);
   memset (error, 0, sizeof *error);
   ok = fw_write_reply_ok (true, reply, error);
   bson_destroy (reply);
   return ok;
}

static void
a_reply_is_ok_only_without_write_errors_or_a_write_concern_error (void **state)
{
   bson_error_t e;

   (void) state;
   assert_true (check_json ("{\"ok\": 1, \"n\": 1, \"nModified\": 1}", &e));
   assert_true (check_json ("{\"ok\": 1, \"writeErrors\": []}", &e));
   assert_true (fw_write_reply_ok (true, NULL, &e));

   assert_false (
      check_json ("{\"ok\": 1, \"n\": 0, \"writeErrors\": [{\"index\": 0, \"code\": "
                  "11000, \"errmsg\": \"E11000 duplicate key\"}]}",
                  &e));
   assert_int_equal (e.domain, MONGOC_ERROR_SERVER);
   assert_int_equal (e.code, 11000);
   assert_string_equal (e.message, "write error: E11000 duplicate key");

   assert_false (
      check_json ("{\"ok\": 1, \"n\": 1, \"writeConcernError\": {\"code\": 64, "
                  "\"errmsg\": \"waiting for replication timed out\"}}",
                  &e));
   assert_int_equal (e.domain, MONGOC_ERROR_WRITE_CONCERN);
   assert_int_equal (e.code, 64);
   assert_string_equal (e.message, "write concern error: waiting for replication timed out");

   assert_false (check_json ("{\"ok\": 0, \"code\": 96, \"errmsg\": \"boom\"}", &e));
   assert_int_equal (e.code, 96);
   assert_string_equal (e.message, "command failed: boom");

   /* Not sent: the call's own error stays. */
   bson_set_error (&e, MONGOC_ERROR_STREAM, 1, "socket error");
   assert_false (fw_write_reply_ok (false, NULL, &e));
   assert_string_equal (e.message, "socket error");
}

/* --- the members' renew ------------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_warning[1024];

static void
sink (void *ud, fw_log_level_t level, const char *stream, const char *message)
{
   (void) ud;
   (void) stream;
   pthread_mutex_lock (&g_mu);
   if (level == FW_LOG_WARN && strstr (message, "cannot renew or count the members") &&
       !g_warning[0]) {
      snprintf (g_warning, sizeof g_warning, "%s", message);
   }
   pthread_mutex_unlock (&g_mu);
}

static bool
command (mongoc_client_t *client, const char *db, const char *json)
{
   bson_error_t err;
   bson_t *cmd = bson_new_from_json ((const uint8_t *) json, -1, &err);
   bool ok = cmd && mongoc_client_command_simple (client, db, cmd, NULL, NULL, &err);

   if (!ok) {
      fprintf (stderr, "%s: %s\n", json, err.message);
   }
   bson_destroy (cmd);
   return ok;
}

/* Joins database's group and waits (10 s at most) for the renew's warning;
 * true when it came with `want` in it and no member was counted. */
static bool
renew_is_refused (const char *database, const char *want)
{
   mongoc_uri_t *uri = mongoc_uri_new (g_standin.uri);
   fw_shared_group_t *g;
   fw_shared_figures_t f;
   fw_error_t err;
   double deadline = now_s () + 10.0;
   bool warned = false;

   memset (&err, 0, sizeof err);
   pthread_mutex_lock (&g_mu);
   g_warning[0] = '\0';
   pthread_mutex_unlock (&g_mu);
   fw_log_set_sink (sink, NULL);
   assert_non_null (g = fw_shared_group_join (uri, database, 1000, &err));
   while (!warned && now_s () < deadline) {
      pthread_mutex_lock (&g_mu);
      warned = g_warning[0] != '\0';
      pthread_mutex_unlock (&g_mu);
      if (!warned) {
         usleep (10000);
      }
   }
   fw_shared_group_figures (g, &f);
   fw_shared_group_leave (g);
   fw_log_set_sink (NULL, NULL);
   mongoc_uri_destroy (uri);
   fprintf (stderr, "warning: %s; members %d\n", warned ? g_warning : "(none)", f.members);
   return warned && strstr (g_warning, want) && f.members == 0;
}

static void
a_renew_refused_by_a_write_error_is_not_a_renew (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);

   (void) state;
   /* A unique index on a field no member document has: the second document
    * without it (this member's upsert) is a duplicate key, which mongod
    * reports in writeErrors of an ok: 1 reply. The other member expired a
    * minute ago (not swept, not counted). */
   assert_true (command (client, "renewdb",
                         "{\"insert\": \"_fw_members\", \"documents\": [{\"_id\": "
                         "\"other\"}]}"));
   assert_true (command (client, "renewdb",
                         "{\"createIndexes\": \"_fw_members\", \"indexes\": [{\"key\": "
                         "{\"slot\": 1}, \"name\": \"slot_1\", \"unique\": true}]}"));
   assert_true (command (client, "renewdb",
                         "{\"update\": \"_fw_members\", \"updates\": [{\"q\": {\"_id\": "
                         "\"other\"}, \"u\": [{\"$set\": {\"expiresAt\": {\"$subtract\": "
                         "[\"$$NOW\", 60000]}}}]}]}"));
   assert_true (renew_is_refused ("renewdb", "E11000"));
   mongoc_client_destroy (client);
}

static void
a_renew_with_a_write_concern_error_is_not_a_renew (void **state)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);

   (void) state;
   assert_true (command (client, "admin",
                         "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", "
                         "\"data\": {\"failCommands\": [\"update\"], \"appName\": "
                         "\"flowwarden-members\", \"writeConcernError\": {\"code\": 64, "
                         "\"codeName\": \"WriteConcernFailed\", \"errmsg\": \"waiting for "
                         "replication timed out\"}}}"));
   assert_true (renew_is_refused ("wcedb", "waiting for replication timed out"));
   assert_true (
      command (client, "admin", "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}"));
   mongoc_client_destroy (client);
}

static int
group_setup (void **state)
{
   (void) state;
   return standin_group_start (&g_standin);
}

static int
group_teardown (void **state)
{
   (void) state;
   return standin_group_stop (&g_standin);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (a_reply_is_ok_only_without_write_errors_or_a_write_concern_error),
      cmocka_unit_test (a_renew_refused_by_a_write_error_is_not_a_renew),
      cmocka_unit_test (a_renew_with_a_write_concern_error_is_not_a_renew),
   };
   return cmocka_run_group_tests_name ("write_reply", tests, group_setup, group_teardown);
}
