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
   FW_OP_OTHER
} fw_op_t;

typedef struct {
   const bson_t *doc;
   fw_op_t op;
   const char *operation_type; /* borrowed from doc */
   bool has_id, has_ns_db, has_ns_coll, has_cluster_time, has_wall_time, has_document_key,
      has_full_document, has_before, has_update_description, has_lsid, has_txn;
   bson_iter_t id;           /* _id: the resume token document */
   bson_iter_t ns_db, ns_coll;
   bson_iter_t cluster_time, wall_time, document_key, full_document, before,
      update_description, lsid, txn_number;
} fw_event_t;

/* Parses doc into ev. Fails (with a message naming the field) when the event
 * lacks _id or operationType, which the change-stream spec requires. */
bool fw_event_parse (const bson_t *doc, fw_event_t *ev, fw_error_t *error);

/* Writes the stable event id (the resume token's _data, or its hex bytes)
 * into buf. Returns false if it did not fit. */
bool fw_event_id (const fw_event_t *ev, char *buf, size_t len);

/* One line for logs: operation, namespace and event id. Never document
 * contents. */
void fw_event_summary (const fw_event_t *ev, char *buf, size_t len);

#endif
