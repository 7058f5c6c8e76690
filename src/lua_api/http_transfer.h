/*
 * http_transfer.h - one HTTP exchange over libcurl, for fw.http. No Lua.
 *
 * A session is one libcurl easy handle: its connection cache keeps
 * connections alive from one transfer to the next. A transfer holds what one
 * request needs (the parsed URL, the header list, the response body), so a
 * caller that may longjmp can own it from a Lua userdata and free it on any
 * path. Neither type is thread-safe: a session serves one thread at a time.
 *
 * The policy (http_policy.h) is applied twice: to the URL's host before
 * anything is sent, and to every address libcurl is about to connect to
 * (redirects included), before the socket exists.
 */
#ifndef FLOWWARDEN_HTTP_TRANSFER_H
#define FLOWWARDEN_HTTP_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lua_api/http_policy.h"

typedef struct fw_http_session fw_http_session_t;
typedef struct fw_http_transfer fw_http_transfer_t;

/* Every string is borrowed and must live until the last perform returns. */
typedef struct {
   const char *method; /* "GET", "HEAD", "POST", ... (upper case) */
   const char *url;
   const char *body; /* NULL: none */
   size_t body_len;
   const char *ca_file;        /* NULL: the system's CA bundle */
   int64_t connect_timeout_ms; /* 0: bounded by the timeout only */
   size_t max_body;            /* larger response bodies fail with Http.TooLarge */
   bool follow_redirects, verify_tls;
} fw_http_request_t;

typedef struct {
   const char *type; /* "Http.Timeout", "Http.Denied", ..., "ArgumentError"; NULL: out of memory */
   char message[1024];
} fw_http_failure_t;

/* A new session (initializing libcurl once per process), or NULL when
 * memory or libcurl's initialization failed. */
fw_http_session_t *fw_http_session_new (void);

/* Closes the session's connections. NULL is a no-op. */
void fw_http_session_destroy (fw_http_session_t *session);

/* A new transfer, or NULL when out of memory. */
fw_http_transfer_t *fw_http_transfer_new (void);

/* NULL is a no-op. Never touches a session. */
void fw_http_transfer_destroy (fw_http_transfer_t *t);

/*
 * Parses rq->url with libcurl's parser (http:// and https:// only) and
 * judges its host under policy (borrowed, like rq, until the last perform
 * returns). call names the Lua function in argument errors.
 */
bool fw_http_transfer_prepare (fw_http_transfer_t *t, const char *call, const fw_http_request_t *rq,
                               const fw_http_policy_t *policy, fw_http_failure_t *failure);

/* "GET http://host:port/path", without user info, query or fragment: what
 * logs and messages may show. Owned by t; valid until it is destroyed. */
const char *fw_http_transfer_target (const fw_http_transfer_t *t);

/* Appends a "Name: value" header line (copied). False when out of memory. */
bool fw_http_transfer_add_header (fw_http_transfer_t *t, const char *line);

/*
 * Runs the prepared transfer on session, within timeout_ms; budget_bound
 * (the handler's budget set that limit) only words the timeout message.
 * Blocks the thread, runs no Lua, and raises no signal.
 */
bool fw_http_transfer_perform (fw_http_transfer_t *t, fw_http_session_t *session, long timeout_ms,
                               bool budget_bound, fw_http_failure_t *failure);

/* After a successful perform: the final response's status, and its body
 * (owned by t until fw_http_transfer_drop_body or destroy; never NULL). */
long fw_http_transfer_status (const fw_http_transfer_t *t);
const char *fw_http_transfer_body (const fw_http_transfer_t *t, size_t *len);
void fw_http_transfer_drop_body (fw_http_transfer_t *t);

/* Iterates the final response's headers: *iter starts NULL; name and value
 * are valid until the next call or the session's next transfer. */
bool fw_http_transfer_next_header (fw_http_transfer_t *t, void **iter, const char **name,
                                   const char **value);

#endif
