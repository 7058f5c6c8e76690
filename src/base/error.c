#include <stdio.h>
#include <string.h>

#include "flowwarden/error.h"

void
fw_error_set (fw_error_t *error, int code, const char *fmt, ...)
{
   va_list ap;

   if (!error) {
      return;
   }
   error->code = code;
   va_start (ap, fmt);
   vsnprintf (error->message, sizeof error->message, fmt, ap);
   va_end (ap);
}

