/*
 * stream_partition-private.h - what a partition of a stream (issue 31,
 * fw.stream { partitions = N }) checks before its change stream opens.
 */
#ifndef FLOWWARDEN_STREAM_PARTITION_PRIVATE_H
#define FLOWWARDEN_STREAM_PARTITION_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <mongoc/mongoc.h>

#include "runtime/config/stream_config.h"

/* False, with why written to what[len], when the server cannot hash keys
 * ($toHashedIndexKey, MongoDB 7.0+, needed when partitions > 1) or when the
 * database holds checkpoints of another generation of the stream (see
 * fw_stream_partition_same_generation). True otherwise. Runs for every
 * stream, partitioned or not. client: the stream's (borrowed). */
bool fw_stream_partition_check (const fw_stream_config_t *cfg, mongoc_client_t *client, char *what,
                                size_t len);

/* False, with why written to what[len], when the stream's database holds a
 * checkpoint of the stream with another number of partitions than cfg's
 * (ids "<stream>#k/M" with M != cfg->partitions, or "<stream>" when cfg is a
 * unit): another generation, which this version does not switch from. A
 * checkpoint of the unpartitioned stream counts as partitions 0, so removing
 * partitions from a stream is refused as changing N is. True when they all
 * match, and when they cannot be read (the checkpoint's own read at the open
 * reports that). One query on _id (an anchored prefix). cfg, client:
 * borrowed; also used by flowwarden doctor. */
bool fw_stream_partition_same_generation (const fw_stream_config_t *cfg, mongoc_client_t *client,
                                          char *what, size_t len);

/* The stream's name in a unit's (its length: cfg->name without "#k/N"). */
size_t fw_stream_partition_base_len (const fw_stream_config_t *cfg);

/* The regex "^<base>(#|$)" of the stream's checkpoint ids; the caller
 * frees it; NULL on no memory. */
char *fw_stream_partition_regex (const char *base, size_t n);

/* The generation (number of partitions) of checkpoint id of the stream
 * base[0..n): 0 for the unpartitioned stream's, N for "<base>#k/N", -1 for
 * another stream's (or the generation document). */
int fw_stream_partition_generation_of (const char *id, const char *base, size_t n);

/* The id of the stream's generation document: "<base>#generation". */
#define FW_GENERATION_SUFFIX "#generation"

/* id is base's generation document (base: its first n bytes). */
bool fw_stream_partition_is_generation_doc (const char *id, const char *base, size_t n);

#endif
