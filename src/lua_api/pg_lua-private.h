/*
 * pg_lua-private.h - what the files of fw.pg share: the socket-level IO
 * bounded by a deadline (pg_conn.c) and the mapping of values between Lua
 * and PostgreSQL's text format (pg_values.c).
 */
#ifndef FLOWWARDEN_PG_LUA_PRIVATE_H
#define FLOWWARDEN_PG_LUA_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <lua.h>

#include "flowwarden/pg_io.h"

/*
 * Converts the parameters table at params_idx (absolute; nil: none) to
 * text, for fw_pg_exec: pushes a table holding the strings (keep it on the
 * stack while values is used) and a userdata array of the pointers, and
 * returns their count (the highest integer key). Raises ArgumentError for a
 * value with no text form. *values points into the userdata.
 */
int fw_pg_push_params (lua_State *L, int params_idx, const char ***values);

/* Pushes res's rows as a list of tables keyed by column name, each value
 * mapped by its column's type (docs/lua-api.md). */
void fw_pg_push_rows (lua_State *L, const PGresult *res);

#endif
