/*
 * stream_exactly_once-private.h - exactly_once (issue 39, stream_exactly_once.c): the
 * dispatcher's transactions write the stream's position.
 */
#ifndef FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H
#define FLOWWARDEN_STREAM_EXACTLY_ONCE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/stream/stream_worker.h"

#include "runtime/checkpoint/checkpoint_store.h"

/* stream_exactly_once.c: exactly_once (issue 39) wires the dispatcher's
 * transactions to write the stream's position in them. */
void fw_stream_exactly_once_wire (fw_stream_worker_t *w);

/* At the start of a run (under ha: once the lease is held, before the
 * checkpoint is fenced, since the fence's write would wait for a
 * transaction that wrote the checkpoint; without ha: before the change
 * stream opens): kills the server sessions recorded by an earlier holder of
 * the checkpoint (a killed process, a deposed leader), aborting the
 * transaction it may have left open, and ends this thread's own; a failure
 * is logged and the run goes on. */
void fw_stream_exactly_once_recover (fw_stream_worker_t *w);

/* Before the stream reads (at each open): false, with why in what, when the
 * deployment exactly_once's transactions run on (the stream's own, or the
 * sink's) has none (a standalone server, a server too old: txn_support.h),
 * and the stream must stop rather than send every event to the DLQ; true
 * otherwise, also when the server cannot be asked now (logged). */
bool fw_stream_exactly_once_supported (fw_stream_worker_t *w, char *what, size_t len);

/* exactly_once = { connection = <MongoDB> } (a sink deployment; the lease
 * stays on the stream's): _fence raises the sink's checkpoint's epoch to the
 * lease's (a new leader, after the stream's own checkpoint; *stored as
 * fw_checkpoint_fence's; without a sink *stored = epoch and true). _load
 * reads the sink's checkpoint into cp (*found: it holds a position, which
 * wins over the stream's own), retried with the restart backoff, false only
 * on shutdown; without a sink true and nothing read. _advance, at each
 * checkpoint save: writes the position's handled and seen tokens (each
 * NULL: none) to the sink's checkpoint when no transaction did (best
 * effort, fenced under ha); _wire sets w->eo.advance to it, which the
 * position's saves call. */
bool fw_stream_exactly_once_fence (fw_stream_worker_t *w, int64_t epoch, int64_t *stored,
                                   fw_error_t *error);
bool fw_stream_exactly_once_load (fw_stream_worker_t *w, fw_checkpoint_t *cp, bool *found);
void fw_stream_exactly_once_advance (fw_stream_worker_t *w, const bson_t *processed,
                                     const bson_t *seen);

/* stream_exactly_once_pg.c: exactly_once = { connection = <PostgreSQL> }
 * (issue 40). _wire hands the dispatcher the PostgreSQL sink (its state made
 * on first use, owned by w, freed by _free after w's dispatcher). _load, at
 * the start of a run after the lease: raises the position's epoch to the
 * leader's (ha) and reads the position committed there into cp's handled
 * token (*found), which wins over _fw_checkpoints' (none there, or
 * start_position = "latest": cp untouched); retried with the restart
 * backoff, false on shutdown (or when the sink could not be made: the
 * stream failed rather than run without its transactions). */
void fw_stream_exactly_once_pg_wire (fw_stream_worker_t *w);
void fw_stream_exactly_once_pg_free (fw_stream_worker_t *w);
bool fw_stream_exactly_once_pg_load (fw_stream_worker_t *w, fw_checkpoint_t *cp, bool *found);
/* At each checkpoint save: stores the handled position (processed; seen is
 * not kept there) in the table when
 * no transaction did (the last events were dead-lettered, skipped or had no
 * handler), so a restart does not run them again. Best effort. */
void fw_stream_exactly_once_pg_advance (fw_stream_worker_t *w, const bson_t *processed,
                                        const bson_t *seen);
/* (_pg_wire sets w->eo.advance to it: the position's saves call it there.) */

#endif
