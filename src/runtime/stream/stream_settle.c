/*
 * stream_settle.c - what an event's outcome means for its stream
 * (stream_settle.h): the one place where a dispatcher's outcome becomes a
 * moved position, a count, or the stream's stop.
 */
#include "flowwarden/check.h"
#include "flowwarden/lua_host.h"
#include "runtime/stream/stream_settle.h"

#if FW_CHECKING
/* A DLQ outcome names its stored entry. */
static bool
names_entry (const fw_outcome_t *o)
{
   return o->kind != FW_OUTCOME_DEAD_LETTERED && o->kind != FW_OUTCOME_PARKED &&
                o->kind != FW_OUTCOME_DEFERRED
             ? true
             : o->entry_id && o->entry_id[0];
}
#endif

fw_read_end_t
fw_stream_settle (const fw_settle_place_t *place, const fw_outcome_t *o)
{
   FW_ASSERT ((unsigned) o->kind < FW_OUTCOME_KINDS);
   if (fw_outcome_comes_back (o->kind)) {
      return place->lease_lost && place->lease_lost (place->ud) ? FW_READ_LOST : FW_READ_STOP;
   }
   if (!fw_outcome_finished (o->kind)) { /* FAILED, NO_DLQ: the stream stops before it */
      place->fail (place->ud, o->kind == FW_OUTCOME_NO_DLQ && place->no_dlq_why
                                 ? place->no_dlq_why
                                 : o->error);
      return FW_READ_FAILED;
   }
   /* A replay's GAVE_UP is its replay's to settle, never a stream's. */
   FW_ASSERT (o->kind != FW_OUTCOME_GAVE_UP);
   FW_ASSERT (names_entry (o));
   if (place->count) {
      place->count (place->ud);
   } else if (place->metrics) {
      fw_stream_metrics_set_lua_memory (place->metrics,
                                        fw_lua_host_memory_used (fw_dispatcher_host (place->d)));
   }
   return place->advance ? place->advance (place->ud) : FW_READ_NEXT;
}
