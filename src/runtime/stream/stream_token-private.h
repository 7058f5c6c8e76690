/*
 * stream_token-private.h - the position's tokens for the files that set or
 * compare them without reading the position itself (stream_position.c):
 * exactly_once's transactions and sinks, the checkpoint read at a start.
 * The position (fw_position_t) is stream_position-private.h's.
 */
#ifndef FLOWWARDEN_STREAM_TOKEN_PRIVATE_H
#define FLOWWARDEN_STREAM_TOKEN_PRIVATE_H

#include <stdbool.h>

#include <bson/bson.h>

#include "bson/event.h"
#include "runtime/checkpoint/checkpoint_store.h"

typedef struct fw_position fw_position_t; /* stream_position-private.h */

/* dst = a copy of src (dst initialized). */
void fw_position_set_token (bson_t *dst, const bson_t *src);

/* dst = a copy of ev's resume token (its _id) when that is a document;
 * false (dst untouched) otherwise. */
bool fw_position_set_event_token (bson_t *dst, const fw_event_t *ev);

/* Whether a position's handled token processed and seen token seen (each
 * NULL: none) are both committed (a token, or NULL: never). */
static inline bool
fw_position_tokens_are (const bson_t *processed, const bson_t *seen, const bson_t *committed)
{
   return committed && processed && bson_equal (processed, committed) &&
          (!seen || bson_equal (seen, committed));
}

/* p = the position stored in cp: its handled token (read from again), else
 * its seen token (*candidate = 1); *from_checkpoint set when cp holds
 * either, nothing done when it holds none. */
void fw_position_from_stored (fw_position_t *p, const fw_checkpoint_t *cp, int *candidate,
                              bool *from_checkpoint);

/* As fw_position_from_stored, but cp's position (exactly once: a sink's)
 * replaces p's whole and *candidate = 0 first. */
void fw_position_replace_stored (fw_position_t *p, const fw_checkpoint_t *cp, int *candidate,
                                 bool *from_checkpoint);

#endif
