/*
 * stream_reload-private.h - a reload's hand-over to the stream's thread
 * (stream_reload.c): the program left pending and what its switch reads of
 * the stream.
 */
#ifndef FLOWWARDEN_STREAM_RELOAD_PRIVATE_H
#define FLOWWARDEN_STREAM_RELOAD_PRIVATE_H

#include <pthread.h>

#include "runtime/config/stream_config.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/stream/stream_worker.h"

struct fw_stream_lanes; /* stream_lanes.c */

/* Part of the stream's state (w->pending). What it reads of the stream is
 * set as the stream is made (stream_program.c): its dispatcher and settings
 * (a switch takes the new program into them in place), its running lanes
 * (a link: they start and stop with each run). */
typedef struct fw_stream_pending {
   pthread_mutex_t mu;
   fw_stream_worker_t *next;             /* a reload's replacement, applied at an event boundary */
   int has;                              /* read without the lock on the hot path */
   fw_stream_worker_t *w;                /* the stream */
   fw_dispatcher_t *d;                   /* its dispatcher */
   const fw_stream_config_t *cfg;        /* its settings (fw_dispatcher_config (d)) */
   struct fw_stream_lanes *const *lanes; /* its running lanes, NULL in it: none */
} fw_stream_pending_t;

#endif
