/*
 * bson_alloc.h - heap memory for bson_t values.
 *
 * libbson declares bson_t with a 128-byte alignment; malloc and calloc give
 * 16. A bson_t (or a struct holding one) put in calloc'd memory is
 * misaligned, which UBSan reports and some code generation punishes.
 */
#ifndef FLOWWARDEN_BSON_ALLOC_H
#define FLOWWARDEN_BSON_ALLOC_H

#include <stddef.h>

/* size zeroed bytes aligned for a bson_t (and for any struct holding one),
 * or NULL when memory is short. Free with free(). */
void *fw_bson_aligned_calloc (size_t size);

#endif
