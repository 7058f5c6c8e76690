/*
 * http_policy.h - where fw.http may connect: the allow list of
 * fw.defaults { http = { allow_hosts = ... } } and the link-local rule.
 *
 * Pure functions over borrowed strings and socket addresses: no Lua, no
 * libcurl, no allocation, safe to call from libcurl's callbacks.
 *
 * - Without an allow list every host is allowed; with one, a host must equal
 *   an entry ("hooks.example", "10.0.0.7", "::1") or lie below a wildcard
 *   entry ("*.internal" matches "a.internal" and "a.b.internal", not
 *   "internal").
 * - Link-local addresses (169.254.0.0/16, fe80::/10, also IPv4-mapped) are
 *   refused unless the host or the address is an entry itself, so the cloud
 *   metadata service 169.254.169.254 is out of reach by default.
 */
#ifndef FLOWWARDEN_HTTP_POLICY_H
#define FLOWWARDEN_HTTP_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Host names and entries are compared after fw_http_host_normalize. */
#define FW_HTTP_HOST_MAX 256

typedef struct {
   const char *const *hosts; /* normalized entries, borrowed; NULL: no allow list */
   size_t n_hosts;
} fw_http_policy_t;

typedef enum {
   FW_HTTP_ALLOWED = 0,
   FW_HTTP_DENIED_HOST,      /* the host is not in the allow list */
   FW_HTTP_DENIED_LINK_LOCAL /* the address is link-local and not listed */
} fw_http_verdict_t;

/* Lower-cases host into out (n bytes) without [brackets] or a trailing dot.
 * Returns false when the result is empty or does not fit. */
bool fw_http_host_normalize (const char *host, char *out, size_t n);

/* The verdict on connecting to host (normalized) at address addr. addr NULL
 * judges the host alone, and then a host that is a literal address is
 * judged as that address. */
fw_http_verdict_t fw_http_policy_check (const fw_http_policy_t *policy, const char *host,
                                        const struct sockaddr *addr);

/* True for 169.254.0.0/16, fe80::/10 and ::ffff:169.254.0.0/112. */
bool fw_http_address_is_link_local (const struct sockaddr *addr);

#endif
