/*
 * outage_config.h - a stream's circuit breaker and rate limit settings
 * (issue 29), copied out of the spec flowwarden.config validated
 * (lua/flowwarden/config/outage.lua).
 */
#ifndef FLOWWARDEN_OUTAGE_CONFIG_H
#define FLOWWARDEN_OUTAGE_CONFIG_H

#include <lua.h>

#include "runtime/config/stream_config.h"

/* Reads spec.circuit, spec.rate_limit and spec.rate_burst of the spec table at t
 * into cfg->circuit and cfg->rate_limit (released by
 * fw_stream_config_cleanup). Leaves the stack as it found it; false with
 * error filled when memory ran out or the rate is malformed. */
bool fw_outage_config_read (lua_State *L, int t, fw_stream_config_t *cfg, fw_error_t *error);

#endif
