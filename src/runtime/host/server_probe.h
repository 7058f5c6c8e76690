/*
 * server_probe.h - is the MongoDB deployment of a URI reachable? A bounded
 * try, on a client of its own, so that a stream's thread can say at once
 * why it cannot start and stay responsive to a stop (a pooled client's
 * server selection waits serverSelectionTimeoutMS, 30 s by default).
 */
#ifndef FLOWWARDEN_SERVER_PROBE_H
#define FLOWWARDEN_SERVER_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include <mongoc/mongoc.h>

/* connectTimeoutMS of a probe when the URI does not set one. */
#define FW_PROBE_CONNECT_TIMEOUT_MS 2000

/* What uri points at, for a log line: "127.0.0.1:1 (replica set rs0)",
 * "a.example.net:27017,b.example.net:27017", "SRV cluster0.example.net".
 * Never a credential. */
void fw_server_describe (const mongoc_uri_t *uri, char *out, size_t len);

/*
 * One try to select a writable server of uri (the primary of a replica
 * set): a single-threaded client scans the seed list once
 * (serverSelectionTryOnce) with connectTimeoutMS FW_PROBE_CONNECT_TIMEOUT_MS
 * unless the URI sets it, so it returns within about that long. False with
 * libmongoc's server selection error in why (e.g. "No suitable servers
 * found ...: [connection refused calling hello on '127.0.0.1:1']"). uri is
 * borrowed; nothing stays allocated.
 */
bool fw_server_probe (const mongoc_uri_t *uri, char *why, size_t len);

/* After a failed server selection of client (why: libmongoc's error, e.g.
 * "No suitable servers found", which does not say that a server answered
 * but was left out of the replica set the URI names): appends to why (at
 * most len in all) what the own hello of each seed that answered says
 * against replicaSet= (a standalone, another set, a set not initiated, a
 * mongos) with the remedy. Nothing without replicaSet=; a seed that never
 * answered is left to libmongoc's message. One bounded connection per seed
 * that answered (the URI's connectTimeoutMS); client is borrowed. */
void fw_server_explain_selection (mongoc_client_t *client, char *why, size_t len);

/* fw_server_probe's try, returning the selected server's description (its
 * hello reply: mongoc_server_description_hello_response), owned by the
 * caller (mongoc_server_description_destroy), or NULL with why set. */
mongoc_server_description_t *fw_server_probe_select (const mongoc_uri_t *uri, char *why,
                                                     size_t len);

#endif
