/*
 * stream_server.c - whether the server a stream reads from can take the
 * stream's change stream options: some need MongoDB 6.0, and a 5.0 server
 * refuses them (or, for pre-images, reads them from elsewhere) every time
 * the stream opens. Called by worker_main (stream_worker.c) only.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/stream/stream_partition-private.h"
#include "runtime/stream/stream_read-private.h"

#define FW_WIRE_6_0 17 /* maxWireVersion of MongoDB 6.0 (wire_version.h) */

/* The MongoDB release a maxWireVersion stands for; NULL when not listed. */
static const char *
release_of (int64_t wire)
{
   static const char *const releases[] = {[6] = "3.6",  [7] = "4.0",  [8] = "4.2",  [9] = "4.4",
                                          [13] = "5.0", [14] = "5.1", [15] = "5.2", [16] = "5.3"};
   if (wire >= 0 && wire < (int64_t) (sizeof releases / sizeof *releases)) {
      return releases[wire];
   }
   return NULL;
}

/* The first of the stream's options that needs MongoDB 6.0, as the script
 * spells it, written to `opt`, and what to do on an older server written to
 * `advice`; false when it has none. */
static bool
option_needing_6_0 (const fw_stream_config_t *cfg, char *opt, size_t len, const char **advice)
{
   const char *fd = cfg->full_document, *before = cfg->full_document_before_change;

   if (fd && (strcmp (fd, "whenAvailable") == 0 || strcmp (fd, "required") == 0)) {
      snprintf (opt, len, "full_document = \"%s\"", fd);
      *advice = "use full_document = \"updateLookup\" on this server, or upgrade it";
      return true;
   }
   if (before && strcmp (before, "off") != 0) {
      /* 5.0 parses fullDocumentBeforeChange but reads pre-images only from
       * collections with recordPreImages, which flowwarden does not use. */
      snprintf (opt, len, "full_document_before_change = \"%s\"", before);
      *advice =
         "remove it on this server (pre-images come from the collection's "
         "changeStreamPreAndPostImages, a 6.0 option), or upgrade it";
      return true;
   }
   return false;
}

bool
fw_stream_server_supports (const fw_stream_config_t *cfg, mongoc_client_t *client, char *what,
                           size_t len)
{
   char opt[160];
   const char *advice = NULL;
   mongoc_server_description_t *sd;
   const bson_t *hello;
   bson_iter_t it;
   bson_error_t berr;
   int64_t wire = -1;
   const char *release;

   if (!fw_stream_partition_check (cfg, client, what, len)) {
      return false; /* issue 31: stream_partition.c */
   }
   if (!option_needing_6_0 (cfg, opt, sizeof opt, &advice)) {
      return true;
   }
   /* The server the change stream will open on (a read, primary). */
   if (!(sd = mongoc_client_select_server (client, false, NULL, &berr))) {
      return true; /* not known yet: opening the change stream will say why */
   }
   hello = mongoc_server_description_hello_response (sd);
   if (hello && bson_iter_init_find (&it, hello, "maxWireVersion") &&
       BSON_ITER_HOLDS_NUMBER (&it)) {
      wire = bson_iter_as_int64 (&it);
   }
   if (wire < 0 || wire >= FW_WIRE_6_0) {
      mongoc_server_description_destroy (sd);
      return true;
   }
   release = release_of (wire);
   snprintf (what, len,
             "stream \"%s\": %s needs MongoDB 6.0 or later, but the server %s is MongoDB %s "
             "(maxWireVersion %lld): the stream is stopped; %s",
             cfg->name, opt, mongoc_server_description_host (sd)->host_and_port,
             release ? release : "older than 6.0", (long long) wire, advice);
   mongoc_server_description_destroy (sd);
   return false;
}
