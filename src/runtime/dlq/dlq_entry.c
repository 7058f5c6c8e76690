/*
 * dlq_entry.c - seed 002's DLQ document, field for field and type for type.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/dlq/dlq_entry.h"

#define MS_PER_DAY (24LL * 60 * 60 * 1000)

void
fw_dlq_operation_type (const char *op, char *buf, size_t len)
{
   size_t o = 0;
   for (size_t i = 0; op[i] && o + 2 < len; i++) {
      if (isupper ((unsigned char) op[i]) && i > 0) {
         buf[o++] = '_';
      }
      buf[o++] = (char) toupper ((unsigned char) op[i]);
   }
   buf[o] = '\0';
}

/* A random (version 4) UUID, as the seed's _id is. */
static bool
uuid4 (char out[37])
{
   uint8_t b[16];
   if (getrandom (b, sizeof b, 0) != (ssize_t) sizeof b) {
      return false;
   }
   b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40);
   b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80);
   snprintf (out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
   return true;
}

static void
append_or_null (bson_t *out, const char *key, const fw_event_t *ev, fw_event_field_t f)
{
   bson_iter_t it;
   if (fw_event_field (ev, f, &it)) {
      bson_append_iter (out, key, -1, &it);
   } else {
      bson_append_null (out, key, -1);
   }
}

/* MongoDB refuses documents over 16 MiB; keep room for the insert's own
 * envelope. */
#define FW_DLQ_MAX_ENTRY_BYTES (16 * 1024 * 1024 - 16 * 1024)

void
fw_dlq_actor (char *buf, size_t len)
{
   char host[256];

   if (gethostname (host, sizeof host) != 0) {
      snprintf (host, sizeof host, "unknown-host");
   }
   host[sizeof host - 1] = '\0';
   snprintf (buf, len, "%s:%ld", host, (long) getpid ());
}

static bool build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
                   const fw_dlq_failure_t *f, bool slim, fw_error_t *error);

bool
fw_dlq_entry_build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
                    const fw_dlq_failure_t *f, fw_error_t *error)
{
   if (!build (out, ev, cfg, f, false, error)) {
      return false;
   }
   if (out->len <= FW_DLQ_MAX_ENTRY_BYTES) {
      return true;
   }
   /* An entry the server would refuse forever would hold the stream forever:
    * keep everything but the bulky parts, and say so (omitted, truncated). */
   bson_destroy (out);
   if (!build (out, ev, cfg, f, true, error)) {
      return false;
   }
   BSON_APPEND_BOOL (out, "truncated", true);
   return true;
}

/* True when the event has field f with a value worth keeping (not null). */
static bool
has_value (const fw_event_t *ev, fw_event_field_t f)
{
   bson_iter_t it;
   return fw_event_field (ev, f, &it) && bson_iter_type (&it) != BSON_TYPE_NULL;
}

static void
append_if_present (bson_t *out, const char *key, const fw_event_t *ev, fw_event_field_t f)
{
   bson_iter_t it;
   if (fw_event_field (ev, f, &it)) {
      bson_append_iter (out, key, -1, &it);
   }
}

/* True when the failure's raw event (an event flowwarden could not read)
 * is a document with a field name. */
static bool
raw_has (const fw_dlq_failure_t *f, const char *name)
{
   bson_iter_t it;
   return f->raw_event && bson_validate (f->raw_event, BSON_VALIDATE_NONE, NULL) &&
          bson_iter_init_find (&it, f->raw_event, name);
}

/* The event fields the entry leaves out although the event had them: the
 * original document when include_original_document is false or the entry
 * was slimmed, and the stack trace a slimmed entry drops. A replay reads
 * this list to tell "the event had none" from "it was not stored". */
static void
append_omitted (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
                const fw_dlq_failure_t *f, bool slim)
{
   static const struct {
      const char *name;
      fw_event_field_t field;
   } original[] = {{"fullDocument", FW_EV_FULL_DOCUMENT},
                   {"fullDocumentBeforeChange", FW_EV_BEFORE},
                   {"updateDescription", FW_EV_UPDATE_DESCRIPTION}};
   const char *names[5];
   uint32_t n = 0;
   bson_t arr;

   if (!cfg->include_original_document || slim) {
      for (size_t i = 0; i < sizeof original / sizeof original[0]; i++) {
         if (has_value (ev, original[i].field) || raw_has (f, original[i].name)) {
            names[n++] = original[i].name;
         }
      }
   }
   if (slim && cfg->include_stack_trace) {
      names[n++] = "error.stackTrace";
   }
   if (!cfg->include_original_document && !slim && f->raw_event &&
       !bson_validate (f->raw_event, BSON_VALIDATE_NONE, NULL)) {
      names[n++] = "rawEvent";
   }
   if (n == 0) {
      return;
   }
   BSON_APPEND_ARRAY_BEGIN (out, "omitted", &arr);
   for (uint32_t i = 0; i < n; i++) {
      char key[16];
      const char *k;
      bson_uint32_to_string (i, &k, key, sizeof key);
      BSON_APPEND_UTF8 (&arr, k, names[i]);
   }
   bson_append_array_end (out, &arr);
}

/* The failure: type, message and (unless slimmed) stack trace. An event
 * parked behind its sequence has no error of its own (Axon: the cause of a
 * letter enqueued as part of a sequence is empty). */
static void
append_error (bson_t *out, const fw_dlq_config_t *cfg, const fw_dlq_failure_t *f, bool slim)
{
   bson_t err;

   if (!f->error_type) {
      return;
   }
   BSON_APPEND_DOCUMENT_BEGIN (out, "error", &err);
   BSON_APPEND_UTF8 (&err, "type", f->error_type);
   BSON_APPEND_UTF8 (&err, "message", f->error_message);
   if (cfg->include_stack_trace && !slim) {
      BSON_APPEND_UTF8 (&err, "stackTrace", f->stack_trace ? f->stack_trace : "");
   }
   /* Issue 38: what the HTTP server answered (bounded by flowwarden.dispatch,
    * valid UTF-8, redacted), so the dead letter says why it refused. */
   if (f->error_status > 0) {
      BSON_APPEND_INT32 (&err, "status", f->error_status);
      if (f->error_body) {
         BSON_APPEND_UTF8 (&err, "body", f->error_body);
      }
   }
   bson_append_document_end (out, &err);
}

/* Added to the seed's schema, never renaming any of it: the event's id,
 * namespace and clusterTime, the script version, the sequence, the epoch. */
static void
append_additions (bson_t *out, const fw_event_t *ev, const fw_dlq_failure_t *f)
{
   char *event_id;
   bson_t ns;

   /* The whole id, however long the token: the unique (streamName, eventId)
    * index needs it on every entry (index keys have no size limit from
    * MongoDB 4.2, FCV 4.2). */
   if ((event_id = fw_event_id_dup (ev))) {
      BSON_APPEND_UTF8 (out, "eventId", event_id);
      bson_free (event_id);
   }
   BSON_APPEND_DOCUMENT_BEGIN (out, "ns", &ns);
   if (fw_event_ns_db (ev)) {
      BSON_APPEND_UTF8 (&ns, "db", fw_event_ns_db (ev));
   }
   if (fw_event_ns_coll (ev)) {
      BSON_APPEND_UTF8 (&ns, "coll", fw_event_ns_coll (ev));
   }
   bson_append_document_end (out, &ns);
   append_if_present (out, "clusterTime", ev, FW_EV_CLUSTER_TIME);
   if (f->script_version) {
      BSON_APPEND_UTF8 (out, "scriptVersion", f->script_version);
   }
   if (f->sequence_id) {
      BSON_APPEND_UTF8 (out, "sequenceId", f->sequence_id);
      BSON_APPEND_INT64 (out, "sequenceIndex", f->sequence_index);
   }
   if (f->epoch > 0) {
      BSON_APPEND_INT64 (out, "epoch", f->epoch);
   }
}

/* The entry's life (issue 12). Fields set later by replays and operators
 * (lastReprocessAt, resolvedAt, claimedBy, ...) are absent until then. */
static void
append_life (bson_t *out, const fw_dlq_failure_t *f, const char *actor)
{
   bson_t history, item, empty = BSON_INITIALIZER;

   BSON_APPEND_DATE_TIME (out, "lastTouched", f->created_ms);
   BSON_APPEND_INT32 (out, "reprocessAttempts", 0);
   BSON_APPEND_DOCUMENT (out, "diagnostics", &empty);
   BSON_APPEND_ARRAY_BEGIN (out, "history", &history);
   BSON_APPEND_DOCUMENT_BEGIN (&history, "0", &item);
   BSON_APPEND_DATE_TIME (&item, "at", f->created_ms);
   BSON_APPEND_UTF8 (&item, "action", "enqueued");
   BSON_APPEND_UTF8 (&item, "actor", actor);
   BSON_APPEND_UTF8 (&item, "result", f->error_type ? f->error_type : "parked");
   bson_append_document_end (&history, &item);
   bson_append_array_end (out, &history);
}

/* What a replay needs to hand the event over again as it first came. */
static void
append_for_replay (bson_t *out, const fw_event_t *ev, const fw_dlq_failure_t *f, bool original,
                   bool slim)
{
   if (original) {
      append_if_present (out, "updateDescription", ev, FW_EV_UPDATE_DESCRIPTION);
      append_if_present (out, "fullDocumentBeforeChange", ev, FW_EV_BEFORE);
   }
   append_if_present (out, "wallTime", ev, FW_EV_WALL_TIME);
   append_if_present (out, "txnNumber", ev, FW_EV_TXN_NUMBER);
   append_if_present (out, "lsid", ev, FW_EV_LSID);
   if (f->raw_event && !slim) {
      /* As a document when it is one; bytes that are not valid BSON are
       * kept as they came, as binary. Without the original document, the
       * document without its fields that hold user data, and no bytes that
       * could not be read (they may hold them). */
      if (bson_validate (f->raw_event, BSON_VALIDATE_NONE, NULL)) {
         bson_t kept;
         if (original) {
            BSON_APPEND_DOCUMENT (out, "rawEvent", f->raw_event);
            return;
         }
         bson_init (&kept);
         bson_copy_to_excluding_noinit (f->raw_event, &kept, "fullDocument",
                                        "fullDocumentBeforeChange", "updateDescription", NULL);
         BSON_APPEND_DOCUMENT (out, "rawEvent", &kept);
         bson_destroy (&kept);
      } else if (original) {
         BSON_APPEND_BINARY (out, "rawEvent", BSON_SUBTYPE_BINARY, bson_get_data (f->raw_event),
                             f->raw_event->len);
      }
   }
}

static bool
build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg, const fw_dlq_failure_t *f,
       bool slim, fw_error_t *error)
{
   char id[37];
   char op[64];
   char actor[300];
   bool original = cfg->include_original_document && !slim;
   bson_t empty = BSON_INITIALIZER;

   bson_init (out);
   if (!uuid4 (id)) {
      fw_error_set (error, FW_ERROR_IO, "cannot draw random bytes for a DLQ entry id");
      return false;
   }
   fw_dlq_operation_type (ev->operation_type, op, sizeof op);
   if (f->actor) {
      snprintf (actor, sizeof actor, "%s", f->actor);
   } else {
      fw_dlq_actor (actor, sizeof actor);
   }

   BSON_APPEND_UTF8 (out, "_id", id);
   BSON_APPEND_UTF8 (out, "streamName", f->stream_name);
   BSON_APPEND_UTF8 (out, "operationType", op);
   append_or_null (out, "documentKey", ev, FW_EV_DOCUMENT_KEY);
   if (original) {
      append_or_null (out, "fullDocument", ev, FW_EV_FULL_DOCUMENT);
   }
   append_or_null (out, "resumeToken", ev, FW_EV_ID);
   append_error (out, cfg, f, slim);
   BSON_APPEND_INT32 (out, "attempts", f->attempts);
   BSON_APPEND_UTF8 (out, "status", "PENDING");
   BSON_APPEND_DATE_TIME (out, "firstAttemptAt", f->first_attempt_ms);
   BSON_APPEND_DATE_TIME (out, "lastAttemptAt", f->last_attempt_ms);
   BSON_APPEND_DATE_TIME (out, "createdAt", f->created_ms);
   if (cfg->ttl_days > 0) {
      BSON_APPEND_DATE_TIME (out, "expiresAt", f->created_ms + cfg->ttl_days * MS_PER_DAY);
   } else {
      BSON_APPEND_NULL (out, "expiresAt");
   }
   BSON_APPEND_DOCUMENT (out, "metadata", f->metadata ? f->metadata : &empty);
   append_additions (out, ev, f);
   append_life (out, f, actor);
   append_for_replay (out, ev, f, original, slim);
   append_omitted (out, ev, cfg, f, slim);
   return true;
}

const char *
fw_dlq_entry_stream (const bson_t *entry)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, entry, "streamName") && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

bool
fw_dlq_entry_schedule (bson_t *entry, int64_t next_ms)
{
   bson_t out = BSON_INITIALIZER;
   bson_iter_t it;
   bool ok = bson_iter_init (&it, entry);

   while (ok && bson_iter_next (&it)) {
      if (strcmp (bson_iter_key (&it), "status") == 0) {
         ok = BSON_APPEND_UTF8 (&out, "status", "SCHEDULED") &&
              BSON_APPEND_DATE_TIME (&out, "nextAttemptAt", next_ms);
      } else {
         ok = bson_append_iter (&out, NULL, 0, &it);
      }
   }
   if (!ok) {
      bson_destroy (&out);
      return false;
   }
   bson_destroy (entry);
   bson_steal (entry, &out);
   return true;
}
