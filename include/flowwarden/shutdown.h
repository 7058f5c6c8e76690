/*
 * shutdown.h - the process-wide "stop now" flag, with interruptible waits so
 * a stream sleeping in a backoff wakes the moment SIGTERM arrives.
 */
#ifndef FLOWWARDEN_SHUTDOWN_H
#define FLOWWARDEN_SHUTDOWN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t cond;
   bool stopping; /* written under mu (atomically: fw_shutdown_requested reads it without) */
} fw_shutdown_t;

/* Sets up s (caller-owned storage). 0, or the pthread error code with nothing
 * left to clean up; after 0, fw_shutdown_cleanup releases it. */
int fw_shutdown_init (fw_shutdown_t *s);
void fw_shutdown_cleanup (fw_shutdown_t *s);

/* Asks every waiter to stop; idempotent. */
void fw_shutdown_request (fw_shutdown_t *s);

/* Whether a stop was asked; takes no lock. */
bool fw_shutdown_requested (fw_shutdown_t *s);

/* Sleeps up to ms; returns true early (and at once) when a stop was asked. */
bool fw_shutdown_wait_ms (fw_shutdown_t *s, int64_t ms);

#endif
