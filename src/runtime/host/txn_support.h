/*
 * txn_support.h - can a MongoDB deployment run multi-document transactions?
 * exactly_once (issue 39) needs them on the deployment its transactions run
 * on; the stream checks before it reads (stream_exactly_once.c) and
 * `flowwarden doctor` reports it (doctor_eo_mongo.c).
 *
 * What tells (MongoDB's manual, "Transactions": replica sets since 4.0,
 * sharded clusters since 4.2; the driver transactions specification refuses
 * to start one below those wire versions): the hello of the server a write
 * goes to. A replica set member says its setName, a mongos says msg
 * "isdbgrid" (jstests/core/txns/commands_banning_txnnumber_outside_transactions.js
 * tells them apart so), a standalone mongod says neither and refuses any
 * command carrying a txnNumber with 20 IllegalOperation
 * (jstests/noPassthrough/retryable_writes_standalone_api.js). Sessions, which
 * transactions run on, exist only where hello has logicalSessionTimeoutMinutes.
 */
#ifndef FLOWWARDEN_TXN_SUPPORT_H
#define FLOWWARDEN_TXN_SUPPORT_H

#include <stddef.h>

#include <mongoc/mongoc.h>

typedef enum {
   FW_TXN_SUPPORTED,
   FW_TXN_UNSUPPORTED, /* why says what the server is */
   FW_TXN_UNKNOWN,     /* the server could not be asked: why says why */
} fw_txn_support_t;

/* maxWireVersion of MongoDB 4.0 (transactions on a replica set) and 4.2
 * (through mongos), src/mongo/db/wire_version.h. */
#define FW_WIRE_TXN_REPLSET 7
#define FW_WIRE_TXN_MONGOS 8

/* Judges a hello reply (borrowed). */
fw_txn_support_t fw_txn_support_of_hello (const bson_t *hello, char *why, size_t len);

/* Asks the writable server of uri (borrowed) once, on a client of its own
 * (as fw_server_probe: about connectTimeoutMS at most), and judges its hello.
 * Nothing stays allocated. */
fw_txn_support_t fw_txn_support_probe (const mongoc_uri_t *uri, char *why, size_t len);

#endif
