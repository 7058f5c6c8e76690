/*
 * runtime_control.c - the admin endpoint's control interface, implemented
 * by posting each request to the runtime's thread and waiting for it.
 *
 * Stream actions are split in two: the runtime's thread finds the worker
 * and hands it the request (that is quick, and the worker list only changes
 * on that thread), then the endpoint's control thread watches the stream's
 * metrics block (which lives as long as the registry) until the stream has
 * done it, or says the request is under way.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dlq/dlq_admin.h"
#include "runtime/runtime-private.h"

/* How long a pause, resume or restart is waited for before the answer is
 * "accepted" (202): a handler in the middle of its retries finishes first. */
#define ACTION_WAIT_MS 10000
#define POLL_MS 20

typedef struct request {
   struct request *next;
   bool reload;
   bool snapshot; /* an on-demand snapshot, of filter (JSON, or NULL) */
   const char *filter;
   const char *stream;
   fw_stream_action_t action;
   /* filled by the runtime's thread */
   bool done;
   fw_control_result_t result;
   fw_stream_metrics_t *block; /* the stream's, when the worker was asked */
   char *message;
   size_t len;
} request_t;

struct fw_runtime_control {
   fw_runtime_hooks_t rt;
   fw_metrics_t *metrics;
   pthread_t runtime_thread;
   fw_admin_t *admin;
   pthread_mutex_t mu;
   pthread_cond_t cond;
   request_t *head, *tail;
   bool closed;
};

fw_runtime_control_t *
fw_runtime_control_new (const fw_runtime_hooks_t *hooks, fw_metrics_t *metrics)
{
   fw_runtime_control_t *ctl = calloc (1, sizeof *ctl);

   if (!ctl) {
      return NULL;
   }
   ctl->rt = *hooks;
   ctl->metrics = metrics;
   ctl->runtime_thread = pthread_self ();
   if (pthread_mutex_init (&ctl->mu, NULL) != 0) {
      free (ctl);
      return NULL;
   }
   if (pthread_cond_init (&ctl->cond, NULL) != 0) {
      pthread_mutex_destroy (&ctl->mu);
      free (ctl);
      return NULL;
   }
   return ctl;
}

/* Hands req to the runtime's thread and waits until it is done there (or
 * the runtime stops: 503). */
static void
post (fw_runtime_control_t *ctl, request_t *req)
{
   pthread_mutex_lock (&ctl->mu);
   if (ctl->closed) {
      req->result = FW_CONTROL_UNAVAILABLE;
      snprintf (req->message, req->len, "flowwarden is stopping");
      pthread_mutex_unlock (&ctl->mu);
      return;
   }
   if (ctl->tail) {
      ctl->tail->next = req;
   } else {
      ctl->head = req;
   }
   ctl->tail = req;
   pthread_kill (ctl->runtime_thread, FW_RUNTIME_CONTROL_SIGNAL);
   while (!req->done) {
      pthread_cond_wait (&ctl->cond, &ctl->mu);
   }
   pthread_mutex_unlock (&ctl->mu);
}

static fw_stream_state_t
state_of (fw_stream_metrics_t *block, fw_stream_snapshot_t *snap)
{
   fw_stream_metrics_snapshot (block, fw_now_ms (), snap);
   return snap->state;
}

/* Runtime's thread: finds the stream and asks it. */
static void
run_stream_action (fw_runtime_control_t *ctl, request_t *req)
{
   fw_stream_worker_t *w = ctl->rt.find_stream (ctl->rt.ud, req->stream);
   fw_stream_stats_t stats;
   fw_error_t err;

   if (!w) {
      req->result = FW_CONTROL_NOT_FOUND;
      snprintf (req->message, req->len, "no stream named \"%s\"", req->stream);
      return;
   }
   req->block = fw_stream_worker_metrics (w);
   if (!fw_stream_worker_finished (w)) {
      fw_log (FW_LOG_INFO, req->stream, "%s asked through the admin endpoint",
              fw_stream_action_name (req->action));
      fw_stream_worker_control (w, req->action);
      req->result = FW_CONTROL_ACCEPTED;
      return;
   }
   fw_stream_worker_stats (w, &stats);
   if (!stats.failed) {
      req->result = FW_CONTROL_UNAVAILABLE;
      snprintf (req->message, req->len, "stream \"%s\" is stopping", req->stream);
   } else if (req->action != FW_STREAM_RESTART) {
      req->result = FW_CONTROL_CONFLICT;
      snprintf (req->message, req->len,
                "stream \"%s\" stopped on an error: restart it (flowwarden restart %s) or fix the "
                "script and reload",
                req->stream, req->stream);
   } else {
      /* Its thread ended on an error: start it again, from its checkpoint. */
      fw_stream_worker_join (w);
      fw_log (FW_LOG_INFO, req->stream,
              "restart asked through the admin endpoint: starting the stream again");
      if (fw_stream_worker_start (w, &err)) {
         if (req->block) {
            fw_stream_metrics_restart (req->block, FW_METRICS_RESTART_ADMIN);
         }
         req->result = FW_CONTROL_OK;
         snprintf (req->message, req->len, "stream \"%s\" started again from its checkpoint",
                   req->stream);
      } else {
         req->result = FW_CONTROL_FAILED;
         snprintf (req->message, req->len, "%s", err.message);
      }
   }
}

/* Runtime's thread: asks the stream for an incremental snapshot. */
static void
run_snapshot (fw_runtime_control_t *ctl, request_t *req)
{
   fw_stream_worker_t *w = ctl->rt.find_stream (ctl->rt.ud, req->stream);
   bson_t *filter = NULL;
   bson_error_t berr;
   fw_error_t err;

   if (!w) {
      req->result = FW_CONTROL_NOT_FOUND;
      snprintf (req->message, req->len, "no stream named \"%s\"", req->stream);
      return;
   }
   if (req->filter && !(filter = bson_new_from_json ((const uint8_t *) req->filter, -1, &berr))) {
      req->result = FW_CONTROL_FAILED;
      snprintf (req->message, req->len, "the filter is not a JSON document: %s", berr.message);
      return;
   }
   if (!fw_stream_worker_snapshot (w, filter, &err)) {
      req->result = FW_CONTROL_CONFLICT;
      snprintf (req->message, req->len, "%s", err.message);
   } else {
      fw_log (FW_LOG_INFO, req->stream, "snapshot%s asked through the admin endpoint",
              filter ? " (filtered)" : "");
      req->result = FW_CONTROL_ACCEPTED;
      snprintf (req->message, req->len,
                "snapshot asked: the stream reads its collection%s in chunks between its live "
                "events (progress in flowwarden status)",
                filter ? " (the documents matching the filter)" : "");
   }
   bson_destroy (filter);
}

void
fw_runtime_control_run (fw_runtime_control_t *ctl)
{
   request_t *req;

   pthread_mutex_lock (&ctl->mu);
   while ((req = ctl->head)) {
      if (!(ctl->head = req->next)) {
         ctl->tail = NULL;
      }
      pthread_mutex_unlock (&ctl->mu);
      if (req->reload) {
         fw_log (FW_LOG_INFO, NULL, "reload asked through the admin endpoint");
         req->result = ctl->rt.reload (ctl->rt.ud, req->message, req->len) ? FW_CONTROL_OK
                                                                           : FW_CONTROL_FAILED;
      } else if (req->snapshot) {
         run_snapshot (ctl, req);
      } else {
         run_stream_action (ctl, req);
      }
      pthread_mutex_lock (&ctl->mu);
      req->done = true;
      pthread_cond_broadcast (&ctl->cond);
   }
   pthread_mutex_unlock (&ctl->mu);
}

/* --- the endpoint's callbacks (its control thread) ----------------------- */

static int
list_streams (void *ud, fw_stream_snapshot_t **out)
{
   fw_runtime_control_t *ctl = ud;

   return fw_metrics_snapshot_all (ctl->metrics, fw_now_ms (), out);
}

/* True once the asked action shows in the stream's block. */
static bool
action_done (fw_stream_action_t action, fw_stream_state_t was, uint64_t restarts_before,
             const fw_stream_snapshot_t *now)
{
   switch (action) {
   case FW_STREAM_PAUSE:
      return now->state == FW_STREAM_PAUSED;
   case FW_STREAM_RESUME:
      return was != FW_STREAM_PAUSED || now->state != FW_STREAM_PAUSED;
   default:
      return now->restarts > restarts_before && now->state != FW_STREAM_PAUSED;
   }
}

static fw_control_result_t
stream_action (void *ud, const char *stream, fw_stream_action_t action, char *message, size_t len)
{
   fw_runtime_control_t *ctl = ud;
   request_t req = {0};
   fw_stream_snapshot_t before, now;
   fw_stream_state_t was = FW_STREAM_STARTING;

   req.stream = stream;
   req.action = action;
   req.message = message;
   req.len = len;
   /* The state before, to tell "already paused" from "paused now". */
   {
      fw_stream_snapshot_t *all = NULL;
      int n = list_streams (ctl, &all);
      memset (&before, 0, sizeof before);
      for (int i = 0; i < n; i++) {
         if (strcmp (all[i].name, stream) == 0) {
            before = all[i];
            was = all[i].state;
         }
      }
      free (all);
   }
   post (ctl, &req);
   if (req.result != FW_CONTROL_ACCEPTED || !req.block) {
      return req.result;
   }
   if (action == FW_STREAM_PAUSE && was == FW_STREAM_PAUSED) {
      snprintf (message, len, "already paused");
      return FW_CONTROL_OK;
   }
   if (action == FW_STREAM_RESUME && was != FW_STREAM_PAUSED && before.outage.circuit_state) {
      snprintf (message, len, "circuit open: probing now"); /* issue 29 */
      return FW_CONTROL_OK;
   }
   if (action == FW_STREAM_RESUME && was != FW_STREAM_PAUSED) {
      snprintf (message, len, "not paused: nothing to resume");
      return FW_CONTROL_OK;
   }
   for (int waited = 0; waited < ACTION_WAIT_MS; waited += POLL_MS) {
      struct timespec nap = {0, POLL_MS * 1000000L};
      state_of (req.block, &now);
      if (action_done (action, was, before.restarts, &now)) {
         snprintf (message, len, "%s",
                   action == FW_STREAM_PAUSE    ? "paused: checkpoint written, change stream closed"
                   : action == FW_STREAM_RESUME ? "resumed from its checkpoint"
                                                : "restarted from its checkpoint");
         return FW_CONTROL_OK;
      }
      nanosleep (&nap, NULL);
   }
   snprintf (message, len,
             "%s asked: the stream does it once the event in flight is finished with (state now: "
             "%s)",
             fw_stream_action_name (action), fw_stream_state_name (state_of (req.block, &now)));
   return FW_CONTROL_ACCEPTED;
}

static fw_control_result_t
snapshot_action (void *ud, const char *stream, const char *filter, char *message, size_t len)
{
   request_t req = {0};

   req.snapshot = true;
   req.stream = stream;
   req.filter = filter;
   req.message = message;
   req.len = len;
   post (ud, &req);
   return req.result;
}

static fw_control_result_t
reload (void *ud, char *message, size_t len)
{
   request_t req = {0};

   req.reload = true;
   req.message = message;
   req.len = len;
   post (ud, &req);
   return req.result;
}

/* GET /v1/dlq/stats: what `flowwarden dlq stats --json` prints, for the
 * script on disk (the running one unless it was edited and not reloaded). */
static fw_control_result_t
dlq_stats (void *ud, char **json, char *message, size_t len)
{
   fw_runtime_control_t *ctl = ud;
   fw_dlq_filter_t filter;
   fw_dlq_admin_t *admin;
   const char *script, *uri;
   fw_error_t err;
   bson_t stats;
   char *text;

   memset (&filter, 0, sizeof filter);
   ctl->rt.script (ctl->rt.ud, &script, &uri);
   if (!(admin = fw_dlq_admin_new (script, uri, &err))) {
      snprintf (message, len, "%s", err.message);
      return FW_CONTROL_NOT_FOUND;
   }
   if (!fw_dlq_admin_stats (admin, &filter, NULL, fw_now_ms (), &stats, &err)) {
      snprintf (message, len, "%s", err.message);
      fw_dlq_admin_destroy (admin);
      return FW_CONTROL_FAILED;
   }
   text = bson_as_relaxed_extended_json (&stats, NULL);
   *json = text ? strdup (text) : NULL;
   bson_free (text);
   bson_destroy (&stats);
   fw_dlq_admin_destroy (admin);
   if (!*json) {
      snprintf (message, len, "out of memory");
      return FW_CONTROL_FAILED;
   }
   return FW_CONTROL_OK;
}

/* The console's dead-letter routes (runtime_dlq_routes.c). */
static fw_control_result_t
dlq_route (void *ud, const fw_admin_dlq_request_t *req, char **json, char *message, size_t len)
{
   fw_runtime_control_t *ctl = ud;
   const char *script, *uri;

   ctl->rt.script (ctl->rt.ud, &script, &uri);
   return fw_runtime_dlq_route (script, uri, req, json, message, len);
}

bool
fw_runtime_control_start_admin (fw_runtime_control_t *ctl, const char *listen, const char *token,
                                fw_error_t *error)
{
   fw_admin_options_t opts = {0};

   opts.listen = listen;
   opts.token = token;
   opts.metrics = ctl->metrics;
   opts.control = (fw_admin_control_t){list_streams, stream_action,   reload,   ctl,
                                       dlq_stats,    snapshot_action, dlq_route};
   if (!(ctl->admin = fw_admin_start (&opts, error))) {
      return false;
   }
   fw_log (FW_LOG_INFO, NULL,
           "admin endpoint on %s (port %d)%s: the console at /, /metrics, "
           "/healthz, /readyz, /v1/streams",
           listen, fw_admin_port (ctl->admin), token && *token ? ", token required for POST" : "");
   return true;
}

void
fw_runtime_control_close (fw_runtime_control_t *ctl)
{
   request_t *req;

   pthread_mutex_lock (&ctl->mu);
   ctl->closed = true;
   while ((req = ctl->head)) {
      ctl->head = req->next;
      req->result = FW_CONTROL_UNAVAILABLE;
      snprintf (req->message, req->len, "flowwarden is stopping");
      req->done = true;
   }
   ctl->tail = NULL;
   pthread_cond_broadcast (&ctl->cond);
   pthread_mutex_unlock (&ctl->mu);
   fw_admin_stop (ctl->admin);
   ctl->admin = NULL;
}

void
fw_runtime_control_destroy (fw_runtime_control_t *ctl)
{
   if (!ctl) {
      return;
   }
   fw_runtime_control_close (ctl);
   pthread_cond_destroy (&ctl->cond);
   pthread_mutex_destroy (&ctl->mu);
   free (ctl);
}
