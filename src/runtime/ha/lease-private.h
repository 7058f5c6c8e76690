/*
 * lease-private.h - what lease.c (the lease's thread and interface) and
 * lease_store.c (the lease document on the server) share.
 */
#ifndef FLOWWARDEN_LEASE_PRIVATE_H
#define FLOWWARDEN_LEASE_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "runtime/ha/lease.h"

struct fw_lease {
   mongoc_uri_t *uri;
   char *owner;      /* this instance's owner id */
   bool owner_given; /* by fw_lease_new's caller (tests) */
   char *database;
   char *stream;
   int64_t lease_ms;
   int64_t margin_ms;
   pthread_t thread;
   pthread_mutex_t mu;
   pthread_cond_t cond; /* CLOCK_MONOTONIC: the thread's waits; changes of role */
   /* Under mu: */
   fw_lease_role_t role;
   bool holding; /* the last acquisition or renewal succeeded and was not lost */
   int64_t epoch;
   int64_t deadline_ms; /* CLOCK_MONOTONIC: leading until then */
   char holder[256];
   int64_t clock_offset_ms;
   int acquisitions;
   struct {                    /* issue 38: what the last read of a standby saw (under mu,
                               * CLOCK_MONOTONIC times) */
      bool read;               /* a read answered since the last holding */
      bool live;               /* ... and named a live holder */
      int64_t expires_mono;    /* live: when its expiresAt falls on this host's clock */
      int64_t free_since_mono; /* !live: since when it has been without a holder */
   } seen;
   bool stop;
   struct { /* fw_lease_release's request to the thread (under mu) */
      bool asked;
      bool done;
      bool ok;
   } release;
   /* ha.mode = "shared" (issue 31, shared_units.c): */
   struct {
      fw_lease_gate_fn fn; /* consulted before each take; NULL: always take */
      void *ud;
   } gate;
   struct { /* give the lease up now, stay a standby (under mu) */
      bool asked;
      bool done;
   } yield;
};

/* What a read of the lease document says. */
typedef struct {
   bool exists;
   bool owner_is_string;
   char owner[256];
   bool has_epoch;
   int64_t epoch;
   bool has_expires;
   int64_t expires_ms;
   bool has_now;
   int64_t server_now_ms;
} fw_lease_doc_t;

typedef enum { FW_LEASE_TAKE_OK, FW_LEASE_TAKE_HELD, FW_LEASE_TAKE_ERROR } fw_lease_take_t;

/* Reads the lease with the server's $$NOW beside it (out->exists false when
 * there is no lease document). */
bool fw_lease__read (fw_lease_t *l, mongoc_client_t *client, fw_lease_doc_t *out,
                     bson_error_t *berr);

/* The highest epoch a leader fenced the stream's checkpoint with (0: none). */
bool fw_lease__read_fence_floor (fw_lease_t *l, mongoc_client_t *client, int64_t *floor,
                                 bson_error_t *berr);

/* Takes the lease if it is free, ours or expired by the server's clock, with
 * an epoch above floor (one upsert on _id, the decision in its update
 * pipeline). got: the lease as the server left it: ours (FW_LEASE_TAKE_OK)
 * or the holder's (FW_LEASE_TAKE_HELD; got->exists false when the server
 * answered a duplicate key instead). */
fw_lease_take_t fw_lease__take (fw_lease_t *l, mongoc_client_t *client, int64_t floor,
                                fw_lease_doc_t *got, bson_error_t *berr);

/* Renews (release: gives up) the lease held with epoch; *matched false when
 * another instance holds it now. */
bool fw_lease__update_held (fw_lease_t *l, mongoc_client_t *client, int64_t epoch, bool release,
                            bool *matched, bson_error_t *berr);

#endif
