/*
 * pg_resolve.c - the host names of a PostgreSQL URI looked up against a
 * deadline (see pg_lua-private.h).
 *
 * libpq resolves names with a blocking getaddrinfo inside PQconnectPoll,
 * which no socket wait can bound. So each name is looked up here, in a
 * thread of its own, while the caller waits on a condition variable until
 * its deadline; then libpq gets the addresses as hostaddr (and the names as
 * host, for TLS verification, the password file and the messages). A lookup
 * still running at the deadline is left to finish on its own: whichever of
 * the thread and the caller lets go last frees it.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "pg_lua-private.h"

#define MAX_HOSTS 16
#define MAX_ADDRS 8 /* per name: libpq tries each in turn */

typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t cond;
   int refs; /* the thread and the caller */
   bool done;
   int rc;   /* getaddrinfo's */
   int n;
   char addrs[MAX_ADDRS][INET6_ADDRSTRLEN];
   char host[]; /* the name */
} lookup_t;

static void
lookup_release (lookup_t *l)
{
   bool last;

   pthread_mutex_lock (&l->mu);
   last = --l->refs == 0;
   pthread_mutex_unlock (&l->mu);
   if (last) {
      pthread_mutex_destroy (&l->mu);
      pthread_cond_destroy (&l->cond);
      free (l);
   }
}

static void *
lookup_run (void *arg)
{
   lookup_t *l = arg;
   struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC };
   struct addrinfo *res = NULL;
   int rc = getaddrinfo (l->host, NULL, &hints, &res);

   pthread_mutex_lock (&l->mu);
   l->rc = rc;
   for (struct addrinfo *a = res; rc == 0 && a && l->n < MAX_ADDRS; a = a->ai_next) {
      const void *src = a->ai_family == AF_INET
                           ? (const void *) &((struct sockaddr_in *) a->ai_addr)->sin_addr
                           : (const void *) &((struct sockaddr_in6 *) a->ai_addr)->sin6_addr;
      if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
          inet_ntop (a->ai_family, src, l->addrs[l->n], sizeof l->addrs[0])) {
         l->n++;
      }
   }
   l->done = true;
   pthread_cond_signal (&l->cond);
   pthread_mutex_unlock (&l->mu);
   if (res) {
      freeaddrinfo (res);
   }
   lookup_release (l);
   return NULL;
}

/* Starts looking host up; NULL when no thread could be started. */
static lookup_t *
lookup_start (const char *host)
{
   size_t len = strlen (host);
   lookup_t *l = calloc (1, sizeof *l + len + 1);
   pthread_condattr_t ca;
   pthread_attr_t ta;
   pthread_t t;
   bool started;

   if (!l) {
      return NULL;
   }
   memcpy (l->host, host, len + 1);
   pthread_mutex_init (&l->mu, NULL);
   pthread_condattr_init (&ca);
   pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
   pthread_cond_init (&l->cond, &ca);
   pthread_condattr_destroy (&ca);
   l->refs = 2;
   pthread_attr_init (&ta);
   pthread_attr_setdetachstate (&ta, PTHREAD_CREATE_DETACHED);
   started = pthread_create (&t, &ta, lookup_run, l) == 0;
   pthread_attr_destroy (&ta);
   if (!started) {
      l->refs = 1;
      lookup_release (l);
      return NULL;
   }
   return l;
}

/* Waits until l is done or deadline_ns (CLOCK_MONOTONIC); true: done. */
static bool
lookup_wait (lookup_t *l, int64_t deadline_ns)
{
   struct timespec until = { .tv_sec = deadline_ns / 1000000000,
                             .tv_nsec = deadline_ns % 1000000000 };
   bool done;

   pthread_mutex_lock (&l->mu);
   while (!l->done && fw_mono_ns () < deadline_ns) {
      (void) pthread_cond_timedwait (&l->cond, &l->mu, &until);
   }
   done = l->done;
   pthread_mutex_unlock (&l->mu);
   return done;
}

/* Whether name is an address libpq uses as is (or a socket directory). */
static bool
is_literal (const char *name)
{
   unsigned char buf[sizeof (struct in6_addr)];

   return name[0] == '\0' || name[0] == '/' || name[0] == '@' ||
          inet_pton (AF_INET, name, buf) == 1 || inet_pton (AF_INET6, name, buf) == 1;
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

/* Appends text and a comma to buf (of size cap): false when it is full. */
static bool
append (char *buf, size_t cap, const char *text)
{
   size_t used = strlen (buf);
   int w = snprintf (buf + used, cap - used, "%s%s", used ? "," : "", text);

   return w >= 0 && (size_t) w < cap - used;
}

/* Builds out's lists from the names and their lookups (n entries). */
static bool
build (char **names, lookup_t **lookups, char **ports, int n, int n_ports, fw_pg_hosts_t *out)
{
   size_t cap = (size_t) n * MAX_ADDRS * (INET6_ADDRSTRLEN + 256) + 1;
   char *host = calloc (1, cap), *addr = calloc (1, cap), *port = calloc (1, cap);
   bool ok = host && addr && port;

   for (int i = 0; ok && i < n; i++) {
      int k = lookups[i] ? lookups[i]->n : 1;
      for (int j = 0; ok && j < k; j++) {
         ok = append (host, cap, names[i]) &&
              append (addr, cap, lookups[i] ? lookups[i]->addrs[j] : names[i]) &&
              (n_ports <= 1 || append (port, cap, ports[i]));
      }
   }
   if (!ok) {
      free (host);
      free (addr);
      free (port);
      return false;
   }
   out->host = host;
   out->hostaddr = addr;
   if (n_ports > 1) {
      out->port = port;
   } else {
      free (port);
   }
   return true;
}

fw_pg_io_t
fw_pg_resolve (const char *uri, int64_t deadline_ns, fw_pg_hosts_t *out, char *why, size_t len)
{
   PQconninfoOption *opts = PQconninfoParse (uri, NULL);
   const char *hosts = option (opts, "host"), *ports = option (opts, "port");
   char *hl = NULL, *pl = NULL, *names[MAX_HOSTS], *port_list[MAX_HOSTS];
   lookup_t *lookups[MAX_HOSTS] = { 0 };
   int n = 0, n_ports = 0, pending = 0;
   fw_pg_io_t io = FW_PG_OK;

   memset (out, 0, sizeof *out);
   /* Nothing to look up: no host (the socket), hostaddr given, or addresses. */
   if (!opts || !hosts || !*hosts || (option (opts, "hostaddr") && *option (opts, "hostaddr")) ||
       !(hl = strdup (hosts)) || (ports && !(pl = strdup (ports)))) {
      goto done;
   }
   n = split (hl, names);
   n_ports = pl ? split (pl, port_list) : 0;
   if (n_ports > 1 && n_ports != n) {
      goto done; /* libpq says what is wrong */
   }
   for (int i = 0; i < n; i++) {
      if (is_literal (names[i])) {
         if (names[i][0] == '\0' || names[i][0] == '/' || names[i][0] == '@') {
            goto done; /* a socket: libpq's own way */
         }
         continue;
      }
      if (!(lookups[i] = lookup_start (names[i]))) {
         snprintf (why, len, "cannot look up host \"%s\": no thread for it", names[i]);
         io = FW_PG_LOST;
         goto done;
      }
      pending++;
   }
   if (!pending) {
      goto done;
   }
   for (int i = 0; i < n; i++) {
      if (lookups[i] && !lookup_wait (lookups[i], deadline_ns)) {
         snprintf (why, len, "looking up host \"%s\" took too long", names[i]);
         io = FW_PG_TIMEOUT;
         goto done;
      }
      if (lookups[i] && (lookups[i]->rc != 0 || lookups[i]->n == 0)) {
         snprintf (why, len, "could not translate host name \"%s\" to address: %s", names[i],
                   lookups[i]->rc ? gai_strerror (lookups[i]->rc) : "no IPv4 or IPv6 address");
         io = FW_PG_LOST;
         goto done;
      }
   }
   if (!build (names, lookups, port_list, n, n_ports, out)) {
      snprintf (why, len, "out of memory");
      io = FW_PG_LOST;
   }
done:
   for (int i = 0; i < n; i++) {
      if (lookups[i]) {
         lookup_release (lookups[i]);
      }
   }
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
