/*
 * event.h - one change event, parsed once so every ctx accessor is a lookup.
 *
 * An fw_event_t borrows the event's bytes: it is valid while the bson_t it
 * was parsed from is.
 */
#ifndef FLOWWARDEN_EVENT_H
#define FLOWWARDEN_EVENT_H

#include <stdbool.h>

#include <bson/bson.h>

#include "flowwarden/error.h"

typedef enum {
   FW_OP_INSERT = 0,
   FW_OP_UPDATE,
   FW_OP_REPLACE,
   FW_OP_DELETE,
   FW_OP_OTHER,
   FW_OP_SNAPSHOT /* a snapshot's row (snapshot.h): keyed, handled by on_snapshot or on_insert */
} fw_op_t;

/* The top-level fields of a change event the runtime reads. */
typedef enum {
   FW_EV_ID = 0, /* the resume token */
   FW_EV_CLUSTER_TIME,
   FW_EV_WALL_TIME,
   FW_EV_NS,
   FW_EV_DOCUMENT_KEY,
   FW_EV_FULL_DOCUMENT,
   FW_EV_BEFORE, /* fullDocumentBeforeChange */
   FW_EV_UPDATE_DESCRIPTION,
   FW_EV_LSID,
   FW_EV_TXN_NUMBER,
   FW_EV_SPLIT, /* splitEvent: a fragment of an event over 16 MiB */
   FW_EV_FIELD_COUNT
} fw_event_field_t;

/* Where each field is (offset 0: absent); iterators are made on demand. */
typedef struct {
   const bson_t *doc;
   fw_op_t op;
   const char *operation_type; /* borrowed from doc */
   uint32_t offset[FW_EV_FIELD_COUNT];
   uint32_t keylen[FW_EV_FIELD_COUNT];
} fw_event_t;

/* True when the event has field f. */
static inline bool
fw_event_has (const fw_event_t *ev, fw_event_field_t f)
{
   return ev->offset[f] != 0;
}

/* Positions out on field f; false when the event lacks it. */
bool fw_event_field (const fw_event_t *ev, fw_event_field_t f, bson_iter_t *out);

/* The bytes of field f when it is an embedded document (*data borrowed from
 * ev->doc, *len its length); false when the event lacks it or it is of
 * another type. No iterator: the per-event copy of the resume token. */
bool fw_event_field_document (const fw_event_t *ev, fw_event_field_t f, const uint8_t **data,
                              uint32_t *len);

/* The server's time of the event in ms (wallTime, else clusterTime's
 * seconds), for the lag; 0 when it has neither. */
int64_t fw_event_time_ms (const fw_event_t *ev);

/* ns.db and ns.coll, borrowed from the event, or NULL. */
const char *fw_event_ns_db (const fw_event_t *ev);
const char *fw_event_ns_coll (const fw_event_t *ev);

/* Parses doc into ev. Fails (with a message naming the field) when the event
 * lacks _id or operationType, which the change-stream spec requires, is not
 * valid BSON, or has a field of another type than MongoDB's change-event
 * schema gives it: _id, ns, documentKey, updateDescription, lsid and
 * splitEvent documents, fullDocument and fullDocumentBeforeChange documents
 * or null, operationType, ns.db and ns.coll strings, clusterTime a
 * timestamp, wallTime a date, txnNumber a long, updateDescription's
 * updatedFields (and disambiguatedPaths) a document, its removedFields and
 * truncatedArrays arrays. Absent fields are not an error (a pipeline may
 * leave them out), nor are fields the runtime does not read. The message
 * names the first wrong field, its type and the expected one. ev then holds
 * what was read (its _id among it, when fw_event_has (ev, FW_EV_ID)), with
 * the wrong-typed fields located as they came. Types are checked during the
 * one scan of the top level; ns and updateDescription have their own top
 * level scanned, no deeper. */
bool fw_event_parse (const bson_t *doc, fw_event_t *ev, fw_error_t *error);

/* The key that orders the event (lanes, the sequenced DLQ's default
 * sequence): { _id: documentKey._id }, into key, which the caller
 * bson_destroys after a true return (it may borrow the event's bytes: valid
 * while the event is). On a sharded collection documentKey is
 * { shard key..., _id } and its shard-key part changes with
 * refineCollectionShardKey or resharding while the document stays the same:
 * _id alone keeps one document's events together. On an unsharded one the
 * result is the documentKey itself. A documentKey without _id (never from a
 * server) is the key whole. False when the event has no documentKey
 * document, or memory runs out. */
bool fw_event_order_key (const fw_event_t *ev, bson_t *key);

/* Whether ev is an event of a multi-document transaction: MongoDB gives
 * each its session's lsid and the transaction's txnNumber. */
bool fw_event_in_txn (const fw_event_t *ev);

/* Whether a and b are events of the same transaction (the same lsid and
 * txnNumber, byte for byte). */
bool fw_event_same_txn (const fw_event_t *a, const fw_event_t *b);

/* Writes the stable event id (the resume token's _data, or its hex bytes)
 * into buf. Returns false if it did not fit: a server's token has no bound
 * (it holds the documentKey), so a fixed buffer suits only log lines. */
bool fw_event_id (const fw_event_t *ev, char *buf, size_t len);

/* The length of the event id (without its NUL), 0 when the event has no _id:
 * a buffer of fw_event_id_len () + 1 bytes always fits it. */
size_t fw_event_id_len (const fw_event_t *ev);

/* The whole event id in a new string the caller frees with bson_free (), or
 * NULL when the event has no _id. */
char *fw_event_id_dup (const fw_event_t *ev);

/* The event's id for a log line into buf (len at least 64): whole when it
 * fits, else its first len - 40 characters and its length; "(none)" without
 * one. */
void fw_event_log_id (const fw_event_t *ev, char *buf, size_t len);

/* The event's id for a warn or info line into buf (len at least 40): whole
 * when it has at most FW_EVENT_SHORT_ID_MAX characters, else 12 hex digits
 * of its FNV-1a 64-bit hash and, for a server's token ("82" + KeyString
 * Timestamp), its clusterTime: "9f3a2c1b7e01@1795687200.3". "(none)"
 * without one. When the log shows debug records it is followed by the whole
 * token, " (token 826B...)", cut with "...)" when buf is too small (issue
 * 38: a server's token is ~170 characters, which buried every warn line). */
#define FW_EVENT_SHORT_ID_MAX 32
void fw_event_short_id (const fw_event_t *ev, char *buf, size_t len);

/* What a failure's log line ends with, into buf: " (at WHERE; key {...};
 * entry ID)", each part when known: the failing line (where, "" or NULL:
 * none), the event's document key (never the document; cut at 200 bytes)
 * and the DLQ entry (entry_id "" or NULL: none); "" when none is. Returns
 * buf. */
const char *fw_event_failure_context (const fw_event_t *ev, const char *where, const char *entry_id,
                                      char *buf, size_t len);

/* One line for logs: operation, namespace and event id. Never document
 * contents. */
void fw_event_summary (const fw_event_t *ev, char *buf, size_t len);

#endif
