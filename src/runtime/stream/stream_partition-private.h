/*
 * stream_partition-private.h - what a partition of a stream (issue 31,
 * fw.stream { partitions = N }) checks before its change stream opens.
 */
#ifndef FLOWWARDEN_STREAM_PARTITION_PRIVATE_H
#define FLOWWARDEN_STREAM_PARTITION_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <mongoc/mongoc.h>

#include "flowwarden/stream_config.h"

/* For a unit of a partitioned stream (cfg->partitions > 0): false, with why
 * written to what[len], when the server cannot hash keys ($toHashedIndexKey,
 * MongoDB 7.0+, needed when partitions > 1) or when the database holds
 * checkpoints of the stream with another number of partitions (or of the
 * stream unpartitioned): another generation, which this version does not
 * switch from. True otherwise, and for an unpartitioned stream (no query).
 * client: the stream's (borrowed). */
bool fw_stream_partition_check (const fw_stream_config_t *cfg, mongoc_client_t *client,
                                char *what, size_t len);

#endif
