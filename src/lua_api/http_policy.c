/*
 * http_policy.c - the allow list and the link-local rule of fw.http (see
 * http_policy.h).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "lua_api/http_policy.h"

bool
fw_http_host_normalize (const char *host, char *out, size_t n)
{
   size_t len = strlen (host);

   if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
      host++;
      len -= 2;
   }
   if (len > 0 && host[len - 1] == '.') {
      len--;
   }
   if (len == 0 || len >= n) {
      return false;
   }
   for (size_t i = 0; i < len; i++) {
      out[i] = (char) tolower ((unsigned char) host[i]);
   }
   out[len] = '\0';
   return true;
}

/* "*.internal" matches every name below internal, not internal itself. */
static bool
host_matches (const char *host, const char *entry)
{
   if (entry[0] == '*' && entry[1] == '.') {
      size_t hl = strlen (host), sl = strlen (entry + 1);
      return hl > sl && strcmp (host + hl - sl, entry + 1) == 0;
   }
   return strcmp (host, entry) == 0;
}

/* The IPv4 address of addr (also inside ::ffff:a.b.c.d), or false. */
static bool
ipv4_of (const struct sockaddr *addr, uint32_t *out)
{
   if (addr->sa_family == AF_INET) {
      *out = ntohl (((const struct sockaddr_in *) addr)->sin_addr.s_addr);
      return true;
   }
   if (addr->sa_family == AF_INET6) {
      const struct in6_addr *a = &((const struct sockaddr_in6 *) addr)->sin6_addr;
      if (IN6_IS_ADDR_V4MAPPED (a)) {
         memcpy (out, a->s6_addr + 12, 4);
         *out = ntohl (*out);
         return true;
      }
   }
   return false;
}

bool
fw_http_address_is_link_local (const struct sockaddr *addr)
{
   uint32_t v4;

   if (ipv4_of (addr, &v4)) {
      return (v4 >> 16) == 0xA9FE;
   }
   if (addr->sa_family == AF_INET6) {
      const uint8_t *b = ((const struct sockaddr_in6 *) addr)->sin6_addr.s6_addr;
      return b[0] == 0xFE && (b[1] & 0xC0) == 0x80;
   }
   return false;
}

/* Whether an entry names host or addr exactly: a wildcard does not open a
 * link-local address. */
static bool
listed_explicitly (const fw_http_policy_t *p, const char *host, const struct sockaddr *addr)
{
   uint32_t v4 = 0;
   bool has_v4 = ipv4_of (addr, &v4);

   for (size_t i = 0; p->hosts && i < p->n_hosts; i++) {
      const char *e = p->hosts[i];
      struct in_addr a4;
      struct in6_addr a6;
      if (strcmp (e, host) == 0) {
         return true;
      }
      if (has_v4 && inet_pton (AF_INET, e, &a4) == 1 && ntohl (a4.s_addr) == v4) {
         return true;
      }
      if (addr->sa_family == AF_INET6 && inet_pton (AF_INET6, e, &a6) == 1 &&
          memcmp (&a6, &((const struct sockaddr_in6 *) addr)->sin6_addr, sizeof a6) == 0) {
         return true;
      }
   }
   return false;
}

fw_http_verdict_t
fw_http_policy_check (const fw_http_policy_t *p, const char *host, const struct sockaddr *addr)
{
   struct sockaddr_storage literal;
   bool allowed = !p->hosts;

   for (size_t i = 0; !allowed && i < p->n_hosts; i++) {
      allowed = host_matches (host, p->hosts[i]);
   }
   if (!allowed) {
      return FW_HTTP_DENIED_HOST;
   }
   if (!addr) {
      memset (&literal, 0, sizeof literal);
      if (inet_pton (AF_INET, host, &((struct sockaddr_in *) &literal)->sin_addr) == 1) {
         literal.ss_family = AF_INET;
      } else if (inet_pton (AF_INET6, host, &((struct sockaddr_in6 *) &literal)->sin6_addr) == 1) {
         literal.ss_family = AF_INET6;
      } else {
         return FW_HTTP_ALLOWED; /* a name: judged again once resolved */
      }
      addr = (const struct sockaddr *) &literal;
   }
   if (fw_http_address_is_link_local (addr) && !listed_explicitly (p, host, addr)) {
      return FW_HTTP_DENIED_LINK_LOCAL;
   }
   return FW_HTTP_ALLOWED;
}
