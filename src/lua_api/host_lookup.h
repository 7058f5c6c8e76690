/*
 * host_lookup.h - a host name looked up against a deadline, for the stores
 * whose client libraries resolve names with a blocking getaddrinfo (libpq,
 * hiredis): the caller then connects to the addresses.
 */
#ifndef FLOWWARDEN_HOST_LOOKUP_H
#define FLOWWARDEN_HOST_LOOKUP_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FW_HOST_ADDRS_MAX 8 /* kept per name, in getaddrinfo's order */

typedef struct {
   int n;
   char addrs[FW_HOST_ADDRS_MAX][INET6_ADDRSTRLEN]; /* numeric text */
} fw_host_addrs_t;

typedef enum {
   FW_HOST_FOUND,   /* out holds at least one address */
   FW_HOST_TIMEOUT, /* the deadline came first (the lookup ends on its own) */
   FW_HOST_FAILED,  /* the name did not resolve, or no thread: why says so */
} fw_host_lookup_t;

/* Looks host up in a thread of its own, waiting until deadline_ns
 * (CLOCK_MONOTONIC). why (len bytes) names the host on failure. */
fw_host_lookup_t fw_host_lookup (const char *host, int64_t deadline_ns, fw_host_addrs_t *out,
                                 char *why, size_t len);

/* Whether name is an IPv4 or IPv6 address (nothing to look up). */
bool fw_host_is_address (const char *name);

#endif
