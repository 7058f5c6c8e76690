/*
 * dlq_replay_sequence.c - replaying a sequenced DLQ (issue 14): an entry of
 * a sequence is replayed only as part of its whole sequence, head first
 * then by sequenceIndex; the first failure stops the sequence (the enqueue
 * policy decided: requeued, the entry stays head; evicted, the sequence goes
 * on), and a sequence whose last entry is resolved is closed with the
 * conditional update of dlq_sequence.h, re-reading when a live event took
 * an index meanwhile.
 */
#include <string.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_sequence.h"
#include "runtime/replay/dlq_replay.h"

/* How long a replay waits for live index requests in flight (inflight >
 * 0: a stream is storing a parked entry) before leaving the sequence open. */
#define INFLIGHT_WAIT_MS 5000
#define INFLIGHT_POLL_MS 50

static const char *
entry_sequence (const bson_t *entry, int64_t *index)
{
   bson_iter_t it;
   if (!bson_iter_init_find (&it, entry, "sequenceId") || !BSON_ITER_HOLDS_UTF8 (&it)) {
      return NULL;
   }
   if (index) {
      bson_iter_t i;
      *index = bson_iter_init_find (&i, entry, "sequenceIndex") && BSON_ITER_HOLDS_NUMBER (&i)
                  ? bson_iter_as_int64 (&i)
                  : 0;
   }
   return bson_iter_utf8 (&it, NULL);
}

typedef struct {
   bson_t *docs;
   int n;
} collect_t;

static bool
collect_entry (const bson_t *entry, void *ud, fw_error_t *error)
{
   collect_t *c = ud;
   char key[16];

   snprintf (key, sizeof key, "%d", c->n++);
   if (!BSON_APPEND_DOCUMENT (c->docs, key, entry)) {
      fw_error_set (error, FW_ERROR_NOMEM, "too many waiting entries to hold in one document");
      return false;
   }
   return true;
}

/* The waiting entries of the sequence, by sequenceIndex, into docs (an
 * array document the caller initialised). */
static bool
waiting_entries (fw_dlq_store_t *store, const char *stream, const char *seq, bson_t *docs, int *n,
                 fw_error_t *error)
{
   collect_t c = {docs, 0};
   bool ok = store->seq_entries (store, stream, seq, collect_entry, &c, error);

   *n = c.n;
   return ok;
}

bool
fw_dlq_replay_is_head (fw_dlq_store_t *store, const bson_t *entry, bool *head, fw_error_t *error)
{
   int64_t index = 0, before;
   const char *seq = entry_sequence (entry, &index);
   const char *stream = fw_dlq_entry_stream (entry) ? fw_dlq_entry_stream (entry) : "";

   *head = true;
   if (!seq) {
      return true;
   }
   if (!store->seq_before (store, stream, seq, index, &before, error)) {
      return false;
   }
   *head = before == 0;
   return true;
}

static bool
done_with (fw_replay_status_t s)
{
   return s == FW_REPLAY_RESOLVED || s == FW_REPLAY_SKIPPED || s == FW_REPLAY_EVICTED ||
          s == FW_REPLAY_WOULD_RUN;
}

/* Replays the waiting entries (docs, by sequenceIndex) in order, reporting
 * each; true when one was not done with, which stops the sequence there. */
static bool
replay_waiting (fw_dispatcher_t *d, fw_dlq_store_t *dlq, const bson_t *docs,
                const fw_replay_options_t *opts, fw_replay_report_fn report, void *ud)
{
   bson_iter_t it;

   if (!bson_iter_init (&it, docs)) {
      return false;
   }
   while (bson_iter_next (&it)) {
      uint32_t len;
      const uint8_t *data;
      bson_t entry;
      fw_replay_result_t r;

      bson_iter_document (&it, &len, &data);
      if (!bson_init_static (&entry, data, len)) {
         continue;
      }
      fw_dlq_replay_entry (d, dlq, &entry, opts, &r);
      report (ud, &entry, &r);
      if (!done_with (r.status)) {
         return true; /* the entry stays head; the rest stay behind it */
      }
   }
   return false;
}

/* A live event is storing its entry (inflight > 0): waits a poll for it,
 * from *waited_since on; true when the replay should leave the sequence
 * open instead (waited INFLIGHT_WAIT_MS already, or shutdown). */
static bool
wait_for_inflight (fw_dispatcher_t *d, const char *seq, int64_t *waited_since)
{
   if (!*waited_since) {
      *waited_since = fw_mono_ms ();
   } else if (fw_mono_ms () - *waited_since >= INFLIGHT_WAIT_MS) {
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "DLQ sequence %.300s: a live event is still being parked behind it after "
              "%d ms; left open (replay it again)",
              seq, INFLIGHT_WAIT_MS);
      return true;
   }
   return fw_shutdown_wait_ms (fw_dispatcher_shutdown (d), INFLIGHT_POLL_MS);
}

fw_seq_replay_t
fw_dlq_replay_sequence (fw_dispatcher_t *d, fw_dlq_store_t *dlq, const char *seq,
                        const fw_replay_options_t *opts, fw_replay_report_fn report, void *ud,
                        fw_error_t *error)
{
   int64_t waited_since = 0;
   fw_seq_replay_t out = FW_SEQ_REPLAY_ERROR;

   for (;;) {
      fw_seq_state_t st;
      bson_t docs = BSON_INITIALIZER;
      bool stopped, closed;
      int n;

      if (fw_shutdown_requested (fw_dispatcher_shutdown (d))) {
         out = FW_SEQ_REPLAY_OPEN;
         bson_destroy (&docs);
         break;
      }
      /* next as it is before the entries are read: the close below holds
       * only if no live event took an index since. */
      if (!dlq->seq_read (dlq, fw_dispatcher_config (d)->name, seq, &st, error) ||
          !waiting_entries (dlq, fw_dispatcher_config (d)->name, seq, &docs, &n, error)) {
         bson_destroy (&docs);
         break;
      }
      stopped = replay_waiting (d, dlq, &docs, opts, report, ud);
      bson_destroy (&docs);
      if (stopped || opts->dry_run) {
         out = FW_SEQ_REPLAY_OPEN;
         break;
      }
      if (!st.exists || !st.open) {
         out = FW_SEQ_REPLAY_CLOSED; /* closed already (by another replay) */
         break;
      }
      if (st.inflight == 0 && n == 0 &&
          !dlq->seq_close (dlq, fw_dispatcher_config (d)->name, seq, st.next, &closed, error)) {
         break;
      }
      if (st.inflight == 0 && n == 0 && closed) {
         out = FW_SEQ_REPLAY_CLOSED;
         break;
      }
      /* Entries were resolved this round (read again: a live event may
       * have joined meanwhile), or a live event is storing its entry. */
      if (st.inflight > 0) {
         if (wait_for_inflight (d, seq, &waited_since)) {
            out = FW_SEQ_REPLAY_OPEN;
            break;
         }
      } else {
         waited_since = 0;
      }
   }
   if (out == FW_SEQ_REPLAY_CLOSED) {
      /* A replay inside run: the stream stops parking the key at once. */
      fw_dispatcher_sequence_closed (d, seq);
      fw_log (FW_LOG_INFO, fw_dispatcher_config (d)->name,
              "DLQ sequence %.300s resolved and closed", seq);
   }
   return out;
}

fw_seq_replay_t
fw_dlq_replay_select (fw_dispatcher_t *d, fw_dlq_store_t *dlq, const bson_t *entry,
                      const fw_replay_options_t *opts, fw_replay_report_fn report, void *ud,
                      fw_error_t *error)
{
   const char *seq = entry_sequence (entry, NULL);
   fw_replay_result_t r;
   bool head;

   if (!seq) {
      fw_dlq_replay_entry (d, dlq, entry, opts, &r);
      report (ud, entry, &r);
      return FW_SEQ_REPLAY_NONE;
   }
   if (!fw_dlq_replay_is_head (dlq, entry, &head, error)) {
      return FW_SEQ_REPLAY_ERROR;
   }
   if (!head) {
      return FW_SEQ_REPLAY_BEHIND;
   }
   return fw_dlq_replay_sequence (d, dlq, seq, opts, report, ud, error);
}
