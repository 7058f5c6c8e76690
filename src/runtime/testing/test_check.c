/*
 * test_check.c - core.check_document(value, root) for the fw.mongo test
 * fake (lua/flowwarden/testing/mongo_fake.lua): the check fw.mongo's writes
 * run on each document (bson/bson_check.h), on the document the fake was
 * given, so a write the runtime refuses is refused offline with the same
 * message.
 */
#include <lauxlib.h>

#include "bson/bson_check.h"
#include "bson/bson_lua.h"
#include "runtime/testing/test_app-private.h"

/* core.check_document(value, root) -> nil, or "<where> <problem>" (as
 * fw.mongo words it after "<method>: "). value is what the fake converted
 * already (a table or a document view); anything that is not a document
 * passes (the fake's own checks name it). A value the runtime's conversion
 * refuses (the fake's own conversion let it through) answers the
 * conversion's message, "<path>: <what>", as fw.mongo words it. */
int
fw_test__check_document (lua_State *L)
{
   const char *root = luaL_checkstring (L, 2);
   char where[512];
   fw_error_t err;
   bson_t wrap = BSON_INITIALIZER, doc;
   bson_iter_t it;
   const uint8_t *data;
   uint32_t len;
   fw_bson_text_t t = FW_BSON_TEXT_OK;

   luaL_checkany (L, 1);
   if (!fw_bson_lua_append (L, 1, &wrap, "v", 1, root, &err)) {
      bson_destroy (&wrap);
      lua_pushstring (L, err.message);
      return 1;
   }
   if (bson_iter_init_find (&it, &wrap, "v") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_iter_document (&it, &len, &data);
      t = bson_init_static (&doc, data, len) ? fw_bson_check_text (&doc, root, where, sizeof where)
                                             : FW_BSON_TEXT_CORRUPT;
   }
   bson_destroy (&wrap);
   if (t == FW_BSON_TEXT_OK) {
      lua_pushnil (L);
   } else {
      lua_pushfstring (L, "%s %s", t == FW_BSON_TEXT_CORRUPT ? root : where,
                       fw_bson_text_problem (t));
   }
   return 1;
}
