/*
 * doctor.c - the deployment's checks of `flowwarden doctor` (doctor.h):
 * reachable and authenticated, version and topology, the split stage, the
 * oplog window and the clock; then each stream's (doctor_streams.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor-private.h"
#include "flowwarden/clock.h"
#include "runtime/ha/lease.h"
#include "runtime/host/oplog_window.h"
#include "runtime/host/server_probe.h"

/* maxWireVersion of MongoDB 7.0 (src/mongo/db/wire_version.h). */
#define WIRE_7_0 21

static const char *
utf8_of (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

/* hello, timed for the clock check: the second of two, the first having
 * connected and authenticated; false (reported) when unreachable. */
static bool
hello (mongoc_client_t *client, bson_t *reply, int64_t *mid_ms, fw_doctor_report_t *r)
{
   bson_t cmd = BSON_INITIALIZER;
   bson_error_t berr;
   int64_t sent = 0;
   bool ok;

   BSON_APPEND_INT32 (&cmd, "hello", 1);
   ok = mongoc_client_command_simple (client, "admin", &cmd, NULL, reply, &berr);
   if (ok) {
      bson_destroy (reply);
      sent = fw_now_ms ();
      ok = mongoc_client_command_simple (client, "admin", &cmd, NULL, reply, &berr);
   }
   *mid_ms = sent + (fw_now_ms () - sent) / 2;
   bson_destroy (&cmd);
   if (!ok) {
      char why[2048];
      snprintf (why, sizeof why, "%s", berr.message);
      if (berr.domain == MONGOC_ERROR_SERVER_SELECTION) {
         fw_server_explain_selection (client, why, sizeof why);
      }
      fw_doctor_add (r, NULL, "connection", FW_DOCTOR_FAIL,
                     "check the URI (--uri, FLOWWARDEN_URI or fw.defaults { uri }), that the "
                     "server is up and reachable from here, and the user and password",
                     "cannot reach or authenticate to the deployment: %s", why);
   }
   return ok;
}

/* "6.0.9" of buildInfo into *version (at most len), "" when unknown. */
static void
server_version (mongoc_client_t *client, char *version, size_t len)
{
   bson_t cmd = BSON_INITIALIZER, reply;
   bson_error_t berr;
   const char *v;

   version[0] = '\0';
   BSON_APPEND_INT32 (&cmd, "buildInfo", 1);
   if (mongoc_client_command_simple (client, "admin", &cmd, NULL, &reply, &berr) &&
       (v = utf8_of (&reply, "version"))) {
      snprintf (version, len, "%s", v);
   }
   bson_destroy (&reply);
   bson_destroy (&cmd);
}

static void
check_topology (mongoc_client_t *client, const bson_t *hello_reply, const char *version,
                int32_t wire, fw_doctor_report_t *r)
{
   const char *set = utf8_of (hello_reply, "setName");
   const char *msg = utf8_of (hello_reply, "msg");
   const char *user = mongoc_uri_get_username (mongoc_client_get_uri (client));

   fw_doctor_add (r, NULL, "connection", FW_DOCTOR_OK, NULL,
                  "connected%s; MongoDB %s, "
                  "maxWireVersion %d",
                  user ? " and authenticated" : " (no credentials)",
                  *version ? version : "(version unknown)", (int) wire);
   if (set) {
      fw_doctor_add (r, NULL, "topology", FW_DOCTOR_OK, NULL, "replica set %s", set);
   } else if (msg && strcmp (msg, "isdbgrid") == 0) {
      fw_doctor_add (r, NULL, "topology", FW_DOCTOR_OK, NULL, "sharded cluster through mongos");
   } else {
      fw_doctor_add (r, NULL, "topology", FW_DOCTOR_FAIL,
                     "run mongod as a replica set (--replSet NAME, then rs.initiate(); one "
                     "member will do) and add ?replicaSet=NAME to the URI",
                     "a standalone server: it cannot serve change streams");
   }
}

/* 6.0.9+ within 6.0, or 7.0+ (wire 21). */
static bool
has_split_stage (const char *version, int32_t wire)
{
   int major = 0, minor = 0, patch = 0;

   if (wire >= WIRE_7_0) {
      return true;
   }
   if (sscanf (version, "%d.%d.%d", &major, &minor, &patch) != 3) {
      return false;
   }
   return major > 6 || (major == 6 && (minor > 0 || patch >= 9));
}

static void
check_split (const fw_stream_config_t *cfgs, size_t n, const char *version, int32_t wire,
             fw_doctor_report_t *r)
{
   bool split = has_split_stage (version, wire);

   for (size_t i = 0; i < n; i++) {
      const fw_stream_config_t *c = &cfgs[i];
      if (!c->split_large_events) {
         continue;
      }
      if (split) {
         fw_doctor_add (r, c->name, "split_large_events", FW_DOCTOR_OK, NULL,
                        "the server has $changeStreamSplitLargeEvent");
      } else {
         fw_doctor_add (r, c->name, "split_large_events", FW_DOCTOR_WARN,
                        "upgrade to MongoDB 6.0.9 or 7.0+, or set split_large_events = false "
                        "to silence this",
                        "MongoDB %s has no $changeStreamSplitLargeEvent (6.0.9, 7.0+): the "
                        "stream is read without it and an event over 16 MiB %s",
                        *version ? version : "of this version",
                        c->oversize_skip ? "is dead-lettered (oversize = \"skip\")"
                                         : "stops the stream (oversize = \"fail\")");
      }
   }
}

static void
check_oplog (mongoc_client_t *client, fw_doctor_server_t *srv, fw_doctor_report_t *r)
{
   bson_error_t berr;
   int got = fw_oplog_window_read (client, &srv->oplog_first_s, &srv->oplog_last_s, &berr);

   if (got < 0) {
      fw_doctor_add (r, NULL, "oplog_window", FW_DOCTOR_WARN,
                     "grant find on local.oplog.rs (e.g. the clusterMonitor role) to see it "
                     "here, or watch the window where the deployment reports it (Atlas: the "
                     "Oplog Window metric)",
                     "cannot read the oplog (local.oplog.rs): %s; checkpoints are not compared "
                     "with the window",
                     berr.message);
      return;
   }
   if (got == 0) {
      fw_doctor_add (r, NULL, "oplog_window", FW_DOCTOR_INFO, NULL, "the oplog is empty");
      return;
   }
   srv->has_oplog = true;
   fw_doctor_add (r, NULL, "oplog_window", FW_DOCTOR_OK, NULL,
                  "the oplog holds %lld s (its first entry is %lld s old)",
                  (long long) (srv->oplog_last_s - srv->oplog_first_s),
                  (long long) (fw_now_ms () / 1000 - srv->oplog_first_s));
}

static void
check_clock (const bson_t *hello_reply, int64_t mid_ms, const fw_stream_config_t *cfgs, size_t n,
             fw_doctor_report_t *r)
{
   int64_t lease_ms = 0, margin, diff;
   bson_iter_t it;

   if (!bson_iter_init_find (&it, hello_reply, "localTime") || !BSON_ITER_HOLDS_DATE_TIME (&it)) {
      fw_doctor_add (r, NULL, "clock", FW_DOCTOR_INFO, NULL,
                     "the server does not report its time (hello's localTime)");
      return;
   }
   diff = bson_iter_date_time (&it) - mid_ms;
   for (size_t i = 0; i < n; i++) {
      if (cfgs[i].ha_leader && (!lease_ms || cfgs[i].ha_lease_ms < lease_ms)) {
         lease_ms = cfgs[i].ha_lease_ms;
      }
   }
   if (!lease_ms) {
      fw_doctor_add (r, NULL, "clock", FW_DOCTOR_INFO, NULL,
                     "this machine's clock differs from the server's by %lld ms (no stream "
                     "uses ha, which is what it would matter for)",
                     (long long) diff);
      return;
   }
   margin = fw_lease_margin_ms (lease_ms);
   if (llabs (diff) > margin) {
      fw_doctor_add (r, NULL, "clock", FW_DOCTOR_WARN,
                     "synchronise the clocks (NTP, chrony) of this machine and the servers",
                     "this machine's clock differs from the server's by %lld ms, more than the "
                     "lease's safety margin (%lld ms)",
                     (long long) diff, (long long) margin);
   } else {
      fw_doctor_add (r, NULL, "clock", FW_DOCTOR_OK, NULL,
                     "this machine's clock differs from the server's by %lld ms (the lease's "
                     "safety margin: %lld ms)",
                     (long long) diff, (long long) margin);
   }
}

void
fw_doctor_run (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
               fw_doctor_report_t *r)
{
   fw_doctor_server_t srv = {0};
   bson_t reply;
   char version[64];
   int64_t mid_ms;
   bson_iter_t it;

   if (!hello (client, &reply, &mid_ms, r)) {
      bson_destroy (&reply);
      return;
   }
   server_version (client, version, sizeof version);
   srv.max_wire = bson_iter_init_find (&it, &reply, "maxWireVersion") && BSON_ITER_HOLDS_INT32 (&it)
                     ? bson_iter_int32 (&it)
                     : 0;
   check_topology (client, &reply, version, srv.max_wire, r);
   check_clock (&reply, mid_ms, cfgs, n, r);
   check_oplog (client, &srv, r);
   fw_doctor_privileges (client, cfgs, n, r);
   check_split (cfgs, n, version, srv.max_wire, r);
   fw_doctor_partitions (client, cfgs, n, &srv, r); /* issue 31 */
   for (size_t i = 0; i < n; i++) {
      fw_doctor_pre_images (client, &cfgs[i], &srv, r);
      fw_doctor_checkpoint (client, &cfgs[i], &srv, r);
   }
   bson_destroy (&reply);
}
