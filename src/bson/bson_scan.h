/*
 * bson_scan.h - a bounds-checked walk over a BSON document's elements that
 * only finds where each one is (type, key, value bytes), for the hot paths
 * that bson_iter_next would make pay for decoding every element.
 * Shared by bson_view.c and event.c; not a public interface.
 */
#ifndef FLOWWARDEN_BSON_SCAN_H
#define FLOWWARDEN_BSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
   uint8_t type;
   const uint8_t *name;
   size_t nlen;
   const uint8_t *value;
   size_t vsize;
   uint32_t offset; /* of the element's type byte, from the start of the document */
} fw_bson_elem_t;

/* Reads the element of the document data[0..len) at *pos (start with 4)
 * and moves *pos past it. False at the end, or on bytes that would lead out
 * of the document. */
bool fw_bson_scan_next (const uint8_t *data, uint32_t len, uint32_t *pos, fw_bson_elem_t *e);

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

#endif
