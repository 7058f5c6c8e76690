/*
 * doctor_report.c - the report `flowwarden doctor` fills (doctor.h): its
 * checks, their worst status and their names. The checks (doctor.c,
 * doctor_streams.c, doctor_partitions.c) add to it.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/doctor/doctor.h"

void
fw_doctor_add (fw_doctor_report_t *r, const char *stream, const char *name,
               fw_doctor_status_t status, const char *fix, const char *fmt, ...)
{
   fw_doctor_check_t *c;
   va_list ap;

   if (r->n == r->cap) {
      size_t cap = r->cap ? r->cap * 2 : 16;
      fw_doctor_check_t *grown = realloc (r->checks, cap * sizeof *grown);
      if (!grown) {
         r->out_of_memory = true;
         return;
      }
      r->checks = grown;
      r->cap = cap;
   }
   c = &r->checks[r->n];
   va_start (ap, fmt);
   c->message = bson_strdupv_printf (fmt, ap);
   va_end (ap);
   c->stream = stream ? bson_strdup (stream) : NULL;
   c->name = bson_strdup (name);
   c->fix = fix ? bson_strdup (fix) : NULL;
   c->status = status;
   r->n++;
}

const char *
fw_doctor_status_name (fw_doctor_status_t status)
{
   static const char *const names[] = {"ok", "info", "warn", "fail"};
   return names[status];
}

fw_doctor_status_t
fw_doctor_worst (const fw_doctor_report_t *r)
{
   fw_doctor_status_t worst = FW_DOCTOR_OK;

   if (r->out_of_memory) {
      return FW_DOCTOR_FAIL;
   }
   for (size_t i = 0; i < r->n; i++) {
      if (r->checks[i].status > worst) {
         worst = r->checks[i].status;
      }
   }
   return worst;
}

void
fw_doctor_report_cleanup (fw_doctor_report_t *r)
{
   for (size_t i = 0; i < r->n; i++) {
      bson_free (r->checks[i].stream);
      bson_free (r->checks[i].name);
      bson_free (r->checks[i].message);
      bson_free (r->checks[i].fix);
   }
   free (r->checks);
   memset (r, 0, sizeof *r);
}
