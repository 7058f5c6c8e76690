/*
 * checkpoint_store.h - resume tokens persisted in <database>._fw_checkpoints,
 * one document per stream (_id = stream name), as FlowWarden keeps them:
 *
 *   lastProcessedToken  the token of the last event a handler finished with
 *   lastSeenToken       the furthest position the stream has read to, which
 *                       on an idle stream follows the server's post-batch
 *                       resume token so it never falls out of the oplog
 */
#ifndef FLOWWARDEN_CHECKPOINT_STORE_H
#define FLOWWARDEN_CHECKPOINT_STORE_H

#include <stdbool.h>

#include <mongoc/mongoc.h>

#include "flowwarden/collection_names.h"
#include "flowwarden/error.h"

typedef struct {
   bool has_processed;
   bool has_seen;
   bson_t processed; /* initialised (possibly empty) after a load */
   bson_t seen;
} fw_checkpoint_t;

/* Reads the checkpoint of stream. A missing document is not an error: both
 * has_ flags are then false. cp is owned by the caller:
 * fw_checkpoint_cleanup. */
bool fw_checkpoint_load (mongoc_client_t *client, const char *database, const char *stream,
                         fw_checkpoint_t *cp, fw_error_t *error);

/* Upserts the checkpoint. processed and seen may be NULL (field untouched);
 * script_version (may be NULL) records which script wrote it. Acknowledged
 * with the client's write concern. */
bool fw_checkpoint_save (mongoc_client_t *client, const char *database, const char *stream,
                         const bson_t *processed, const bson_t *seen, const char *script_version,
                         fw_error_t *error);

/* Fencing (ha.mode = "leader", lease.h). A new leader first raises the
 * checkpoint's epoch field to its lease's epoch ($max, upserting a document
 * without tokens when there is none); *stored is the epoch stored afterwards
 * (-1 when it is not an integer): greater than epoch means a newer leader
 * fenced it first. When it leads, the fence also raises writerGen past the
 * stored one (the time when none is stored, as fw_checkpoint_claim_generation
 * does), so that a run without ha from before ha was turned on writes
 * nothing after it (the leader's own writes carry no generation). */
bool fw_checkpoint_fence (mongoc_client_t *client, const char *database, const char *stream,
                          int64_t epoch, int64_t *stored, fw_error_t *error);

/* As fw_checkpoint_save, but only while the stored epoch is still epoch: a
 * deposed leader's late write matches nothing and moves nothing (false,
 * *fenced true, error says so). Never upserts: the fence made the document. */
bool fw_checkpoint_save_fenced (mongoc_client_t *client, const char *database, const char *stream,
                                const bson_t *processed, const bson_t *seen,
                                const char *script_version, int64_t epoch, bool *fenced,
                                fw_error_t *error);

/* As fw_checkpoint_save (epoch <= 0) or fw_checkpoint_save_fenced (epoch >
 * 0), with also's fields (a document of field: value, e.g. a snapshot's
 * progress: fw_checkpoint_snapshot_fields) set in the same update: both
 * are stored or neither. also is borrowed. */
bool fw_checkpoint_save_with (mongoc_client_t *client, const char *database, const char *stream,
                              const bson_t *processed, const bson_t *seen,
                              const char *script_version, const bson_t *also, int64_t epoch,
                              fw_error_t *error);

/* How an ordered save (fw_checkpoint_save_ordered) ended. */
typedef enum {
   FW_CHECKPOINT_SAVED,      /* the position is stored */
   FW_CHECKPOINT_SUPERSEDED, /* nothing written: the same writer stored a later seq already */
   FW_CHECKPOINT_NOT_SAVED,  /* nothing written (error set): an error, or fenced by a leader */
   /* nothing written (error set, naming both generations): a newer run of
    * the stream (writer generation) holds the checkpoint, so no write of
    * this run can succeed again: it stops */
   FW_CHECKPOINT_REFUSED,
} fw_checkpoint_saved_t;

/* Without ha (where the fencing epochs order the runs), a run of the stream
 * (a process's start, or a restart of the stream within it) first claims a
 * writer generation, before any checkpoint write: the stored writerGen + 1,
 * or the current time in milliseconds when none is stored (no document,
 * one written before writerGen existed, or one deleted by hand: past every
 * generation an earlier run may still write with, on clocks that agree),
 * raised with $max and upserted. Every write of the run carries it
 * (fw_checkpoint_save_ordered) and is applied only while the stored
 * generation is not a later one, so a write of an earlier run (a process
 * killed with kill -9, or hung and replaced) that the server applies after
 * this run's claim changes nothing: that run's claim was acknowledged
 * before its first write, so this run read it. A fencing epoch stored (by a
 * leader, ha turned off since) is not compared by the run's writes and the
 * claim adds 1 to it, so a paused leader's late write (conditional on its
 * own epoch) changes nothing either. False (error set) when the claim
 * cannot be read or written. */
bool fw_checkpoint_claim_generation (mongoc_client_t *client, const char *database,
                                     const char *stream, int64_t *gen, fw_error_t *error);

/* Raises the writerGen of stream's checkpoint on client's deployment to gen
 * ($max, upserted: a document without tokens when there is none), before
 * the run's first write there (exactly_once's sink, whose checkpoint the
 * transactions write: the run's generation is claimed on the stream's own).
 * *stored: the generation stored afterwards (greater than gen: a later run
 * raised it first). A fencing epoch stored there gains 1 as with the claim.
 * False (error set) when it cannot be written. */
bool fw_checkpoint_raise_generation (mongoc_client_t *client, const char *database,
                                     const char *stream, int64_t gen, int64_t *stored,
                                     fw_error_t *error);

/* *gen: the writerGen of document id in _fw_checkpoints (a checkpoint, or a
 * document beside it), 0 when it has none (no document, no field, not a
 * number). False (error set) when it cannot be read. */
bool fw_checkpoint_stored_gen (mongoc_client_t *client, const char *database, const char *id,
                               int64_t *gen, fw_error_t *error);

/* Appends to selector the condition that lets a write of the run with
 * writer generation gen through: the stored writerGen is not a later one
 * ($not $gt, which a missing field matches). gen <= 0 (under ha, or none):
 * nothing. False when out of memory. */
bool fw_checkpoint_gen_filter (bson_t *selector, int64_t gen);

/* A write of document id (the checkpoint of stream, or a document beside
 * it) carrying gen in its filter matched nothing (an upsert failed with a
 * duplicate key): true, err set, when a later run's generation is stored
 * there (*newer true, err naming what: "checkpoint", "the snapshot's
 * progress", ..., and both generations) or it cannot be read (*newer
 * false); false when not (gen <= 0, or the stored one is not later).
 * newer may be NULL. */
bool fw_checkpoint_refused_by_newer_run (mongoc_client_t *client, const char *database,
                                         const char *id, const char *stream, const char *what,
                                         int64_t gen, bool *newer, fw_error_t *err);

/* The checkpoint writer's save (checkpoint_writer.h), which may have several
 * writes in flight on as many connections: as fw_checkpoint_save (epoch 0)
 * or fw_checkpoint_save_fenced (epoch > 0), and also stamps the document
 * with gen (the run's writer generation: fw_checkpoint_claim_generation; 0:
 * none, as under ha), writer (one per checkpoint writer's life) and seq (its
 * hand-over, 1, 2, ...). The update matches only while the stored
 * generation is not a later one and the stored stamp is another writer's
 * (or none) or a lower seq, so a write that reaches the server after a later
 * one of the same writer, or after a later run's claim, changes nothing: the
 * stored checkpoint never moves back. An upsert that loses the race to
 * insert the document is tried once more. Refused by a later run:
 * FW_CHECKPOINT_REFUSED, the error naming both generations. */
fw_checkpoint_saved_t fw_checkpoint_save_ordered (mongoc_client_t *client, const char *database,
                                                  const char *stream, const bson_t *processed,
                                                  const bson_t *seen, const char *script_version,
                                                  int64_t epoch, int64_t gen,
                                                  const bson_oid_t *writer, int64_t seq,
                                                  fw_error_t *error);

/* As fw_checkpoint_save_ordered, with also's fields (as
 * fw_checkpoint_save_with) in the same update; writer may be NULL (epoch 0
 * only: ordered by gen alone, as mode = "sync" saves are). The stream's own
 * synchronous saves use it: while it has a checkpoint writer (the final one
 * at shutdown, a pause, a restart) with the writer's stamp and a seq past
 * every hand-over (fw_checkpoint_writer_stamp), so that a write of the
 * writer that the server applies late (one that timed out on the client's
 * side) never replaces them. also is borrowed. */
fw_checkpoint_saved_t fw_checkpoint_save_ordered_with (
   mongoc_client_t *client, const char *database, const char *stream, const bson_t *processed,
   const bson_t *seen, const char *script_version, const bson_t *also, int64_t epoch, int64_t gen,
   const bson_oid_t *writer, int64_t seq, fw_error_t *error);

/* exactly_once (issue 39): saves token as both lastProcessedToken and
 * lastSeenToken inside session's transaction (started by the caller, who
 * commits it). epoch > 0: fenced as fw_checkpoint_save_fenced (*fenced true
 * when a newer leader holds it), else an upsert, which with gen > 0 (the
 * run's writer generation: fw_checkpoint_claim_generation) is applied only
 * while no later run's generation is stored, and stamps gen (refused:
 * *fenced true, the error names both generations, and the server has
 * aborted the transaction). *reply (initialised here, the caller destroys
 * it) is the server's, for the error labels. */
bool fw_checkpoint_save_in (mongoc_client_t *client, mongoc_client_session_t *session,
                            const char *database, const char *stream, const bson_t *token,
                            const char *script_version, int64_t epoch, int64_t gen, bool *fenced,
                            bson_t *reply, fw_error_t *error);

void fw_checkpoint_cleanup (fw_checkpoint_t *cp);

#endif
