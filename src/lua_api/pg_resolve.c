/*
 * pg_resolve.c - the host names of a PostgreSQL URI looked up against a
 * deadline (see pg_lua-private.h).
 *
 * libpq resolves names with a blocking getaddrinfo inside PQconnectPoll,
 * which no socket wait can bound. So each name is looked up here
 * (host_lookup.h); then libpq gets the addresses as hostaddr, and the names
 * as host, for TLS verification, the password file and the messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_lookup.h"
#include "pg_lua-private.h"

#define MAX_HOSTS 16

/* Whether name is a socket directory (libpq's own way). */
static bool
is_socket (const char *name)
{
   return name[0] == '\0' || name[0] == '/' || name[0] == '@';
}

/* Splits list at commas into at most MAX_HOSTS entries (list is modified). */
static int
split (char *list, char **out)
{
   int n = 0;

   for (char *p = list; n < MAX_HOSTS; p++) {
      out[n++] = p;
      if (!(p = strchr (p, ','))) {
         break;
      }
      *p = '\0';
   }
   return n;
}

static const char *
option (const PQconninfoOption *opts, const char *key)
{
   for (; opts && opts->keyword; opts++) {
      if (strcmp (opts->keyword, key) == 0) {
         return opts->val;
      }
   }
   return NULL;
}

/* Appends text (after a comma) to buf of size cap: false when it is full. */
static bool
append (char *buf, size_t cap, const char *text)
{
   size_t used = strlen (buf);
   int w = snprintf (buf + used, cap - used, "%s%s", used ? "," : "", text);

   return w >= 0 && (size_t) w < cap - used;
}

/* Builds out's lists from the names and their addresses (n entries; an
 * entry with no address is an address itself). */
static bool
build (char **names, const fw_host_addrs_t *addrs, char **ports, int n, int n_ports,
       fw_pg_hosts_t *out)
{
   size_t cap = 1;
   char *host, *addr, *port;
   bool ok;

   for (int i = 0; i < n; i++) {
      cap += (size_t) FW_HOST_ADDRS_MAX * (strlen (names[i]) + INET6_ADDRSTRLEN + 16);
   }
   host = calloc (1, cap);
   addr = calloc (1, cap);
   port = calloc (1, cap);
   ok = host && addr && port;
   for (int i = 0; ok && i < n; i++) {
      int k = addrs[i].n ? addrs[i].n : 1;
      for (int j = 0; ok && j < k; j++) {
         ok = append (host, cap, names[i]) &&
              append (addr, cap, addrs[i].n ? addrs[i].addrs[j] : names[i]) &&
              (n_ports <= 1 || append (port, cap, ports[i]));
      }
   }
   if (!ok || n_ports <= 1) {
      free (port);
      port = NULL;
   }
   if (!ok) {
      free (host);
      free (addr);
      return false;
   }
   out->host = host;
   out->hostaddr = addr;
   out->port = port;
   return true;
}

/* Looks up every name of names that is not an address; false: why says
 * which failed, *io how. */
static bool
look_up_all (char **names, int n, int64_t deadline_ns, fw_host_addrs_t *addrs, fw_pg_io_t *io,
             char *why, size_t len)
{
   for (int i = 0; i < n; i++) {
      fw_host_lookup_t r;
      addrs[i].n = 0;
      if (fw_host_is_address (names[i])) {
         continue;
      }
      r = fw_host_lookup (names[i], deadline_ns, &addrs[i], why, len);
      if (r != FW_HOST_FOUND) {
         *io = r == FW_HOST_TIMEOUT ? FW_PG_TIMEOUT : FW_PG_LOST;
         return false;
      }
   }
   return true;
}

fw_pg_io_t
fw_pg_resolve (const char *uri, int64_t deadline_ns, fw_pg_hosts_t *out, char *why, size_t len)
{
   PQconninfoOption *opts = PQconninfoParse (uri, NULL);
   const char *hosts = option (opts, "host"), *ports = option (opts, "port");
   const char *hostaddr = option (opts, "hostaddr");
   char *hl = NULL, *pl = NULL, *names[MAX_HOSTS], *port_list[MAX_HOSTS];
   fw_host_addrs_t *addrs = NULL;
   int n = 0, n_ports = 0, to_look_up = 0;
   fw_pg_io_t io = FW_PG_OK;

   memset (out, 0, sizeof *out);
   /* Nothing to look up: no host (the socket), or hostaddr given. */
   if (!opts || !hosts || !*hosts || (hostaddr && *hostaddr) || !(hl = strdup (hosts)) ||
       (ports && !(pl = strdup (ports)))) {
      goto done;
   }
   n = split (hl, names);
   n_ports = pl ? split (pl, port_list) : 0;
   if (n_ports > 1 && n_ports != n) {
      goto done; /* libpq says what is wrong */
   }
   for (int i = 0; i < n; i++) {
      if (is_socket (names[i])) {
         goto done;
      }
      to_look_up += !fw_host_is_address (names[i]);
   }
   if (!to_look_up) {
      goto done;
   }
   if (!(addrs = calloc ((size_t) n, sizeof *addrs))) {
      snprintf (why, len, "out of memory");
      io = FW_PG_LOST;
      goto done;
   }
   if (look_up_all (names, n, deadline_ns, addrs, &io, why, len) &&
       !build (names, addrs, port_list, n, n_ports, out)) {
      snprintf (why, len, "out of memory");
      io = FW_PG_LOST;
   }
done:
   free (addrs);
   free (hl);
   free (pl);
   PQconninfoFree (opts);
   return io;
}

void
fw_pg_hosts_free (fw_pg_hosts_t *h)
{
   free (h->host);
   free (h->hostaddr);
   free (h->port);
   memset (h, 0, sizeof *h);
}
