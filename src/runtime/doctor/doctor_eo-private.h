/*
 * doctor_eo-private.h - the checks of the stores a stream runs exactly once
 * into, for doctor_stores.c (which walks the script's connections).
 */
#ifndef FLOWWARDEN_DOCTOR_EO_PRIVATE_H
#define FLOWWARDEN_DOCTOR_EO_PRIVATE_H

#include "runtime/doctor/doctor.h"

/* exactly_once into the PostgreSQL connection name (doctor_eo_pg.c): the
 * privileges its position table needs, when a stream of L's script uses it. */
void fw_doctor_eo_pg (lua_State *L, fw_doctor_report_t *r, const char *name);

/* exactly_once into the MongoDB connection name (uri_text: its URI; a
 * deployment other than the stream's, doctor_eo_mongo.c): reachable, with
 * transactions, and its transaction lifetime, when a stream of L's script
 * uses it. */
void fw_doctor_eo_mongo (lua_State *L, fw_doctor_report_t *r, const char *name,
                         const char *uri_text);

#endif
