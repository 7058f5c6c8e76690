/* Unit tests for the lazy document views handed to handlers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"

/* A state with `doc` (a view of a document owned by an anchor userdata) and
 * `fw` (the value constructors plus fw.table) as globals. */
static lua_State *
state_with_doc (const bson_t *doc)
{
   lua_State *L = luaL_newstate ();
   uint8_t *copy;

   luaL_openlibs (L);
   lua_newtable (L);
   fw_bson_lua_open (L, -1);
   fw_bson_view_open (L, -1);
   lua_setglobal (L, "fw");
   copy = lua_newuserdatauv (L, doc->len, 0);
   memcpy (copy, bson_get_data (doc), doc->len);
   fw_bson_view_push (L, -1, copy, doc->len, false);
   lua_setglobal (L, "doc");
   lua_pop (L, 1); /* the anchor lives on through the view */
   return L;
}

static bson_t *
sample (void)
{
   bson_oid_t oid;
   bson_oid_init_from_string (&oid, "64f1a2b3c4d5e6f7a8b9c0d1");
   return BCON_NEW ("_id", BCON_OID (&oid), "status", "PAID", "total", BCON_DOUBLE (99.5), "qty",
                    BCON_INT32 (3), "big", BCON_INT64 (INT64_MAX), "ok", BCON_BOOL (true), "none",
                    BCON_NULL, "customer", "{", "name", "Ada", "address", "{", "city", "Paris", "}",
                    "}", "items", "[", "{", "sku", "A1", "price", BCON_DOUBLE (10.0), "}", "{",
                    "sku", "B2", "price", BCON_DOUBLE (20.0), "}", "]", "tags", "[", "]");
}

/* Runs chunk; fails the test with Lua's message if it raises. */
static void
run (lua_State *L, const char *chunk)
{
   if (luaL_dostring (L, chunk) != LUA_OK) {
      fail_msg ("%s", lua_tostring (L, -1));
   }
}

static void
bson_view_reads_fields_like_a_table (void **state)
{
   bson_t *d = sample ();
   lua_State *L = state_with_doc (d);
   (void) state;
   run (L,
        "assert(doc.status == 'PAID' and doc.total == 99.5 and doc.qty == 3)\n"
        "assert(math.type(doc.qty) == 'integer' and math.type(doc.total) == 'float')\n"
        "assert(doc.big == math.maxinteger and doc.ok == true and doc.none == fw.null)\n"
        "assert(doc.customer.address.city == 'Paris')\n"
        "assert(doc.items[2].sku == 'B2' and doc.items[3] == nil and doc.missing == nil)\n"
        "assert(tostring(doc._id) == '64f1a2b3c4d5e6f7a8b9c0d1')\n"
        "assert(#doc.items == 2 and #doc.tags == 0 and #doc == 0)\n");
   lua_close (L);
   bson_destroy (d);
}

static void
bson_view_iterates_with_pairs_and_ipairs_in_bson_order (void **state)
{
   bson_t *d = sample ();
   lua_State *L = state_with_doc (d);
   (void) state;
   run (L,
        "local keys = {}\n"
        "for k in pairs(doc) do keys[#keys + 1] = k end\n"
        "assert(table.concat(keys, ',') == "
        "'_id,status,total,qty,big,ok,none,customer,items,tags', table.concat(keys, ','))\n"
        "local skus = {}\n"
        "for i, item in ipairs(doc.items) do skus[i] = item.sku end\n"
        "assert(skus[1] == 'A1' and skus[2] == 'B2' and #skus == 2)\n"
        "local n = 0 for i, v in pairs(doc.items) do n = n + i end\n"
        "assert(n == 3)\n");
   lua_close (L);
   bson_destroy (d);
}

/* Array lookups go on from the last element read: any order of indexes
 * must still give each index its own element. */
static void
bson_view_array_index_in_any_order (void **state)
{
   bson_t *d = BCON_NEW ("a", "[", BCON_INT32 (10), BCON_INT32 (20), BCON_INT32 (30),
                         BCON_INT32 (40), "]", "k", "first", "k", "second");
   lua_State *L = state_with_doc (d);
   (void) state;
   run (L,
        "local a = doc.a\n"
        "for i = 1, 4 do assert(a[i] == i * 10, i) end\n"
        "assert(a[5] == nil and a[4] == 40)\n"
        "for i = 4, 1, -1 do assert(a[i] == i * 10, i) end\n"
        "assert(a[3] == 30 and a[1] == 10 and a[4] == 40 and a[2] == 20)\n"
        "assert(a[0] == nil and a[-1] == nil and a[2.5] == nil and a.x == nil)\n"
        "assert(a[2] == 20 and a[100] == nil and a[3] == 30)\n"
        /* a key twice in a document (valid BSON): the first wins, whatever
            * was read before */
        "assert(doc.k == 'first' and doc.a[1] == 10 and doc.k == 'first')\n");
   lua_close (L);
   bson_destroy (d);
}

static void
bson_view_is_read_only_and_fw_table_gives_a_mutable_copy (void **state)
{
   bson_t *d = sample ();
   lua_State *L = state_with_doc (d);
   (void) state;
   run (L,
        "local ok, err = pcall(function() doc.status = 'x' end)\n"
        "assert(not ok and err:find('read%-only; use fw.table'), err)\n"
        "local t = fw.table(doc)\n"
        "t.status = 'SHIPPED'\n"
        "assert(type(t) == 'table' and t.status == 'SHIPPED' and doc.status == 'PAID')\n"
        "assert(t.customer.address.city == 'Paris' and #t.items == 2)\n"
        "assert(fw.table(42) == 42)\n");
   lua_close (L);
   bson_destroy (d);
}

/* Shared substructures and equality: two reads of one subdocument are
 * equal; a view goes back to BSON as the bytes it came from. */
static void
bson_view_round_trips_byte_identical (void **state)
{
   bson_t *d = sample ();
   lua_State *L = state_with_doc (d);
   bson_t out = BSON_INITIALIZER;
   bson_t expected = BSON_INITIALIZER;
   bson_iter_t it;
   fw_error_t err;
   (void) state;

   run (L,
        "assert(doc.customer == doc.customer and doc.items[1] ~= doc.items[2])\n"
        "wrapped = { whole = doc, items = doc.items }\n");
   lua_getglobal (L, "wrapped");
   assert_true (fw_bson_lua_to_bson (L, -1, "wrapped", &out, &err));
   /* keys of a table built in Lua come out sorted: items, whole */
   assert_true (bson_iter_init_find (&it, d, "items"));
   bson_append_iter (&expected, "items", -1, &it);
   BSON_APPEND_DOCUMENT (&expected, "whole", d);
   assert_int_equal (out.len, expected.len);
   assert_memory_equal (bson_get_data (&out), bson_get_data (&expected), out.len);
   bson_destroy (&out);
   bson_destroy (&expected);
   lua_close (L);
   bson_destroy (d);
}

/* A view kept after the data it was made from is gone still reads: it owns
 * its bytes through the anchor. */
static void
bson_view_outlives_its_source (void **state)
{
   bson_t *d = sample ();
   lua_State *L = state_with_doc (d);
   (void) state;
   bson_destroy (d); /* the view reads the anchor's copy, not d */
   run (L,
        "kept = doc.customer\n doc = nil\n collectgarbage()\n collectgarbage()\n"
        "assert(kept.address.city == 'Paris' and kept.name == 'Ada')\n");
   lua_close (L);
}

/* A view that owns its bytes (as ctx:full_document()'s does) anchors the
 * views nested in it, whether read by field or by pairs: they are views like
 * any other and still read after the root is gone. */
static void
bson_view_nested_in_an_owning_view_outlive_it (void **state)
{
   bson_t *d = sample ();
   lua_State *L = luaL_newstate ();
   (void) state;

   luaL_openlibs (L);
   lua_newtable (L);
   fw_bson_lua_open (L, -1);
   fw_bson_view_open (L, -1);
   lua_setglobal (L, "fw");
   fw_bson_view_push_copy (L, bson_get_data (d), d->len, false);
   lua_setglobal (L, "doc");
   bson_destroy (d);
   run (L,
        "local mt = getmetatable(doc)\n"
        "by_field = doc.customer.address\n"
        "for k, v in pairs(doc) do if k == 'items' then by_pairs = v end end\n"
        "for _, v in pairs(by_pairs) do if v.sku == 'B2' then item = v end end\n"
        "doc = nil\n collectgarbage()\n collectgarbage()\n"
        "assert(by_field.city == 'Paris' and item.price == 20.0 and #by_pairs == 2)\n"
        "assert(getmetatable(by_field) == mt and getmetatable(item) == mt)\n"
        "assert(fw.table(item).sku == 'B2')\n"
        "assert(not pcall(function() by_field.city = 'Lyon' end))\n");
   lua_close (L);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (bson_view_reads_fields_like_a_table),
      cmocka_unit_test (bson_view_iterates_with_pairs_and_ipairs_in_bson_order),
      cmocka_unit_test (bson_view_array_index_in_any_order),
      cmocka_unit_test (bson_view_is_read_only_and_fw_table_gives_a_mutable_copy),
      cmocka_unit_test (bson_view_round_trips_byte_identical),
      cmocka_unit_test (bson_view_outlives_its_source),
      cmocka_unit_test (bson_view_nested_in_an_owning_view_outlive_it),
   };
   return cmocka_run_group_tests_name ("bson_view", tests, NULL, NULL);
}
