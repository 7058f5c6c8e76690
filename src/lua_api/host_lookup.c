/*
 * host_lookup.c - a host name looked up against a deadline (see
 * host_lookup.h).
 *
 * getaddrinfo blocks without a bound, so each name is looked up in a thread
 * of its own while the caller waits on a condition variable until its
 * deadline. A lookup still running at the deadline is left to finish on its
 * own: whichever of the thread and the caller lets go last frees it.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"
#include "host_lookup.h"

typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t cond;
   int refs; /* the thread and the caller */
   bool done;
   int rc; /* getaddrinfo's */
   int n;
   char addrs[FW_HOST_ADDRS_MAX][INET6_ADDRSTRLEN];
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
      fw_mono_lock_destroy (&l->mu, &l->cond);
      free (l);
   }
}

static void *
lookup_run (void *arg)
{
   lookup_t *l = arg;
   struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
   struct addrinfo *res = NULL;
   int rc = getaddrinfo (l->host, NULL, &hints, &res);

   pthread_mutex_lock (&l->mu);
   l->rc = rc;
   for (struct addrinfo *a = res; rc == 0 && a && l->n < FW_HOST_ADDRS_MAX; a = a->ai_next) {
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

/* Starts looking host up; NULL when its wait or its thread could not be set
 * up. */
static lookup_t *
lookup_start (const char *host)
{
   size_t len = strlen (host);
   lookup_t *l = calloc (1, sizeof *l + len + 1);
   pthread_attr_t ta;
   pthread_t t;
   bool started;

   if (!l) {
      return NULL;
   }
   memcpy (l->host, host, len + 1);
   if (fw_mono_lock_init (&l->mu, &l->cond) != 0) {
      free (l);
      return NULL;
   }
   l->refs = 2;
   started = pthread_attr_init (&ta) == 0;
   if (started) {
      started = pthread_attr_setdetachstate (&ta, PTHREAD_CREATE_DETACHED) == 0 &&
                pthread_create (&t, &ta, lookup_run, l) == 0;
      pthread_attr_destroy (&ta);
   }
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
   bool done;

   pthread_mutex_lock (&l->mu);
   while (!l->done && fw_mono_ns () < deadline_ns) {
      (void) fw_mono_cond_wait_until_ns (&l->cond, &l->mu, deadline_ns);
   }
   done = l->done;
   pthread_mutex_unlock (&l->mu);
   return done;
}

bool
fw_host_is_address (const char *name)
{
   unsigned char buf[sizeof (struct in6_addr)];

   return inet_pton (AF_INET, name, buf) == 1 || inet_pton (AF_INET6, name, buf) == 1;
}

fw_host_lookup_t
fw_host_lookup (const char *host, int64_t deadline_ns, fw_host_addrs_t *out, char *why, size_t len)
{
   lookup_t *l = lookup_start (host);
   fw_host_lookup_t r = FW_HOST_FOUND;

   out->n = 0;
   if (!l) {
      snprintf (why, len, "cannot look up host \"%s\": no thread for it", host);
      return FW_HOST_FAILED;
   }
   if (!lookup_wait (l, deadline_ns)) {
      snprintf (why, len, "looking up host \"%s\" took too long", host);
      r = FW_HOST_TIMEOUT;
   } else if (l->rc != 0 || l->n == 0) {
      snprintf (why, len, "could not translate host name \"%s\" to address: %s", host,
                l->rc ? gai_strerror (l->rc) : "no IPv4 or IPv6 address");
      r = FW_HOST_FAILED;
   } else {
      out->n = l->n;
      memcpy (out->addrs, l->addrs, sizeof out->addrs);
   }
   lookup_release (l);
   return r;
}
