/*
 * bson_values.c - typed Lua values for the BSON types Lua lacks: conversion
 * to and from BSON elements, and the metamethods scripts see.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_values.h"
#include "bson_values-private.h"

#define VALUE_MT_NAME "flowwarden.bson_value"
#define SCOPE_READER_KEY FW_BSON_VALUES_SCOPE_READER

/* Registry keys: their addresses are the keys, the bytes are never used. */
static const char value_mt_key;
static const char null_key;

const char *
fw_bson_values_type_name (uint8_t type)
{
   switch (type) {
   case BSON_TYPE_OID:
      return "object_id";
   case BSON_TYPE_DATE_TIME:
      return "date";
   case BSON_TYPE_TIMESTAMP:
      return "timestamp";
   case BSON_TYPE_DECIMAL128:
      return "decimal128";
   case BSON_TYPE_BINARY:
      return "binary";
   case BSON_TYPE_REGEX:
      return "regex";
   case BSON_TYPE_MINKEY:
      return "min_key";
   case BSON_TYPE_MAXKEY:
      return "max_key";
   case BSON_TYPE_CODE:
      return "code";
   case BSON_TYPE_CODEWSCOPE:
      return "code_w_scope";
   case BSON_TYPE_SYMBOL:
      return "symbol";
   case BSON_TYPE_DBPOINTER:
      return "db_pointer";
   case BSON_TYPE_UNDEFINED:
      return "undefined";
   case BSON_TYPE_INT64:
      return "int64";
   default:
      return "?";
   }
}

/* Bytes of data[]: one part and its NUL, or two for Regex and CodeWScope. */
static size_t
payload_size (uint8_t type, uint32_t len, uint32_t len2)
{
   bool two = type == BSON_TYPE_REGEX || type == BSON_TYPE_CODEWSCOPE;
   return (size_t) len + 1 + (two ? (size_t) len2 + 1 : 0);
}

value_t *
fw_bson_values_new (lua_State *L, uint8_t type, uint32_t len, uint32_t len2)
{
   size_t size = payload_size (type, len, len2);
   value_t *v = lua_newuserdatauv (L, sizeof (value_t) + size, 0);

   memset (v, 0, sizeof (value_t));
   v->type = type;
   v->len = len;
   v->len2 = len2;
   v->data[len] = '\0';
   v->data[size - 1] = '\0';
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &value_mt_key) == LUA_TNIL) {
      /* Values made before fw_bson_values_open (from C) still need the metatable. */
      lua_pop (L, 1);
      fw_bson_values_open (L, 0);
      lua_rawgetp (L, LUA_REGISTRYINDEX, &value_mt_key);
   }
   lua_setmetatable (L, -2);
   return v;
}

value_t *
fw_bson_values_test (lua_State *L, int idx)
{
   value_t *v = lua_touserdata (L, idx);
   bool ok;

   if (!v || lua_islightuserdata (L, idx) || !lua_getmetatable (L, idx)) {
      return NULL;
   }
   lua_rawgetp (L, LUA_REGISTRYINDEX, &value_mt_key);
   ok = lua_rawequal (L, -1, -2);
   lua_pop (L, 2);
   return ok ? v : NULL;
}

bool
fw_bson_values_is_null (lua_State *L, int idx)
{
   bool ok;

   if (lua_type (L, idx) != LUA_TUSERDATA) {
      return false;
   }
   idx = lua_absindex (L, idx);
   lua_rawgetp (L, LUA_REGISTRYINDEX, &null_key);
   ok = lua_rawequal (L, idx, -1);
   lua_pop (L, 1);
   return ok;
}

void
fw_bson_values_push_null (lua_State *L)
{
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &null_key) == LUA_TNIL) {
      lua_pop (L, 1);
      fw_bson_values_open (L, 0);
      lua_rawgetp (L, LUA_REGISTRYINDEX, &null_key);
   }
}

/* ---- BSON -> Lua ------------------------------------------------------- */

bool
fw_bson_values_push (lua_State *L, const bson_iter_t *iter)
{
   value_t *v;
   uint32_t len, len2;
   const char *s, *s2;
   const uint8_t *bytes;
   const bson_oid_t *oid;
   bson_subtype_t subtype;

   switch (bson_iter_type (iter)) {
   case BSON_TYPE_OID:
      v = fw_bson_values_new (L, BSON_TYPE_OID, 0, 0);
      bson_oid_copy (bson_iter_oid (iter), &v->u.oid);
      return true;
   case BSON_TYPE_DATE_TIME:
      v = fw_bson_values_new (L, BSON_TYPE_DATE_TIME, 0, 0);
      v->u.i64 = bson_iter_date_time (iter);
      return true;
   case BSON_TYPE_TIMESTAMP:
      v = fw_bson_values_new (L, BSON_TYPE_TIMESTAMP, 0, 0);
      bson_iter_timestamp (iter, &v->u.ts.t, &v->u.ts.i);
      return true;
   case BSON_TYPE_DECIMAL128:
      v = fw_bson_values_new (L, BSON_TYPE_DECIMAL128, 0, 0);
      bson_iter_decimal128 (iter, &v->u.dec);
      return true;
   case BSON_TYPE_BINARY:
      bson_iter_binary (iter, &subtype, &len, &bytes);
      v = fw_bson_values_new (L, BSON_TYPE_BINARY, len, 0);
      v->subtype = (uint8_t) subtype;
      memcpy (v->data, bytes, len);
      return true;
   case BSON_TYPE_REGEX:
      s = bson_iter_regex (iter, &s2);
      len = (uint32_t) strlen (s);
      len2 = (uint32_t) strlen (s2);
      v = fw_bson_values_new (L, BSON_TYPE_REGEX, len, len2);
      memcpy (v->data, s, len);
      memcpy (v->data + len + 1, s2, len2);
      return true;
   case BSON_TYPE_CODE:
   case BSON_TYPE_SYMBOL:
      s = bson_iter_type (iter) == BSON_TYPE_CODE ? bson_iter_code (iter, &len)
                                                  : bson_iter_symbol (iter, &len);
      v = fw_bson_values_new (L, (uint8_t) bson_iter_type (iter), len, 0);
      memcpy (v->data, s, len);
      return true;
   case BSON_TYPE_CODEWSCOPE: {
      bson_t scope;
      s = bson_iter_codewscope (iter, &len, &len2, &bytes);
      /* libbson's iterator checks the scope's length, not its trailing NUL:
       * a value that could never be written back is no value. */
      if (!bson_init_static (&scope, bytes, len2)) {
         return false;
      }
      v = fw_bson_values_new (L, BSON_TYPE_CODEWSCOPE, len, len2);
      memcpy (v->data, s, len);
      memcpy (v->data + len + 1, bytes, len2);
      return true;
   }
   case BSON_TYPE_DBPOINTER:
      bson_iter_dbpointer (iter, &len, &s, &oid);
      v = fw_bson_values_new (L, BSON_TYPE_DBPOINTER, len, 0);
      memcpy (v->data, s, len);
      bson_oid_copy (oid, &v->u.oid);
      return true;
   case BSON_TYPE_UNDEFINED:
   case BSON_TYPE_MINKEY:
   case BSON_TYPE_MAXKEY:
      fw_bson_values_new (L, (uint8_t) bson_iter_type (iter), 0, 0);
      return true;
   default:
      return false;
   }
}

/* ---- Lua -> BSON ------------------------------------------------------- */

fw_bson_values_append_result_t
fw_bson_values_append (lua_State *L, int idx, bson_t *out, const char *key, int key_len)
{
   value_t *v;
   bson_t scope;
   bool ok;

   if (fw_bson_values_is_null (L, idx)) {
      return bson_append_null (out, key, key_len) ? FW_BSON_VALUES_APPENDED
                                                  : FW_BSON_VALUES_TOO_LARGE;
   }
   if (!(v = fw_bson_values_test (L, idx))) {
      return FW_BSON_VALUES_NOT_TYPED;
   }
   switch (v->type) {
   case BSON_TYPE_OID:
      ok = bson_append_oid (out, key, key_len, &v->u.oid);
      break;
   case BSON_TYPE_DATE_TIME:
      ok = bson_append_date_time (out, key, key_len, v->u.i64);
      break;
   case BSON_TYPE_TIMESTAMP:
      ok = bson_append_timestamp (out, key, key_len, v->u.ts.t, v->u.ts.i);
      break;
   case BSON_TYPE_DECIMAL128:
      ok = bson_append_decimal128 (out, key, key_len, &v->u.dec);
      break;
   case BSON_TYPE_BINARY:
      ok = bson_append_binary (out, key, key_len, (bson_subtype_t) v->subtype,
                               (const uint8_t *) v->data, v->len);
      break;
   case BSON_TYPE_REGEX:
      ok = bson_append_regex_w_len (out, key, key_len, v->data, (int) v->len, v->data + v->len + 1);
      break;
   case BSON_TYPE_CODE:
      ok = bson_append_code (out, key, key_len, v->data);
      break;
   case BSON_TYPE_CODEWSCOPE:
      ok = bson_init_static (&scope, (const uint8_t *) v->data + v->len + 1, v->len2) &&
           bson_append_code_with_scope (out, key, key_len, v->data, &scope);
      break;
   case BSON_TYPE_SYMBOL:
      ok = bson_append_symbol (out, key, key_len, v->data, (int) v->len);
      break;
   case BSON_TYPE_DBPOINTER:
      ok = bson_append_dbpointer (out, key, key_len, v->data, &v->u.oid);
      break;
   case BSON_TYPE_UNDEFINED:
      ok = bson_append_undefined (out, key, key_len);
      break;
   case BSON_TYPE_MINKEY:
      ok = bson_append_minkey (out, key, key_len);
      break;
   case BSON_TYPE_MAXKEY:
      ok = bson_append_maxkey (out, key, key_len);
      break;
   case BSON_TYPE_INT64:
      ok = bson_append_int64 (out, key, key_len, v->u.i64);
      break;
   default:
      ok = false;
      break;
   }
   return ok ? FW_BSON_VALUES_APPENDED : FW_BSON_VALUES_TOO_LARGE;
}

/* ---- metamethods ------------------------------------------------------- */

static value_t *
check_value (lua_State *L, int idx)
{
   value_t *v = fw_bson_values_test (L, idx);
   if (!v) {
      luaL_typeerror (L, idx, "BSON value");
   }
   return v;
}

/* Days since 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm). */
static void
civil_from_days (int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
   int64_t era, yoe, doy, mp;

   z += 719468;
   era = (z >= 0 ? z : z - 146096) / 146097;
   yoe = z - era * 146097;
   yoe = (yoe - yoe / 1460 + yoe / 36524 - yoe / 146096) / 365;
   doy = (z - era * 146097) - (365 * yoe + yoe / 4 - yoe / 100);
   mp = (5 * doy + 2) / 153;
   *d = (unsigned) (doy - (153 * mp + 2) / 5 + 1);
   *m = (unsigned) (mp < 10 ? mp + 3 : mp - 9);
   *y = yoe + era * 400 + (*m <= 2);
}

static void
push_date_string (lua_State *L, int64_t ms)
{
   int64_t days, rem, y;
   unsigned mo, d;
   char buf[32];

   /* Outside years 0..9999 ISO-8601 needs an extended form; print the number. */
   if (ms < -62167219200000LL || ms > 253402300799999LL) {
      lua_pushfstring (L, "Date(%I)", (lua_Integer) ms);
      return;
   }
   days = ms / 86400000;
   rem = ms % 86400000;
   if (rem < 0) {
      rem += 86400000;
      days--;
   }
   civil_from_days (days, &y, &mo, &d);
   snprintf (buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", (int) y, mo, d,
             (int) (rem / 3600000), (int) (rem / 60000 % 60), (int) (rem / 1000 % 60),
             (int) (rem % 1000));
   lua_pushstring (L, buf);
}

static void
push_base64 (lua_State *L, const uint8_t *p, size_t n)
{
   static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
   luaL_Buffer b;
   size_t i;

   luaL_buffinit (L, &b);
   for (i = 0; i + 2 < n; i += 3) {
      uint32_t w = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8 | p[i + 2];
      luaL_addchar (&b, alphabet[w >> 18 & 63]);
      luaL_addchar (&b, alphabet[w >> 12 & 63]);
      luaL_addchar (&b, alphabet[w >> 6 & 63]);
      luaL_addchar (&b, alphabet[w & 63]);
   }
   if (i < n) {
      uint32_t w = (uint32_t) p[i] << 16 | (i + 1 < n ? (uint32_t) p[i + 1] << 8 : 0);
      luaL_addchar (&b, alphabet[w >> 18 & 63]);
      luaL_addchar (&b, alphabet[w >> 12 & 63]);
      luaL_addchar (&b, i + 1 < n ? alphabet[w >> 6 & 63] : '=');
      luaL_addchar (&b, '=');
   }
   luaL_pushresult (&b);
}

static int
value_tostring (lua_State *L)
{
   value_t *v = check_value (L, 1);
   char buf[BSON_DECIMAL128_STRING > 25 ? BSON_DECIMAL128_STRING : 25];

   switch (v->type) {
   case BSON_TYPE_OID:
      bson_oid_to_string (&v->u.oid, buf);
      lua_pushstring (L, buf);
      break;
   case BSON_TYPE_DATE_TIME:
      push_date_string (L, v->u.i64);
      break;
   case BSON_TYPE_TIMESTAMP:
      lua_pushfstring (L, "Timestamp(%I, %I)", (lua_Integer) v->u.ts.t, (lua_Integer) v->u.ts.i);
      break;
   case BSON_TYPE_DECIMAL128:
      bson_decimal128_to_string (&v->u.dec, buf);
      lua_pushstring (L, buf);
      break;
   case BSON_TYPE_BINARY:
      lua_pushfstring (L, "Binary(%d, ", (int) v->subtype);
      push_base64 (L, (const uint8_t *) v->data, v->len);
      lua_pushliteral (L, ")");
      lua_concat (L, 3);
      break;
   case BSON_TYPE_REGEX:
      lua_pushfstring (L, "/%s/%s", v->data, v->data + v->len + 1);
      break;
   case BSON_TYPE_MINKEY:
      lua_pushliteral (L, "MinKey");
      break;
   case BSON_TYPE_MAXKEY:
      lua_pushliteral (L, "MaxKey");
      break;
   case BSON_TYPE_UNDEFINED:
      lua_pushliteral (L, "undefined");
      break;
   case BSON_TYPE_CODE:
   case BSON_TYPE_CODEWSCOPE:
   case BSON_TYPE_SYMBOL:
      lua_pushlstring (L, v->data, v->len);
      break;
   case BSON_TYPE_DBPOINTER:
      bson_oid_to_string (&v->u.oid, buf);
      lua_pushfstring (L, "DBPointer(%s, %s)", v->data, buf);
      break;
   case BSON_TYPE_INT64:
      lua_pushfstring (L, "%I", (lua_Integer) v->u.i64);
      break;
   default:
      lua_pushliteral (L, "?");
      break;
   }
   return 1;
}

static bool
values_equal (const value_t *a, const value_t *b)
{
   if (a->type != b->type) {
      return false;
   }
   switch (a->type) {
   case BSON_TYPE_OID:
   case BSON_TYPE_DBPOINTER:
      if (!bson_oid_equal (&a->u.oid, &b->u.oid)) {
         return false;
      }
      break;
   case BSON_TYPE_DATE_TIME:
   case BSON_TYPE_INT64:
      return a->u.i64 == b->u.i64;
   case BSON_TYPE_TIMESTAMP:
      return a->u.ts.t == b->u.ts.t && a->u.ts.i == b->u.ts.i;
   case BSON_TYPE_DECIMAL128:
      return a->u.dec.high == b->u.dec.high && a->u.dec.low == b->u.dec.low;
   case BSON_TYPE_BINARY:
      if (a->subtype != b->subtype) {
         return false;
      }
      break;
   default:
      break;
   }
   /* Variable parts, NULs included, are the rest of the identity. */
   return a->len == b->len && a->len2 == b->len2 &&
          memcmp (a->data, b->data, payload_size (a->type, a->len, a->len2)) == 0;
}

static int
value_eq (lua_State *L)
{
   value_t *a = fw_bson_values_test (L, 1);
   value_t *b = fw_bson_values_test (L, 2);
   lua_pushboolean (L, a && b && values_equal (a, b));
   return 1;
}

/* Orders two values of one ordered type, or raises like Lua does. */
static int
compare (lua_State *L)
{
   value_t *a = check_value (L, 1);
   value_t *b = check_value (L, 2);
   uint64_t x, y;

   if (a->type != b->type) {
      return luaL_error (L, "attempt to compare %s with %s", fw_bson_values_type_name (a->type),
                         fw_bson_values_type_name (b->type));
   }
   switch (a->type) {
   case BSON_TYPE_DATE_TIME:
   case BSON_TYPE_INT64:
      return a->u.i64 < b->u.i64 ? -1 : a->u.i64 > b->u.i64;
   case BSON_TYPE_TIMESTAMP:
      x = (uint64_t) a->u.ts.t << 32 | a->u.ts.i;
      y = (uint64_t) b->u.ts.t << 32 | b->u.ts.i;
      return x < y ? -1 : x > y;
   case BSON_TYPE_OID:
      return bson_oid_compare (&a->u.oid, &b->u.oid);
   default:
      return luaL_error (L, "attempt to compare two %s values", fw_bson_values_type_name (a->type));
   }
}

static int
value_lt (lua_State *L)
{
   lua_pushboolean (L, compare (L) < 0);
   return 1;
}

static int
value_le (lua_State *L)
{
   lua_pushboolean (L, compare (L) <= 0);
   return 1;
}

void
fw_bson_values_push_oid (lua_State *L, const bson_oid_t *oid)
{
   value_t *v = fw_bson_values_new (L, BSON_TYPE_OID, 0, 0);
   bson_oid_copy (oid, &v->u.oid);
}

/* Pushes field `name` of v; returns false if v's type has no such field. */
static bool
push_field (lua_State *L, value_t *v, const char *name)
{
   char buf[BSON_DECIMAL128_STRING > 25 ? BSON_DECIMAL128_STRING : 25];

   switch (v->type) {
   case BSON_TYPE_OID:
      if (!strcmp (name, "hex")) {
         bson_oid_to_string (&v->u.oid, buf);
         lua_pushlstring (L, buf, 24);
      } else if (!strcmp (name, "time")) {
         lua_pushinteger (L, (lua_Integer) bson_oid_get_time_t (&v->u.oid));
      } else {
         return false;
      }
      return true;
   case BSON_TYPE_DATE_TIME:
      if (strcmp (name, "ms") != 0) {
         return false;
      }
      lua_pushinteger (L, v->u.i64);
      return true;
   case BSON_TYPE_INT64:
      if (strcmp (name, "value") != 0) {
         return false;
      }
      lua_pushinteger (L, v->u.i64);
      return true;
   case BSON_TYPE_TIMESTAMP:
      if (!strcmp (name, "t")) {
         lua_pushinteger (L, v->u.ts.t);
      } else if (!strcmp (name, "i")) {
         lua_pushinteger (L, v->u.ts.i);
      } else {
         return false;
      }
      return true;
   case BSON_TYPE_DECIMAL128:
      if (strcmp (name, "string") != 0) {
         return false;
      }
      bson_decimal128_to_string (&v->u.dec, buf);
      lua_pushstring (L, buf);
      return true;
   case BSON_TYPE_BINARY:
      if (!strcmp (name, "subtype")) {
         lua_pushinteger (L, v->subtype);
      } else if (!strcmp (name, "data")) {
         lua_pushlstring (L, v->data, v->len);
      } else {
         return false;
      }
      return true;
   case BSON_TYPE_REGEX:
      if (!strcmp (name, "pattern")) {
         lua_pushlstring (L, v->data, v->len);
      } else if (!strcmp (name, "options")) {
         lua_pushlstring (L, v->data + v->len + 1, v->len2);
      } else {
         return false;
      }
      return true;
   case BSON_TYPE_CODE:
   case BSON_TYPE_CODEWSCOPE:
      if (!strcmp (name, "code")) {
         lua_pushlstring (L, v->data, v->len);
         return true;
      }
      if (v->type != BSON_TYPE_CODEWSCOPE || strcmp (name, "scope") != 0) {
         return false;
      }
      /* Documents are the converter's business, a layer above this one:
       * it registers its reader when it sets itself up in this state. */
      if (lua_getfield (L, LUA_REGISTRYINDEX, SCOPE_READER_KEY) != LUA_TFUNCTION) {
         luaL_error (L, "code_w_scope: no document converter in this state");
      }
      lua_pushlstring (L, v->data + v->len + 1, v->len2);
      lua_call (L, 1, 1);
      return true;
   case BSON_TYPE_SYMBOL:
      if (strcmp (name, "symbol") != 0) {
         return false;
      }
      lua_pushlstring (L, v->data, v->len);
      return true;
   case BSON_TYPE_DBPOINTER:
      if (!strcmp (name, "collection")) {
         lua_pushlstring (L, v->data, v->len);
      } else if (!strcmp (name, "id")) {
         fw_bson_values_push_oid (L, &v->u.oid);
      } else {
         return false;
      }
      return true;
   default:
      return false;
   }
}

static int
value_index (lua_State *L)
{
   value_t *v = check_value (L, 1);
   const char *name = lua_type (L, 2) == LUA_TSTRING ? lua_tostring (L, 2) : NULL;

   if (!name) {
      lua_pushnil (L);
   } else if (!strcmp (name, "type")) {
      lua_pushstring (L, fw_bson_values_type_name (v->type));
   } else if (!push_field (L, v, name)) {
      lua_pushnil (L);
   }
   return 1;
}

static int
null_tostring (lua_State *L)
{
   lua_pushliteral (L, "null");
   return 1;
}

void
fw_bson_values_open (lua_State *L, int module_idx)
{
   static const luaL_Reg value_mt[] = {
      {"__tostring", value_tostring}, {"__eq", value_eq}, {"__lt", value_lt}, {"__le", value_le},
      {"__index", value_index},       {NULL, NULL}};

   if (module_idx) {
      module_idx = lua_absindex (L, module_idx);
   }
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &value_mt_key) == LUA_TNIL) {
      lua_newtable (L);
      luaL_setfuncs (L, value_mt, 0);
      lua_pushliteral (L, VALUE_MT_NAME);
      lua_setfield (L, -2, "__name");
      /* Shared by every value: keep scripts from changing what all values do. */
      lua_pushliteral (L, VALUE_MT_NAME);
      lua_setfield (L, -2, "__metatable");
      lua_rawsetp (L, LUA_REGISTRYINDEX, &value_mt_key);

      lua_newuserdatauv (L, 0, 0);
      lua_createtable (L, 0, 3);
      lua_pushcfunction (L, null_tostring);
      lua_setfield (L, -2, "__tostring");
      lua_pushliteral (L, "flowwarden.null");
      lua_setfield (L, -2, "__name");
      lua_pushliteral (L, "flowwarden.null");
      lua_setfield (L, -2, "__metatable");
      lua_setmetatable (L, -2);
      lua_rawsetp (L, LUA_REGISTRYINDEX, &null_key);
   }
   lua_pop (L, 1);
   if (module_idx) {
      lua_pushvalue (L, module_idx);
      luaL_setfuncs (L, fw_bson_values_constructors, 0);
      lua_rawgetp (L, LUA_REGISTRYINDEX, &null_key);
      lua_setfield (L, -2, "null");
      lua_pop (L, 1);
   }
}
