/*
 * redis_lua.h - fw.redis: commands and pipelines to a Redis server from
 * handlers, over hiredis.
 *
 * fw.redis.call(conn, command, args...) and fw.redis.pipeline(conn,
 * { {command, args...}, ... }) (docs/lua-api.md). conn names a connection
 * declared with fw.connection { uri = "redis://..." }; its parts come from
 * flowwarden.config.store_connection. Each Lua state (one per stream
 * thread) keeps one connection per name in its registry, opened on first
 * use, dropped after any network failure or timeout and opened again by the
 * next call; it is closed with the state. Every wait is bounded by the
 * handler's remaining budget (lua_call.h). Failures raise typed errors:
 * Redis.Connection, Redis.Timeout, Redis.ReadOnly, Redis.Error (with
 * fields.prefix, the first word of the server's error reply).
 */
#ifndef FLOWWARDEN_REDIS_LUA_H
#define FLOWWARDEN_REDIS_LUA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Sets `redis` (a table: call, pipeline) in the table at module_idx. May
 * raise (memory). */
void fw_redis_lua_open (lua_State *L, int module_idx);

/* For `doctor`: connects to the Redis connection name declared by the
 * script loaded in L (AUTH and SELECT as its URI says) and sends PING,
 * within timeout_ms. False with why (len bytes; never the password) when
 * that fails. */
bool fw_redis_lua_probe (lua_State *L, const char *name, int64_t timeout_ms, char *why, size_t len);

#endif
