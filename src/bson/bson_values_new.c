/*
 * bson_values_new.c - the constructors scripts use to make typed BSON values.
 *
 * Each validates its arguments and raises with the constructor's name and
 * what is wrong; luaL_error adds the script position of the call.
 */
#include <string.h>
#include <sys/time.h>

#include <lauxlib.h>

#include "bson_values-private.h"

/* Parses 24 hex digits at idx into oid, or raises naming the constructor. */
static void
check_oid (lua_State *L, int idx, const char *fn, bson_oid_t *oid)
{
   size_t len, i;
   const char *s;

   if (lua_type (L, idx) != LUA_TSTRING) {
      luaL_error (L, "%s: expected a string of 24 hexadecimal digits, got %s", fn,
                  luaL_typename (L, idx));
   }
   s = lua_tolstring (L, idx, &len);
   if (len != 24) {
      luaL_error (L, "%s: expected 24 hexadecimal digits, got %d characters", fn, (int) len);
   }
   for (i = 0; i < len; i++) {
      if (!strchr ("0123456789abcdefABCDEF", s[i]) || s[i] == '\0') {
         luaL_error (L, "%s: \"%s\" is not hexadecimal (character %d)", fn, s, (int) i + 1);
      }
   }
   bson_oid_init_from_string (oid, s);
}

/* Returns the integer at idx within [lo, hi], or raises naming fn and what. */
static lua_Integer
check_int (lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo, lua_Integer hi)
{
   int isint;
   lua_Integer n = lua_tointegerx (L, idx, &isint);

   if (!isint || lua_type (L, idx) != LUA_TNUMBER) {
      luaL_error (L, "%s: %s must be an integer, got %s", fn, what,
                  lua_type (L, idx) == LUA_TNUMBER ? "a non-integral number"
                                                   : luaL_typename (L, idx));
   }
   if (n < lo || n > hi) {
      luaL_error (L, "%s: %s must be an integer from %I to %I, got %I", fn, what, lo, hi, n);
   }
   return n;
}

static const char *
check_string (lua_State *L, int idx, const char *fn, const char *what, size_t *len, bool allow_nul)
{
   const char *s;

   if (lua_type (L, idx) != LUA_TSTRING) {
      luaL_error (L, "%s: %s must be a string, got %s", fn, what, luaL_typename (L, idx));
   }
   s = lua_tolstring (L, idx, len);
   if (!allow_nul && memchr (s, '\0', *len)) {
      luaL_error (L, "%s: %s must not contain a NUL byte", fn, what);
   }
   if (*len > UINT32_MAX / 2) {
      luaL_error (L, "%s: %s is too long", fn, what);
   }
   return s;
}

static int
new_object_id (lua_State *L)
{
   bson_oid_t oid;

   if (lua_isnoneornil (L, 1)) {
      bson_oid_init (&oid, NULL);
   } else {
      check_oid (L, 1, "object_id", &oid);
   }
   fw_bson_values_push_oid (L, &oid);
   return 1;
}

static int
new_date (lua_State *L)
{
   value_t *v;
   lua_Integer ms;
   struct timeval tv;

   if (lua_isnoneornil (L, 1)) {
      gettimeofday (&tv, NULL);
      ms = (lua_Integer) tv.tv_sec * 1000 + tv.tv_usec / 1000;
   } else {
      ms = check_int (L, 1, "date", "milliseconds since the epoch", LUA_MININTEGER, LUA_MAXINTEGER);
   }
   v = fw_bson_values_new (L, BSON_TYPE_DATE_TIME, 0, 0);
   v->u.i64 = ms;
   return 1;
}

static int
new_timestamp (lua_State *L)
{
   lua_Integer t = check_int (L, 1, "timestamp", "t", 0, UINT32_MAX);
   lua_Integer i = check_int (L, 2, "timestamp", "i", 0, UINT32_MAX);
   value_t *v = fw_bson_values_new (L, BSON_TYPE_TIMESTAMP, 0, 0);

   v->u.ts.t = (uint32_t) t;
   v->u.ts.i = (uint32_t) i;
   return 1;
}

static int
new_decimal128 (lua_State *L)
{
   size_t len;
   const char *s = check_string (L, 1, "decimal128", "the value", &len, false);
   bson_decimal128_t dec;
   value_t *v;

   if (!bson_decimal128_from_string_w_len (s, (int) len, &dec)) {
      return luaL_error (L, "decimal128: \"%s\" is not a decimal number", s);
   }
   v = fw_bson_values_new (L, BSON_TYPE_DECIMAL128, 0, 0);
   v->u.dec = dec;
   return 1;
}

static int
new_binary (lua_State *L)
{
   size_t len;
   const char *s = check_string (L, 1, "binary", "data", &len, true);
   lua_Integer subtype = lua_isnoneornil (L, 2) ? 0 : check_int (L, 2, "binary", "subtype", 0, 255);
   value_t *v = fw_bson_values_new (L, BSON_TYPE_BINARY, (uint32_t) len, 0);

   v->subtype = (uint8_t) subtype;
   memcpy (v->data, s, len);
   return 1;
}

static int
new_regex (lua_State *L)
{
   size_t len, len2 = 0, i;
   const char *s = check_string (L, 1, "regex", "pattern", &len, false);
   const char *o = lua_isnoneornil (L, 2) ? ""
                                          : check_string (L, 2, "regex", "options", &len2, false);
   value_t *v;

   for (i = 0; i < len2; i++) {
      if (!strchr ("ilmsux", o[i])) {
         return luaL_error (L, "regex: unknown option '%c' (valid options: i, l, m, s, u, x)",
                            o[i]);
      }
   }
   v = fw_bson_values_new (L, BSON_TYPE_REGEX, (uint32_t) len, (uint32_t) len2);
   memcpy (v->data, s, len);
   memcpy (v->data + len + 1, o, len2);
   return 1;
}

static int
new_text_value (lua_State *L, uint8_t type, const char *fn, bool allow_nul)
{
   size_t len;
   const char *s = check_string (L, 1, fn, "the text", &len, allow_nul);
   value_t *v = fw_bson_values_new (L, type, (uint32_t) len, 0);

   memcpy (v->data, s, len);
   return 1;
}

static int
new_code (lua_State *L)
{
   return new_text_value (L, BSON_TYPE_CODE, "code", false);
}

static int
new_symbol (lua_State *L)
{
   return new_text_value (L, BSON_TYPE_SYMBOL, "symbol", true);
}

static int
new_db_pointer (lua_State *L)
{
   size_t len;
   const char *coll = check_string (L, 1, "db_pointer", "collection", &len, false);
   bson_oid_t oid;
   value_t *v;

   check_oid (L, 2, "db_pointer", &oid);
   v = fw_bson_values_new (L, BSON_TYPE_DBPOINTER, (uint32_t) len, 0);
   memcpy (v->data, coll, len);
   bson_oid_copy (&oid, &v->u.oid);
   return 1;
}

static int
new_min_key (lua_State *L)
{
   fw_bson_values_new (L, BSON_TYPE_MINKEY, 0, 0);
   return 1;
}

static int
new_max_key (lua_State *L)
{
   fw_bson_values_new (L, BSON_TYPE_MAXKEY, 0, 0);
   return 1;
}

static int
new_undefined (lua_State *L)
{
   fw_bson_values_new (L, BSON_TYPE_UNDEFINED, 0, 0);
   return 1;
}

static int
new_int64 (lua_State *L)
{
   lua_Integer n = check_int (L, 1, "int64", "the value", LUA_MININTEGER, LUA_MAXINTEGER);
   value_t *v = fw_bson_values_new (L, BSON_TYPE_INT64, 0, 0);

   v->u.i64 = n;
   return 1;
}

const luaL_Reg fw_bson_values_constructors[] = {{"object_id", new_object_id},
                                                {"date", new_date},
                                                {"timestamp", new_timestamp},
                                                {"decimal128", new_decimal128},
                                                {"binary", new_binary},
                                                {"regex", new_regex},
                                                {"min_key", new_min_key},
                                                {"max_key", new_max_key},
                                                {"code", new_code},
                                                {"symbol", new_symbol},
                                                {"db_pointer", new_db_pointer},
                                                {"undefined", new_undefined},
                                                {"int64", new_int64},
                                                {NULL, NULL}};
