/*
 * event_oversize.c - change events larger than MongoDB's 16 MiB limit
 * (issue 18): the stages the stream adds for them, the reassembly of the
 * fragments $changeStreamSplitLargeEvent cuts them into, and the DLQ entry of
 * an event oversize = "skip" left out.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "flowwarden/log.h"
#include "runtime/stream/event_oversize-private.h"

#define SPLIT_STAGE "$changeStreamSplitLargeEvent"

void
fw_split_buffer_init (fw_split_buffer_t *b)
{
   memset (b, 0, sizeof *b);
   bson_init (&b->fields);
   bson_init (&b->whole);
}

void
fw_split_buffer_reset (fw_split_buffer_t *b)
{
   bson_reinit (&b->fields);
   b->next = 0;
   b->of = 0;
}

void
fw_split_buffer_cleanup (fw_split_buffer_t *b)
{
   bson_destroy (&b->fields);
   bson_destroy (&b->whole);
}

bool
fw_split_buffer_active (const fw_split_buffer_t *b)
{
   return b->next > 0;
}

static bool
split_numbers (const bson_t *doc, int32_t *fragment, int32_t *of)
{
   bson_iter_t it, sub;
   if (!bson_iter_init_find (&it, doc, "splitEvent")) {
      return false;
   }
   *fragment = *of = 0;
   if (BSON_ITER_HOLDS_DOCUMENT (&it) && bson_iter_recurse (&it, &sub)) {
      while (bson_iter_next (&sub)) {
         if (BSON_ITER_HOLDS_INT32 (&sub) || BSON_ITER_HOLDS_INT64 (&sub)) {
            if (strcmp (bson_iter_key (&sub), "fragment") == 0) {
               *fragment = (int32_t) bson_iter_as_int64 (&sub);
            } else if (strcmp (bson_iter_key (&sub), "of") == 0) {
               *of = (int32_t) bson_iter_as_int64 (&sub);
            }
         }
      }
   }
   return true;
}

/* The top-level fields of a change event in the order mongod gives them in
 * an unsplit one: the transform (change_stream_event_transform.cpp) adds the
 * transaction fields, _id, operationType, clusterTime, ..., updateDescription;
 * the pre-image stage appends fullDocumentBeforeChange after them
 * (document_source_change_stream_add_pre_image.cpp). Fragments bring them
 * ordered by size instead (change_stream_split_event_helpers.cpp). */
static const char *const event_order[] = {"txnNumber",
                                          "lsid",
                                          "_id",
                                          "operationType",
                                          "clusterTime",
                                          "collectionUUID",
                                          "wallTime",
                                          "fullDocument",
                                          "ns",
                                          "documentKey",
                                          "operationDescription",
                                          "updateDescription",
                                          "fullDocumentBeforeChange",
                                          NULL};

static bool
ordered_field (const char *key)
{
   for (int i = 0; event_order[i]; i++) {
      if (strcmp (key, event_order[i]) == 0) {
         return true;
      }
   }
   return false;
}

/* b->whole: the fragments' fields in event_order, then any other field (a
 * user stage's) in the order the fragments brought them. The event takes
 * the last fragment's _id: resuming from it goes on after the event, never
 * into its middle. */
static void
rebuild (fw_split_buffer_t *b, const bson_t *last)
{
   bson_iter_t it;

   bson_reinit (&b->whole);
   for (int i = 0; event_order[i]; i++) {
      const bson_t *from = strcmp (event_order[i], "_id") == 0 ? last : &b->fields;
      if (bson_iter_init_find (&it, from, event_order[i])) {
         bson_append_iter (&b->whole, event_order[i], -1, &it);
      }
   }
   if (bson_iter_init (&it, &b->fields)) {
      while (bson_iter_next (&it)) {
         if (!ordered_field (bson_iter_key (&it))) {
            bson_append_iter (&b->whole, bson_iter_key (&it), -1, &it);
         }
      }
   }
}

fw_split_t
fw_split_buffer_add (fw_split_buffer_t *b, const bson_t *doc, const bson_t **whole,
                     fw_error_t *error)
{
   int32_t fragment, of;
   bson_iter_t it;

   if (!split_numbers (doc, &fragment, &of)) {
      if (fw_split_buffer_active (b)) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "a whole change event came before fragment %d of %d of a split event",
                       (int) b->next, (int) b->of);
         fw_split_buffer_reset (b);
         return FW_SPLIT_BROKEN;
      }
      *whole = doc;
      return FW_SPLIT_WHOLE;
   }
   if (fragment < 1 || of < 1 || fragment > of ||
       (fw_split_buffer_active (b) ? (fragment != b->next || of != b->of) : fragment != 1)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "split change event fragment %d of %d came out of order (expected %d of %d)",
                    (int) fragment, (int) of, fw_split_buffer_active (b) ? (int) b->next : 1,
                    fw_split_buffer_active (b) ? (int) b->of : (int) of);
      fw_split_buffer_reset (b);
      return FW_SPLIT_BROKEN;
   }
   /* Fragments cut the event along its top-level fields: concatenating them,
    * less each fragment's own _id and splitEvent, gives the event back. */
   if (bson_iter_init (&it, doc)) {
      while (bson_iter_next (&it)) {
         const char *k = bson_iter_key (&it);
         if (strcmp (k, "_id") != 0 && strcmp (k, "splitEvent") != 0) {
            bson_append_iter (&b->fields, k, -1, &it);
         }
      }
   }
   b->of = of;
   b->next = fragment + 1;
   if (fragment < of) {
      return FW_SPLIT_PENDING;
   }
   rebuild (b, doc);
   fw_split_buffer_reset (b);
   *whole = &b->whole;
   return FW_SPLIT_DONE;
}

/* The fields that make an event large, each a stored document (at most
 * 16 MiB) or derived from one. */
static const char *const measured[] = {"$fullDocument", "$fullDocumentBeforeChange",
                                       "$updateDescription", "$documentKey"};

/* {$add: [{$ifNull: [{$bsonSize: "$<field>"}, 0]}, ...]}: the size of the
 * event's documents. $bsonSize of the whole event cannot be used: MongoDB
 * builds the measured BSON with the default limit (ExpressionBsonSize::
 * evaluate), so an event over 16 MiB + 16 KiB - the very events to stub -
 * fails there with BSONObjectTooLarge (10334). */
static void
append_size (bson_t *parent, const char *key)
{
   bson_t size, add, part, if_null, bsize;
   char ik[16];
   const char *ikp;

   BSON_APPEND_DOCUMENT_BEGIN (parent, key, &size);
   BSON_APPEND_ARRAY_BEGIN (&size, "$add", &add);
   for (uint32_t i = 0; i < sizeof measured / sizeof measured[0]; i++) {
      bson_uint32_to_string (i, &ikp, ik, sizeof ik);
      BSON_APPEND_DOCUMENT_BEGIN (&add, ikp, &part);
      BSON_APPEND_ARRAY_BEGIN (&part, "$ifNull", &if_null);
      BSON_APPEND_DOCUMENT_BEGIN (&if_null, "0", &bsize);
      BSON_APPEND_UTF8 (&bsize, "$bsonSize", measured[i]);
      bson_append_document_end (&if_null, &bsize);
      BSON_APPEND_INT32 (&if_null, "1", 0);
      bson_append_array_end (&part, &if_null);
      bson_append_document_end (&add, &part);
   }
   bson_append_array_end (&size, &add);
   bson_append_document_end (parent, &size);
}

/* The stub of an event over the threshold: what identifies it, and size. */
static void
append_stub (bson_t *parent, const char *key)
{
   bson_t stub;

   BSON_APPEND_DOCUMENT_BEGIN (parent, key, &stub);
   BSON_APPEND_UTF8 (&stub, "_id", "$_id");
   BSON_APPEND_UTF8 (&stub, "operationType", "$operationType");
   BSON_APPEND_UTF8 (&stub, "clusterTime", "$clusterTime");
   BSON_APPEND_UTF8 (&stub, "wallTime", "$wallTime");
   BSON_APPEND_UTF8 (&stub, "ns", "$ns");
   BSON_APPEND_UTF8 (&stub, "documentKey", "$documentKey");
   BSON_APPEND_UTF8 (&stub, FW_OVERSIZE_FIELD, "$$size");
   bson_append_document_end (parent, &stub);
}

void
fw_oversize_pipeline (const fw_stream_config_t *cfg, bool split, bson_t *out)
{
   bson_t stage, spec, let, vars, cond, lte, arr;
   char key[16];
   const char *k;

   bson_copy_to (cfg->pipeline, out);
   bson_uint32_to_string (bson_count_keys (cfg->pipeline), &k, key, sizeof key);
   if (split) {
      BSON_APPEND_DOCUMENT_BEGIN (out, k, &stage);
      BSON_APPEND_DOCUMENT_BEGIN (&stage, SPLIT_STAGE, &spec);
      bson_append_document_end (&stage, &spec);
      bson_append_document_end (out, &stage);
      return;
   }
   if (!cfg->oversize_skip) {
      return;
   }
   /* A $match could only drop the event, and nothing would say it was
    * there: one $replaceRoot keeps events up to the threshold whole and
    * turns a larger one into a stub (token, key, namespace, size) that the
    * runtime dead-letters. _id stays as it was, so resuming still works. */
   BSON_APPEND_DOCUMENT_BEGIN (out, k, &stage);
   BSON_APPEND_DOCUMENT_BEGIN (&stage, "$replaceRoot", &spec);
   BSON_APPEND_DOCUMENT_BEGIN (&spec, "newRoot", &let);
   BSON_APPEND_DOCUMENT_BEGIN (&let, "$let", &vars);
   {
      bson_t v, in;
      BSON_APPEND_DOCUMENT_BEGIN (&vars, "vars", &v);
      append_size (&v, "size");
      bson_append_document_end (&vars, &v);
      BSON_APPEND_DOCUMENT_BEGIN (&vars, "in", &in);
      BSON_APPEND_DOCUMENT_BEGIN (&in, "$cond", &cond);
      BSON_APPEND_DOCUMENT_BEGIN (&cond, "if", &lte);
      BSON_APPEND_ARRAY_BEGIN (&lte, "$lte", &arr);
      BSON_APPEND_UTF8 (&arr, "0", "$$size");
      BSON_APPEND_INT64 (&arr, "1", cfg->oversize_threshold);
      bson_append_array_end (&lte, &arr);
      bson_append_document_end (&cond, &lte);
      BSON_APPEND_UTF8 (&cond, "then", "$$ROOT");
      append_stub (&cond, "else");
      bson_append_document_end (&in, &cond);
      bson_append_document_end (&vars, &in);
   }
   bson_append_document_end (&let, &vars);
   bson_append_document_end (&spec, &let);
   bson_append_document_end (&stage, &spec);
   bson_append_document_end (out, &stage);
}

bool
fw_oversize_stub_size (const bson_t *doc, int64_t *size)
{
   bson_iter_t it;
   if (!bson_iter_init_find (&it, doc, FW_OVERSIZE_FIELD) || !BSON_ITER_HOLDS_NUMBER (&it)) {
      return false;
   }
   *size = bson_iter_as_int64 (&it);
   return true;
}

bool
fw_oversize_stage_rejected (const bson_error_t *berr)
{
   /* Servers before 6.0.9 / 7.0 do not know the stage (40324 "Unrecognized
    * pipeline stage name"); any refusal naming it counts. */
   return berr->code == 40324 || strstr (berr->message, SPLIT_STAGE) != NULL;
}

fw_oversize_step_t
fw_oversize_take (bool oversize_skip, fw_split_buffer_t *split, const bson_t **doc, fw_event_t *ev,
                  bool *parsed, int64_t *size, fw_error_t *error)
{
   /* A fragment moves neither the position nor the checkpoint: until the
    * last one is handled, a restart resumes before the first. */
   if (fw_event_has (ev, FW_EV_SPLIT) || fw_split_buffer_active (split)) {
      switch (fw_split_buffer_add (split, *doc, doc, error)) {
      case FW_SPLIT_PENDING:
         return FW_OVERSIZE_FRAGMENT;
      case FW_SPLIT_BROKEN:
         return FW_OVERSIZE_BROKEN;
      default:
         *parsed = fw_event_parse (*doc, ev, error); /* the reassembled event */
         break;
      }
   }
   if (!*parsed || !oversize_skip || !fw_oversize_stub_size (*doc, size)) {
      return FW_OVERSIZE_EVENT;
   }
   return FW_OVERSIZE_STUB;
}

bool
fw_oversize_error (const bson_error_t *berr)
{
   return berr->code == FW_ERR_OBJECT_TOO_LARGE || berr->code == FW_ERR_SPLIT_FAILED;
}

void
fw_oversize_failure (const bson_t *position, bool split, bool skip, const bson_error_t *berr,
                     char *what, size_t size)
{
   char *pos = position ? bson_as_relaxed_extended_json (position, NULL) : NULL;
   snprintf (what, size,
             "the change event after position %.600s is larger than 16 MiB (%s %u: %.600s) and "
             "%s; the checkpoint stays before it. Use a server that supports "
             "$changeStreamSplitLargeEvent (6.0.9+, 7.0+) with split_large_events = true, or set "
             "oversize = \"skip\" to dead-letter such events without their document",
             pos ? pos : "(the stream's start)",
             berr->code == FW_ERR_SPLIT_FAILED ? "split failed" : "BSONObjectTooLarge", berr->code,
             berr->message,
             split  ? "cannot be split (one field alone is over the limit)"
             : skip ? "the oversize = \"skip\" stage did not stub it (what makes it large is not "
                      "in fullDocument, fullDocumentBeforeChange, updateDescription or "
                      "documentKey: a field a pipeline stage added?)"
                    : "oversize = \"fail\"");
   bson_free (pos);
}
