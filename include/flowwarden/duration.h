/*
 * duration.h - the one duration grammar, for every duration flowwarden
 * reads from a command line (--since, --until, --claim-ttl, ...).
 *
 * A duration is digits, an optional fraction (a point and digits) and one
 * unit: ms, s, m, h, d (24 h) or w (7 d), with nothing around or between
 * ("500ms", "1.5s", "30m", "7d"). The fraction must come to a whole number
 * of milliseconds ("0.5ms" is refused); at most 2^53 ms. It is the grammar
 * of a script's durations (lua/flowwarden/duration.lua, which scripts
 * parse with); tests/data/durations.txt holds the cases both must agree on.
 */
#ifndef FLOWWARDEN_DURATION_H
#define FLOWWARDEN_DURATION_H

#include <stdbool.h>
#include <stdint.h>

#include "flowwarden/error.h"

#define FW_DURATION_MAX_MS ((int64_t) 1 << 53)

/* Parses text into *out_ms (>= 0; "0s" is 0: whether zero is allowed is
 * the caller's rule). On failure fills error with a message that names the
 * value and says what is expected, ready to follow "option: ". */
bool fw_duration_parse (const char *text, int64_t *out_ms, fw_error_t *error);

#endif /* FLOWWARDEN_DURATION_H */
