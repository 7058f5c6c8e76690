/*
 * dlq_replay_txn.c - exactly_once for a replayed dead letter (issue 39): the
 * handler's writes and the entry's RESOLVED status in one transaction, when
 * the DLQ lives on the sink (the transactions' client). A crash (or a lost
 * commit) then leaves the entry claimed with nothing applied, and the next
 * replay (once the claim expired) runs it again; never the writes without
 * the resolution, which a later replay would apply a second time. A skip by
 * on_error, a failure or a give-up are settled as without exactly_once:
 * nothing of the handler is applied then.
 */
#include "runtime/replay/dlq_replay_txn.h"
#include "flowwarden/clock.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/event_txn.h"

static bool
resolve_in_txn (void *ud, const fw_event_t *ev, mongoc_client_t *client,
                mongoc_client_session_t *session, bson_t *reply, bool *fenced, fw_error_t *error)
{
   fw_replay_txn_t *t = ud;
   fw_dlq_outcome_t o = {.kind = FW_DLQ_RESOLVE, .now_ms = fw_now_ms ()};
   bool held;

   (void) ev;
   (void) client;
   bson_init (reply);
   *fenced = false;
   t->resolved = false;
   if (!t->sink->settle_in (t->sink, session, t->id, t->actor, &o, &held, error)) {
      return false;
   }
   if (!held) {
      /* Another process took the entry: this replay commits nothing. */
      *fenced = true;
      fw_error_set (error, FW_ERROR_MONGO,
                    "the replayed entry's claim expired and another "
                    "process took it (raise --claim-ttl)");
      return false;
   }
   t->resolved = true;
   return true;
}

bool
fw_replay_txn_start (fw_dispatcher_t *d, const bson_value_t *id, const char *actor,
                     fw_replay_txn_t *t)
{
   mongoc_client_t *client;
   fw_error_t err;

   t->sink = NULL;
   t->id = id;
   t->actor = actor;
   t->resolved = false;
   if (!fw_dispatcher_config (d)->exactly_once || !(client = fw_dispatcher_txn_client (d, &err)) ||
       !(t->sink = fw_txn_sink_dlq (d, client))) {
      return false;
   }
   fw_dispatcher_set_exactly_once_replay (d, resolve_in_txn, t);
   return true;
}

void
fw_replay_txn_stop (fw_dispatcher_t *d, fw_replay_txn_t *t)
{
   fw_dispatcher_set_exactly_once_replay (d, NULL, NULL);
   fw_dlq_store_destroy (t->sink);
   t->sink = NULL;
}
