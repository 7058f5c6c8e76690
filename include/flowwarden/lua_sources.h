/*
 * lua_sources.h - the Lua library (lua/ in the source tree), compiled into
 * the binary by cmake/embed_lua.cmake.
 */
#ifndef FLOWWARDEN_LUA_SOURCES_H
#define FLOWWARDEN_LUA_SOURCES_H

#include <stddef.h>

typedef struct {
   const char *module; /* "flowwarden.config"; init.lua maps to its folder */
   const char *path;   /* "flowwarden/config.lua", for chunk names */
   const char *source; /* NUL-terminated text, static storage */
   size_t length;
} fw_lua_source_t;

/* Terminated by an entry whose module is NULL. */
extern const fw_lua_source_t fw_lua_sources[];

#endif
