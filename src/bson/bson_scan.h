/*
 * bson_scan.h - a bounds-checked walk over a BSON document's elements that
 * only finds where each one is (type, key, value bytes), for the hot paths
 * that bson_iter_next would make pay for decoding every element.
 * Shared by bson_view.c and event.c; not a public interface. Inline: it
 * runs a few dozen times per event (every field lookup of a view scans),
 * and a call per element cost a third of the scan.
 */
#ifndef FLOWWARDEN_BSON_SCAN_H
#define FLOWWARDEN_BSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <bson/bson.h>

typedef struct {
   uint8_t type;
   const uint8_t *name;
   size_t nlen;
   const uint8_t *value;
   size_t vsize;
   uint32_t offset; /* of the element's type byte, from the start of the document */
} fw_bson_elem_t;

static inline uint32_t
fw_bson_read_u32 (const uint8_t *p)
{
   return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static inline uint64_t
fw_bson_read_u64 (const uint8_t *p)
{
   return (uint64_t) fw_bson_read_u32 (p) | (uint64_t) fw_bson_read_u32 (p + 4) << 32;
}

/* Bytes taken by a value of BSON type t at p, or SIZE_MAX when it would
 * run past end (or the type is unknown): the scan stops rather than read out
 * of bounds. Cheaper than bson_iter_next, which decodes every element. */
static inline size_t
fw_bson_scan_value_size (uint8_t t, const uint8_t *p, const uint8_t *end)
{
   size_t avail = (size_t) (end - p);
   size_t n;

   switch (t) {
   case BSON_TYPE_DOUBLE:
   case BSON_TYPE_DATE_TIME:
   case BSON_TYPE_TIMESTAMP:
   case BSON_TYPE_INT64:
      n = 8;
      break;
   case BSON_TYPE_UTF8:
   case BSON_TYPE_CODE:
   case BSON_TYPE_SYMBOL:
      n = avail < 4 ? 0 : 4 + (size_t) fw_bson_read_u32 (p);
      break;
   case BSON_TYPE_DOCUMENT:
   case BSON_TYPE_ARRAY:
   case BSON_TYPE_CODEWSCOPE:
      n = avail < 4 ? 0 : (size_t) fw_bson_read_u32 (p);
      break;
   case BSON_TYPE_BINARY:
      n = avail < 4 ? 0 : 5 + (size_t) fw_bson_read_u32 (p);
      break;
   case BSON_TYPE_UNDEFINED:
   case BSON_TYPE_NULL:
   case BSON_TYPE_MINKEY:
   case BSON_TYPE_MAXKEY:
      return 0; /* no value bytes */
   case BSON_TYPE_OID:
      n = 12;
      break;
   case BSON_TYPE_BOOL:
      n = 1;
      break;
   case BSON_TYPE_REGEX: {
      const uint8_t *a = memchr (p, 0, avail);
      const uint8_t *b = a ? memchr (a + 1, 0, (size_t) (end - a - 1)) : NULL;
      n = b ? (size_t) (b - p) + 1 : 0;
      break;
   }
   case BSON_TYPE_DBPOINTER:
      n = avail < 4 ? 0 : 4 + (size_t) fw_bson_read_u32 (p) + 12;
      break;
   case BSON_TYPE_INT32:
      n = 4;
      break;
   case BSON_TYPE_DECIMAL128:
      n = 16;
      break;
   default:
      return SIZE_MAX;
   }
   return n == 0 || n > avail ? SIZE_MAX : n;
}

/* The NUL that ends the key at p, or end when there is none before end.
 * Keys are short but a byte-at-a-time loop was the scan's dearest part:
 * eight bytes at a time while eight remain before end (all inside the
 * document), with the classic has-a-zero-byte test, whose lowest flagged
 * byte is always a true zero; little-endian only (the lowest address is
 * the lowest byte), else the plain loop. */
static inline const uint8_t *
fw_bson_scan_key_end (const uint8_t *p, const uint8_t *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
   while ((size_t) (end - p) >= 8) {
      uint64_t w, z;
      memcpy (&w, p, 8);
      z = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL;
      if (z) {
         return p + (__builtin_ctzll (z) >> 3);
      }
      p += 8;
   }
#endif
   while (p < end && *p) {
      p++;
   }
   return p;
}

/* Reads the element of the document data[0..len) at *pos (start with 4)
 * and moves *pos past it. False at the end, or on bytes that would lead out
 * of the document. */
static inline bool
fw_bson_scan_next (const uint8_t *data, uint32_t len, uint32_t *pos, fw_bson_elem_t *e)
{
   const uint8_t *end, *p, *nul;

   if (len < 5 || *pos < 4) {
      return false;
   }
   end = data + len - 1; /* the document's trailing NUL */
   p = data + *pos;
   if (p >= end) {
      return false;
   }
   e->offset = *pos;
   e->type = *p++;
   e->name = p;
   nul = fw_bson_scan_key_end (p, end);
   if (nul >= end) {
      return false;
   }
   e->nlen = (size_t) (nul - p);
   e->value = nul + 1;
   if ((e->vsize = fw_bson_scan_value_size (e->type, e->value, end)) == SIZE_MAX) {
      return false;
   }
   *pos = (uint32_t) (e->value + e->vsize - data);
   return true;
}

#endif
