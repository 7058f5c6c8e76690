/*
 * event.c - parses a change event's top level once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/event.h"
#include "bson_scan.h"
#include "flowwarden/log.h"

static fw_op_t
op_of (const char *s)
{
   switch (s[0]) {
   case 'i':
      return strcmp (s, "insert") == 0 ? FW_OP_INSERT : FW_OP_OTHER;
   case 'u':
      return strcmp (s, "update") == 0 ? FW_OP_UPDATE : FW_OP_OTHER;
   case 'r':
      return strcmp (s, "replace") == 0 ? FW_OP_REPLACE : FW_OP_OTHER;
   case 'd':
      return strcmp (s, "delete") == 0 ? FW_OP_DELETE : FW_OP_OTHER;
   case 's':
      return strcmp (s, "snapshot") == 0 ? FW_OP_SNAPSHOT : FW_OP_OTHER;
   default:
      return FW_OP_OTHER;
   }
}

/* Which field a top-level key names, by length then bytes. */
static int
field_of (const uint8_t *k, size_t n)
{
#define IS(lit) (n == sizeof (lit) - 1 && memcmp (k, lit, sizeof (lit) - 1) == 0)
   switch (n) {
   case 2:
      return IS ("ns") ? FW_EV_NS : -1;
   case 3:
      return IS ("_id") ? FW_EV_ID : -1;
   case 4:
      return IS ("lsid") ? FW_EV_LSID : -1;
   case 8:
      return IS ("wallTime") ? FW_EV_WALL_TIME : -1;
   case 9:
      return IS ("txnNumber") ? FW_EV_TXN_NUMBER : -1;
   case 10:
      return IS ("splitEvent") ? FW_EV_SPLIT : -1;
   case 11:
      return IS ("clusterTime") ? FW_EV_CLUSTER_TIME : IS ("documentKey") ? FW_EV_DOCUMENT_KEY : -1;
   case 12:
      return IS ("fullDocument") ? FW_EV_FULL_DOCUMENT : -1;
   case 17:
      return IS ("updateDescription") ? FW_EV_UPDATE_DESCRIPTION : -1;
   case 24:
      return IS ("fullDocumentBeforeChange") ? FW_EV_BEFORE : -1;
   default:
      return -1;
   }
#undef IS
}

/* The change-event schema of MongoDB's manual, for the fields the runtime
 * reads: the BSON types each may have, a bit per type (every type a server
 * sends is below 32). */
#define T(t) (1u << (t))
static const uint32_t field_types[FW_EV_FIELD_COUNT] = {
   [FW_EV_ID] = T (BSON_TYPE_DOCUMENT),
   [FW_EV_CLUSTER_TIME] = T (BSON_TYPE_TIMESTAMP),
   [FW_EV_WALL_TIME] = T (BSON_TYPE_DATE_TIME),
   [FW_EV_NS] = T (BSON_TYPE_DOCUMENT),
   [FW_EV_DOCUMENT_KEY] = T (BSON_TYPE_DOCUMENT),
   [FW_EV_FULL_DOCUMENT] = T (BSON_TYPE_DOCUMENT) | T (BSON_TYPE_NULL),
   [FW_EV_BEFORE] = T (BSON_TYPE_DOCUMENT) | T (BSON_TYPE_NULL),
   [FW_EV_UPDATE_DESCRIPTION] = T (BSON_TYPE_DOCUMENT),
   [FW_EV_LSID] = T (BSON_TYPE_DOCUMENT),
   [FW_EV_TXN_NUMBER] = T (BSON_TYPE_INT64),
   [FW_EV_SPLIT] = T (BSON_TYPE_DOCUMENT),
};

static bool
type_in (uint8_t type, uint32_t types)
{
   return type < 32 && (types & T (type)) != 0;
}

/* MongoDB's names of the BSON types ($type), "document" for an object as
 * the manual's change-event tables say. */
static const char *
type_name (uint8_t type)
{
   static const char *const names[] = {
      "?",         "double",     "string",    "document",
      "array",     "binData",    "undefined", "objectId",
      "bool",      "date",       "null",      "regex",
      "dbPointer", "javascript", "symbol",    "javascriptWithScope",
      "int",       "timestamp",  "long",      "decimal"};
   if (type < sizeof names / sizeof names[0]) {
      return names[type];
   }
   return type == BSON_TYPE_MAXKEY ? "maxKey" : type == BSON_TYPE_MINKEY ? "minKey" : "?";
}

/* Names the types of a mask, as "document or null". */
static void
types_text (uint32_t types, char *buf, size_t len)
{
   size_t o = 0;
   buf[0] = '\0';
   for (uint8_t t = 0; t < 32 && o < len; t++) {
      if (types & T (t)) {
         o += (size_t) snprintf (buf + o, len - o, "%s%s", o ? " or " : "", type_name (t));
      }
   }
}

/* A field of the wrong type, kept for the parse's message. */
typedef struct {
   const char *parent; /* "ns", "updateDescription", or NULL at the top */
   const uint8_t *name;
   size_t nlen;
   uint8_t found;
   uint32_t expected;
} wrong_field_t;

/* The first few, in the event's order (a pipeline that gets one type wrong
 * often gets more wrong: the message names them all at once). */
#define WRONG_MAX 4
typedef struct {
   wrong_field_t field[WRONG_MAX];
   int n;
} wrong_t;

static void
wrong_set (wrong_t *w, const char *parent, const fw_bson_elem_t *e, uint32_t expected)
{
   if (w->n < WRONG_MAX) {
      wrong_field_t *f = &w->field[w->n++];
      f->parent = parent;
      f->name = e->name;
      f->nlen = e->nlen;
      f->found = e->type;
      f->expected = expected;
   }
}

/* The types the manual gives a field inside ns (db, coll) or
 * updateDescription (updatedFields, removedFields, truncatedArrays,
 * disambiguatedPaths), by length then bytes (constant-size compares, which
 * the compiler inlines); 0 for any other field. */
static uint32_t
part_types (bool in_ns, const uint8_t *k, size_t n)
{
#define IS(lit) (n == sizeof (lit) - 1 && memcmp (k, lit, sizeof (lit) - 1) == 0)
   if (in_ns) {
      return IS ("db") || IS ("coll") ? T (BSON_TYPE_UTF8) : 0;
   }
   switch (n) {
   case 13:
      return IS ("updatedFields")   ? T (BSON_TYPE_DOCUMENT)
             : IS ("removedFields") ? T (BSON_TYPE_ARRAY)
                                    : 0;
   case 15:
      return IS ("truncatedArrays") ? T (BSON_TYPE_ARRAY) : 0;
   case 18:
      return IS ("disambiguatedPaths") ? T (BSON_TYPE_DOCUMENT) : 0;
   default:
      return 0;
   }
#undef IS
}

/* Moves *p past the element there when it is head (a literal: the type
 * byte, the key and its NUL) with a value of that type's length, before
 * end. Inline with a literal, the compare is a few word compares. */
static inline bool
take (const uint8_t **p, const uint8_t *end, const char *head, size_t hlen)
{
   const uint8_t *q = *p;
   size_t avail = (size_t) (end - q);
   uint32_t len;

   if (avail < hlen + 4 || memcmp (q, head, hlen) != 0) {
      return false;
   }
   len = fw_bson_read_u32 (q + hlen);
   avail -= hlen;
   if (head[0] == BSON_TYPE_UTF8) { /* the length, then the bytes and their NUL */
      if (len < 1 || len > avail - 4 || q[hlen + 4 + len - 1] != 0) {
         return false;
      }
      *p = q + hlen + 4 + len;
   } else { /* a document or array: its length counts itself and its NUL */
      if (len < 5 || len > avail || q[hlen + len - 1] != 0) {
         return false;
      }
      *p = q + hlen + len;
   }
   return true;
}

#define TAKE(p, end, type, key) ((p) < (end) && take (&(p), (end), type key, sizeof (type key)))

/* True when ns (doc) has the shape a server sends, { db, coll } or { db }
 * (strings), or updateDescription { updatedFields, removedFields,
 * truncatedArrays, disambiguatedPaths } in that order, any absent, of the
 * manual's types: checked in place without finding where each key ends,
 * as this runs for every event. Any other shape goes to check_parts. */
static bool
plain_ns (const fw_bson_elem_t *doc)
{
   const uint8_t *p = doc->value + 4, *end = doc->value + doc->vsize - 1;
   (void) TAKE (p, end, "\x02", "db");
   (void) TAKE (p, end, "\x02", "coll");
   return p == end && *end == 0;
}

static bool
plain_update (const fw_bson_elem_t *doc)
{
   const uint8_t *p = doc->value + 4, *end = doc->value + doc->vsize - 1;
   (void) TAKE (p, end, "\x03", "updatedFields");
   (void) TAKE (p, end, "\x04", "removedFields");
   (void) TAKE (p, end, "\x04", "truncatedArrays");
   (void) TAKE (p, end, "\x03", "disambiguatedPaths");
   return p == end && *end == 0;
}
#undef TAKE

/* Checks the fields of doc (ns or updateDescription: parent) that the
 * manual types: a wrong one into *w. Their values are skipped, not walked.
 * False when the document's own bytes do not add up. */
static bool
check_parts (const char *parent, const fw_bson_elem_t *doc, wrong_t *w)
{
   bool in_ns = parent[0] == 'n';
   uint32_t len = (uint32_t) doc->vsize, pos = 4, types;
   fw_bson_elem_t e;

   while (fw_bson_scan_next (doc->value, len, &pos, &e)) {
      if ((types = part_types (in_ns, e.name, e.nlen)) != 0 && !type_in (e.type, types)) {
         wrong_set (w, parent, &e, types);
      }
   }
   return pos == len - 1 && doc->value[len - 1] == '\0';
}

/* Sets the parse's error for the wrong-typed fields w. */
static void
wrong_error (const wrong_t *w, fw_error_t *error)
{
   char text[600], expected[64]; /* 4 fields of known names: enough */
   size_t o = 0;

   text[0] = '\0';
   for (int i = 0; i < w->n && o < sizeof text; i++) {
      const wrong_field_t *f = &w->field[i];
      types_text (f->expected, expected, sizeof expected);
      o += (size_t) snprintf (text + o, sizeof text - o, "%s%s%s%s%.*s is %s, expected %s",
                              i ? "; " : "", i ? "field " : "", f->parent ? f->parent : "",
                              f->parent ? "." : "", (int) f->nlen, (const char *) f->name,
                              type_name (f->found), expected);
   }
   fw_error_set (error, FW_ERROR_INVALID, "change event field %s (MongoDB's change-event schema)",
                 text);
}

bool
fw_event_parse (const bson_t *doc, fw_event_t *ev, fw_error_t *error)
{
   const uint8_t *data = bson_get_data (doc);
   uint32_t pos = 4;
   fw_bson_elem_t e;
   wrong_t wrong;
   const char *broken = NULL;

   wrong.n = 0; /* not the whole struct: this runs for every event */
   memset (ev, 0, sizeof *ev);
   ev->doc = doc;
   while (fw_bson_scan_next (data, doc->len, &pos, &e)) {
      int f;
      if (e.nlen == 13 && memcmp (e.name, "operationType", 13) == 0) {
         uint32_t n = fw_bson_read_u32 (e.value);
         if (e.type != BSON_TYPE_UTF8) {
            wrong_set (&wrong, NULL, &e, T (BSON_TYPE_UTF8));
         } else if (n >= 1 && e.value[4 + n - 1] == '\0') {
            ev->operation_type = (const char *) e.value + 4;
            ev->op = op_of (ev->operation_type);
         }
      } else if ((f = field_of (e.name, e.nlen)) >= 0) {
         /* Located whatever its type: a refused event is dead-lettered
          * with its fields as they came. */
         ev->offset[f] = e.offset;
         ev->keylen[f] = (uint32_t) e.nlen;
         if (!type_in (e.type, field_types[f])) {
            wrong_set (&wrong, NULL, &e, field_types[f]);
         } else if (f == FW_EV_NS && !plain_ns (&e) && !check_parts ("ns", &e, &wrong)) {
            broken = "ns";
         } else if (f == FW_EV_UPDATE_DESCRIPTION && !plain_update (&e) &&
                    !check_parts ("updateDescription", &e, &wrong)) {
            broken = "updateDescription";
         }
      }
   }
   if (pos != doc->len - 1) {
      fw_error_set (error, FW_ERROR_INVALID, "change event is not valid BSON");
      return false;
   }
   if (!fw_event_has (ev, FW_EV_ID) || data[ev->offset[FW_EV_ID]] != BSON_TYPE_DOCUMENT) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "change event has no _id (resume token): a pipeline stage must not "
                    "remove or change _id");
      return false;
   }
   if (broken) {
      fw_error_set (error, FW_ERROR_INVALID, "change event field %s is not valid BSON", broken);
      return false;
   }
   if (wrong.n > 0) {
      wrong_error (&wrong, error);
      return false;
   }
   if (!ev->operation_type) {
      fw_error_set (error, FW_ERROR_INVALID, "change event has no operationType");
      return false;
   }
   return true;
}
#undef T

bool
fw_event_field (const fw_event_t *ev, fw_event_field_t f, bson_iter_t *out)
{
   return ev->offset[f] &&
          bson_iter_init_from_data_at_offset (out, bson_get_data (ev->doc), ev->doc->len,
                                              ev->offset[f], ev->keylen[f]);
}

/* The value bytes of field f when it is of type and at least size bytes
 * fit in the document after it; NULL otherwise. */
static const uint8_t *
field_value (const fw_event_t *ev, fw_event_field_t f, uint8_t type, uint32_t size)
{
   const uint8_t *doc = bson_get_data (ev->doc);
   uint32_t at = ev->offset[f];
   uint32_t pos;

   if (!at || doc[at] != type) {
      return NULL;
   }
   pos = at + 1 + ev->keylen[f] + 1; /* type byte, key, its NUL */
   if (pos >= ev->doc->len || ev->doc->len - pos < size) {
      return NULL;
   }
   return doc + pos;
}

bool
fw_event_field_document (const fw_event_t *ev, fw_event_field_t f, const uint8_t **data,
                         uint32_t *len)
{
   const uint8_t *v = field_value (ev, f, BSON_TYPE_DOCUMENT, 5);
   uint32_t n;

   if (!v) {
      return false;
   }
   n = fw_bson_read_u32 (v);
   if (n < 5 || n > ev->doc->len - (uint32_t) (v - bson_get_data (ev->doc)) || v[n - 1] != '\0') {
      return false;
   }
   *data = v;
   *len = n;
   return true;
}

/* Read from the bytes (no iterator: this runs for every event). */
int64_t
fw_event_time_ms (const fw_event_t *ev)
{
   const uint8_t *v;

   if ((v = field_value (ev, FW_EV_WALL_TIME, BSON_TYPE_DATE_TIME, 8))) {
      return (int64_t) fw_bson_read_u64 (v);
   }
   if ((v = field_value (ev, FW_EV_CLUSTER_TIME, BSON_TYPE_TIMESTAMP, 8))) {
      /* A Timestamp: the increment in the low four bytes, the seconds above. */
      return (int64_t) (fw_bson_read_u64 (v) >> 32) * 1000;
   }
   return 0;
}

static const char *
ns_part (const fw_event_t *ev, const char *key)
{
   bson_iter_t ns, child;
   if (fw_event_field (ev, FW_EV_NS, &ns) && BSON_ITER_HOLDS_DOCUMENT (&ns) &&
       bson_iter_recurse (&ns, &child) && bson_iter_find (&child, key) &&
       BSON_ITER_HOLDS_UTF8 (&child)) {
      return bson_iter_utf8 (&child, NULL);
   }
   return NULL;
}

const char *
fw_event_ns_db (const fw_event_t *ev)
{
   return ns_part (ev, "db");
}

const char *
fw_event_ns_coll (const fw_event_t *ev)
{
   return ns_part (ev, "coll");
}

size_t
fw_event_id_len (const fw_event_t *ev)
{
   bson_iter_t id, child;
   const uint8_t *data;
   uint32_t dlen;

   if (!fw_event_field (ev, FW_EV_ID, &id)) {
      return 0;
   }
   if (bson_iter_recurse (&id, &child) && bson_iter_find (&child, "_data") &&
       BSON_ITER_HOLDS_UTF8 (&child)) {
      uint32_t slen;
      bson_iter_utf8 (&child, &slen);
      return slen;
   }
   bson_iter_document (&id, &dlen, &data);
   return (size_t) dlen * 2;
}

char *
fw_event_id_dup (const fw_event_t *ev)
{
   size_t n = fw_event_id_len (ev);
   char *id;

   if (n == 0 || !(id = bson_malloc (n + 1))) {
      return NULL;
   }
   if (!fw_event_id (ev, id, n + 1)) {
      bson_free (id);
      return NULL;
   }
   return id;
}

bool
fw_event_id (const fw_event_t *ev, char *buf, size_t len)
{
   bson_iter_t id, child;
   const uint8_t *data;
   uint32_t dlen;

   if (!fw_event_field (ev, FW_EV_ID, &id)) {
      return false;
   }
   if (bson_iter_recurse (&id, &child) && bson_iter_find (&child, "_data") &&
       BSON_ITER_HOLDS_UTF8 (&child)) {
      uint32_t slen;
      const char *s = bson_iter_utf8 (&child, &slen);
      if ((size_t) slen + 1 > len) {
         return false;
      }
      memcpy (buf, s, (size_t) slen + 1);
      return true;
   }
   /* Not a server-shaped token: use its bytes, which are just as stable. */
   bson_iter_document (&id, &dlen, &data);
   if ((size_t) dlen * 2 + 1 > len) {
      return false;
   }
   for (uint32_t i = 0; i < dlen; i++) {
      snprintf (buf + 2 * i, 3, "%02x", data[i]);
   }
   buf[2 * dlen] = '\0';
   return true;
}

void
fw_event_log_id (const fw_event_t *ev, char *buf, size_t len)
{
   char *whole;

   if (len < 64 || fw_event_id (ev, buf, len)) {
      return;
   }
   /* A server's token holds the documentKey (~180 characters for a small
    * key): a long one is cut, saying how long it is. */
   if ((whole = fw_event_id_dup (ev))) {
      snprintf (buf, len, "%.*s...(%zu characters)", (int) (len - 40), whole, strlen (whole));
      bson_free (whole);
   } else {
      snprintf (buf, len, "(none)");
   }
}

static uint64_t
fnv1a64 (const char *s)
{
   uint64_t h = 14695981039346656037ULL;
   for (; *s; s++) {
      h ^= (unsigned char) *s;
      h *= 1099511628211ULL;
   }
   return h;
}

const char *
fw_event_failure_context (const fw_event_t *ev, const char *where, const char *entry_id, char *buf,
                          size_t len)
{
   bson_iter_t it;
   char *key = NULL;
   size_t n = 0;
   const char *sep = " (";

   buf[0] = '\0';
   if (where && where[0]) {
      n += (size_t) snprintf (buf + n, len - n, "%sat %s", sep, where);
      sep = "; ";
   }
   if (n < len && fw_event_field (ev, FW_EV_DOCUMENT_KEY, &it) && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_t view;
      uint32_t dlen;
      const uint8_t *data;
      bson_iter_document (&it, &dlen, &data);
      if (bson_init_static (&view, data, dlen) &&
          (key = bson_as_relaxed_extended_json (&view, NULL))) {
         n += (size_t) snprintf (buf + n, len - n, "%skey %.200s%s", sep, key,
                                 strlen (key) > 200 ? "..." : "");
         sep = "; ";
         bson_free (key);
      }
   }
   if (n < len && entry_id && entry_id[0]) {
      n += (size_t) snprintf (buf + n, len - n, "%sentry %s", sep, entry_id);
      sep = "; ";
   }
   if (n < len && buf[0]) {
      snprintf (buf + n, len - n, ")");
   }
   return buf;
}

void
fw_event_short_id (const fw_event_t *ev, char *buf, size_t len)
{
   char *whole = fw_event_id_dup (ev);
   size_t n = whole ? strlen (whole) : 0;
   char hex[17] = "", *end = NULL;
   uint64_t ts = 0;

   if (!whole) {
      snprintf (buf, len, "(none)");
      return;
   }
   if (n <= FW_EVENT_SHORT_ID_MAX) {
      snprintf (buf, len, "%s", whole);
      bson_free (whole);
      return;
   }
   if (strncmp (whole, "82", 2) == 0 && n >= 18) {
      memcpy (hex, whole + 2, 16);
      ts = strtoull (hex, &end, 16);
      ts = end && *end == '\0' ? ts : 0;
   }
   if (ts) {
      snprintf (buf, len, "%012llx@%u.%u", (unsigned long long) (fnv1a64 (whole) >> 16),
                (unsigned) (ts >> 32), (unsigned) (ts & 0xffffffffu));
   } else {
      snprintf (buf, len, "%012llx", (unsigned long long) (fnv1a64 (whole) >> 16));
   }
   if (fw_log_enabled (FW_LOG_DEBUG)) {
      size_t used = strlen (buf);
      snprintf (buf + used, len - used, " (token %s)", whole);
      if (strlen (buf) + 1 >= len) { /* cut: say so rather than end mid-token */
         snprintf (buf + len - 5, 5, "...)");
      }
   }
   bson_free (whole);
}

void
fw_event_summary (const fw_event_t *ev, char *buf, size_t len)
{
   char id[540];
   const char *db = fw_event_ns_db (ev);
   const char *coll = fw_event_ns_coll (ev);

   db = db ? db : "";
   coll = coll ? coll : "";
   fw_event_log_id (ev, id, sizeof id);
   /* An invalidate has no namespace: no empty field (and double space) then. */
   snprintf (buf, len, "%s %s%s%s%sevent=%s", ev->operation_type, db, *coll ? "." : "", coll,
             *db || *coll ? " " : "", id);
}

bool
fw_event_order_key (const fw_event_t *ev, bson_t *key)
{
   bson_iter_t it, id;
   uint32_t len;
   const uint8_t *data;
   bson_t dk;

   if (!fw_event_field (ev, FW_EV_DOCUMENT_KEY, &it) || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   if (!bson_init_static (&dk, data, len)) {
      return false;
   }
   if (!bson_iter_init_find (&id, &dk, "_id") || bson_count_keys (&dk) == 1) {
      /* No _id (the key whole), or _id alone (unsharded): the documentKey
       * itself, borrowed from the event. */
      return bson_init_static (key, data, len);
   }
   /* Shard-key fields beside _id: a copy of _id alone. */
   bson_init (key);
   if (!bson_append_iter (key, "_id", 3, &id)) {
      bson_destroy (key);
      return false;
   }
   return true;
}

bool
fw_event_in_txn (const fw_event_t *ev)
{
   return fw_event_has (ev, FW_EV_LSID) && fw_event_has (ev, FW_EV_TXN_NUMBER);
}

bool
fw_event_same_txn (const fw_event_t *a, const fw_event_t *b)
{
   bson_iter_t la, lb, ta, tb;
   const uint8_t *da, *db;
   uint32_t na, nb;

   if (!fw_event_field (a, FW_EV_LSID, &la) || !fw_event_field (b, FW_EV_LSID, &lb) ||
       !fw_event_field (a, FW_EV_TXN_NUMBER, &ta) || !fw_event_field (b, FW_EV_TXN_NUMBER, &tb) ||
       !BSON_ITER_HOLDS_DOCUMENT (&la) || !BSON_ITER_HOLDS_DOCUMENT (&lb) ||
       !BSON_ITER_HOLDS_INT64 (&ta) || !BSON_ITER_HOLDS_INT64 (&tb)) {
      return false;
   }
   bson_iter_document (&la, &na, &da);
   bson_iter_document (&lb, &nb, &db);
   return na == nb && memcmp (da, db, na) == 0 && bson_iter_int64 (&ta) == bson_iter_int64 (&tb);
}
