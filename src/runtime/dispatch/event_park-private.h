/*
 * event_park-private.h - a sequenced DLQ's live side (event_park.c), for the files
 * that take an event or a batch through the dispatcher.
 */
#ifndef FLOWWARDEN_EVENT_PARK_PRIVATE_H
#define FLOWWARDEN_EVENT_PARK_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/dispatch/dispatcher.h"

/* dlq.sequenced on the stream's own DLQ: fw_park_enabled
 * (dispatcher-private.h). */

/* Whether ev, a live event, must be looked up in the open sequences: none
 * are open (the common case) costs one comparison. */
bool fw_park_check_needed (fw_dispatcher_t *d, const fw_event_t *ev);

typedef enum {
   FW_PARK_KEY_OK,    /* d->park.key holds the event's sequence id */
   FW_PARK_KEY_NONE,  /* the event has no key: never sequenced */
   FW_PARK_KEY_FAILED /* dlq.sequence_key failed: its failure table is on the Lua stack */
} fw_park_key_t;

/* Computes the event's sequence id once per event (d->park.key). */
fw_park_key_t fw_park_key (fw_dispatcher_t *d, const fw_event_t *ev, fw_lua_stop_t *stop);

/* The event's sequence (d->park.key) is open in the stream's memory. */
bool fw_park_is_open (const fw_dispatcher_t *d);

typedef enum {
   FW_PARK_TAKEN,    /* d->park.index is the entry's sequenceIndex */
   FW_PARK_CLOSED,   /* park: the sequence was closed meanwhile; handle the event */
   FW_PARK_OVERFLOW, /* max_sequences or max_sequence_size: d->out.failure says which */
   FW_PARK_STOPPED   /* shutdown while the server failed */
} fw_park_take_t;

/* Takes the next index of the event's sequence: open = true opens it (the
 * event is its head), false parks behind it. Retries server errors. */
fw_park_take_t fw_park_take (fw_dispatcher_t *d, bool open);

/* The entry of the taken index is stored: gives the index request back and
 * remembers the sequence as open. */
void fw_park_settle (fw_dispatcher_t *d);

/* The event is finished with: forgets its key. */
void fw_park_end (fw_dispatcher_t *d);

#endif
