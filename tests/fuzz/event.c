/*
 * fuzz_event: arbitrary bytes that bson_init_static accepts, as a change
 * event: fw_event_parse, then everything the runtime reads of an event
 * (its id, summary and namespace, every field it located) and every ctx
 * method a handler can call on it.
 *
 * Invariants: parse succeeds only with an _id document and an operationType
 * string, and every field located has a type of MongoDB's change-event
 * schema; every field it located is found again by fw_event_field with the
 * same key; the id and summary are NUL-terminated within their buffers;
 * ctx methods return or raise a message, never crash.
 */
#include <bson/bson.h>

#include "bson/event.h"
#include "fuzz_common.h"
#include "lua_api/event_ctx.h"

static const char *const field_names[FW_EV_FIELD_COUNT] = {"_id",
                                                           "clusterTime",
                                                           "wallTime",
                                                           "ns",
                                                           "documentKey",
                                                           "fullDocument",
                                                           "fullDocumentBeforeChange",
                                                           "updateDescription",
                                                           "lsid",
                                                           "txnNumber",
                                                           "splitEvent"};

/* Each field's type in MongoDB's change-event schema (fullDocument and
 * fullDocumentBeforeChange: or null). */
static const uint8_t field_types[FW_EV_FIELD_COUNT] = {
   BSON_TYPE_DOCUMENT, BSON_TYPE_TIMESTAMP, BSON_TYPE_DATE_TIME, BSON_TYPE_DOCUMENT,
   BSON_TYPE_DOCUMENT, BSON_TYPE_DOCUMENT,  BSON_TYPE_DOCUMENT,  BSON_TYPE_DOCUMENT,
   BSON_TYPE_DOCUMENT, BSON_TYPE_INT64,     BSON_TYPE_DOCUMENT};

static const char harness[] =
   "local METHODS = { 'operation_type', 'attempt_number', 'event_id', 'stream_name',\n"
   "  'database_name', 'collection_name', 'transaction', 'summary', 'full_document',\n"
   "  'full_document_before_change', 'document_key', 'update_description', 'resume_token',\n"
   "  'cluster_time', 'wall_time', 'metadata', 'dead_letter' }\n"
   "local function touch(v, depth)\n"
   "  if depth > 20 then return end\n"
   "  local mt = getmetatable(v)\n"
   "  tostring(v)\n"
   "  if mt == 'flowwarden.view' or type(v) == 'table' then\n"
   "    for k, x in pairs(v) do touch(x, depth + 1) end\n"
   "    pcall(fw.json.encode, v)\n"
   "  end\n"
   "end\n"
   "return function(ctx)\n"
   "  for _, m in ipairs(METHODS) do\n"
   "    local ok, v = pcall(ctx[m], ctx)\n"
   "    if ok then\n"
   "      touch(v, 1)\n"
   "      local ok2, v2 = pcall(ctx[m], ctx)\n"
   "      assert(ok2, m .. ' raised when called again: ' .. tostring(v2))\n"
   "      assert(type(v) == 'table' or v2 == v or v ~= v, m .. ' is not the same when called again')\n"
   "    else\n"
   "      assert(type(v) == 'string', m .. ' raised a ' .. type(v))\n"
   "    end\n"
   "  end\n"
   "end\n";

typedef struct {
   fw_event_t *ev;
} input_t;

static int harness_ref;

static int
run_ctx (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);
   static fw_dispatch_t d;
   static bool opened;

   if (!opened) {
      fw_event_ctx_open (L);
      d.stream_name = "fuzz";
      d.cache_ref = LUA_NOREF;
      opened = true;
   }
   d.attempt = 1;
   fw_event_ctx_begin (L, &d, in->ev);
   fuzz_push_harness (L, &harness_ref, "=event", harness);
   fw_event_ctx_push (L, &d);
   lua_call (L, 1, 0);
   /* The event's bytes go away after this input: as the worker does. */
   fw_event_ctx_begin (L, &d, NULL);
   return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   bson_t doc;
   fw_event_t ev;
   fw_error_t err;
   char id[512], summary[512];
   bson_iter_t it;
   input_t in = {&ev};

   if (!bson_init_static (&doc, data, size)) {
      return 0;
   }
   if (!fw_event_parse (&doc, &ev, &err)) {
      FUZZ_ASSERT (err.message[0] != '\0', "a refused event without a message");
      return 0;
   }
   FUZZ_ASSERT (fw_event_has (&ev, FW_EV_ID) && ev.operation_type != NULL,
                "an event parsed without _id or operationType");
   FUZZ_ASSERT ((const uint8_t *) ev.operation_type > data &&
                   (const uint8_t *) ev.operation_type + strlen (ev.operation_type) < data + size,
                "operationType is not inside the event");
   for (int f = 0; f < FW_EV_FIELD_COUNT; f++) {
      if (fw_event_has (&ev, f)) {
         uint8_t t;
         FUZZ_ASSERT (ev.offset[f] < size, "field %d located past the end", f);
         t = data[ev.offset[f]];
         FUZZ_ASSERT (t == field_types[f] ||
                         (t == BSON_TYPE_NULL && (f == FW_EV_FULL_DOCUMENT || f == FW_EV_BEFORE)),
                      "field %d of type 0x%02x accepted", f, t);
         if (fw_event_field (&ev, f, &it)) {
            FUZZ_ASSERT (strcmp (bson_iter_key (&it), field_names[f]) == 0,
                         "field %d found as \"%s\"", f, bson_iter_key (&it));
         }
      } else {
         FUZZ_ASSERT (!fw_event_field (&ev, f, &it), "field %d found but not located", f);
      }
   }
   FUZZ_ASSERT (fw_event_field (&ev, FW_EV_ID, &it), "the _id located cannot be read");
   if (fw_event_id (&ev, id, sizeof id)) {
      FUZZ_ASSERT (memchr (id, '\0', sizeof id) != NULL, "the event id is not terminated");
   }
   fw_event_id (&ev, id, 8); /* too small for most ids: must say so, not overflow */
   fw_event_summary (&ev, summary, sizeof summary);
   FUZZ_ASSERT (memchr (summary, '\0', sizeof summary) != NULL, "the summary is not terminated");
   fw_event_summary (&ev, summary, 16);
   (void) fw_event_ns_db (&ev);
   (void) fw_event_ns_coll (&ev);
   fuzz_run (fuzz_state (), run_ctx, &in);
   return 0;
}
