/*
 * event_path_bench.c - flowwarden's own per-event path, in process, no network.
 *
 * Replays change events (raw BSON) through the real dispatch path of a stream
 * worker, fw_event_dispatch: fw_event_parse, handler lookup, fw_event_ctx_begin,
 * pushing the handler and the ctx, fw_lua_host_call (with the stream's timeout
 * hook and memory accounting), stats. The only thing missing compared to a
 * running stream is libmongoc handing the event over and the checkpoint
 * bookkeeping after it. Scenarios (the same handlers as bench/run_bench.py):
 *
 *   S1  on_insert = function(ctx) end
 *   S2  reads three fields of the full document, one of them nested
 *       (d.seq, d.amount, d.customer.name)
 *   S3  walks the whole full document recursively with pairs()
 *   B1, B2  S1's and S2's work in on_batch over batches of 500 events (issue
 *       30), through fw_batch_dispatch: for i, ctx in batch:events() do ... end
 *
 * and, for reference, what the same events cost without Lua:
 *
 *   parse   fw_event_parse only (the envelope's top level)
 *   walk    libbson visits every element of the whole event, recursively,
 *           reading each value (the "libbson's own walk speed" floor)
 *   table   fw_bson_lua_push_document of the full document (the eager
 *           conversion a plain-table handler pays), then lua_pop
 *
 *   fw_event_path_bench [--events N] [--size small|large] [--file EVENTS.bson]
 *                       [--only s1,s2,s3,b1,b2,parse,walk,table] [--json] [--no-metrics]
 *
 * The workers count in a metrics registry as under `flowwarden run` (what the
 * admin endpoint exposes); --no-metrics leaves that out, to measure its cost.
 *
 * Events come from --file (concatenated BSON documents, e.g. recorded from
 * the stand-in by bench/run_bench.py) or are generated here: a ring of 1024
 * distinct insert events shaped exactly like the ones bench/bench_docs.py
 * loads (--size small: ~300-byte documents, ~500-byte events; large: ~4 KB
 * documents). Each scenario warms up on 10% of N, then times N dispatches.
 * "per core" rates use the process CPU time (this program is one thread);
 * wall-clock rates are printed too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bson/bson.h>
#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "bson/event.h"
#include "ops/metrics.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/host/lua_host.h"
#include "runtime/stream/event_settle.h"

#define RING 1024

/* The registry the workers count in, as under `flowwarden run`; NULL with
 * --no-metrics. */
static fw_metrics_t *metrics;

/* Where settled counts, as a stream's summary. */
typedef struct {
   fw_stream_metrics_t *metrics;
   fw_stream_stats_t summary;
} settle_to_t;

/* The stream's per-event settle, as `run` wires it (ud: a settle_to_t). */
static void
settled (void *ud, const char *stream, const fw_event_t *ev, const fw_outcome_t *o)
{
   settle_to_t *to = ud;
   fw_event_settle (to->metrics, &to->summary, stream, ev, o);
}

static const char *const S1_BODY = "  on_insert = function(ctx) end,\n";

static const char *const S2_PRELUDE = "local acc, nlen = 0, 0\n";
static const char *const S2_BODY =
   "  on_insert = function(ctx)\n"
   "    local d = ctx:full_document()\n"
   "    acc = acc + d.seq + d.amount\n"
   "    nlen = nlen + #d.customer.name\n"
   "  end,\n";

static const char *const S3_PRELUDE =
   "local leaves = 0\n"
   "local function walk(t)\n"
   "  local n = 0\n"
   "  for _, v in pairs(t) do\n"
   "    if type(v) == \"table\" then n = n + walk(v) else n = n + 1 end\n"
   "  end\n"
   "  return n\n"
   "end\n";
static const char *const S3_BODY =
   "  on_insert = function(ctx)\n"
   "    leaves = leaves + walk(ctx:full_document())\n"
   "  end,\n";

/* B1, B2: the same work in on_batch, batches of BATCH events. */
#define BATCH 500
static const char *const B1_BODY =
   "  batch = { max_events = 500 },\n"
   "  on_batch = function(batch)\n"
   "    for _, ctx in batch:events() do end\n"
   "  end,\n";
static const char *const B2_BODY =
   "  batch = { max_events = 500 },\n"
   "  on_batch = function(batch)\n"
   "    for _, ctx in batch:events() do\n"
   "      local d = ctx:full_document()\n"
   "      acc = acc + d.seq + d.amount\n"
   "      nlen = nlen + #d.customer.name\n"
   "    end\n"
   "  end,\n";

typedef struct {
   bson_t **ev;
   size_t n;
   size_t bytes;
} ring_t;

typedef struct {
   const char *name;
   double wall_s, cpu_s;
   uint64_t n;
   size_t lua_kb;
} result_t;

static double
clock_s (clockid_t id)
{
   struct timespec ts;
   clock_gettime (id, &ts);
   return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---- events ------------------------------------------------------------ */

/* Mirrors bench/bench_docs.py small_doc() / large_doc(). */
static void
append_doc (bson_t *d, uint32_t i, bool large)
{
   bson_oid_t oid;
   bson_t sub, arr, item;
   char name[32], sku[32], key[16];

   bson_oid_init (&oid, NULL);
   BSON_APPEND_OID (d, "_id", &oid);
   BSON_APPEND_INT32 (d, "seq", (int32_t) i);
   BSON_APPEND_UTF8 (d, "status", "paid");
   BSON_APPEND_DOCUMENT_BEGIN (d, "customer", &sub);
   snprintf (name, sizeof name, "cust-%06u", i % 100000);
   BSON_APPEND_UTF8 (&sub, "name", name);
   BSON_APPEND_UTF8 (&sub, "tier", "gold");
   BSON_APPEND_UTF8 (&sub, "city", "Lyon");
   bson_append_document_end (d, &sub);
   BSON_APPEND_DOUBLE (d, "amount", (double) (i % 10000) / 100.0 + 0.5);
   BSON_APPEND_INT32 (d, "qty", (int32_t) (i % 7 + 1));
   BSON_APPEND_ARRAY_BEGIN (d, "items", &arr);
   for (int k = 0; k < 2; k++) {
      snprintf (key, sizeof key, "%d", k);
      BSON_APPEND_DOCUMENT_BEGIN (&arr, key, &item);
      snprintf (sku, sizeof sku, "SKU-%05u", k == 0 ? i % 50000 : (i * 7) % 50000);
      BSON_APPEND_UTF8 (&item, "sku", sku);
      BSON_APPEND_INT32 (&item, "qty", k == 0 ? 2 : 1);
      BSON_APPEND_DOUBLE (&item, "price", k == 0 ? 9.99 : 24.5);
      bson_append_document_end (&arr, &item);
   }
   bson_append_array_end (d, &arr);
   BSON_APPEND_UTF8 (d, "region", "eu-west");
   BSON_APPEND_DATE_TIME (d, "created", INT64_C (1705320000000));
   if (large) {
      BSON_APPEND_ARRAY_BEGIN (d, "lines", &arr);
      for (int k = 0; k < 36; k++) {
         snprintf (key, sizeof key, "%d", k);
         BSON_APPEND_DOCUMENT_BEGIN (&arr, key, &item);
         snprintf (sku, sizeof sku, "SKU-%05u", (i + (uint32_t) k * 13) % 50000);
         BSON_APPEND_UTF8 (&item, "sku", sku);
         BSON_APPEND_INT32 (&item, "qty", k % 5 + 1);
         BSON_APPEND_DOUBLE (&item, "price", 1.25 * (k + 1));
         BSON_APPEND_UTF8 (&item, "desc", "standard line item description, 48 chars long..");
         bson_append_document_end (&arr, &item);
      }
      bson_append_array_end (d, &arr);
   }
}

/* An insert event as MongoDB 6.0 (and the stand-in) lays it out. */
static bson_t *
make_event (uint32_t i, bool large)
{
   bson_t *ev = bson_new ();
   bson_t sub, full;
   char data[40];
   bson_iter_t it;

   snprintf (data, sizeof data, "82%08X%08X01800000000000", 0x65A1B2C3u + i / 1000, i % 1000 + 1);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "_id", &sub);
   BSON_APPEND_UTF8 (&sub, "_data", data);
   bson_append_document_end (ev, &sub);
   BSON_APPEND_UTF8 (ev, "operationType", "insert");
   BSON_APPEND_TIMESTAMP (ev, "clusterTime", 0x65A1B2C3u + i / 1000, i % 1000 + 1);
   BSON_APPEND_DATE_TIME (ev, "wallTime", INT64_C (1705320000000) + i);
   bson_init (&full);
   append_doc (&full, i, large);
   BSON_APPEND_DOCUMENT (ev, "fullDocument", &full);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "ns", &sub);
   BSON_APPEND_UTF8 (&sub, "db", "bench");
   BSON_APPEND_UTF8 (&sub, "coll", "events");
   bson_append_document_end (ev, &sub);
   BSON_APPEND_DOCUMENT_BEGIN (ev, "documentKey", &sub);
   if (bson_iter_init_find (&it, &full, "_id")) {
      BSON_APPEND_OID (&sub, "_id", bson_iter_oid (&it));
   }
   bson_append_document_end (ev, &sub);
   bson_destroy (&full);
   return ev;
}

static bool
load_file (const char *path, ring_t *r)
{
   FILE *f = fopen (path, "rb");
   size_t cap = 0;
   uint8_t hdr[4];

   if (!f) {
      perror (path);
      return false;
   }
   while (fread (hdr, 1, 4, f) == 4) {
      uint32_t len = (uint32_t) hdr[0] | (uint32_t) hdr[1] << 8 | (uint32_t) hdr[2] << 16 |
                     (uint32_t) hdr[3] << 24;
      uint8_t *buf;
      if (len < 5 || len > 16 * 1024 * 1024 || !(buf = malloc (len))) {
         fprintf (stderr, "%s: bad BSON length %u\n", path, len);
         fclose (f);
         return false;
      }
      memcpy (buf, hdr, 4);
      if (fread (buf + 4, 1, len - 4, f) != len - 4) {
         fprintf (stderr, "%s: truncated document\n", path);
         free (buf);
         fclose (f);
         return false;
      }
      if (r->n == cap) {
         cap = cap ? cap * 2 : 1024;
         r->ev = realloc (r->ev, cap * sizeof *r->ev);
      }
      r->ev[r->n] = bson_new_from_data (buf, len);
      free (buf);
      if (!r->ev[r->n]) {
         fprintf (stderr, "%s: invalid BSON document #%zu\n", path, r->n + 1);
         fclose (f);
         return false;
      }
      r->bytes += len;
      r->n++;
   }
   fclose (f);
   if (r->n == 0) {
      fprintf (stderr, "%s: no events\n", path);
      return false;
   }
   return true;
}

/* ---- baselines without Lua ---------------------------------------------- */

static volatile uint64_t sink;

static uint64_t
walk_iter (bson_iter_t *it)
{
   uint64_t n = 0;
   while (bson_iter_next (it)) {
      bson_iter_t child;
      uint32_t len;
      switch (bson_iter_type (it)) {
      case BSON_TYPE_DOCUMENT:
      case BSON_TYPE_ARRAY:
         if (bson_iter_recurse (it, &child)) {
            n += walk_iter (&child);
         }
         break;
      case BSON_TYPE_UTF8:
         n += (uint64_t) bson_iter_utf8 (it, &len)[0] + len;
         break;
      case BSON_TYPE_INT32:
         n += (uint64_t) bson_iter_int32 (it);
         break;
      case BSON_TYPE_INT64:
      case BSON_TYPE_DATE_TIME:
         n += (uint64_t) bson_iter_as_int64 (it);
         break;
      case BSON_TYPE_DOUBLE:
         n += (uint64_t) bson_iter_double (it);
         break;
      default:
         n++;
      }
      n += (uint64_t) bson_iter_key (it)[0];
   }
   return n;
}

static bool
run_baseline (const char *name, const ring_t *r, uint64_t n, result_t *out)
{
   uint64_t warm = n / 10 + 1, acc = 0;
   lua_State *L = NULL;
   fw_error_t err;
   fw_lua_host_t *host = NULL;

   if (strcmp (name, "table") == 0) {
      host = fw_lua_host_new (&err);
      if (!host) {
         fprintf (stderr, "%s\n", err.message);
         return false;
      }
      L = fw_lua_host_state (host);
   }
   double w0 = 0, c0 = 0;
   for (uint64_t i = 0; i < warm + n; i++) {
      const bson_t *ev = r->ev[i % r->n];
      if (i == warm) {
         w0 = clock_s (CLOCK_MONOTONIC);
         c0 = clock_s (CLOCK_PROCESS_CPUTIME_ID);
      }
      if (name[0] == 'p') {
         fw_event_t e;
         if (!fw_event_parse (ev, &e, &err)) {
            fprintf (stderr, "parse: %s\n", err.message);
            return false;
         }
         acc += e.op;
      } else if (name[0] == 'w') {
         bson_iter_t it;
         bson_iter_init (&it, ev);
         acc += walk_iter (&it);
      } else {
         bson_iter_t it;
         if (!bson_iter_init_find (&it, ev, "fullDocument") ||
             !fw_bson_lua_push_value (L, &it, "fullDocument", &err)) {
            fprintf (stderr, "table: conversion failed\n");
            return false;
         }
         lua_pop (L, 1);
      }
   }
   out->wall_s = clock_s (CLOCK_MONOTONIC) - w0;
   out->cpu_s = clock_s (CLOCK_PROCESS_CPUTIME_ID) - c0;
   out->n = n;
   out->lua_kb = host ? fw_lua_host_memory_used (host) / 1024 : 0;
   sink = acc;
   fw_lua_host_destroy (host);
   return true;
}

/* ---- the dispatch path --------------------------------------------------- */

static bool
write_script (char *path, size_t len, const char *prelude, const char *body)
{
   int fd;
   FILE *f;

   snprintf (path, len, "/tmp/fw_event_path_bench_XXXXXX.lua");
   fd = mkstemps (path, 4);
   if (fd < 0 || !(f = fdopen (fd, "w"))) {
      perror ("mkstemps");
      return false;
   }
   fprintf (f,
            "local fw = require(\"flowwarden\")\n%s"
            "fw.stream {\n"
            "  name = \"bench\",\n"
            "  collection = \"events\",\n"
            "  checkpoint = { save_every = 100 },\n"
            "%s"
            "}\n",
            prelude ? prelude : "", body);
   fclose (f);
   return true;
}

/* Events i .. i + k - 1 of the ring as one batch through d (m: its metrics
 * block, or NULL). */
static bool
dispatch_batch (fw_dispatcher_t *d, fw_stream_metrics_t *m, const ring_t *r, uint64_t i, size_t k)
{
   static fw_event_t evs[BATCH];
   static const fw_event_t *ptrs[BATCH];
   fw_error_t err;

   for (size_t j = 0; j < k; j++) {
      if (!fw_event_parse (r->ev[(i + j) % r->n], &evs[j], &err)) {
         return false;
      }
      ptrs[j] = &evs[j];
      fw_event_received (m, &evs[j]);
   }
   return fw_outcome_finished (fw_batch_dispatch (d, ptrs, k, NULL).kind);
}

static bool
run_dispatch (const char *name, const char *prelude, const char *body, const ring_t *r, uint64_t n,
              result_t *out)
{
   char path[64];
   fw_error_t err;
   fw_lua_host_t *host;
   fw_dispatcher_t *d;
   fw_shutdown_t stop;
   fw_stream_metrics_t *m;
   fw_stream_stats_t st;
   settle_to_t to = {NULL, {0}};
   bool ok = true;
   uint64_t warm = n / 10 + 1;
   double w0 = 0, c0 = 0;

   if (!write_script (path, sizeof path, prelude, body)) {
      return false;
   }
   host = fw_lua_host_new (&err);
   if (!host) {
      fprintf (stderr, "%s\n", err.message);
      unlink (path);
      return false;
   }
   if (!fw_lua_host_load_script (host, path, "mongodb://127.0.0.1:9/bench?replicaSet=rs0", &err)) {
      fprintf (stderr, "%s: %s\n", name, err.message);
      fw_lua_host_destroy (host);
      unlink (path);
      return false;
   }
   unlink (path);
   /* No client: the dispatcher needs one only for a DLQ or fw.mongo, which
    * these scenarios do not use. */
   if (fw_shutdown_init (&stop) != 0) {
      fprintf (stderr, "%s: cannot set up the stop flag\n", name);
      fw_lua_host_destroy (host);
      return false;
   }
   d = fw_dispatcher_new (host, 0, NULL, &stop, &err);
   if (!d) {
      fprintf (stderr, "%s: %s\n", name, err.message);
      fw_shutdown_cleanup (&stop);
      return false;
   }
   /* Counted as `run` counts them (the admin endpoint's metrics), unless
    * --no-metrics. */
   m = metrics ? fw_metrics_stream (metrics, fw_dispatcher_config (d)->name) : NULL;
   fw_dispatcher_set_metrics (d, m);
   to.metrics = m;
   fw_dispatcher_set_outcome_sink (d, settled, &to); /* the stream's settle of each event */
   for (uint64_t i = 0; i < warm + n; i++) {
      if (i == warm) {
         w0 = clock_s (CLOCK_MONOTONIC);
         c0 = clock_s (CLOCK_PROCESS_CPUTIME_ID);
      }
      if (name[0] == 'b') { /* a batch, ending at the warm-up's end or N's */
         uint64_t end = i < warm ? warm : warm + n;
         size_t k = end - i < BATCH ? (size_t) (end - i) : BATCH;
         if (!dispatch_batch (d, m, r, i, k)) {
            fprintf (stderr, "%s: dispatch stopped\n", name);
            ok = false;
            break;
         }
         i += k - 1;
         continue;
      }
      fw_event_t parsed;
      if (!fw_event_parse (r->ev[i % r->n], &parsed, &err)) {
         fprintf (stderr, "%s: dispatch stopped\n", name);
         ok = false;
         break;
      }
      fw_event_received (m, &parsed);
      if (!fw_outcome_finished (fw_event_dispatch (d, &parsed).kind)) {
         fprintf (stderr, "%s: dispatch stopped\n", name);
         ok = false;
         break;
      }
      if (m) {
         fw_stream_metrics_set_lua_memory (m, fw_lua_host_memory_used (fw_dispatcher_host (d)));
      }
   }
   out->wall_s = clock_s (CLOCK_MONOTONIC) - w0;
   out->cpu_s = clock_s (CLOCK_PROCESS_CPUTIME_ID) - c0;
   out->n = n;
   out->lua_kb = fw_lua_host_memory_used (fw_dispatcher_host (d)) / 1024;
   fw_stream_summary_read (&to.summary, &st);
   if (ok && st.handled != warm + n) {
      fprintf (stderr,
               "%s: %" PRIu64 " of %" PRIu64 " events handled (handler errors: %" PRIu64 ")\n",
               name, st.handled, warm + n, st.handler_errors);
      ok = false;
   }
   fw_dispatcher_destroy (d);
   fw_shutdown_cleanup (&stop);
   return ok;
}

static int
usage (const char *prog)
{
   fprintf (stderr,
            "usage: %s [--events N] [--size small|large] [--file EVENTS.bson]\n"
            "          [--only s1,s2,s3,b1,b2,parse,walk,table] [--json] [--no-metrics]\n",
            prog);
   return 2;
}

int
main (int argc, char **argv)
{
   uint64_t n = 1000000;
   bool large = false, json = false, no_metrics = false;
   const char *file = NULL, *only = "parse,walk,table,s1,s2,s3";
   ring_t ring = {0};
   result_t res[8];
   int nres = 0;

   for (int i = 1; i < argc; i++) {
      if (strcmp (argv[i], "--events") == 0 && i + 1 < argc) {
         n = strtoull (argv[++i], NULL, 10);
      } else if (strcmp (argv[i], "--size") == 0 && i + 1 < argc) {
         i++;
         if (strcmp (argv[i], "large") == 0) {
            large = true;
         } else if (strcmp (argv[i], "small") != 0) {
            return usage (argv[0]);
         }
      } else if (strcmp (argv[i], "--file") == 0 && i + 1 < argc) {
         file = argv[++i];
      } else if (strcmp (argv[i], "--only") == 0 && i + 1 < argc) {
         only = argv[++i];
      } else if (strcmp (argv[i], "--json") == 0) {
         json = true;
      } else if (strcmp (argv[i], "--no-metrics") == 0) {
         no_metrics = true;
      } else {
         return usage (argv[0]);
      }
   }
   if (n == 0) {
      return usage (argv[0]);
   }
   if (!no_metrics) {
      metrics = fw_metrics_new ();
   }
   if (file) {
      if (!load_file (file, &ring)) {
         return 1;
      }
   } else {
      ring.ev = calloc (RING, sizeof *ring.ev);
      for (uint32_t i = 0; i < RING; i++) {
         ring.ev[i] = make_event (i, large);
         ring.bytes += ring.ev[i]->len;
      }
      ring.n = RING;
   }

   const char *order[] = {"parse", "walk", "table", "s1", "s2", "s3", "b1", "b2"};
   for (int k = 0; k < 8; k++) {
      const char *name = order[k];
      size_t l = strlen (name);
      const char *p = only;
      bool want = false;
      while ((p = strstr (p, name))) {
         if ((p == only || p[-1] == ',') && (p[l] == ',' || p[l] == '\0')) {
            want = true;
            break;
         }
         p += l;
      }
      if (!want) {
         continue;
      }
      result_t *r = &res[nres];
      memset (r, 0, sizeof *r);
      r->name = name;
      bool ok;
      if (name[0] == 'b') {
         ok = run_dispatch (name, name[1] == '2' ? S2_PRELUDE : NULL,
                            name[1] == '2' ? B2_BODY : B1_BODY, &ring, n, r);
      } else if (name[0] == 's') {
         const char *pre = name[1] == '1' ? NULL : name[1] == '2' ? S2_PRELUDE : S3_PRELUDE;
         const char *body = name[1] == '1' ? S1_BODY : name[1] == '2' ? S2_BODY : S3_BODY;
         ok = run_dispatch (name, pre, body, &ring, n, r);
      } else {
         ok = run_baseline (name, &ring, n, r);
      }
      if (!ok) {
         return 1;
      }
      nres++;
   }

   double avg = (double) ring.bytes / (double) ring.n;
   if (json) {
      printf ("{\"events\": %" PRIu64
              ", \"distinct_events\": %zu, \"avg_event_bytes\": %.0f, "
              "\"source\": \"%s\", \"results\": {",
              n, ring.n, avg, file ? "file" : (large ? "generated-large" : "generated-small"));
      for (int k = 0; k < nres; k++) {
         printf (
            "%s\"%s\": {\"events_per_cpu_s\": %.0f, \"events_per_wall_s\": %.0f, "
            "\"ns_per_event\": %.1f, \"lua_kb\": %zu}",
            k ? ", " : "", res[k].name, (double) res[k].n / res[k].cpu_s,
            (double) res[k].n / res[k].wall_s, res[k].cpu_s * 1e9 / (double) res[k].n,
            res[k].lua_kb);
      }
      printf ("}}\n");
   } else {
      printf ("event path, %" PRIu64 " events per scenario (%zu distinct, %.0f bytes avg, %s)\n", n,
              ring.n, avg, file ? file : (large ? "generated, large" : "generated, small"));
      printf ("%-8s %16s %16s %12s %10s\n", "", "events/s/core", "events/s wall", "ns/event",
              "Lua KB");
      for (int k = 0; k < nres; k++) {
         printf ("%-8s %16.0f %16.0f %12.1f %10zu\n", res[k].name, (double) res[k].n / res[k].cpu_s,
                 (double) res[k].n / res[k].wall_s, res[k].cpu_s * 1e9 / (double) res[k].n,
                 res[k].lua_kb);
      }
   }
   for (size_t i = 0; i < ring.n; i++) {
      bson_destroy (ring.ev[i]);
   }
   free (ring.ev);
   return 0;
}
