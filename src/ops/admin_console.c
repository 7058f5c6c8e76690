/*
 * admin_console.c - the console's routes: its embedded files, and the
 * dead-letter requests (their route and query arguments) that admin.c hands
 * to the runtime's control.
 */
#include <stdlib.h>
#include <string.h>

#include "admin-private.h"

const char *
fw_admin_dlq_arg (const fw_admin_dlq_request_t *req, const char *key)
{
   for (int i = 0; i < req->n_args && i < FW_ADMIN_DLQ_MAX_ARGS; i++) {
      if (strcmp (req->keys[i], key) == 0) {
         return req->values[i];
      }
   }
   return NULL;
}

bool
fw_admin_route_dlq (fw_admin_dlq_request_t *req, const char *url, const char **allow)
{
   static const char entries[] = "/v1/dlq/entries";
   const char *rest, *slash;

   if (strcmp (url, "/v1/dlq/sequences") == 0) {
      req->verb = FW_ADMIN_DLQ_SEQUENCES;
      return true;
   }
   if (strncmp (url, entries, sizeof entries - 1) != 0) {
      return false;
   }
   rest = url + sizeof entries - 1;
   if (!*rest || strcmp (rest, "/") == 0) {
      req->verb = FW_ADMIN_DLQ_LIST;
      return true;
   }
   if (*rest++ != '/' || !*rest) {
      return false;
   }
   slash = strchr (rest, '/');
   req->verb = FW_ADMIN_DLQ_SHOW;
   if (slash) {
      if (strcmp (slash, "/replay") == 0) {
         req->verb = FW_ADMIN_DLQ_REPLAY;
      } else if (strcmp (slash, "/discard") == 0) {
         req->verb = FW_ADMIN_DLQ_DISCARD;
      } else {
         return false;
      }
      *allow = "POST";
   }
   req->id = slash ? strndup (rest, (size_t) (slash - rest)) : strdup (rest);
   return req->id != NULL;
}

const fw_console_file_t *
fw_console_file (const char *url)
{
   if (strcmp (url, "/index.html") == 0) {
      url = "/";
   }
   for (const fw_console_file_t *f = fw_console_files; f->path; f++) {
      if (strcmp (f->path, url) == 0) {
         return f;
      }
   }
   return NULL;
}

enum MHD_Result
fw_admin_collect_arg (void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
   fw_admin_dlq_request_t *d = cls;

   (void) kind;
   if (d->n_args == FW_ADMIN_DLQ_MAX_ARGS) {
      d->n_args++; /* too many: noticed by begin */
      return MHD_NO;
   }
   if (d->n_args > FW_ADMIN_DLQ_MAX_ARGS) {
      return MHD_NO;
   }
   d->keys[d->n_args] = strdup (key ? key : "");
   d->values[d->n_args] = strdup (value ? value : "");
   if (!d->keys[d->n_args] || !d->values[d->n_args]) {
      free ((char *) d->keys[d->n_args]);
      free ((char *) d->values[d->n_args]);
      return MHD_NO;
   }
   d->n_args++;
   return MHD_YES;
}
