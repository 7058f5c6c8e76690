/*
 * io_deadline.h - a per-thread deadline for libmongoc's socket reads and
 * writes.
 *
 * libmongoc 1.23 has no per-operation socket timeout: every read and write
 * waits up to the URI's socketTimeoutMS. A handler with a 2 s budget must
 * not hang 5 minutes on a server that stopped answering, so clients handed
 * to fw.mongo get a stream initiator that wraps each connection's stream;
 * the wrapper clamps every read and write to what is left of the deadline
 * the calling thread set. Past the deadline it fails at once with ETIMEDOUT
 * without touching the socket; libmongoc then reports a stream error and
 * drops the connection (its state is unknown after a timeout, as in every
 * driver).
 *
 * What the wrapper cannot bound: connecting a new socket (connectTimeoutMS,
 * TLS handshake included) and waiting for server selection
 * (serverSelectionTimeoutMS). Keep those short in the URI.
 */
#ifndef FLOWWARDEN_IO_DEADLINE_H
#define FLOWWARDEN_IO_DEADLINE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"

/* Sets the calling thread's deadline: a CLOCK_MONOTONIC time in nanoseconds
 * (see fw_mono_ns in clock.h), or 0 for none. Set it around an operation and
 * clear it (0) afterwards. Setting a deadline (not 0) also clears the "hit"
 * flag below. Never fails. */
void fw_io_deadline_set (int64_t deadline_ns);

/* True when, since the calling thread last set a deadline, the deadline cut
 * a read or write short or refused a connection: the operation failed
 * because of it. (The socket's clock may fire a millisecond before the
 * deadline, so comparing clocks afterwards is not reliable.) */
bool fw_io_deadline_hit (void);

/* The calling thread's deadline, 0 when none. */
int64_t fw_io_deadline_get (void);

/* True when the calling thread has a deadline and it has passed. */
bool fw_io_deadline_passed (void);

/*
 * Makes every connection client opens from now on honour the deadline of the
 * thread using it, through mongoc_client_set_stream_initiator (which replaces
 * any initiator set before). Works on single and pooled clients (for a
 * pooled client: its application connections; the pool's monitors keep their
 * own sockets). Call it before the client's first operation, so no
 * connection escapes the wrapper. Returns false with error filled only for a
 * NULL client.
 */
bool fw_io_deadline_install (mongoc_client_t *client, fw_error_t *error);

#endif
