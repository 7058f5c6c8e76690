/*
 * fw.mongo against the MongoDB stand-in: every method's result shape, BSON
 * types surviving a round trip, typed errors (server codes, fail points,
 * a socket deadline), bad arguments and the handler gate. The group setup
 * starts one stand-in (tests/standin/mongo_standin.py --port 0) and a client
 * pool whose client fw.mongo gets through a provider, as the runtime does.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <mongoc/mongoc.h>

#include "bson/bson_view.h"
#include "flowwarden/clock.h"
#include "flowwarden/io_deadline.h"
#include "lua_api/lua_call.h"
#include "lua_api/mongo_lua.h"
#include "runtime/host/lua_host.h"
#include "standin_process.h"

#define APP_NAME "fwmongo-test"

static pid_t g_pid;
static char g_uri[256];
static mongoc_client_pool_t *g_pool;
static mongoc_client_t *g_client; /* fw.mongo's, popped from the pool */
static mongoc_client_t *g_admin;  /* the test's own, for fail points */

/* Starts the stand-in into g_pid and g_uri. */
static bool
start_standin (void)
{
   standin_t s;
   if (!standin_start (&s)) {
      return false;
   }
   g_pid = s.pid;
   snprintf (g_uri, sizeof g_uri, "%s", s.uri);
   return true;
}

static mongoc_client_t *
provider_client_for (void *ud, const char *name, fw_error_t *error)
{
   (void) ud;
   if (strcmp (name, "default") == 0) {
      return g_client;
   }
   fw_error_set (error, FW_ERROR_INVALID,
                 "unknown connection \"%s\" (declare it with fw.connection)", name);
   return NULL;
}

static const fw_mongo_provider_t g_provider = {provider_client_for, NULL};

/* Commands fw.mongo sent, "name:maxTimeMS " or "name:- " each, when recording. */
static char g_sent[4096];
static bool g_recording;

static void
on_started (const mongoc_apm_command_started_t *event)
{
   const bson_t *cmd = mongoc_apm_command_started_get_command (event);
   const char *name = mongoc_apm_command_started_get_command_name (event);
   size_t len = strlen (g_sent);

   if (g_recording && strcmp (name, "configureFailPoint") != 0) {
      snprintf (g_sent + len, sizeof g_sent - len, "%s:%s ", name,
                bson_has_field (cmd, "maxTimeMS") ? "maxTimeMS" : "-");
   }
}

static int
group_setup (void **state)
{
   char uri[320];
   mongoc_uri_t *u;
   fw_error_t err;

   (void) state;
   mongoc_init ();
   if (!start_standin ()) {
      return -1;
   }
   snprintf (uri, sizeof uri, "%s&appname=%s&serverSelectionTimeoutMS=5000", g_uri, APP_NAME);
   u = mongoc_uri_new (uri);
   g_pool = mongoc_client_pool_new (u);
   mongoc_uri_destroy (u);
   mongoc_client_pool_set_error_api (g_pool, MONGOC_ERROR_API_VERSION_2);
   {
      mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
      mongoc_apm_set_command_started_cb (cbs, on_started);
      mongoc_client_pool_set_apm_callbacks (g_pool, cbs, NULL);
      mongoc_apm_callbacks_destroy (cbs);
   }
   g_client = mongoc_client_pool_pop (g_pool);
   if (!fw_io_deadline_install (g_client, &err)) {
      return -1;
   }
   g_admin = mongoc_client_new (g_uri);
   mongoc_client_set_error_api (g_admin, MONGOC_ERROR_API_VERSION_2);
   return 0;
}

static int
group_teardown (void **state)
{
   int status = -1;

   (void) state;
   mongoc_client_destroy (g_admin);
   mongoc_client_pool_push (g_pool, g_client);
   mongoc_client_pool_destroy (g_pool);
   kill (g_pid, SIGTERM);
   waitpid (g_pid, &status, 0);
   mongoc_cleanup ();
   return (WIFEXITED (status) && WEXITSTATUS (status) == 0) ? 0 : -1;
}

static void
admin (const char *json)
{
   bson_error_t error;
   bson_t reply;
   bson_t *cmd = bson_new_from_json ((const uint8_t *) json, -1, &error);

   assert_non_null (cmd);
   if (!mongoc_client_command_simple (g_admin, "admin", cmd, NULL, &reply, &error)) {
      fail_msg ("command %s failed: %s", json, error.message);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
}

static void
fail_point_off (void)
{
   admin ("{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}");
}

/* --- running Lua ------------------------------------------------------------ */

static char result[4096];

/* A host with the provider attached; collection `c` is fwtest.<coll>. */
static fw_lua_host_t *
new_host (void)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   assert_non_null (host);
   fw_mongo_lua_attach (fw_lua_host_state (host), &g_provider);
   return host;
}

/*
 * Runs code as a handler would run (in_call set; deadline_ns, 0 = none) and
 * keeps tostring of its result or error in `result`. The chunk starts with
 * fw, a collection c = fwtest.<coll>, and fails(f, ...) -> the error f raised.
 */
static bool
run_in (fw_lua_host_t *host, int64_t deadline_ns, const char *coll, const char *code)
{
   lua_State *L = fw_lua_host_state (host);
   fw_lua_call_t *call = fw_lua_call_get (L);
   char chunk[16384];
   int status;

   snprintf (
      chunk, sizeof chunk,
      "local fw = require('flowwarden')\n"
      "local c = fw.mongo.collection('fwtest', '%s')\n"
      "local function fails(f, ...)\n"
      "  local ok, e = pcall(f, ...)\n"
      "  if ok then error('expected an error', 2) end\n"
      "  return e\n"
      "end\n"
      "local function dump(t)\n"
      "  local out = {}\n"
      "  for k, v in pairs(t) do\n"
      "    out[#out + 1] = tostring(k) .. '=' .. (type(v) == 'table' and dump(v) or tostring(v))\n"
      "  end\n"
      "  table.sort(out)\n"
      "  return '{' .. table.concat(out, ',') .. '}'\n"
      "end\n"
      "%s",
      coll, code);
   if (luaL_loadstring (L, chunk) != LUA_OK) {
      fail_msg ("%s", lua_tostring (L, -1));
   }
   /* Atomic, as fw_lua_host_call does: the watchdog thread reads it. */
   call->in_call = 1;
   __atomic_store_n (&call->deadline_ns, deadline_ns, __ATOMIC_RELEASE);
   status = lua_pcall (L, 0, 1, 0);
   call->in_call = 0;
   __atomic_store_n (&call->deadline_ns, 0, __ATOMIC_RELEASE);
   snprintf (result, sizeof result, "%s", luaL_tolstring (L, -1, NULL));
   lua_pop (L, 2);
   return status == LUA_OK;
}

/* As a handler with a 20 s budget: every command carries maxTimeMS. */
static bool
run (fw_lua_host_t *host, const char *coll, const char *code)
{
   return run_in (host, fw_mono_ns () + 20000 * 1000000LL, coll, code);
}

#define ASSERT_RUN(host, coll, code)          \
   do {                                       \
      if (!run (host, coll, code)) {          \
         fail_msg ("Lua failed: %s", result); \
      }                                       \
   } while (0)

/* --- cases -------------------------------------------------------------------- */

static void
mongo_lua_crud_methods_return_documented_shapes (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   ASSERT_RUN (
      host, "crud",
      "local r = c:insert_one({ _id = 1, n = 1, tag = 'a' })\n"
      "assert(r.inserted_id == 1)\n"
      "r = c:insert_one({ n = 2, tag = 'b' })\n"
      "assert(r.inserted_id.type == 'object_id', 'generated _id')\n"
      "assert(c:find_one({ _id = r.inserted_id }).n == 2)\n"
      "r = c:insert_many({ { _id = 3, n = 3, tag = 'a' }, { n = 4, tag = 'b' } })\n"
      "assert(#r.inserted_ids == 2 and r.inserted_ids[1] == 3)\n"
      "assert(r.inserted_ids[2].type == 'object_id')\n"
      "assert(c:count({}) == 4 and c:count({ tag = 'a' }) == 2)\n"
      "assert(c:count({}, { skip = 1, limit = 2 }) == 2)\n"
      "assert(c:find_one({ _id = 99 }) == nil)\n"
      "local d = c:find_one({ tag = 'b' }, { sort = { n = -1 }, projection = { _id = 0, n = 1 } "
      "})\n"
      "assert(d.n == 4 and d._id == nil and d.tag == nil)\n"
      "local seen = {}\n"
      "for doc in c:find({}, { sort = { n = 1 }, skip = 1, limit = 2, batch_size = 1 }) do\n"
      "  seen[#seen + 1] = doc.n\n"
      "end\n"
      "assert(table.concat(seen, ',') == '2,3', table.concat(seen, ','))\n"
      "local all = c:find({}, { sort = { { 'tag', 1 }, { 'n', -1 } } }):to_array()\n"
      "local order = {}\n"
      "for i, doc in ipairs(all) do order[i] = doc.n end\n"
      "assert(table.concat(order, ',') == '3,1,4,2', table.concat(order, ','))\n"
      "local cur = c:find({}, { batch_size = 1 })\n"
      "assert(cur:next() ~= nil)\n"
      "assert(#cur:to_array() == 3 and cur() == nil and cur:next() == nil)\n"
      "local groups = c:aggregate({ { ['$match'] = { tag = 'a' } },\n"
      "  { ['$group'] = { _id = '$tag', total = { ['$sum'] = '$n' } } } }):to_array()\n"
      "assert(#groups == 1 and groups[1]._id == 'a' and groups[1].total == 4)\n"
      "assert(#c:aggregate({}):to_array() == 4)\n"
      "r = c:update_one({ _id = 1 }, { ['$set'] = { n = 10 } })\n"
      "assert(r.matched == 1 and r.modified == 1 and r.upserted_id == nil)\n"
      "r = c:update_many({ tag = 'a' }, { ['$inc'] = { n = 1 } })\n"
      "assert(r.matched == 2 and r.modified == 2)\n"
      "r = c:update_one({ _id = 5 }, { ['$set'] = { n = 5 } }, { upsert = true })\n"
      "assert(r.matched == 0 and r.modified == 0 and r.upserted_id == 5)\n"
      "r = c:replace_one({ _id = 5 }, { n = 50 })\n"
      "assert(r.matched == 1 and r.modified == 1 and c:find_one({ _id = 5 }).n == 50)\n"
      "r = c:replace_one({ _id = 6 }, { n = 6 }, { upsert = true })\n"
      "assert(r.upserted_id == 6)\n"
      "d = c:find_one_and_update({ _id = 6 }, { ['$inc'] = { n = 1 } })\n"
      "assert(d.n == 6)\n"
      "d = c:find_one_and_update({ _id = 6 }, { ['$inc'] = { n = 1 } },\n"
      "  { return_document = 'after', projection = { n = 1 } })\n"
      "assert(d.n == 8)\n"
      "assert(c:find_one_and_update({ _id = 7 }, { ['$set'] = { n = 7 } }) == nil)\n"
      "d = c:find_one_and_update({ _id = 7 }, { ['$set'] = { n = 7 } },\n"
      "  { upsert = true, return_document = 'after' })\n"
      "assert(d._id == 7 and d.n == 7)\n"
      "d = c:find_one_and_update({ tag = 'a' }, { ['$set'] = { hit = true } },\n"
      "  { sort = { n = -1 }, return_document = 'after' })\n"
      "assert(d._id == 1 and d.hit == true)\n"
      "r = c:delete_one({ _id = 7 })\n"
      "assert(r.deleted == 1)\n"
      "r = c:delete_many({ tag = 'a' })\n"
      "assert(r.deleted == 2)\n"
      "assert(c:delete_many({ tag = 'zzz' }).deleted == 0)\n"
      "r = c:bulk_write({\n"
      "  { insert_one = { _id = 20, n = 20 } },\n"
      "  { update_one = { filter = { _id = 20 }, update = { ['$set'] = { n = 21 } } } },\n"
      "  { update_many = { filter = { n = { ['$gte'] = 21 } }, update = { ['$inc'] = { n = 1 } } } "
      "},\n"
      "  { replace_one = { filter = { _id = 21 }, replacement = { n = 1 }, upsert = true } },\n"
      "  { update_one = { filter = { _id = 22 }, update = { ['$set'] = { n = 2 } }, upsert = true "
      "} },\n"
      "  { delete_one = { filter = { _id = 22 } } },\n"
      "  { delete_many = { filter = { n = { ['$gte'] = 50 } } } },\n"
      "}, { ordered = true })\n"
      "assert(r.inserted == 1 and r.matched == 3 and r.modified == 3, dump(r))\n"
      "assert(r.deleted == 2 and r.upserted == 2, dump(r))\n"
      "assert(r.upserted_ids[4] == 21 and r.upserted_ids[5] == 22, dump(r))\n"
      "return 'ok'");
   assert_string_equal (result, "ok");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_bson_types_survive_a_round_trip (void **state)
{
   fw_lua_host_t *host = new_host ();
   lua_State *L = fw_lua_host_state (host);
   bson_t *doc = BCON_NEW ("_id", BCON_INT32 (100), "from", "view", "big", BCON_INT64 (5), "sub",
                           "{", "k", BCON_INT32 (1), "}");
   (void) state;

   /* A read-only view, as ctx hands out, goes in as a filter or document
    * (made once the script loaded flowwarden, which registers views). */
   ASSERT_RUN (host, "types", "return 'loaded'");
   fw_bson_view_push_copy (L, bson_get_data (doc), doc->len, false);
   lua_setglobal (L, "VIEW");
   bson_destroy (doc);
   ASSERT_RUN (host, "types",
               "local oid = fw.object_id()\n"
               "local doc = { _id = oid, i64 = fw.int64(7), big = 9007199254740993,\n"
               "  dec = fw.decimal128('1234.5678'), at = fw.date(1700000000123),\n"
               "  bin = fw.binary('\\0\\1\\2', 128), f = 2.0, s = 'x', arr = fw.array({}),\n"
               "  nested = { list = { 1, fw.int64(2) } } }\n"
               "c:insert_one(doc)\n"
               "local back = c:find_one({ _id = oid })\n"
               "assert(back._id == oid)\n"
               "assert(math.type(back.i64) == 'integer' and back.i64 == 7)\n"
               "assert(back.big == 9007199254740993)\n"
               "assert(back.dec.type == 'decimal128' and tostring(back.dec) == '1234.5678')\n"
               "assert(back.at.type == 'date' and back.at.ms == 1700000000123)\n"
               "assert(back.bin.subtype == 128 and back.bin.data == '\\0\\1\\2')\n"
               "assert(math.type(back.f) == 'float' and back.s == 'x')\n"
               "assert(getmetatable(back.arr) == 'flowwarden.array' and #back.arr == 0)\n"
               "assert(back.nested.list[2] == 2)\n"
               "-- int64 width is kept: the same document comes back byte-identical\n"
               "c:replace_one({ _id = oid }, back)\n"
               "assert(c:count({ i64 = fw.int64(7), ['nested.list'] = fw.int64(2) }) == 1)\n"
               "assert(c:count({ _id = oid, i64 = { ['$type'] = 'long' } }) == 1)\n"
               "assert(c:count({ _id = oid, dec = { ['$type'] = 'decimal' } }) == 1)\n"
               "assert(c:count({ _id = oid, at = { ['$type'] = 'date' } }) == 1)\n"
               "assert(c:count({ _id = oid, bin = { ['$type'] = 'binData' } }) == 1)\n"
               "c:insert_one(VIEW)\n"
               "local v = c:find_one(VIEW)\n"
               "assert(v.from == 'view' and math.type(v.big) == 'integer')\n"
               "assert(c:count({ _id = 100, big = { ['$type'] = 'long' } }) == 1)\n"
               "assert(c:update_one(VIEW, { ['$set'] = { seen = true } }).modified == 1)\n"
               "-- NUL bytes and multi-byte UTF-8 pass flowwarden's own check\n"
               "local set = { z = 'a\\0b', u = 'h\\xc3\\xa9' }\n"
               "assert(c:update_one({ _id = oid }, { ['$set'] = set }).modified == 1)\n"
               "local w = { 'x\\0', { k = '\\xe2\\x82\\xac' } }\n"
               "c:bulk_write({ { update_one = { filter = { _id = oid },\n"
               "  update = { ['$set'] = { w = w } } } } })\n"
               "c:insert_many({ { _id = 'nul', s = 'a\\0b' } })\n"
               "assert(c:find_one({ _id = 'nul' }).s == 'a\\0b')\n"
               "local z = c:find_one({ _id = oid })\n"
               "assert(z.z == 'a\\0b' and z.u == 'h\\xc3\\xa9')\n"
               "assert(z.w[1] == 'x\\0' and z.w[2].k == '\\xe2\\x82\\xac')\n"
               "return 'ok'");
   assert_string_equal (result, "ok");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_duplicate_key_is_typed_with_write_errors (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   ASSERT_RUN (
      host, "dup",
      "c:insert_one({ _id = 1 })\n"
      "local e = fails(c.insert_one, c, { _id = 1 })\n"
      "assert(e.type == 'Mongo.DuplicateKey', tostring(e))\n"
      "assert(e.fields.code == 11000 and e.fields.code_name == 'DuplicateKey')\n"
      "assert(#e.fields.write_errors == 1 and e.fields.write_errors[1].index == 1)\n"
      "assert(e.fields.write_errors[1].code == 11000)\n"
      "assert(e.fields.write_errors[1].message:find('E11000', 1, true))\n"
      "assert(type(e.fields.labels) == 'table' and #e.fields.labels == 0)\n"
      "local w = fails(function() return c:insert_one({ _id = 1 }) end)\n"
      "assert(w.where and w.where:find(':%d+$'), tostring(w.where))\n"
      "local m = fails(c.insert_many, c, { { _id = 2 }, { _id = 1 }, { _id = 3 }, { _id = 2 } },\n"
      "  { ordered = false })\n"
      "assert(m.type == 'Mongo.DuplicateKey')\n"
      "assert(#m.fields.write_errors == 2, #m.fields.write_errors)\n"
      "assert(m.fields.write_errors[1].index == 2 and m.fields.write_errors[2].index == 4)\n"
      "assert(c:count({}) == 3)\n"
      "local k = fails(c.insert_one, c, { [''] = 1 })\n"
      "assert(k.type == 'ArgumentError' and k.message == 'insert_one: document has an empty key',\n"
      "  tostring(k))\n"
      "local u = fails(c.update_one, c, { _id = 2 }, { ['$set'] = { _id = 3 } })\n"
      "assert(u.type == 'Mongo.Invalid' and u.fields.code == 66, tostring(u))\n"
      "return e.message");
   assert_true (strncmp (result, "fw.mongo: insert_one on fwtest.dup: E11000 duplicate key", 56) ==
                0);
   fw_lua_host_destroy (host);
}

static void
mongo_lua_not_writable_primary_from_a_fail_point (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   ASSERT_RUN (host, "nwp", "c:insert_one({ _id = 1 }) return 'ok'");
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
      "{\"failCommands\": [\"find\"], \"errorCode\": 91, \"appName\": \"" APP_NAME "\"}}");
   run (host, "nwp",
        "local e = fails(c.find_one, c, { _id = 1 })\n"
        "return e.type .. '|' .. e.fields.code .. '|' .. e.fields.code_name .. '|' .. e.message");
   fail_point_off ();
   assert_string_equal (result,
                        "Mongo.NotWritablePrimary|91|ShutdownInProgress|fw.mongo: find_one "
                        "on fwtest.nwp: Failing command via 'failCommand' failpoint");
   /* The next operation goes through once the fail point is off. */
   ASSERT_RUN (host, "nwp", "return c:find_one({ _id = 1 })._id");
   assert_string_equal (result, "1");
   fw_lua_host_destroy (host);
}

/* What a mongos (or a shard behind it) answers, typed by MongoDB's
 * error_codes.yml categories: ExceededTimeLimitError is Mongo.Timeout;
 * RetriableError and NeedRetargettingError (and 133, which has no category)
 * are Mongo.NotWritablePrimary: a later attempt reaches a node that can
 * serve it. One fail point per code, alwaysOn: libmongoc retries some reads
 * once by itself. */
static void
mongo_lua_sharded_cluster_codes_are_typed (void **state)
{
   static const struct {
      int code;
      const char *expect;
   } cases[] = {
      {133, "Mongo.NotWritablePrimary|133|FailedToSatisfyReadPreference"},
      {134, "Mongo.NotWritablePrimary|134|ReadConcernMajorityNotAvailableYet"},
      {150, "Mongo.NotWritablePrimary|150|StaleEpoch"},
      {202, "Mongo.Timeout|202|NetworkInterfaceExceededTimeLimit"},
      {407, "Mongo.Timeout|407|PooledConnectionAcquisitionExceededTimeLimit"},
      {13388, "Mongo.NotWritablePrimary|13388|StaleConfig"},
   };
   fw_lua_host_t *host = new_host ();
   (void) state;

   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      char cmd[300];
      snprintf (cmd, sizeof cmd,
                "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"find\"], \"errorCode\": %d, \"appName\": \"" APP_NAME "\"}}",
                cases[i].code);
      admin (cmd);
      run (host, "shard",
           "local e = fails(c.find_one, c, { _id = 1 })\n"
           "return e.type .. '|' .. e.fields.code .. '|' .. e.fields.code_name");
      fail_point_off ();
      assert_string_equal (result, cases[i].expect);
   }
   fw_lua_host_destroy (host);
}

static void
mongo_lua_closed_connection_is_a_network_error (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   ASSERT_RUN (host, "net", "c:insert_one({ _id = 1 }) return 'ok'");
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
      "{\"failCommands\": [\"find\", \"insert\"], \"closeConnection\": true, "
      "\"appName\": \"" APP_NAME "\"}}");
   run (host, "net",
        "local e = fails(c.find_one, c, { _id = 1 })\n"
        "local w = fails(c.insert_one, c, { _id = 2 })\n"
        "return e.type .. '|' .. w.type .. '|' .. tostring(e.fields.code)");
   fail_point_off ();
   assert_string_equal (result, "Mongo.Network|Mongo.Network|nil");
   ASSERT_RUN (host, "net", "return c:count({})");
   assert_string_equal (result, "1");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_socket_deadline_turns_a_hung_server_into_a_timeout (void **state)
{
   fw_lua_host_t *host = new_host ();
   double t0, elapsed;
   (void) state;

   ASSERT_RUN (host, "slow", "c:insert_one({ _id = 1 }) return 'ok'");
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
      "{\"failCommands\": [\"find\"], \"blockConnection\": true, \"blockTimeMS\": 2000, "
      "\"appName\": \"" APP_NAME "\"}}");
   t0 = now_s ();
   run_in (host, fw_mono_ns () + 300 * 1000000LL, "slow",
           "local e = fails(c.find_one, c, { _id = 1 })\n"
           "return e.type .. '|' .. e.message");
   elapsed = now_s () - t0;
   fail_point_off ();
   print_message ("timeout after %.3f s: %s\n", elapsed, result);
   assert_true (strncmp (result,
                         "Mongo.Timeout|fw.mongo: find_one on fwtest.slow: the handler's "
                         "time budget ran out",
                         80) == 0);
   assert_true (elapsed >= 0.25 && elapsed < 1.0);
   assert_int_equal (fw_io_deadline_get (), 0);
   /* A spent budget fails at once, before any IO. */
   run_in (host, fw_mono_ns () - 1, "slow",
           "local e = fails(c.count, c, {}) return e.type .. '|' .. e.message");
   assert_string_equal (result,
                        "Mongo.Timeout|fw.mongo: count on fwtest.slow: the handler's "
                        "time budget is spent");
   /* maxTimeMS from the server is a timeout too. */
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
      "{\"failCommands\": [\"find\"], \"errorCode\": 50, \"appName\": \"" APP_NAME "\"}}");
   run (host, "slow", "local e = fails(c.find_one, c, {}) return e.type .. '|' .. e.fields.code");
   fail_point_off ();
   assert_string_equal (result, "Mongo.Timeout|50");
   ASSERT_RUN (host, "slow", "return c:find_one({})._id");
   assert_string_equal (result, "1");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_write_concern_error_is_typed (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
      "{\"failCommands\": [\"insert\"], \"writeConcernError\": {\"code\": 64, \"errmsg\": "
      "\"waiting for replication timed out\"}, \"appName\": \"" APP_NAME "\"}}");
   run (host, "wce",
        "local e = fails(c.insert_one, c, { _id = 1 })\n"
        "return e.type .. '|' .. e.fields.code .. '|' .. e.message");
   fail_point_off ();
   assert_string_equal (result,
                        "Mongo.WriteConcern|64|fw.mongo: insert_one on fwtest.wce: "
                        "waiting for replication timed out");
   fw_lua_host_destroy (host);
}

/* Issue 37: an unordered bulk_write answered with a write concern error has
 * no write_errors, yet every write was applied on the primary: the error is
 * Mongo.WriteConcern and says what applied (fields.applied), so a handler
 * does not send the $inc again. */
static void
mongo_lua_bulk_write_concern_error_says_what_applied (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   ASSERT_RUN (host, "bwce",
               "c:insert_many({ { _id = 1, n = 0 }, { _id = 2, n = 0 } }) return 'ok'");
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
      "{\"failCommands\": [\"update\"], \"writeConcernError\": {\"code\": 64, "
      "\"codeName\": \"WriteConcernFailed\", \"errmsg\": \"waiting for replication timed "
      "out\"}, \"appName\": \"" APP_NAME "\"}}");
   run (host, "bwce",
        "local e = fails(c.bulk_write, c, {\n"
        "  { update_one = { filter = { _id = 1 }, update = { ['$inc'] = { n = 5 } } } },\n"
        "  { update_one = { filter = { _id = 2 }, update = { ['$inc'] = { n = 7 } } } },\n"
        "  { update_one = { filter = { _id = 3 }, update = { ['$inc'] = { n = 1 } }, upsert = true "
        "} },\n"
        "}, { ordered = false })\n"
        "local f = e.fields\n"
        "return e.type .. '|' .. #f.write_errors .. '|' .. dump(f.applied) .. '|' ..\n"
        "  dump(f.write_concern_error) .. '|' .. c:find_one({ _id = 1 }).n .. ',' ..\n"
        "  c:find_one({ _id = 2 }).n .. ',' .. c:find_one({ _id = 3 }).n");
   fail_point_off ();
   assert_string_equal (result,
                        "Mongo.WriteConcern|0|"
                        "{deleted=0,inserted=0,matched=2,modified=2,upserted=1}|"
                        "{code=64,code_name=WriteConcernFailed,"
                        "message=waiting for replication timed out}|5,7,1");
   fw_lua_host_destroy (host);
}

/* Each line: a call, then the exact message of the ArgumentError it raises
 * (a script bug: not retried by default), located at the call. */
static const char *const bad_calls[][2] = {
   {"fw.mongo.collection(1, 'x')", "fw.mongo.collection: database must be a string, got number"},
   {"fw.mongo.collection('db', nil)", "fw.mongo.collection: name must be a string, got nil"},
   {"fw.mongo.collection('db', 'x', { conection = 'a' })",
    "fw.mongo.collection: unknown option \"conection\" (did you mean \"connection\"?)"},
   {"c:find({}, { limt = 1 })", "find: unknown option \"limt\" (did you mean \"limit\"?)"},
   {"c:find({}, { colour = 1 })",
    "find: unknown option \"colour\" (the options are projection, sort, skip, limit, batch_size)"},
   {"c:find_one('x')", "find_one: filter must be a table, got string"},
   {"c:find_one({ 1, 2 })", "find_one: filter must be a document, not an array"},
   {"c:find_one({ f = print })", "find_one: filter.f: cannot convert a function to BSON"},
   {"c:find({}, { limit = -1 })", "find: limit must be an integer >= 0, got -1"},
   {"c:find({}, { sort = { a = 1, b = -1 } })",
    "find: sort has several keys but a Lua table keeps no order: write it as pairs, e.g. "
    "{ { \"a\", 1 }, { \"b\", -1 } }"},
   {"c:update_one({}, { n = 1 })",
    "update_one: update must be a table of $-operators or use replace_one"},
   {"c:update_many({}, {})",
    "update_many: update must be a table of $-operators or use replace_one"},
   {"c:replace_one({}, { ['$set'] = { n = 1 } })",
    "replace_one: replacement must not contain $-operators"},
   {"c:insert_many({})", "insert_many: docs must be a non-empty array"},
   {"c:insert_many({ a = 1 })", "insert_many: docs must be a non-empty array"},
   {"c:insert_many('x')", "insert_many: docs must be a non-empty array, got string"},
   {"c:insert_many({ 1 })", "insert_many: docs[1] must be a document"},
   /* The position of the bad element, not 1 (op's count was read after release). */
   {"c:insert_many({ { _id = 1 }, { _id = 2 }, 3 })", "insert_many: docs[3] must be a document"},
   {"c:insert_one({ a = 1 }, { w = 1 })",
    "insert_one: unknown option \"w\" (insert_one takes no options)"},
   {"c:update_one({}, { ['$set'] = {} }, { upsert = 'yes' })",
    "update_one: upsert must be a boolean, got string"},
   {"c:find_one_and_update({}, { ['$set'] = {} }, { return_document = 'new' })",
    "find_one_and_update: return_document must be \"before\" or \"after\""},
   {"c:bulk_write({})",
    "bulk_write: ops must be a non-empty array, got an empty or non-array table"},
   {"c:bulk_write({ { insert_on = {} } })",
    "bulk_write: ops[1]: unknown operation \"insert_on\" (did you mean \"insert_one\"?)"},
   {"c:bulk_write({ { delete_one = { filtr = {} } } })",
    "bulk_write: ops[1].delete_one: unknown option \"filtr\" (did you mean \"filter\"?)"},
   {"c:bulk_write({ { update_one = { filter = {}, update = { n = 1 } } } })",
    "bulk_write: ops[1].update_one.update must be a table of $-operators or use replace_one"},
   /* Every part's path, with the position of the bad operation (issue 41: the
    * paths are now built without printf; the messages must not change). */
   {"c:bulk_write({ { delete_one = { filter = {} } }, 7 })",
    "bulk_write: ops[2] must be a table such as { insert_one = doc }, got number"},
   {"c:bulk_write({ { delete_one = { filter = {} } }, {} })",
    "bulk_write: ops[2] must have one key naming the operation, such as insert_one"},
   {"c:bulk_write({ { delete_one = { filter = {} }, insert_one = {} } })",
    "bulk_write: ops[1] must have exactly one key naming the operation"},
   {"c:bulk_write({ { frobnicate = {} } })",
    "bulk_write: ops[1]: unknown operation \"frobnicate\" (the operations are insert_one, "
    "update_one, update_many, replace_one, delete_one and delete_many)"},
   {"local ops = {} for i = 1, 11 do ops[i] = { insert_one = { _id = i } } end "
    "ops[12] = { insert_one = { f = print } } c:bulk_write(ops)",
    "bulk_write: ops[12].insert_one.f: cannot convert a function to BSON"},
   {"c:bulk_write({ { insert_one = 'x' } })",
    "bulk_write: ops[1].insert_one must be a table, got string"},
   {"c:bulk_write({ { delete_many = { filter = { a = { b = print } } } } })",
    "bulk_write: ops[1].delete_many.filter.a.b: cannot convert a function to BSON"},
   {"c:bulk_write({ { update_many = { filter = {}, update = { ['$set'] = {} }, upsert = 1 } } })",
    "bulk_write: ops[1].update_many: upsert must be a boolean, got number"},
   {"c:bulk_write({ { replace_one = { filter = {}, replacement = { ['$set'] = {} } } } })",
    "bulk_write: ops[1].replace_one.replacement must not contain $-operators"},
   {"c:bulk_write({ { replace_one = { filter = {}, update = {} } } })",
    "bulk_write: ops[1].replace_one: unknown option \"update\" (the options are filter, "
    "replacement, upsert)"},
   {"c:bulk_write({ { update_one = { filter = { 1 }, update = { ['$inc'] = { n = 1 } } } } })",
    "bulk_write: ops[1].update_one.filter must be a document, not an array"},
   {"c:bulk_write({ { update_one = { filter = {}, update = 3 } } })",
    "bulk_write: ops[1].update_one.update must be a table of $-operators or use replace_one"},
   {"c:bulk_write({ { update_one = { filter = {}, update = { ['$inc'] = { n = print } } } } })",
    "bulk_write: ops[1].update_one.update.$inc.n: cannot convert a function to BSON"},
   /* Keys and strings of updates and replacements: checked by flowwarden
    * (libmongoc's own validation is off for them); MongoDB would store a
    * string that is not UTF-8, so this is the only place it is stopped. */
   {"c:update_one({}, { ['$set'] = { s = 'a\\xffb' } })",
    "update_one: update.$set.s is not valid UTF-8"},
   {"c:update_many({}, { ['$set'] = { a = { b = { [''] = 1 } } } })",
    "update_many: update.$set.a.b has an empty key"},
   {"c:replace_one({}, { ['k\\xc3'] = 1 })",
    "replace_one: replacement has a key that is not valid UTF-8"},
   {"c:find_one_and_update({}, { ['$set'] = { [''] = 1 } })",
    "find_one_and_update: update.$set has an empty key"},
   {"c:bulk_write({ { update_one = { filter = {}, update = { ['$set'] = { l = { 'ok', "
    "{ s = '\\xc3\\x28' } } } } } } })",
    "bulk_write: ops[1].update_one.update.$set.l[2].s is not valid UTF-8"},
   {"c:bulk_write({ { delete_one = { filter = {} } }, { replace_one = { filter = {}, "
    "replacement = { a = { [''] = 1 } } } } })",
    "bulk_write: ops[2].replace_one.replacement.a has an empty key"},
   /* And inserted documents (Debian's libbson 1.23 let such a string through). */
   {"c:insert_one({ s = '\\xff' })", "insert_one: document.s is not valid UTF-8"},
   {"c:insert_many({ { _id = 1 }, { a = { [''] = 1 } } })",
    "insert_many: docs[2].a has an empty key"},
   {"c:bulk_write({ { insert_one = { ['k\\xc3'] = 1 } } })",
    "bulk_write: ops[1].insert_one has a key that is not valid UTF-8"},
   /* Tables convert straight into the command's document: arrays still refused. */
   {"c:update_one({}, { { ['$set'] = { n = 1 } } })",
    "update_one: update must be a table of $-operators or use replace_one"},
   {"c:delete_one(fw.array({}))", "delete_one: filter must be a document, not an array"},
   {"c.find_one({})", "find_one: call it as a method: coll:find_one(...)"},
   {"fw.mongo.collection('db', 'x', { connection = 'nope' }):find_one({})",
    "find_one: unknown connection \"nope\" (declare it with fw.connection)"},
};

static void
mongo_lua_commands_carry_the_budget_as_max_time_ms (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   g_sent[0] = '\0';
   g_recording = true;
   ASSERT_RUN (host, "budget",
               "c:insert_one({ _id = 1 })\n"
               "c:insert_many({ { _id = 2 }, { _id = 3 } })\n"
               "c:find_one({})\n"
               "c:find({}, { batch_size = 1 }):to_array()\n"
               "c:aggregate({}):to_array()\n"
               "c:count({})\n"
               "c:update_one({ _id = 1 }, { ['$set'] = { a = 1 } })\n"
               "c:find_one_and_update({ _id = 1 }, { ['$set'] = { a = 2 } })\n"
               "c:delete_one({ _id = 3 })\n"
               "c:bulk_write({ { delete_one = { filter = { _id = 2 } } } })\n"
               "return 'ok'");
   g_recording = false;
   /* libmongoc 1.23 cannot put maxTimeMS on update and bulk commands (they
    * are bounded by the socket deadline only); getMore takes no maxTimeMS
    * on a non-tailable cursor. */
   assert_string_equal (g_sent,
                        "insert:maxTimeMS insert:maxTimeMS find:maxTimeMS "
                        "find:maxTimeMS getMore:- getMore:- "
                        "aggregate:maxTimeMS aggregate:maxTimeMS update:- "
                        "findAndModify:maxTimeMS delete:maxTimeMS delete:- ");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_bad_arguments_name_the_call (void **state)
{
   fw_lua_host_t *host = new_host ();
   char code[1024];
   (void) state;

   for (size_t i = 0; i < sizeof bad_calls / sizeof bad_calls[0]; i++) {
      snprintf (code, sizeof code,
                "local e = fails(function() %s end)\n"
                "assert(e.where and e.where:find(':16$'), tostring(e.where))\n"
                "return e.type .. ': ' .. e.message",
                bad_calls[i][0]);
      ASSERT_RUN (host, "bad", code);
      if (strncmp (result, "ArgumentError: ", 15) != 0 ||
          strcmp (result + 15, bad_calls[i][1]) != 0) {
         fail_msg ("%s\n  raised: %s\nexpected: %s", bad_calls[i][0], result, bad_calls[i][1]);
      }
   }
   /* Nothing reached the server. */
   ASSERT_RUN (host, "bad", "return c:count({})");
   assert_string_equal (result, "0");
   fw_lua_host_destroy (host);
}

static void
mongo_lua_is_for_handlers_only (void **state)
{
   fw_lua_host_t *host = new_host ();
   lua_State *L = fw_lua_host_state (host);
   (void) state;

   /* Script top level: a handle may be made, not used. */
   assert_int_equal (luaL_loadstring (L,
                                      "local fw = require('flowwarden')\n"
                                      "local c = fw.mongo.collection('fwtest', 'gate')\n"
                                      "assert(tostring(c):find('fwtest.gate', 1, true))\n"
                                      "return c:find_one({})"),
                     LUA_OK);
   assert_int_not_equal (lua_pcall (L, 0, 1, 0), LUA_OK);
   assert_non_null (strstr (lua_tostring (L, -1), "fw.mongo is available inside handlers only"));
   lua_pop (L, 1);
   /* No provider attached: a state without connections. */
   fw_mongo_lua_attach (L, NULL);
   run (host, "gate", "return c:find_one({})");
   assert_non_null (strstr (result, "fw.mongo: no MongoDB connection is available in this state"));
   fw_lua_host_destroy (host);
}

static void
mongo_lua_cursors_close_with_the_handler_call (void **state)
{
   fw_lua_host_t *host = new_host ();
   lua_State *L = fw_lua_host_state (host);
   (void) state;

   ASSERT_RUN (host, "cur",
               "local docs = {}\n"
               "for i = 1, 10 do docs[i] = { _id = i } end\n"
               "c:insert_many(docs)\n"
               "KEPT = c:find({}, { batch_size = 2 })\n"
               "assert(KEPT:next()._id == 1)\n"
               "local closed = c:find({}, { batch_size = 2 })\n"
               "closed:close()\n"
               "local e = fails(closed.next, closed)\n"
               "assert(tostring(e):find('is closed', 1, true), tostring(e))\n"
               "do\n"
               "  local scoped <close> = c:find({}, { batch_size = 2 })\n"
               "  assert(scoped() ~= nil)\n"
               "end\n"
               "return 'ok'");
   /* A failed getMore raises a typed error and closes the cursor. */
   admin (
      "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
      "{\"failCommands\": [\"getMore\"], \"errorCode\": 2, \"appName\": \"" APP_NAME "\"}}");
   run (host, "cur",
        "local cur = c:find({}, { batch_size = 2 })\n"
        "assert(cur() and cur())\n"
        "local e = fails(cur.next, cur)\n"
        "local again = fails(cur.next, cur)\n"
        "return e.type .. '|' .. e.fields.code .. '|' .. e.message .. '|' .. again.message");
   fail_point_off ();
   assert_string_equal (result,
                        "Mongo.Invalid|2|fw.mongo: find on fwtest.cur: Failing command via "
                        "'failCommand' failpoint|fw.mongo: find cursor on fwtest.cur is "
                        "closed (a cursor lasts for the handler call that opened it, or "
                        "until cursor:close())");
   /* A later call on the same thread and connection may go on. */
   ASSERT_RUN (host, "cur", "return KEPT:next()._id");
   assert_string_equal (result, "2");
   fw_mongo_lua_close_cursors (L);
   run (host, "cur", "return KEPT:next()");
   assert_non_null (strstr (result, "fw.mongo: find cursor on fwtest.cur is closed"));
   /* An open cursor left to the collector is closed by it. */
   ASSERT_RUN (host, "cur",
               "local x = c:find({}, { batch_size = 2 }) x() x = nil "
               "collectgarbage() return c:count({})");
   assert_string_equal (result, "10");
   fw_lua_host_destroy (host);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (mongo_lua_crud_methods_return_documented_shapes),
      cmocka_unit_test (mongo_lua_bson_types_survive_a_round_trip),
      cmocka_unit_test (mongo_lua_duplicate_key_is_typed_with_write_errors),
      cmocka_unit_test (mongo_lua_not_writable_primary_from_a_fail_point),
      cmocka_unit_test (mongo_lua_sharded_cluster_codes_are_typed),
      cmocka_unit_test (mongo_lua_closed_connection_is_a_network_error),
      cmocka_unit_test (mongo_lua_socket_deadline_turns_a_hung_server_into_a_timeout),
      cmocka_unit_test (mongo_lua_write_concern_error_is_typed),
      cmocka_unit_test (mongo_lua_bulk_write_concern_error_says_what_applied),
      cmocka_unit_test (mongo_lua_commands_carry_the_budget_as_max_time_ms),
      cmocka_unit_test (mongo_lua_bad_arguments_name_the_call),
      cmocka_unit_test (mongo_lua_is_for_handlers_only),
      cmocka_unit_test (mongo_lua_cursors_close_with_the_handler_call),
   };
   return cmocka_run_group_tests (tests, group_setup, group_teardown);
}
