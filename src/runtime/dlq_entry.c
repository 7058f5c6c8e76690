/*
 * dlq_entry.c - seed 002's DLQ document, field for field and type for type.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "flowwarden/dlq_entry.h"

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
   snprintf (out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
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

static bool
build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
       const fw_dlq_failure_t *f, fw_error_t *error);

bool
fw_dlq_entry_build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
                    const fw_dlq_failure_t *f, fw_error_t *error)
{
   fw_dlq_config_t slim;

   if (!build (out, ev, cfg, f, error)) {
      return false;
   }
   if (out->len <= FW_DLQ_MAX_ENTRY_BYTES) {
      return true;
   }
   /* An entry the server would refuse forever would hold the stream forever:
    * keep everything but the bulky parts, and say so. */
   slim = *cfg;
   slim.include_original_document = false;
   slim.include_stack_trace = false;
   bson_destroy (out);
   if (!build (out, ev, &slim, f, error)) {
      return false;
   }
   BSON_APPEND_BOOL (out, "truncated", true);
   return true;
}

static bool
build (bson_t *out, const fw_event_t *ev, const fw_dlq_config_t *cfg,
       const fw_dlq_failure_t *f, fw_error_t *error)
{
   char id[37];
   char op[64];
   char event_id[1024];
   bson_t err, ns;

   bson_init (out);
   if (!uuid4 (id)) {
      fw_error_set (error, FW_ERROR_IO, "cannot draw random bytes for a DLQ entry id");
      return false;
   }
   fw_dlq_operation_type (ev->operation_type, op, sizeof op);

   BSON_APPEND_UTF8 (out, "_id", id);
   BSON_APPEND_UTF8 (out, "streamName", f->stream_name);
   BSON_APPEND_UTF8 (out, "operationType", op);
   append_or_null (out, "documentKey", ev, FW_EV_DOCUMENT_KEY);
   if (cfg->include_original_document) {
      append_or_null (out, "fullDocument", ev, FW_EV_FULL_DOCUMENT);
   }
   append_or_null (out, "resumeToken", ev, FW_EV_ID);
   BSON_APPEND_DOCUMENT_BEGIN (out, "error", &err);
   BSON_APPEND_UTF8 (&err, "type", f->error_type);
   BSON_APPEND_UTF8 (&err, "message", f->error_message);
   if (cfg->include_stack_trace) {
      BSON_APPEND_UTF8 (&err, "stackTrace", f->stack_trace ? f->stack_trace : "");
   }
   bson_append_document_end (out, &err);
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
   if (f->metadata) {
      BSON_APPEND_DOCUMENT (out, "metadata", f->metadata);
   } else {
      bson_t empty = BSON_INITIALIZER;
      BSON_APPEND_DOCUMENT (out, "metadata", &empty);
   }
   /* Added to the seed's schema, never renaming any of it. */
   if (fw_event_id (ev, event_id, sizeof event_id)) {
      BSON_APPEND_UTF8 (out, "eventId", event_id);
   }
   BSON_APPEND_DOCUMENT_BEGIN (out, "ns", &ns);
   if (fw_event_ns_db (ev)) {
      BSON_APPEND_UTF8 (&ns, "db", fw_event_ns_db (ev));
   }
   if (fw_event_ns_coll (ev)) {
      BSON_APPEND_UTF8 (&ns, "coll", fw_event_ns_coll (ev));
   }
   bson_append_document_end (out, &ns);
   {
      bson_iter_t ct;
      if (fw_event_field (ev, FW_EV_CLUSTER_TIME, &ct)) {
         bson_append_iter (out, "clusterTime", -1, &ct);
      }
   }
   if (f->script_version) {
      BSON_APPEND_UTF8 (out, "scriptVersion", f->script_version);
   }
   return true;
}
