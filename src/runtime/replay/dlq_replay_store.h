/*
 * dlq_replay_store.h - the DLQ store a replay of a stream reads: the
 * stream's DLQ (or the script's default one, where ctx:send_to_dlq sends a
 * stream's entries when it has no DLQ of its own). A replay claims, extends
 * and settles its entries, and reads and closes their sequences, through it.
 */
#ifndef FLOWWARDEN_DLQ_REPLAY_STORE_H
#define FLOWWARDEN_DLQ_REPLAY_STORE_H

#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_store.h"

/* A reader's MongoDB store (fw_dlq_store_mongo_open) on the client d is
 * bound to (fw_dispatcher_bind), or its dlq.connection's. The caller owns it
 * (fw_dlq_store_destroy) and destroys it before that client goes back. NULL
 * with error filled when the stream has no DLQ or no client. */
fw_dlq_store_t *fw_dlq_replay_store (fw_dispatcher_t *d, fw_error_t *error);

#endif
