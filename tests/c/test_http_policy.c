/* Unit tests for fw.http's allow list and link-local rule (http_policy.h):
 * the cases the integration test cannot reach without sending packets
 * beyond 127.0.0.1 (a name that resolves to a link-local address, allowed
 * wildcard names). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <cmocka.h>

#include "lua_api/http_policy.h"

/* ip as a socket address (v4 or v6). */
static const struct sockaddr *
addr_of (const char *ip, struct sockaddr_storage *ss)
{
   memset (ss, 0, sizeof *ss);
   if (inet_pton (AF_INET, ip, &((struct sockaddr_in *) ss)->sin_addr) == 1) {
      ss->ss_family = AF_INET;
   } else {
      assert_int_equal (inet_pton (AF_INET6, ip, &((struct sockaddr_in6 *) ss)->sin6_addr), 1);
      ss->ss_family = AF_INET6;
   }
   return (const struct sockaddr *) ss;
}

static fw_http_verdict_t
check (const char *const *hosts, size_t n, const char *host, const char *ip)
{
   fw_http_policy_t p = {hosts, n};
   struct sockaddr_storage ss;
   return fw_http_policy_check (&p, host, ip ? addr_of (ip, &ss) : NULL);
}

static void
http_policy_without_list_allows_every_host_but_link_local (void **state)
{
   (void) state;
   assert_int_equal (check (NULL, 0, "hooks.example", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (NULL, 0, "hooks.example", "93.184.216.34"), FW_HTTP_ALLOWED);
   assert_int_equal (check (NULL, 0, "127.0.0.1", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (NULL, 0, "169.254.169.254", NULL), FW_HTTP_DENIED_LINK_LOCAL);
   assert_int_equal (check (NULL, 0, "metadata.example", "169.254.169.254"),
                     FW_HTTP_DENIED_LINK_LOCAL);
}

static void
http_policy_wildcard_matches_subdomains_only (void **state)
{
   static const char *const list[] = {"hooks.example", "*.internal"};
   (void) state;
   assert_int_equal (check (list, 2, "hooks.example", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (list, 2, "a.internal", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (list, 2, "a.b.internal", "10.0.0.7"), FW_HTTP_ALLOWED);
   assert_int_equal (check (list, 2, "internal", NULL), FW_HTTP_DENIED_HOST);
   assert_int_equal (check (list, 2, "xinternal", NULL), FW_HTTP_DENIED_HOST);
   assert_int_equal (check (list, 2, "a.internal.example", NULL), FW_HTTP_DENIED_HOST);
   assert_int_equal (check (list, 2, "www.hooks.example", NULL), FW_HTTP_DENIED_HOST);
   assert_int_equal (check (list, 2, "127.0.0.1", NULL), FW_HTTP_DENIED_HOST);
}

static void
http_policy_link_local_needs_an_explicit_entry (void **state)
{
   static const char *const wildcard[] = {"*.internal"};
   static const char *const by_name[] = {"meta.internal"};
   static const char *const by_ip[] = {"*.internal", "169.254.169.254"};
   static const char *const by_ip6[] = {"fe80::1"};
   (void) state;
   /* A name the wildcard allows still may not resolve to link-local. */
   assert_int_equal (check (wildcard, 1, "meta.internal", "169.254.169.254"),
                     FW_HTTP_DENIED_LINK_LOCAL);
   assert_int_equal (check (by_name, 1, "meta.internal", "169.254.169.254"), FW_HTTP_ALLOWED);
   assert_int_equal (check (by_ip, 2, "meta.internal", "169.254.169.254"), FW_HTTP_ALLOWED);
   assert_int_equal (check (by_ip, 2, "meta.internal", "169.254.169.253"),
                     FW_HTTP_DENIED_LINK_LOCAL);
   assert_int_equal (check (by_ip, 2, "169.254.169.254", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (by_ip6, 1, "fe80::1", NULL), FW_HTTP_ALLOWED);
   assert_int_equal (check (by_ip6, 1, "fe80::2", NULL), FW_HTTP_DENIED_HOST);
}

static void
http_policy_link_local_ranges (void **state)
{
   struct sockaddr_storage ss;
   static const char *const in[] = {"169.254.0.0", "169.254.255.255", "fe80::1", "febf::1",
                                    "::ffff:169.254.169.254"};
   static const char *const out[] = {"169.253.255.255",  "169.255.0.0", "fec0::1",
                                     "fe7f::1",          "::1",         "127.0.0.1",
                                     "::ffff:127.0.0.1", "10.0.0.1"};
   (void) state;
   for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
      assert_true (fw_http_address_is_link_local (addr_of (in[i], &ss)));
   }
   for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) {
      assert_false (fw_http_address_is_link_local (addr_of (out[i], &ss)));
   }
}

static void
http_policy_normalize_host (void **state)
{
   char out[FW_HTTP_HOST_MAX], long_host[FW_HTTP_HOST_MAX + 1];
   (void) state;
   assert_true (fw_http_host_normalize ("Hooks.Example.", out, sizeof out));
   assert_string_equal (out, "hooks.example");
   assert_true (fw_http_host_normalize ("[FE80::1]", out, sizeof out));
   assert_string_equal (out, "fe80::1");
   assert_false (fw_http_host_normalize ("", out, sizeof out));
   assert_false (fw_http_host_normalize ("[]", out, sizeof out));
   memset (long_host, 'a', FW_HTTP_HOST_MAX);
   long_host[FW_HTTP_HOST_MAX] = '\0';
   assert_false (fw_http_host_normalize (long_host, out, sizeof out));
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (http_policy_without_list_allows_every_host_but_link_local),
      cmocka_unit_test (http_policy_wildcard_matches_subdomains_only),
      cmocka_unit_test (http_policy_link_local_needs_an_explicit_entry),
      cmocka_unit_test (http_policy_link_local_ranges),
      cmocka_unit_test (http_policy_normalize_host),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
