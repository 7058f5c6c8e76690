/*
 * doctor.h - `flowwarden doctor`: what a deployment lacks for a script's
 * streams, found before they run. Each check is one line with a status and,
 * when not ok, what to do. The checks read only: hello, buildInfo,
 * connectionStatus, listCollections, the oplog's two ends, the streams'
 * checkpoints. No document's contents are reported.
 */
#ifndef FLOWWARDEN_DOCTOR_H
#define FLOWWARDEN_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>
#include <mongoc/mongoc.h>

#include "runtime/config/stream_config.h"

typedef enum {
   FW_DOCTOR_OK,
   FW_DOCTOR_INFO, /* shown, counts as ok */
   FW_DOCTOR_WARN,
   FW_DOCTOR_FAIL
} fw_doctor_status_t;

typedef struct {
   char *stream; /* NULL: the deployment's check */
   char *name;   /* "connection", "topology", "privileges", ... */
   fw_doctor_status_t status;
   char *message;
   char *fix; /* NULL when there is nothing to do */
} fw_doctor_check_t;

typedef struct {
   fw_doctor_check_t *checks;
   size_t n, cap;
   bool out_of_memory;
} fw_doctor_report_t;

/* Runs every check of the n streams cfgs against client (borrowed; a
 * single-threaded client whose URI bounds server selection) and appends them
 * to report (zeroed by the caller, released with fw_doctor_report_cleanup).
 * When the deployment cannot be reached, only that check is reported. */
void fw_doctor_run (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
                    fw_doctor_report_t *report);

/* Appends a check of each Redis and PostgreSQL connection declared by the
 * script loaded in L (fw.connection): connects, authenticates and runs a
 * trivial command, 5 s at most each (doctor_stores.c). */
void fw_doctor_stores (lua_State *L, fw_doctor_report_t *report);

/* Appends a check to r (doctor_report.c); message and fix are printf formats (fix may be NULL);
 * on allocation failure sets r->out_of_memory. */
void fw_doctor_add (fw_doctor_report_t *r, const char *stream, const char *name,
                    fw_doctor_status_t status, const char *fix, const char *fmt, ...)
   BSON_GNUC_PRINTF (6, 7);

/* The worst status of the report (FW_DOCTOR_FAIL when out of memory). */
fw_doctor_status_t fw_doctor_worst (const fw_doctor_report_t *report);

/* "ok", "info", "warn", "fail". */
const char *fw_doctor_status_name (fw_doctor_status_t status);

void fw_doctor_report_cleanup (fw_doctor_report_t *report);

#endif
