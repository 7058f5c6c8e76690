#include "flowwarden/clock.h"

static int64_t
read_ns (clockid_t clock)
{
   struct timespec ts;
   clock_gettime (clock, &ts);
   return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t
fw_now_ms (void)
{
   return read_ns (CLOCK_REALTIME) / 1000000;
}

int64_t
fw_mono_ms (void)
{
   return read_ns (CLOCK_MONOTONIC) / 1000000;
}

int64_t
fw_mono_ns (void)
{
   return read_ns (CLOCK_MONOTONIC);
}

struct timespec
fw_clock_after (clockid_t clock, int64_t after_ms)
{
   struct timespec ts;

   clock_gettime (clock, &ts);
   ts.tv_sec += after_ms / 1000;
   ts.tv_nsec += (after_ms % 1000) * 1000000;
   if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
   }
   return ts;
}
