/*
 * check.c - what a failed FW_ASSERT does (flowwarden/check.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "flowwarden/check.h"

void
fw_check_failed (const char *cond, const char *file, int line, const char *func)
{
   fprintf (stderr, "flowwarden: internal check failed at %s:%d (%s): %s\n", file, line, func,
            cond);
   fflush (stderr);
   abort ();
}
