/*
 * http_lua.h - fw.http: HTTP and HTTPS requests from handlers, over libcurl.
 *
 * fw.http.request{...} and fw.http.get/post/put/patch/delete(url [, opts])
 * (docs/lua-api.md). The options are checked by lua/flowwarden/http.lua;
 * the C side parses the URL with libcurl's parser, applies the allow list
 * (flowwarden.config.effective_http, read at request time) and refuses
 * link-local addresses before any packet is sent, bounds the transfer by the
 * handler's remaining budget (lua_call.h) and raises typed Http.* errors.
 *
 * Each Lua state keeps one libcurl easy handle in its registry, so requests
 * of one stream reuse their connections; it is freed with the state. The
 * state's thread runs the transfer and no Lua code runs during it.
 */
#ifndef FLOWWARDEN_HTTP_LUA_H
#define FLOWWARDEN_HTTP_LUA_H

#include <lua.h>

/* Registry field of a function that answers requests instead of the
 * network (flowwarden.testing; see http_lua.c's fake_exchange). Unset in
 * run. */
#define FW_HTTP_TRANSPORT_KEY "flowwarden.http_transport"

/* Sets `http` (a table: request, get, post, put, patch, delete) in the table
 * at module_idx. Requires the module flowwarden.http. May raise (memory). */
void fw_http_lua_open (lua_State *L, int module_idx);

#endif
