/*
 * bson_values-private.h - the typed-value layout shared by bson_values.c
 * (conversion, metamethods) and bson_values_new.c (constructors).
 */
#ifndef FLOWWARDEN_BSON_VALUES_PRIVATE_H
#define FLOWWARDEN_BSON_VALUES_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <bson/bson.h>
#include <lauxlib.h>
#include <lua.h>

/*
 * One layout for every type: a fixed header, then the variable bytes, so a
 * value is exactly one Lua allocation with nothing owned on the C side.
 */
typedef struct {
   uint8_t type;    /* bson_type_t; BSON_TYPE_INT64 is the explicit fw.int64 */
   uint8_t subtype; /* Binary */
   uint32_t len;    /* bytes of data[] first part: binary, code, symbol, pattern, collection */
   uint32_t len2;   /* regex options length, CodeWScope scope length */
   union {
      bson_oid_t oid; /* ObjectId, DBPointer */
      int64_t i64;    /* Date ms, Int64 */
      struct {
         uint32_t t;
         uint32_t i;
      } ts;
      bson_decimal128_t dec;
   } u;
   /* data[len] '\0' [data2[len2] '\0'] ; the NULs let C string APIs read them. */
   char data[];
} value_t;

/* Pushes a new value with its terminating NULs in place; callers fill the
 * rest. len/len2 size the data parts. May raise (memory). */
value_t *fw_bson_values_new (lua_State *L, uint8_t type, uint32_t len, uint32_t len2);

/* Returns the typed value at idx, or NULL. Allocates nothing, never raises. */
value_t *fw_bson_values_test (lua_State *L, int idx);

/* Pushes a new ObjectId value. May raise (memory). */
void fw_bson_values_push_oid (lua_State *L, const bson_oid_t *oid);

/* "object_id", "date", ...: the names `v.type` returns. */
const char *fw_bson_values_type_name (uint8_t type);

extern const luaL_Reg fw_bson_values_constructors[];

#endif
