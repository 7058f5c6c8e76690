#include <stdio.h>
#include <string.h>

#include "flowwarden/error.h"

static void
set (fw_error_t *error, int domain, int code, const char *fmt, va_list ap)
{
   error->domain = domain;
   error->code = code;
   vsnprintf (error->message, sizeof error->message, fmt, ap);
}

void
fw_error_set (fw_error_t *error, int domain, const char *fmt, ...)
{
   va_list ap;

   if (!error) {
      return;
   }
   va_start (ap, fmt);
   set (error, domain, 0, fmt, ap);
   va_end (ap);
}

void
fw_error_set_code (fw_error_t *error, int domain, int code, const char *fmt, ...)
{
   va_list ap;

   if (!error) {
      return;
   }
   va_start (ap, fmt);
   set (error, domain, code, fmt, ap);
   va_end (ap);
}
