/*
 * outcome.c - the names of an event's outcomes (runtime/dispatch/outcome.h).
 */
#include "runtime/dispatch/outcome.h"

const char *
fw_outcome_name (fw_outcome_kind_t kind)
{
   static const char *const names[FW_OUTCOME_KINDS] = {
      "handled", "skipped", "dlq",  "parked", "deferred",      "lost",   "no_handler",
      "failed",  "stopped", "held", "no_dlq", "stream_failed", "yielded"};
   return (unsigned) kind < FW_OUTCOME_KINDS ? names[kind] : "unknown";
}
