/*
 * event_oversize-private.h - split and oversize events (event_oversize.c),
 * below the stream itself: the fragments of a split event gathered into one,
 * the oversize policy's pipeline stages, its stubs and the errors it
 * applies to. It knows neither the stream worker nor the dispatcher: the
 * oversize policy tells its stubs, the stream dead-letters them.
 */
#ifndef FLOWWARDEN_EVENT_OVERSIZE_PRIVATE_H
#define FLOWWARDEN_EVENT_OVERSIZE_PRIVATE_H

#include <bson/bson.h>

#include "bson/event.h"
#include "flowwarden/error.h"
#include "runtime/config/stream_config.h"

/* The field of an oversize stub that holds the event's $bsonSize. */
#define FW_OVERSIZE_FIELD "fwOversizeBytes"

/* Gathers the fragments of one split event ($changeStreamSplitLargeEvent). */
typedef struct {
   bson_t fields; /* the top-level fields of the fragments so far */
   bson_t whole;  /* the last reassembled event */
   int32_t next;  /* the fragment expected next (1-based); 0: none pending */
   int32_t of;
} fw_split_buffer_t;

typedef enum {
   FW_SPLIT_WHOLE,   /* not a fragment: *whole is the event itself */
   FW_SPLIT_PENDING, /* a fragment kept: more are to come */
   FW_SPLIT_DONE,    /* the last fragment: *whole is the reassembled event */
   FW_SPLIT_BROKEN   /* a fragment out of order (error says which): buffer emptied */
} fw_split_t;

void fw_split_buffer_init (fw_split_buffer_t *b);
void fw_split_buffer_reset (fw_split_buffer_t *b);
void fw_split_buffer_cleanup (fw_split_buffer_t *b);
bool fw_split_buffer_active (const fw_split_buffer_t *b);

/* Adds one change event. *whole is borrowed: doc itself, or the buffer's
 * reassembled event, valid until the next call with the same buffer. */
fw_split_t fw_split_buffer_add (fw_split_buffer_t *b, const bson_t *doc, const bson_t **whole,
                                fw_error_t *error);

/* The stream's pipeline (cfg->pipeline) plus, with split, the
 * $changeStreamSplitLargeEvent stage, or else with oversize = "skip" the stage
 * that turns events over the threshold into stubs. out is initialized here,
 * owned by the caller. */
void fw_oversize_pipeline (const fw_stream_config_t *cfg, bool split, bson_t *out);

/* True (and *size) when doc is an oversize stub. */
bool fw_oversize_stub_size (const bson_t *doc, int64_t *size);

/* True when the server refused the $changeStreamSplitLargeEvent stage. */
bool fw_oversize_stage_rejected (const bson_error_t *berr);

/* MongoDB's errors for an event too large to send: BSONObjectTooLarge, and
 * the split stage's "fragment size ... is greater than maximum allowed
 * fragment size" when one field alone fills a fragment
 * (change_stream_split_event_helpers.cpp). */
#define FW_ERR_OBJECT_TOO_LARGE 10334
#define FW_ERR_SPLIT_FAILED 7182500

/* True when berr is one of them: the oversize policy applies. */
bool fw_oversize_error (const bson_error_t *berr);

/* Writes into what (size bytes) why the stream stops on BSONObjectTooLarge
 * or a failed split (berr): the event after position (NULL: the stream's
 * start) is over 16 MiB; split says whether the split stage was in use, skip
 * whether the oversize = "skip" stage was; then what to do. */
void fw_oversize_failure (const bson_t *position, bool split, bool skip, const bson_error_t *berr,
                          char *what, size_t size);

typedef enum {
   FW_OVERSIZE_EVENT,    /* a whole event for the dispatcher (*parsed: readable) */
   FW_OVERSIZE_FRAGMENT, /* a fragment kept in the buffer: read on */
   FW_OVERSIZE_STUB,     /* an oversize = "skip" stub of *size bytes, to dead-letter */
   FW_OVERSIZE_BROKEN    /* fragments out of order (error says which): re-open */
} fw_oversize_step_t;

/* Takes one change event *doc as fw_event_parse left it in *ev (*parsed: it
 * succeeded): keeps a fragment of a split event, turns the last one into the
 * reassembled event (*doc, *ev and *parsed then describe it; *doc is
 * borrowed from split, valid until its next use), and tells an oversize =
 * "skip" stub (oversize_skip) from a whole event. */
fw_oversize_step_t fw_oversize_take (bool oversize_skip, fw_split_buffer_t *split,
                                     const bson_t **doc, fw_event_t *ev, bool *parsed,
                                     int64_t *size, fw_error_t *error);

#endif
