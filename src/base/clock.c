#include <time.h>

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
