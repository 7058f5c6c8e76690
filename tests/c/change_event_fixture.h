/*
 * change_event_fixture.h - a change event as a replica set sends it, built
 * for the C tests that dispatch events (test_outcomes, test_stream_summary),
 * and its dispatch. Include after cmocka.h.
 */
#ifndef FLOWWARDEN_TEST_CHANGE_EVENT_FIXTURE_H
#define FLOWWARDEN_TEST_CHANGE_EVENT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/host/lua_host.h"

/* A change event of operation op on document key k, the i-th of its stream
 * (its resume token and clusterTime grow with i); a delete has no
 * fullDocument. The caller owns it (bson_destroy). */
static inline bson_t *
change_event_of (const char *op, int k, int i)
{
   bson_t *ev = bson_new ();
   bson_t sub;
   char data[40];

   snprintf (data, sizeof data, "82%08X%08X01800000000000", 0x65A1B2C3u, (unsigned) i + 1);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "_id", &sub);
   BSON_APPEND_UTF8 (&sub, "_data", data);
   bson_append_document_end (ev, &sub);
   BSON_APPEND_UTF8 (ev, "operationType", op);
   BSON_APPEND_TIMESTAMP (ev, "clusterTime", 0x65A1B2C3u, (unsigned) i + 1);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "ns", &sub);
   BSON_APPEND_UTF8 (&sub, "db", "shop");
   BSON_APPEND_UTF8 (&sub, "coll", "c");
   bson_append_document_end (ev, &sub);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "documentKey", &sub);
   BSON_APPEND_INT32 (&sub, "_id", k);
   bson_append_document_end (ev, &sub);
   if (strcmp (op, "delete") != 0) {
      BSON_APPEND_DOCUMENT_BEGIN (ev, "fullDocument", &sub);
      BSON_APPEND_INT32 (&sub, "_id", k);
      bson_append_document_end (ev, &sub);
   }
   return ev;
}

/* Dispatches event (op, k, i) through d; its outcome. */
static inline fw_outcome_t
dispatch_change_event (fw_dispatcher_t *d, const char *op, int k, int i)
{
   bson_t *doc = change_event_of (op, k, i);
   fw_event_t ev;
   fw_error_t err;
   fw_outcome_t o;

   assert_true (fw_event_parse (doc, &ev, &err));
   o = fw_event_dispatch (d, &ev);
   bson_destroy (doc);
   return o;
}

/* A Lua host with script loaded (through a temporary file, removed again),
 * its streams on a replica set nobody listens at; fails the test when the
 * script does not load. The caller owns the host. */
static inline fw_lua_host_t *
host_of_script (const char *script)
{
   char path[] = "/tmp/fw_test_script_XXXXXX.lua";
   int fd = mkstemps (path, 4);
   fw_lua_host_t *host;
   fw_error_t err;

   assert_true (fd >= 0);
   assert_int_equal (write (fd, script, strlen (script)), (ssize_t) strlen (script));
   close (fd);
   host = fw_lua_host_new (&err);
   assert_non_null (host);
   if (!fw_lua_host_load_script (host, path, "mongodb://127.0.0.1:9/shop?replicaSet=rs0", &err)) {
      fail_msg ("%s", err.message);
   }
   unlink (path);
   return host;
}

#endif
