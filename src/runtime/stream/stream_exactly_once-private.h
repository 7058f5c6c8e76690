/*
 * stream_exactly_once-private.h - exactly_once (issue 39, stream_exactly_once.c): the
 * dispatcher's transactions write the stream's position.
 */
#ifndef FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H
#define FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "bson/event.h"
#include "flowwarden/clock.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/config/stream_config.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/ha/lease.h"
#include "runtime/stream/stream_worker.h"

typedef struct fw_stream_eo_pg fw_stream_eo_pg_t; /* stream_exactly_once_pg.c */
typedef struct fw_stream_eo fw_stream_eo_t;

/* exactly_once's state (stream_exactly_once.c, _pg.c), part of the
 * stream's state (w->eo), and what its hooks read of the stream: set as the
 * stream is made (stream_program.c); the settings follow reloads in place,
 * the fields linked to change with each run. The stream's thread. */
struct fw_stream_eo {
   bson_t *written;       /* the position last written in a transaction (NULL: none) */
   bson_t *committed;     /* the last one committed: the stored checkpoint's */
   fw_stream_eo_pg_t *pg; /* exactly once into PostgreSQL: its sink (owned), or NULL */
   /* Another store's position at each checkpoint save (exactly once into
    * PostgreSQL: fw_stream_exactly_once_pg_advance), or NULL: the
    * position's handled and seen tokens (each NULL: none). */
   void (*advance) (fw_stream_eo_t *e, const bson_t *processed, const bson_t *seen);
   /* A snapshot's row has no resume token: the snapshot's progress past
    * it, written in its transaction instead, carrying gen (the run's writer
    * generation: fw_stream_exactly_once_gen). stream_snapshot.c sets it,
    * so that this file's callback calls no snapshot file: no circle. */
   bool (*row) (fw_stream_worker_t *w, const fw_event_t *row, mongoc_client_t *client,
                mongoc_client_session_t *session, int64_t gen, bson_t *reply, bool *fenced,
                fw_error_t *error);
   fw_stream_worker_t *w;          /* the stream (row's argument) */
   fw_dispatcher_t *d;             /* its dispatcher */
   const fw_stream_config_t *cfg;  /* its settings (fw_dispatcher_config (d)) */
   fw_shutdown_t *shutdown;        /* its stop */
   uint64_t *rng;                  /* its restart backoff's jitter */
   mongoc_client_t *const *client; /* its client (NULL in it outside a run) */
   fw_lease_t *const *lease;       /* its lease (ha), NULL in it: none */
   const int64_t *epoch;           /* the epoch it leads with; 0: not leading */
   /* without ha: the run's writer generation its transactions carry (the
    * stream's, raised on the sink's checkpoint too: fw_stream_exactly_once_gen);
    * 0: not yet this run */
   int64_t gen;
};

/* stream_exactly_once.c: exactly_once (issue 39) wires the dispatcher's
 * transactions to write the stream's position in them. */
void fw_stream_exactly_once_wire (fw_stream_eo_t *e);

/* At the start of a run (under ha: once the lease is held, before the
 * checkpoint is fenced, since the fence's write would wait for a
 * transaction that wrote the checkpoint; without ha: before the change
 * stream opens): kills the server sessions recorded by an earlier holder of
 * the checkpoint (a killed process, a deposed leader), aborting the
 * transaction it may have left open, and ends this thread's own; a failure
 * is logged and the run goes on. */
void fw_stream_exactly_once_recover (fw_stream_eo_t *e);

/* Before the stream reads (at each open): false, with why in what, when the
 * deployment exactly_once's transactions run on (the stream's own, or the
 * sink's) has none (a standalone server, a server too old: txn_support.h),
 * and the stream must stop rather than send every event to the DLQ; true
 * otherwise, also when the server cannot be asked now (logged). */
bool fw_stream_exactly_once_supported (fw_stream_eo_t *e, char *what, size_t len);

/* exactly_once = { connection = <MongoDB> } (a sink deployment; the lease
 * stays on the stream's): _fence raises the sink's checkpoint's epoch to the
 * lease's (a new leader, after the stream's own checkpoint; *stored as
 * fw_checkpoint_fence's; without a sink *stored = epoch and true). _load
 * reads the sink's checkpoint into cp (*found: it holds a position, which
 * wins over the stream's own), retried with the restart backoff, false only
 * on shutdown; without a sink true and nothing read. _advance, at each
 * checkpoint save: writes the position's handled and seen tokens (each
 * NULL: none) to the sink's checkpoint when no transaction did (best
 * effort, fenced under ha); _wire sets e->advance to it, which the
 * position's saves call. */
bool fw_stream_exactly_once_fence (fw_stream_eo_t *e, int64_t epoch, int64_t *stored,
                                   fw_error_t *error);

/* Without ha, before the run's first write in a transaction on client (the
 * transactions' client): *gen, the run's writer generation, claimed on the
 * stream's own checkpoint when no save of the run came first
 * (fw_position_claim) and, with a sink, raised on the sink's checkpoint too
 * (so that a killed run's transaction, or a hung one's that resumes,
 * commits nothing over a newer run's position); under ha *gen is 0. False
 * (error set) when it cannot be had; *refused then says a newer run holds
 * the sink's checkpoint. */
bool fw_stream_exactly_once_gen (fw_stream_eo_t *e, mongoc_client_t *client, int64_t *gen,
                                 bool *refused, fw_error_t *error);

/* The change stream opened, before any event's transaction: exactly_once
 * into MongoDB without ha claims the run's writer generation now
 * (fw_stream_exactly_once_gen). Claimed in a transaction, the claim's write
 * would change the checkpoint document after the transaction's snapshot,
 * and the transaction's own write of it would fail with WriteConflict. A
 * failure is logged; the first transaction claims it then (its attempt
 * fails once). */
void fw_stream_exactly_once_opened (fw_stream_eo_t *e);
bool fw_stream_exactly_once_load (fw_stream_eo_t *e, fw_checkpoint_t *cp, bool *found);
void fw_stream_exactly_once_advance (fw_stream_eo_t *e, const bson_t *processed,
                                     const bson_t *seen);

/* stream_exactly_once_pg.c: exactly_once = { connection = <PostgreSQL> }
 * (issue 40). _wire hands the dispatcher the PostgreSQL sink (its state made
 * on first use, owned by e, freed by _free after the stream's dispatcher). _load, at
 * the start of a run after the lease: raises the position's epoch to the
 * leader's (ha) and reads the position committed there into cp's handled
 * token (*found), which wins over _fw_checkpoints' (none there, or
 * start_position = "latest": cp untouched); retried with the restart
 * backoff, false on shutdown (or when the sink could not be made: the
 * stream failed rather than run without its transactions). */
void fw_stream_exactly_once_pg_wire (fw_stream_eo_t *e);
void fw_stream_exactly_once_pg_free (fw_stream_eo_t *e);
bool fw_stream_exactly_once_pg_load (fw_stream_eo_t *e, fw_checkpoint_t *cp, bool *found);
/* At each checkpoint save: stores the handled position (processed; seen is
 * not kept there) in the table when
 * no transaction did (the last events were dead-lettered, skipped or had no
 * handler), so a restart does not run them again. Best effort. */
void fw_stream_exactly_once_pg_advance (fw_stream_eo_t *e, const bson_t *processed,
                                        const bson_t *seen);
/* (_pg_wire sets e->advance to it: the position's saves call it there.) */

#endif
