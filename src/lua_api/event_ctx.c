/*
 * event_ctx.c - the handler context: lazy, cached accessors over one event.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "flowwarden/secrets.h"
#include "lua_api/event_ctx.h"

#define CTX_MT "flowwarden.ctx"

/* The ctx metatable is also kept under this address in the registry, so
 * checks and new ctx look it up by pointer rather than by name. */
static const char ctx_mt_key = 0;

/* Slots of the per-event cache (integer keys: no string lookups). */
enum {
   SLOT_FULL_DOCUMENT = 1,
   SLOT_BEFORE,
   SLOT_DOCUMENT_KEY,
   SLOT_UPDATE_DESCRIPTION,
   SLOT_RESUME_TOKEN,
   SLOT_CLUSTER_TIME,
   SLOT_WALL_TIME,
   SLOT_LSID,
   SLOT_TXN_NUMBER,
   SLOT_METADATA,
   SLOT_DEAD_LETTER,
   SLOT_COUNT = SLOT_DEAD_LETTER
};

typedef struct {
   fw_dispatch_t *d;
   uint64_t generation;
} ctx_ud_t;

/* Every ctx method has the ctx metatable as upvalue 1: comparing with it
 * costs no registry look-up, and anything else passed as self (through
 * debug.getmetatable, or ctx.method(other)) is refused. */
static ctx_ud_t *
test_ctx (lua_State *L, int idx)
{
   ctx_ud_t *c = lua_touserdata (L, idx);
   bool ok = false;
   if (c && lua_getmetatable (L, idx)) {
      ok = lua_rawequal (L, -1, lua_upvalueindex (1));
      lua_pop (L, 1);
   }
   return ok ? c : NULL;
}

static fw_dispatch_t *
check_ctx (lua_State *L)
{
   ctx_ud_t *c = test_ctx (L, 1);
   if (!c) {
      luaL_typeerror (L, 1, "ctx");
   }
   if (c->generation != c->d->generation || !c->d->event) {
      luaL_error (L,
                  "ctx used after its event was handled (keep the values you need, "
                  "not the ctx)");
   }
   return c->d;
}

/* Pushes this event's cache table, creating it on first use. */
static void
push_cache (lua_State *L, fw_dispatch_t *d)
{
   /* One table for the stream's life, emptied between events that used it:
    * no table and no registry slot per event. */
   if (d->cache_ref == LUA_NOREF) {
      lua_createtable (L, SLOT_COUNT, 0);
      lua_pushvalue (L, -1);
      d->cache_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   } else {
      lua_rawgeti (L, LUA_REGISTRYINDEX, d->cache_ref);
   }
}

/* Stores the value on top of the stack in slot of the cache just below it
 * (push_cache's), keeping the value on top, and notes the slot as filled. */
static void
cache_keep (lua_State *L, fw_dispatch_t *d, int slot)
{
   lua_pushvalue (L, -1);
   lua_rawseti (L, -3, slot);
   d->cache_slots |= 1u << slot;
}

/* Pushes a lazy view of the document or array at it, owning a copy of its
 * bytes, so a document kept after the handler returned still reads. */
static void
push_view (lua_State *L, const bson_iter_t *it)
{
   const uint8_t *data;
   uint32_t len;
   bool is_array = BSON_ITER_HOLDS_ARRAY (it);

   if (is_array) {
      bson_iter_array (it, &len, &data);
   } else {
      bson_iter_document (it, &len, &data);
   }
   fw_bson_view_push_copy (L, data, len, is_array);
}

/* Converts the value at it (a field of the event) once per event.
 * view_mt_idx: the view metatable's index (an upvalue), or 0 to look it up. */
static int
push_cached_field (lua_State *L, fw_dispatch_t *d, int slot, const char *key,
                   fw_event_field_t field, int view_mt_idx)
{
   fw_error_t err;
   bson_iter_t copy;
   const uint8_t *data;
   uint32_t len;

   if (!fw_event_has (d->event, field)) {
      lua_pushnil (L);
      return 1;
   }
   push_cache (L, d);
   if (lua_rawgeti (L, -1, slot) != LUA_TNIL) {
      return 1;
   }
   lua_pop (L, 1);
   if (fw_event_field_document (d->event, field, &data, &len)) {
      /* A document (the usual case) from its bytes, without an iterator. */
      if (view_mt_idx) {
         fw_bson_view_push_copy_mt (L, data, len, false, view_mt_idx);
      } else {
         fw_bson_view_push_copy (L, data, len, false);
      }
      cache_keep (L, d, slot);
      return 1;
   }
   if (!fw_event_field (d->event, field, &copy)) {
      lua_pushnil (L); /* not reached: the event has the field */
      return 1;
   }
   if (BSON_ITER_HOLDS_NULL (&copy)) {
      lua_pushnil (L); /* fullDocument: null means "not available" */
      return 1;
   }
   if (BSON_ITER_HOLDS_DOCUMENT (&copy) || BSON_ITER_HOLDS_ARRAY (&copy)) {
      push_view (L, &copy);
   } else if (!fw_bson_lua_push_value (L, &copy, key, &err)) {
      return luaL_error (L, "%s", err.message);
   }
   cache_keep (L, d, slot);
   return 1;
}

/* The ctx methods that return one field of the event, converted once per
 * event. Their order is the order of their cache slots. */
typedef struct {
   const char *method;
   const char *field; /* the event's field name, for error paths */
   fw_event_field_t id;
} field_accessor_t;

static const field_accessor_t accessors[] = {
   {"full_document", "fullDocument", FW_EV_FULL_DOCUMENT},
   {"full_document_before_change", "fullDocumentBeforeChange", FW_EV_BEFORE},
   {"document_key", "documentKey", FW_EV_DOCUMENT_KEY},
   {"update_description", "updateDescription", FW_EV_UPDATE_DESCRIPTION},
   {"resume_token", "_id", FW_EV_ID},
   {"cluster_time", "clusterTime", FW_EV_CLUSTER_TIME},
   {"wall_time", "wallTime", FW_EV_WALL_TIME},
};

/* Upvalue 1: the ctx metatable; 2: the accessor (light userdata); 3: its
 * cache slot; 4: the view metatable. */
static int
ctx_field (lua_State *L)
{
   const field_accessor_t *a = lua_touserdata (L, lua_upvalueindex (2));
   int slot = (int) lua_tointeger (L, lua_upvalueindex (3));
   fw_dispatch_t *d = check_ctx (L);

   return push_cached_field (L, d, slot, a->field, a->id, lua_upvalueindex (4));
}

static int
ctx_transaction (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   if (!fw_event_has (d->event, FW_EV_LSID) && !fw_event_has (d->event, FW_EV_TXN_NUMBER)) {
      lua_pushnil (L);
      return 1;
   }
   lua_createtable (L, 0, 2);
   /* push_cached_field leaves [cache, value] on the stack: set the value in
    * the new table (not in the event's cache) and drop the cache. */
   if (fw_event_has (d->event, FW_EV_LSID)) {
      push_cached_field (L, d, SLOT_LSID, "lsid", FW_EV_LSID, 0);
      lua_setfield (L, -3, "lsid");
      lua_pop (L, 1);
   }
   if (fw_event_has (d->event, FW_EV_TXN_NUMBER)) {
      push_cached_field (L, d, SLOT_TXN_NUMBER, "txnNumber", FW_EV_TXN_NUMBER, 0);
      lua_setfield (L, -3, "txn_number");
      lua_pop (L, 1);
   }
   return 1;
}

static int
ctx_operation_type (lua_State *L)
{
   lua_pushstring (L, check_ctx (L)->event->operation_type);
   return 1;
}

static int
ctx_attempt_number (lua_State *L)
{
   lua_pushinteger (L, check_ctx (L)->attempt);
   return 1;
}

bool
fw_event_push_id (lua_State *L, const fw_event_t *ev)
{
   /* A token holds the event's documentKey: no fixed bound fits it. The
    * buffer belongs to Lua, so nothing leaks if the push raises. */
   size_t n = fw_event_id_len (ev);
   luaL_Buffer b;
   char *id;

   if (n == 0) {
      return false;
   }
   id = luaL_buffinitsize (L, &b, n + 1);
   if (!fw_event_id (ev, id, n + 1)) {
      luaL_pushresultsize (&b, 0);
      lua_pop (L, 1);
      return false;
   }
   luaL_pushresultsize (&b, n);
   return true;
}

static int
ctx_event_id (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   if (!fw_event_push_id (L, d->event)) {
      return luaL_error (L, fw_event_id_len (d->event) == 0
                               ? "the change event has no _id (resume token)"
                               : "the change event's _id cannot be read");
   }
   return 1;
}

static int
ctx_stream_name (lua_State *L)
{
   lua_pushstring (L, check_ctx (L)->stream_name);
   return 1;
}

/* Issue 31: k, N (0-based) from a partition's unit name "<stream>#k/N";
 * nothing (nil) on an unpartitioned stream (the config reserves the suffix). */
static int
ctx_partition (lua_State *L)
{
   const char *name = check_ctx (L)->stream_name, *hash = name ? strrchr (name, '#') : NULL;
   int k, n, used = 0;
   if (!hash || sscanf (hash, "#%d/%d%n", &k, &n, &used) != 2 || hash[used] != '\0') {
      lua_pushnil (L);
      return 1;
   }
   lua_pushinteger (L, k);
   lua_pushinteger (L, n);
   return 2;
}

static int
ctx_database_name (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   lua_pushstring (L, fw_event_ns_db (d->event)); /* NULL pushes nil */
   return 1;
}

static int
ctx_collection_name (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   lua_pushstring (L, fw_event_ns_coll (d->event));
   return 1;
}

static int
ctx_summary (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   char line[1400];
   fw_event_summary (d->event, line, sizeof line);
   lua_pushfstring (L, "[%s] %s attempt=%d", d->stream_name, line, d->attempt);
   return 1;
}

/* ctx:field_names(): the event's top-level field names, in its order. */
static int
ctx_field_names (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   bson_iter_t it;
   lua_Integer i = 0;

   lua_newtable (L);
   if (bson_iter_init (&it, d->event->doc)) {
      while (bson_iter_next (&it)) {
         lua_pushlstring (L, bson_iter_key (&it), bson_iter_key_len (&it));
         lua_rawseti (L, -2, ++i);
      }
   }
   return 1;
}

static int
ctx_add_metadata (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   luaL_checktype (L, 2, LUA_TSTRING);
   luaL_checkany (L, 3);
   push_cache (L, d);
   if (lua_rawgeti (L, -1, SLOT_METADATA) != LUA_TTABLE) {
      lua_pop (L, 1);
      lua_newtable (L);
      cache_keep (L, d, SLOT_METADATA);
   }
   lua_pushvalue (L, 2);
   lua_pushvalue (L, 3);
   lua_settable (L, -3);
   return 0;
}

static int
ctx_metadata (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   luaL_checktype (L, 2, LUA_TSTRING);
   push_cache (L, d);
   if (lua_rawgeti (L, -1, SLOT_METADATA) != LUA_TTABLE) {
      lua_pushnil (L);
      return 1;
   }
   lua_pushvalue (L, 2);
   lua_gettable (L, -2);
   return 1;
}

static int
ctx_send_to_dlq (lua_State *L)
{
   fw_dispatch_t *d = check_ctx (L);
   size_t len;
   const char *reason = luaL_optlstring (L, 2, "sent to the DLQ by the handler", &len);
   if (!d->dlq_enabled) {
      return luaL_error (L,
                         "ctx:send_to_dlq: stream \"%s\" has no dead-letter queue "
                         "(add dlq = true to its declaration)",
                         d->stream_name);
   }
   /* The reason becomes the entry's error.message: fw.env's values hidden. */
   fw_secrets_copy (d->dlq_reason, sizeof d->dlq_reason, reason, len);
   d->dlq_requested = true;
   return 0;
}

void
fw_event_ctx_push_dead_letter (lua_State *L, fw_dispatch_t *d)
{
   fw_error_t err;

   if (!d->dead_letter) {
      lua_pushnil (L);
      return;
   }
   push_cache (L, d);
   if (lua_rawgeti (L, -1, SLOT_DEAD_LETTER) == LUA_TNIL) {
      lua_pop (L, 1);
      if (!fw_bson_lua_push_document (L, d->dead_letter, "dead_letter", &err)) {
         luaL_error (L, "%s", err.message);
         return;
      }
      cache_keep (L, d, SLOT_DEAD_LETTER);
   }
   lua_remove (L, -2);
}

/* ctx:dead_letter(): the letter being replayed, nil for a live event. */
static int
ctx_dead_letter (lua_State *L)
{
   fw_event_ctx_push_dead_letter (L, check_ctx (L));
   return 1;
}

static int
ctx_tostring (lua_State *L)
{
   ctx_ud_t *c = luaL_checkudata (L, 1, CTX_MT);
   lua_pushfstring (L, "ctx(%s)", c->d->stream_name);
   return 1;
}

static const luaL_Reg ctx_methods[] = {{"operation_type", ctx_operation_type},
                                       {"attempt_number", ctx_attempt_number},
                                       {"event_id", ctx_event_id},
                                       {"stream_name", ctx_stream_name},
                                       {"partition", ctx_partition},
                                       {"database_name", ctx_database_name},
                                       {"collection_name", ctx_collection_name},
                                       {"transaction", ctx_transaction},
                                       {"summary", ctx_summary},
                                       {"field_names", ctx_field_names},
                                       {"add_metadata", ctx_add_metadata},
                                       {"metadata", ctx_metadata},
                                       {"send_to_dlq", ctx_send_to_dlq},
                                       {"dead_letter", ctx_dead_letter},
                                       {NULL, NULL}};

void
fw_event_ctx_open (lua_State *L)
{
   fw_bson_view_open (L, 0);
   luaL_newmetatable (L, CTX_MT);
   lua_newtable (L);
   lua_pushvalue (L, -2);
   luaL_setfuncs (L, ctx_methods, 1);
   for (size_t i = 0; i < sizeof accessors / sizeof accessors[0]; i++) {
      lua_pushvalue (L, -2);
      lua_pushlightuserdata (L, (void *) &accessors[i]);
      lua_pushinteger (L, SLOT_FULL_DOCUMENT + (lua_Integer) i);
      fw_bson_view_push_metatable (L);
      lua_pushcclosure (L, ctx_field, 4);
      lua_setfield (L, -2, accessors[i].method);
   }
   lua_setfield (L, -2, "__index");
   lua_pushcfunction (L, ctx_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pushliteral (L, "flowwarden.ctx");
   lua_setfield (L, -2, "__metatable");
   lua_rawsetp (L, LUA_REGISTRYINDEX, &ctx_mt_key);
}

void
fw_event_ctx_begin (lua_State *L, fw_dispatch_t *d, const fw_event_t *ev)
{
   if (d->cache_slots && d->cache_ref != LUA_NOREF) {
      /* Only the slots this event filled. Setting existing fields to nil
       * allocates nothing, so this cannot raise. */
      lua_rawgeti (L, LUA_REGISTRYINDEX, d->cache_ref);
      for (int slot = SLOT_FULL_DOCUMENT; slot <= SLOT_COUNT; slot++) {
         if (d->cache_slots & (1u << slot)) {
            lua_pushnil (L);
            lua_rawseti (L, -2, slot);
         }
      }
      lua_pop (L, 1);
   }
   d->cache_slots = 0;
   d->generation++;
   d->event = ev;
   d->attempt = 1;
   d->dlq_requested = false;
   d->dlq_reason[0] = '\0';
}

void
fw_event_ctx_drop_values (lua_State *L, fw_dispatch_t *d)
{
   uint32_t keep = d->cache_slots & (1u << SLOT_METADATA);

   if (d->cache_slots & ~keep && d->cache_ref != LUA_NOREF) {
      lua_rawgeti (L, LUA_REGISTRYINDEX, d->cache_ref);
      for (int slot = SLOT_FULL_DOCUMENT; slot <= SLOT_COUNT; slot++) {
         if (slot != SLOT_METADATA && (d->cache_slots & (1u << slot))) {
            lua_pushnil (L);
            lua_rawseti (L, -2, slot);
         }
      }
      lua_pop (L, 1);
   }
   d->cache_slots = keep;
}

int
fw_event_ctx_push (lua_State *L, void *dispatch)
{
   fw_dispatch_t *d = dispatch;
   ctx_ud_t *c = lua_newuserdatauv (L, sizeof *c, 0);
   c->d = d;
   c->generation = d->generation;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &ctx_mt_key);
   lua_setmetatable (L, -2);
   return 1;
}

void
fw_event_ctx_push_metadata (lua_State *L, fw_dispatch_t *d)
{
   if (d->cache_ref == LUA_NOREF || !(d->cache_slots & (1u << SLOT_METADATA))) {
      lua_pushnil (L);
      return;
   }
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->cache_ref);
   lua_rawgeti (L, -1, SLOT_METADATA);
   lua_remove (L, -2);
}
