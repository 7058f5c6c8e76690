/*
 * connections.h - the MongoDB connections handlers use (fw.mongo, DLQs on a
 * named connection): one mongoc_client_pool_t per (name, URI), shared by
 * every stream, and each stream's own clients popped from them.
 *
 * "default" is the run URI; fw.connection declares the others. A reload that
 * changes a connection's URI registers a new pool under the same name: new
 * operations use it, clients still out go back to the pool they came from.
 * Replaced pools are kept until the registry is destroyed (a reload changes
 * URIs rarely; freeing a pool while a stream may hold its client is not
 * safe).
 */
#ifndef FLOWWARDEN_CONNECTIONS_H
#define FLOWWARDEN_CONNECTIONS_H

#include <stdbool.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "runtime/host/lua_host.h"

/* The URI used when neither --uri nor fw.defaults { uri = ... } gives one. */
#define FW_DEFAULT_URI "mongodb://127.0.0.1:27017/?replicaSet=rs0"

typedef struct fw_connections fw_connections_t;

/* An empty registry. NULL when out of memory (or its lock cannot be set up).
 * The caller owns it. */
fw_connections_t *fw_connections_new (void);

/* Frees every pool. Every client must have been given back. NULL is a no-op. */
void fw_connections_destroy (fw_connections_t *conns);

/*
 * Makes name refer to uri from now on, creating its pool unless name already
 * refers to exactly this URI. A URI that is not MongoDB's (redis://,
 * postgresql://: fw.redis and fw.pg open their own connections) is left out:
 * returns true and registers nothing. Returns false with error filled when libmongoc
 * rejects the URI (the message never contains the URI: it may hold a
 * password). Thread-safe.
 */
bool fw_connections_set (fw_connections_t *conns, const char *name, const char *uri,
                         fw_error_t *error);

/*
 * Registers every connection host's loaded script declares (fw.connection),
 * as fw_connections_set does for each. host has a script loaded. Returns
 * false with error filled at the first URI libmongoc rejects.
 */
bool fw_connections_set_declared (fw_connections_t *conns, fw_lua_host_t *host, fw_error_t *error);

/*
 * A stream's clients, one per connection name, popped on first use and kept
 * for the stream's life (libmongoc clients are single-threaded: a set is used
 * by its stream's thread only).
 */
typedef struct fw_connection_clients fw_connection_clients_t;

/* A set drawing from conns (borrowed: it must outlive the set). */
fw_connection_clients_t *fw_connection_clients_new (fw_connections_t *conns);

/*
 * The client of connection name, popped from its current pool on first use
 * (or when a reload changed its URI since), with handler deadlines installed
 * on its sockets (io_deadline.h). Borrowed: valid until the next call with
 * the same name or fw_connection_clients_release. NULL with error filled
 * (FW_ERROR_INVALID) when name is not declared.
 */
mongoc_client_t *fw_connection_clients_get (fw_connection_clients_t *set, const char *name,
                                            fw_error_t *error);

/* The registry set draws from (borrowed), for another thread's own set. */
fw_connections_t *fw_connection_clients_registry (const fw_connection_clients_t *set);

/* Gives every client back to its pool. The set stays usable. */
void fw_connection_clients_release (fw_connection_clients_t *set);

/* Releases and frees. NULL is a no-op. */
void fw_connection_clients_destroy (fw_connection_clients_t *set);

#endif
