/*
 * doctor_eo_pg.c - `doctor`'s check of a PostgreSQL connection that a stream
 * runs exactly once into (exactly_once = { connection = name }, issue 40):
 * the privileges to create its position table, flowwarden_checkpoints, and
 * to read and write it, and, for a table made before its column writer_gen,
 * to add it (stream_exactly_once_pg.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "lua_api/pg_io.h"
#include "lua_api/pg_lua.h"
#include "runtime/doctor/doctor_eo-private.h"

#define WAIT_MS 5000

/* What the connected role may do with the table: "" when enough, else the
 * missing privilege's remedy in fix (and the check's text in what). */
static const char *const probe_sql =
   "SELECT to_regclass('flowwarden_checkpoints') IS NOT NULL, "
   "CASE WHEN to_regclass('flowwarden_checkpoints') IS NULL THEN NULL ELSE "
   "has_table_privilege('flowwarden_checkpoints', 'SELECT, INSERT, UPDATE') END, "
   "current_schema() IS NOT NULL AND has_schema_privilege(current_schema(), 'CREATE'), "
   "coalesce(current_schema(), '(none)'), current_user, "
   "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('flowwarden_checkpoints') "
   "AND attname = 'writer_gen' AND NOT attisdropped), "
   "coalesce((SELECT pg_has_role(relowner, 'USAGE') FROM pg_class "
   "WHERE oid = to_regclass('flowwarden_checkpoints')), false)";

/* Whether some stream of L's script runs exactly once into name. */
static bool
used_for_exactly_once (lua_State *L, const char *name)
{
   int top = lua_gettop (L);
   bool used = false;

   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.config") == LUA_TTABLE &&
       lua_getfield (L, -1, "effective") == LUA_TTABLE &&
       lua_getfield (L, -1, "streams") == LUA_TTABLE) {
      for (lua_Integer i = 1; !used && lua_rawgeti (L, -1, i) == LUA_TTABLE; i++) {
         lua_getfield (L, -1, "exactly_once_pg");
         used = lua_isstring (L, -1) && strcmp (lua_tostring (L, -1), name) == 0;
         lua_pop (L, 2);
      }
   }
   lua_settop (L, top);
   return used;
}

static void
report (fw_doctor_report_t *r, const char *name, const PGresult *res)
{
   bool exists = strcmp (PQgetvalue (res, 0, 0), "t") == 0;
   bool can_write = strcmp (PQgetvalue (res, 0, 1), "t") == 0;
   bool can_create = strcmp (PQgetvalue (res, 0, 2), "t") == 0;
   const char *schema = PQgetvalue (res, 0, 3), *user = PQgetvalue (res, 0, 4);
   bool has_gen = strcmp (PQgetvalue (res, 0, 5), "t") == 0;
   bool owner = strcmp (PQgetvalue (res, 0, 6), "t") == 0;
   char fix[512];

   if (exists && can_write && !has_gen && !owner) {
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_FAIL,
                     "as the table's owner: ALTER TABLE flowwarden_checkpoints ADD COLUMN "
                     "writer_gen bigint NOT NULL DEFAULT 0",
                     "connection \"%s\" (PostgreSQL): the position table flowwarden_checkpoints "
                     "has no column writer_gen (made by an earlier version), and role %s, not its "
                     "owner, cannot add it: the stream cannot start",
                     name, user);
   } else if (exists && can_write) {
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_OK, NULL,
                     "connection \"%s\" (PostgreSQL): its position table flowwarden_checkpoints "
                     "exists and can be read and written",
                     name);
   } else if (exists) {
      snprintf (fix, sizeof fix, "GRANT SELECT, INSERT, UPDATE ON flowwarden_checkpoints TO %s",
                user);
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_FAIL, fix,
                     "connection \"%s\" (PostgreSQL): role %s cannot read and write the position "
                     "table flowwarden_checkpoints, so no exactly-once transaction can commit",
                     name, user);
   } else if (can_create) {
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_OK, NULL,
                     "connection \"%s\" (PostgreSQL): the position table flowwarden_checkpoints "
                     "will be created in schema %s on first use",
                     name, schema);
   } else {
      snprintf (fix, sizeof fix,
                "GRANT CREATE ON SCHEMA %s TO %s, or create the table "
                "beforehand as docs/reliability.md shows (\"Exactly once into PostgreSQL\") and "
                "grant SELECT, INSERT, UPDATE on it",
                schema, user);
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_FAIL, fix,
                     "connection \"%s\" (PostgreSQL): role %s may not create the position table "
                     "flowwarden_checkpoints in schema %s",
                     name, user, schema);
   }
}

void
fw_doctor_eo_pg (lua_State *L, fw_doctor_report_t *r, const char *name)
{
   char why[512], *uri = NULL;
   PGconn *conn = NULL;
   PGresult *res = NULL;
   int64_t end = fw_mono_ns () + (int64_t) WAIT_MS * 1000000;

   if (!used_for_exactly_once (L, name)) {
      return;
   }
   if (!(uri = fw_pg_lua_uri (L, name, why, sizeof why)) ||
       fw_pg_connect (uri, end, &conn, why, sizeof why) != FW_PG_OK ||
       fw_pg_exec (conn, probe_sql, 0, NULL, end, &res, why, sizeof why) != FW_PG_OK) {
      /* The connection's own check says why. */
   } else if (PQresultStatus (res) != PGRES_TUPLES_OK || PQntuples (res) != 1) {
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_WARN, NULL,
                     "connection \"%s\" (PostgreSQL): cannot read its privileges (%s)", name,
                     PQresultErrorMessage (res));
   } else {
      report (r, name, res);
   }
   PQclear (res);
   if (conn) {
      PQfinish (conn);
   }
   free (uri);
}
