/*
 * fuzz_bson_to_lua: arbitrary bytes that bson_init_static accepts (a length
 * prefix and a trailing NUL, nothing checked in between), read as
 *
 *   - tables (fw_bson_lua_push_document), written back to BSON and read
 *     again: the second trip must give the same bytes as the first (only the
 *     first may normalise: duplicate keys, array keys, regex options, Code
 *     text after a NUL, see bson_lua.h), and a document libbson considers
 *     canonical must come back byte-identical;
 *   - views (fw_bson_view_push_copy): every field indexed, pairs and ipairs,
 *     #, tostring, typed values' fields, fw.table and fw.json.encode, with
 *     index and pairs agreeing on every value.
 */
#include <bson/bson.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "fuzz_common.h"

typedef struct {
   const uint8_t *data;
   size_t size;
   bson_t doc;
} input_t;

static const char view_harness[] =
   "local FIELDS = { 'type', 'hex', 'time', 'ms', 't', 'i', 'string', 'subtype', 'data',\n"
   "  'pattern', 'options', 'code', 'scope', 'symbol', 'collection', 'id', 'value' }\n"
   "-- Messages are formatted only on failure: the checks run on every value.\n"
   "local function check(ok, fmt, ...) if not ok then error(string.format(fmt, ...), 2) end end\n"
   "local function same(a, b) return a == b or (a ~= a and b ~= b) end\n"
   "local function field(x, f) return x[f] end\n"
   "local walk\n"
   "local function leaf(x, depth)\n"
   "  local mt = getmetatable(x)\n"
   "  if mt == 'flowwarden.view' then return walk(x, depth + 1) end\n"
   "  if mt == 'flowwarden.bson_value' then\n"
   "    tostring(x)\n"
   "    for _, f in ipairs(FIELDS) do pcall(field, x, f) end\n"
   "    check(x == x, 'a typed value is not equal to itself')\n"
   "  end\n"
   "end\n"
   "function walk(v, depth)\n"
   "  if depth > 150 then return end\n"
   "  local n, seen = 0, {}\n"
   "  for k, x in pairs(v) do\n"
   "    n = n + 1\n"
   "    if math.type(k) == 'integer' then\n"
   "      check(k == n, 'array pairs gave index %d at step %d', k, n)\n"
   "      -- indexing scans from the start: check the first elements only\n"
   "      check(n > 64 or same(v[k], x), 'v[%d] differs from what pairs gave', k)\n"
   "    else\n"
   "      check(type(k) == 'string', 'a view key is a %s', type(k))\n"
   "      if n <= 64 and not seen[k] then\n"
   "        seen[k] = true\n"
   "        check(same(v[k], x), 'v[%q] differs from what pairs gave', k)\n"
   "      end\n"
   "    end\n"
   "    leaf(x, depth)\n"
   "  end\n"
   "  local len = #v\n"
   "  check(len == 0 or len == n, '#v is %d but pairs gave %d', len, n)\n"
   "  local m = 0\n"
   "  for i in ipairs(v) do m = i end\n"
   "  check(m <= n, 'ipairs went further than pairs')\n"
   "  check(v[0] == nil and v[-1] == nil and v[1.5] == nil and v[true] == nil, 'odd keys found')\n"
   "  check(v == v, 'a view is not equal to itself')\n"
   "  local ok, t = pcall(fw.table, v)\n"
   "  if ok then\n"
   "    local c = 0\n"
   "    for _ in pairs(t) do c = c + 1 end\n"
   "    check(c <= n, 'fw.table has more entries than the view')\n"
   "  end\n"
   "  check(not pcall(rawset, v, 'x', 1) and not pcall(function() v.x = 1 end),\n"
   "    'a view accepted a write')\n"
   "end\n"
   "return function(v, is_array)\n"
   "  walk(v, 1)\n"
   "  tostring(v)\n"
   "  pcall(fw.json.encode, v)\n"
   "end\n";

static int view_ref;

/* Reads the document as a view, then as a document-less array view. */
static int
run_views (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);

   for (int is_array = 0; is_array <= 1; is_array++) {
      fuzz_push_harness (L, &view_ref, "=bson_to_lua_views", view_harness);
      fw_bson_view_push_copy (L, in->data, (uint32_t) in->size, is_array);
      lua_pushboolean (L, is_array);
      lua_call (L, 2, 0);
   }
   return 0;
}

static bool
same_bytes (const bson_t *a, const bson_t *b)
{
   return a->len == b->len && memcmp (bson_get_data (a), bson_get_data (b), a->len) == 0;
}

/* Canonical: what libbson would write itself, so nothing may change. */
static bool
is_canonical (const bson_t *doc, bool is_array, int depth)
{
   bson_iter_t it;
   uint32_t i = 0;
   char key[16];

   if (depth > FW_BSON_LUA_MAX_DEPTH - 2 || !bson_iter_init (&it, doc)) {
      return false;
   }
   while (bson_iter_next (&it)) {
      const uint8_t *data;
      uint32_t len;
      bson_t child;
      bson_iter_t dup;

      if (is_array) {
         snprintf (key, sizeof key, "%u", i);
         if (strcmp (bson_iter_key (&it), key) != 0) {
            return false;
         }
      } else if (bson_iter_init (&dup, doc) && bson_iter_find (&dup, bson_iter_key (&it)) &&
                 dup.off != it.off) {
         return false; /* a duplicate key */
      }
      i++;
      switch (bson_iter_type (&it)) {
      case BSON_TYPE_DOCUMENT:
      case BSON_TYPE_ARRAY:
         if (BSON_ITER_HOLDS_DOCUMENT (&it)) {
            bson_iter_document (&it, &len, &data);
         } else {
            bson_iter_array (&it, &len, &data);
         }
         if (!bson_init_static (&child, data, len) ||
             !is_canonical (&child, BSON_ITER_HOLDS_ARRAY (&it), depth + 1)) {
            return false;
         }
         break;
      case BSON_TYPE_REGEX:
      case BSON_TYPE_CODE:
      case BSON_TYPE_CODEWSCOPE:
      case BSON_TYPE_DBPOINTER:
      case BSON_TYPE_BOOL:
      case BSON_TYPE_BINARY:
         return false; /* normalised by libbson's writers: left to the fixpoint check */
      default:
         break;
      }
   }
   return !it.err_off;
}

/* BSON -> table -> BSON, twice. */
static int
run_tables (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);
   bson_t once = BSON_INITIALIZER, twice = BSON_INITIALIZER;
   fw_error_t err;
   int top = lua_gettop (L);
   bool ok;

   if (!fw_bson_lua_push_document (L, &in->doc, "doc", &err)) {
      FUZZ_ASSERT (lua_gettop (L) == top, "a failed conversion left values on the stack");
      FUZZ_ASSERT (err.message[0] != '\0', "a failed conversion has no message");
      return 0;
   }
   FUZZ_ASSERT (lua_gettop (L) == top + 1, "a conversion pushed %d values", lua_gettop (L) - top);
   ok = fw_bson_lua_to_bson (L, -1, "doc", &once, &err);
   FUZZ_ASSERT (ok, "a table read from BSON cannot be written back: %s", err.message);
   FUZZ_ASSERT (lua_gettop (L) == top + 1, "fw_bson_lua_to_bson changed the stack");
   lua_pop (L, 1);

   ok = fw_bson_lua_push_document (L, &once, "doc", &err);
   FUZZ_ASSERT (ok, "BSON written from a table cannot be read back: %s", err.message);
   ok = fw_bson_lua_to_bson (L, -1, "doc", &twice, &err);
   FUZZ_ASSERT (ok, "the second trip failed: %s", err.message);
   lua_pop (L, 1);
   FUZZ_ASSERT (same_bytes (&once, &twice), "BSON -> Lua -> BSON is not stable (%u vs %u bytes)",
                once.len, twice.len);
   if (is_canonical (&in->doc, false, 1)) {
      FUZZ_ASSERT (same_bytes (&in->doc, &once),
                   "a canonical document did not come back byte-identical (%u vs %u bytes)",
                   in->doc.len, once.len);
   }
   /* Owned by the C side while Lua may raise: free before anything else
    * can, and nothing above raises after these were filled (push/to_bson
    * report memory errors as false, and the asserts abort). */
   bson_destroy (&once);
   bson_destroy (&twice);
   return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   lua_State *L = fuzz_state ();
   input_t in = {.data = data, .size = size};

   if (!bson_init_static (&in.doc, data, size)) {
      return 0;
   }
   fuzz_run (L, run_tables, &in);
   fuzz_run (L, run_views, &in);
   return 0;
}
