/*
 * event_park_store.c - where a sequenced DLQ's sequences live, for the live
 * side (event_park.c): fw_park_ops_t on the sequences collection beside a
 * MongoDB DLQ (dlq_sequence.c's requests, on the stream's client or its
 * dlq.connection's), and on the records an in-memory store keeps beside its
 * entries (dlq = { store = "memory" }, and flowwarden.testing).
 */
#include "flowwarden/dlq_sequence.h"
#include "flowwarden/dlq_store.h"
#include "runtime/dispatch/dispatcher-private.h"

/* --- MongoDB: "<dlq collection>_sequences" ----------------------------------- */

/* The DLQ's client (the stream's, or its dlq.connection's). */
static mongoc_client_t *
dlq_client (fw_dispatcher_t *d, fw_error_t *error)
{
   if (d->prog.cfg.dlq.connection) {
      return fw_connection_clients_get (d->clients, d->prog.cfg.dlq.connection, error);
   }
   if (!d->client) {
      fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\" has no client", d->prog.cfg.name);
   }
   return d->client;
}

static const char *
dlq_database (const fw_dispatcher_t *d)
{
   return d->prog.cfg.dlq.database ? d->prog.cfg.dlq.database : d->prog.cfg.database;
}

static mongoc_collection_t *
seqs_collection (fw_dispatcher_t *d, fw_error_t *error)
{
   mongoc_client_t *client = dlq_client (d, error);
   mongoc_collection_t *seqs =
      client ? fw_dlq_sequence_collection (client, dlq_database (d), d->prog.cfg.dlq.collection)
             : NULL;
   if (client && !seqs) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
   }
   return seqs;
}

static bool
mongo_load (fw_dispatcher_t *d, fw_dlq_sequences_t *into, fw_error_t *error)
{
   mongoc_collection_t *seqs = seqs_collection (d, error);
   mongoc_client_t *client;
   mongoc_collection_t *dlq;
   bool ok;

   if (!seqs) {
      return false;
   }
   ok = fw_dlq_sequence_load (seqs, d->prog.cfg.name, into, error);
   mongoc_collection_destroy (seqs);
   if (ok && !d->park.indexed && (client = dlq_client (d, error))) {
      dlq = mongoc_client_get_collection (client, dlq_database (d), d->prog.cfg.dlq.collection);
      ok = d->park.indexed = fw_dlq_sequence_indexes (dlq, error);
      mongoc_collection_destroy (dlq);
   }
   return ok;
}

static bool
mongo_take (fw_dispatcher_t *d, const char *id, bool open, int64_t *index,
            fw_seq_take_t *result, fw_error_t *error)
{
   mongoc_collection_t *seqs = seqs_collection (d, error);
   bool ok;

   if (!seqs) {
      return false;
   }
   ok = fw_dlq_sequence_take (seqs, d->prog.cfg.name, id, open, index, result, error);
   mongoc_collection_destroy (seqs);
   return ok;
}

static bool
mongo_settle (fw_dispatcher_t *d, const char *id, fw_error_t *error)
{
   mongoc_collection_t *seqs = seqs_collection (d, error);
   bool ok;

   if (!seqs) {
      return false;
   }
   ok = fw_dlq_sequence_settle (seqs, d->prog.cfg.name, id, error);
   mongoc_collection_destroy (seqs);
   return ok;
}

static bool
mongo_size (fw_dispatcher_t *d, const char *id, int64_t *out, fw_error_t *error)
{
   mongoc_client_t *client = dlq_client (d, error);
   mongoc_collection_t *dlq;
   bool ok;

   if (!client) {
      return false;
   }
   dlq = mongoc_client_get_collection (client, dlq_database (d), d->prog.cfg.dlq.collection);
   ok = fw_dlq_sequence_size (dlq, d->prog.cfg.name, id, out, error);
   mongoc_collection_destroy (dlq);
   return ok;
}

const fw_park_ops_t fw_park_mongo_ops = {mongo_load, mongo_take, mongo_settle, mongo_size};

/* --- in memory: the store's own records ------------------------------------------- */

/* The stream's memory store, opened if a reload closed it (opening one
 * fails only when memory runs out). */
static fw_dlq_store_t *
memory_store (fw_dispatcher_t *d, fw_error_t *error)
{
   if (!d->dlq && !fw_dispatcher_open_dlq (d)) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory opening the store");
      return NULL;
   }
   return d->dlq;
}

static bool
memory_load (fw_dispatcher_t *d, fw_dlq_sequences_t *into, fw_error_t *error)
{
   fw_dlq_store_t *store = memory_store (d, error);
   return store && fw_dlq_store_memory_seq_load (store, d->prog.cfg.name, into, error);
}

static bool
memory_take (fw_dispatcher_t *d, const char *id, bool open, int64_t *index,
             fw_seq_take_t *result, fw_error_t *error)
{
   fw_dlq_store_t *store = memory_store (d, error);
   *result = FW_SEQ_CLOSED;
   return store &&
          fw_dlq_store_memory_seq_take (store, d->prog.cfg.name, id, open, index, result, error);
}

static bool
memory_settle (fw_dispatcher_t *d, const char *id, fw_error_t *error)
{
   fw_dlq_store_t *store = memory_store (d, error);
   return store && fw_dlq_store_memory_seq_settle (store, d->prog.cfg.name, id, error);
}

static bool
memory_size (fw_dispatcher_t *d, const char *id, int64_t *out, fw_error_t *error)
{
   fw_dlq_store_t *store = memory_store (d, error);
   return store && fw_dlq_store_memory_seq_size (store, d->prog.cfg.name, id, out, error);
}

const fw_park_ops_t fw_park_memory_ops = {memory_load, memory_take, memory_settle, memory_size};
