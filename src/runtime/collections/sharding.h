/*
 * sharding.h - the keys flowwarden's own collections may be sharded on, and
 * what a write to one of them says when it is sharded on another.
 *
 * Through mongos, a findAndModify or an upsert must name the whole shard key
 * (else 61 ShardKeyNotFound) and a unique index must start with it (else 67
 * CannotCreateIndex). flowwarden finds its documents by _id (checkpoints,
 * DLQ sequences, leases), and a DLQ's entries by streamName (the claim, the
 * upsert of an event dead-lettered again, the unique (streamName, eventId)
 * index): docs/compatibility.md.
 */
#ifndef FLOWWARDEN_SHARDING_H
#define FLOWWARDEN_SHARDING_H

#include <stddef.h>

#include <mongoc/mongoc.h>

/* The shard key each kind of collection accepts. */
#define FW_SHARD_KEY_BY_ID "{ _id: 1 } (or { _id: \"hashed\" })"
#define FW_SHARD_KEY_DLQ "{ streamName: 1 }"

/* When berr is ShardKeyNotFound (61) or CannotCreateIndex (67): writes into
 * buf (len bytes) a sentence to append to the failure's message, saying
 * that collection is sharded on a key flowwarden's writes cannot use and
 * which key it may be sharded on (shard_key, one of FW_SHARD_KEY_*), and
 * returns buf. Otherwise returns "" (a static string). */
const char *fw_sharding_hint (const bson_error_t *berr, const char *collection,
                              const char *shard_key, char *buf, size_t len);

#endif
