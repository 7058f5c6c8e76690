/*
 * stream_exactly_once_pg.c - exactly_once = { connection = name } naming a
 * PostgreSQL connection (issue 40): the stream's sink for the dispatcher
 * (fw_txn_sink_t). Each handler attempt runs in one SQL transaction on a
 * connection of the sink's own: BEGIN, the handler's fw.pg statements on
 * that connection (fw_pg_lua_join), an upsert of the stream's position into
 * flowwarden_checkpoints in that database, COMMIT. At the start of a run
 * the position there wins over _fw_checkpoints (which the stream keeps
 * writing as usual, at least once).
 *
 * The position table (created on first use; docs/reliability.md):
 *
 *   flowwarden_checkpoints (database text, stream text, resume_token text,
 *                           epoch bigint, script_version text,
 *                           updated_at timestamptz, writer_gen bigint,
 *                           PRIMARY KEY (database, stream))
 *
 * (writer_gen added to a table made before it). resume_token is the event's
 * _id as canonical extended JSON. Each run claims a writer generation in the
 * row before reading the position (the stored one + 1; a leader at the
 * start of each leadership, as it raises the stored epoch to its own), and
 * the upsert only matches while the stored one is not later, and under ha
 * while the stored epoch is not above the leader's: a deposed leader's
 * transaction commits nothing, nor does a run paused and replaced
 * (SIGSTOP, a stalled VM) that resumes, whether ha was on or off in either
 * (without ha its stream stops). A run without ha goes on from a leader's
 * position: the stored epoch does not fence it. A COMMIT whose reply is
 * lost is decided by reading the table once connected again: the event's
 * token there means it committed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/mongo_lua.h"
#include "lua_api/pg_io.h"
#include "lua_api/pg_lua.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_token-private.h"

/* Every statement of the sink's own (BEGIN, the position, COMMIT) waits at
 * most this long. */
#define SINK_WAIT_MS 30000

#define TABLE "flowwarden_checkpoints"

static const char create_sql[] =
   "CREATE TABLE IF NOT EXISTS " TABLE
   " (database text NOT NULL, stream text NOT NULL, "
   "resume_token text, epoch bigint NOT NULL DEFAULT 0, script_version text, "
   "updated_at timestamptz NOT NULL DEFAULT now(), writer_gen bigint NOT NULL DEFAULT 0, "
   "PRIMARY KEY (database, stream))";

/* A table made before writer_gen: the column is added (by its owner; a role
 * with only the privileges to write it cannot, and says so). Asked first, so
 * that such a role works with a table that has it. */
static const char has_gen_sql[] = "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('" TABLE
                                  "') AND attname = 'writer_gen' AND NOT attisdropped";
static const char add_gen_sql[] = "ALTER TABLE " TABLE
                                  " ADD COLUMN IF NOT EXISTS writer_gen bigint NOT NULL DEFAULT 0";

/* The position's write, as the upsert below: matches while the stored
 * writer generation is not later than this run's ($6, a leader's too) and,
 * under ha ($4 > 0), the stored epoch not above this leader's. Without ha
 * the stored epoch is not compared (a leader's, from before ha was turned
 * off: the run's claim raised the generation past that leader's) and stays
 * as it is, for the next leader. */
#define POSITION_UPSERT                                                                    \
   "INSERT INTO " TABLE                                                                    \
   " AS c (database, stream, resume_token, epoch, script_version, "                        \
   "updated_at, writer_gen) VALUES ($1, $2, $3, $4, $5, now(), $6) "                       \
   "ON CONFLICT (database, stream) DO UPDATE SET resume_token = EXCLUDED.resume_token, "   \
   "epoch = GREATEST(c.epoch, EXCLUDED.epoch), script_version = EXCLUDED.script_version, " \
   "updated_at = now(), writer_gen = GREATEST(c.writer_gen, EXCLUDED.writer_gen) "         \
   "WHERE (EXCLUDED.epoch = 0 OR c.epoch <= EXCLUDED.epoch) AND (EXCLUDED.writer_gen = 0 " \
   "OR c.writer_gen <= EXCLUDED.writer_gen)"

static const char upsert_sql[] = POSITION_UPSERT;

/* A new leader's fence: the stored epoch raised to its own and, unless a
 * newer leader's is stored, the leader's writer generation claimed as a
 * run's is without ha (claim_sql), so that a run without ha from before ha
 * was turned on commits nothing after it. */
static const char fence_sql[] =
   "INSERT INTO " TABLE
   " AS c (database, stream, epoch, writer_gen) VALUES ($1, $2, $3, $4) "
   "ON CONFLICT (database, stream) DO UPDATE SET epoch = GREATEST(c.epoch, EXCLUDED.epoch), "
   "writer_gen = CASE WHEN c.epoch > EXCLUDED.epoch THEN c.writer_gen WHEN c.writer_gen > 0 "
   "THEN c.writer_gen + 1 ELSE GREATEST(EXCLUDED.writer_gen, 1) END RETURNING writer_gen";

/* Without ha, a run's claim of its writer generation: the stored one + 1,
 * or $3 (the current time in milliseconds) when none is stored (no row, a
 * row of a version before writer_gen, or one deleted by hand: past every
 * generation an earlier run may still write with), as on the MongoDB side
 * (checkpoint_store.h). The row's lock orders the claims. */
static const char claim_sql[] =
   "INSERT INTO " TABLE
   " AS c (database, stream, writer_gen) VALUES ($1, $2, $3) "
   "ON CONFLICT (database, stream) DO UPDATE SET writer_gen = CASE WHEN c.writer_gen > 0 "
   "THEN c.writer_gen + 1 ELSE GREATEST(EXCLUDED.writer_gen, 1) END RETURNING writer_gen";

static const char read_sql[] = "SELECT resume_token FROM " TABLE
                               " WHERE database = $1 AND stream = $2";

static const char read_gen_sql[] = "SELECT writer_gen FROM " TABLE
                                   " WHERE database = $1 AND stream = $2";

struct fw_stream_eo_pg {
   fw_stream_eo_t *e;    /* the stream's exactly_once state (owns this) */
   PGconn *conn;         /* the sink's connection, or NULL */
   bool table_ok;        /* the position table was made on conn */
   fw_pg_join_t join;    /* fw.pg's calls on the connection during an attempt */
   fw_mongo_txn_t mongo; /* fw.mongo's writes refused during an attempt */
   char *last;           /* the token last stored in the table (bson_free), or NULL */
   char *uri;            /* the URI conn was opened with (free) */
   const void *host;     /* the program whose URI that is: a reload may change it */
   int64_t gen;          /* the run's (a leader's) writer generation in the table; 0: none */
   char *claimed;        /* the URI whose table holds that claim (free), or NULL */
};

static int64_t
deadline (void)
{
   return fw_mono_ns () + (int64_t) SINK_WAIT_MS * 1000000;
}

static void
set_last (fw_stream_eo_pg_t *s, char *token)
{
   bson_free (s->last);
   s->last = token;
}

static void
close_conn (fw_stream_eo_pg_t *s)
{
   if (s->conn) {
      PQfinish (s->conn);
   }
   s->conn = NULL;
   s->table_ok = false;
   free (s->uri);
   s->uri = NULL;
}

static lua_State *
state_of (fw_stream_eo_pg_t *s)
{
   return fw_lua_host_state (fw_dispatcher_host (s->e->d));
}

/* Runs sql with n parameters on s's connection. FW_PG_OK with *res (the
 * caller's, maybe a server error) or the failure with why; a failed
 * connection is closed. */
static fw_pg_io_t
exec (fw_stream_eo_pg_t *s, const char *sql, int n, const char *const *values, PGresult **res,
      char *why, size_t len)
{
   fw_pg_io_t io = fw_pg_exec (s->conn, sql, n, values, deadline (), res, why, len);

   if (io != FW_PG_OK || PQstatus (s->conn) == CONNECTION_BAD) {
      close_conn (s);
   }
   return io;
}

/* Whether res is a server's refusal; its message in why. */
static bool
refused (const PGresult *res, char *why, size_t len)
{
   ExecStatusType st = PQresultStatus (res);

   if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
      return false;
   }
   snprintf (why, len, "%s", PQresultErrorMessage (res));
   why[strcspn (why, "\n")] = '\0';
   return true;
}

/* Adds writer_gen to a table made before it. As ensure_conn's. */
static fw_pg_io_t
ensure_gen_column (fw_stream_eo_pg_t *s, PGresult **res, char *why, size_t len)
{
   fw_pg_io_t io = exec (s, has_gen_sql, 0, NULL, res, why, len);

   if (io != FW_PG_OK || refused (*res, why, len)) {
      return io;
   }
   if (PQntuples (*res) > 0) {
      PQclear (*res);
      *res = NULL;
      return FW_PG_OK;
   }
   PQclear (*res);
   *res = NULL;
   fw_log (FW_LOG_INFO, s->e->cfg->name,
           "exactly_once: adding the column writer_gen to connection \"%s\"'s " TABLE,
           s->e->cfg->exactly_once_pg);
   if ((io = exec (s, add_gen_sql, 0, NULL, res, why, len)) != FW_PG_OK) {
      return io;
   }
   if (!refused (*res, why, len)) {
      PQclear (*res);
      *res = NULL;
   }
   return FW_PG_OK; /* *res: the refusal (e.g. not the table's owner) */
}

/* Connects (when not connected) and makes the position table. On failure
 * *res may hold the server's refusal (the caller's) and why says it. */
static fw_pg_io_t
ensure_conn (fw_stream_eo_pg_t *s, PGresult **res, char *why, size_t len)
{
   char *uri;
   fw_pg_io_t io;

   *res = NULL;
   if (s->conn && s->host != fw_dispatcher_host (s->e->d)) {
      /* A reload: its script may name another server. */
      uri = fw_pg_lua_uri (state_of (s), s->e->cfg->exactly_once_pg, why, len);
      if (!uri || strcmp (uri, s->uri) != 0) {
         close_conn (s);
      }
      free (uri);
   }
   s->host = fw_dispatcher_host (s->e->d);
   if (s->conn && PQstatus (s->conn) == CONNECTION_OK && s->table_ok) {
      return FW_PG_OK;
   }
   close_conn (s);
   if (!(uri = fw_pg_lua_uri (state_of (s), s->e->cfg->exactly_once_pg, why, len))) {
      return FW_PG_LOST;
   }
   io = fw_pg_connect (uri, deadline (), &s->conn, why, len);
   if (io != FW_PG_OK) {
      free (uri);
      return io;
   }
   s->uri = uri;
   /* Two units of one stream may create it at once: one of them meets a
    * unique violation on the catalog, and its second try sees the table. */
   for (int tries = 0; tries < 2; tries++) {
      PQclear (*res);
      *res = NULL;
      if ((io = exec (s, create_sql, 0, NULL, res, why, len)) != FW_PG_OK) {
         return io;
      }
      if (!refused (*res, why, len)) {
         PQclear (*res);
         *res = NULL;
         if ((io = ensure_gen_column (s, res, why, len)) == FW_PG_OK && !*res) {
            s->table_ok = true;
         }
         return io;
      }
   }
   return FW_PG_OK; /* *res: the refusal (e.g. no CREATE privilege) */
}

/* The event's resume token as canonical extended JSON (bson_free), or NULL. */
static char *
token_json (const fw_event_t *ev)
{
   bson_t token = BSON_INITIALIZER;
   char *json = NULL;

   if (fw_position_set_event_token (&token, ev)) {
      json = bson_as_canonical_extended_json (&token, NULL);
   }
   bson_destroy (&token);
   return json;
}

/* --- the dispatcher's sink ------------------------------------------------ */

static fw_pg_io_t claim_row (fw_stream_eo_pg_t *s, char *why, size_t len);

/* As ensure_conn, then, when the connection's database is not the one the
 * run claimed its row in (a reload named another server or database), the
 * claim there (claim_row) before the first write: a transaction never
 * writes a row its run did not claim, so a late one of an earlier run
 * there commits nothing after it, and a later generation stored there
 * before (the table's own) does not stop this run. */
static fw_pg_io_t
connect_claimed (fw_stream_eo_pg_t *s, PGresult **res, char *why, size_t len)
{
   fw_pg_io_t io = ensure_conn (s, res, why, len);

   if (io == FW_PG_OK && !*res && (!s->claimed || strcmp (s->claimed, s->uri) != 0)) {
      if (s->claimed) {
         fw_log (FW_LOG_INFO, s->e->cfg->name,
                 "exactly_once: connection \"%s\" names another server or database: claiming "
                 "the stream's position row there",
                 s->e->cfg->exactly_once_pg);
      }
      io = claim_row (s, why, len);
   }
   return io;
}

static void
leave (lua_State *L)
{
   fw_pg_lua_join (L, NULL);
   fw_mongo_lua_join (L, NULL);
}

static void
push_io_failure (fw_stream_eo_pg_t *s, lua_State *L, fw_pg_io_t io, const PGresult *res,
                 const char *why)
{
   fw_pg_lua_push_failure (L, s->e->cfg->exactly_once_pg, io == FW_PG_OK ? res : NULL,
                           io == FW_PG_TIMEOUT, why);
}

static bool
sink_begin (void *ud, lua_State *L)
{
   fw_stream_eo_pg_t *s = ud;
   PGresult *res = NULL;
   char why[512];
   bool kept = s->conn != NULL;
   fw_pg_io_t io = connect_claimed (s, &res, why, sizeof why);

   if (io == FW_PG_OK && !res) {
      io = exec (s, "BEGIN", 0, NULL, &res, why, sizeof why);
   }
   if (io == FW_PG_LOST && kept) {
      /* A kept connection the server closed while idle (a restart, an
       * idle timeout): a new one at once, not a failed attempt. */
      io = connect_claimed (s, &res, why, sizeof why);
      if (io == FW_PG_OK && !res) {
         io = exec (s, "BEGIN", 0, NULL, &res, why, sizeof why);
      }
   }
   if (io != FW_PG_OK || !res || refused (res, why, sizeof why)) {
      push_io_failure (s, L, io, res, why);
      PQclear (res);
      return false;
   }
   PQclear (res);
   s->join = (fw_pg_join_t){.connection = s->e->cfg->exactly_once_pg,
                            .stream = s->e->cfg->name,
                            .conn = s->conn,
                            .serial = s->join.serial + 1};
   s->mongo = (fw_mongo_txn_t){.stream = s->e->cfg->name, .sink = s->e->cfg->exactly_once_pg};
   fw_pg_lua_join (L, &s->join);
   fw_mongo_lua_join (L, &s->mongo);
   return true;
}

/* Rolls back what is open on s's connection (closing it when that fails). */
static void
rollback (fw_stream_eo_pg_t *s)
{
   PGresult *res = NULL;
   char why[256];

   if (s->conn && (s->join.lost || PQstatus (s->conn) != CONNECTION_OK)) {
      close_conn (s);
   }
   if (s->conn && PQtransactionStatus (s->conn) != PQTRANS_IDLE &&
       (exec (s, "ROLLBACK", 0, NULL, &res, why, sizeof why) != FW_PG_OK ||
        refused (res, why, sizeof why))) {
      close_conn (s);
   }
   PQclear (res);
}

static void
sink_end (void *ud, lua_State *L)
{
   fw_stream_eo_pg_t *s = ud;

   leave (L);
   rollback (s);
}

/* The position of s's stream in the table (*token: bson_free'd by the
 * caller, NULL when none). */
static fw_pg_io_t
read_position (fw_stream_eo_pg_t *s, char **token, char *why, size_t len)
{
   const char *params[] = {s->e->cfg->database, s->e->cfg->name};
   PGresult *res = NULL;
   fw_pg_io_t io = ensure_conn (s, &res, why, len);

   *token = NULL;
   if (io == FW_PG_OK && !res) {
      io = exec (s, read_sql, 2, params, &res, why, len);
   }
   if (io == FW_PG_OK && refused (res, why, len)) {
      io = FW_PG_LOST;
   } else if (io == FW_PG_OK && PQntuples (res) == 1 && !PQgetisnull (res, 0, 0)) {
      *token = bson_strdup (PQgetvalue (res, 0, 0));
   }
   PQclear (res);
   return io;
}

/* The COMMIT's reply was lost: whether it committed, read from the table
 * once connected again (retried until it can tell, or a shutdown). */
static fw_sink_commit_t
commit_unknown (fw_stream_eo_pg_t *s, lua_State *L, const char *token, const char *lost)
{
   int64_t delay = 100;
   char why[512], *stored;

   fw_log (FW_LOG_WARN, s->e->cfg->name,
           "exactly_once: the COMMIT's reply was lost (%s); "
           "reading connection \"%s\"'s position table to learn whether it committed",
           lost, s->e->cfg->exactly_once_pg);
   close_conn (s);
   while (read_position (s, &stored, why, sizeof why) != FW_PG_OK) {
      if (fw_shutdown_wait_ms (s->e->shutdown, delay)) {
         /* The next start reads the table anyway. */
         fw_log (FW_LOG_WARN, s->e->cfg->name,
                 "exactly_once: stopping before knowing whether "
                 "the last event committed; the next start resumes from the table");
         return FW_SINK_FENCED;
      }
      delay = delay * 2 > 2000 ? 2000 : delay * 2;
   }
   if (stored && strcmp (stored, token) == 0) {
      bson_free (stored);
      fw_log (FW_LOG_INFO, s->e->cfg->name, "exactly_once: the event had committed");
      return FW_SINK_COMMITTED;
   }
   bson_free (stored);
   fw_pg_lua_push_failure (L, s->e->cfg->exactly_once_pg, NULL, false,
                           "the connection was lost during COMMIT, which did not commit");
   return FW_SINK_FAILED;
}

/* The upsert and the COMMIT go in one round trip (a pipeline): a fenced
 * upsert (it matches no row) divides by zero, so the COMMIT after it is
 * skipped and the transaction can only roll back. */
static const char commit_sql[] = "COMMIT";
static const char fenced_upsert_sql[] = "WITH u AS (" POSITION_UPSERT
                                        " RETURNING 1) SELECT 1 / count(*)::int FROM u";
#define FENCED_SQLSTATE "22012" /* division_by_zero: the upsert matched nothing */

/* Without ha the position's write matched nothing: when a later run's
 * writer generation is stored (or it cannot be read), this run stops, the
 * events are the later run's (nothing of the transaction committed);
 * otherwise a stored epoch fenced it (a leader's, under ha elsewhere). */
static void
fenced_without_ha (fw_stream_eo_pg_t *s)
{
   const fw_stream_config_t *cfg = s->e->cfg;
   const char *params[] = {cfg->database, cfg->name};
   PGresult *res = NULL;
   char why[512], stored[48] = "unknown", msg[1024];

   if (s->conn && exec (s, read_gen_sql, 2, params, &res, why, sizeof why) == FW_PG_OK &&
       !refused (res, why, sizeof why) && PQntuples (res) == 1 && !PQgetisnull (res, 0, 0)) {
      snprintf (stored, sizeof stored, "%s", PQgetvalue (res, 0, 0));
   }
   PQclear (res);
   if (strcmp (stored, "unknown") != 0 && strtoll (stored, NULL, 10) <= s->gen) {
      fw_log (FW_LOG_WARN, cfg->name,
              "exactly_once: a newer leader holds the position in "
              "connection \"%s\"; this transaction is rolled back",
              cfg->exactly_once_pg);
      return;
   }
   snprintf (msg, sizeof msg,
             "exactly_once: a newer run of stream \"%s\" (writer generation %s, this run's "
             "%lld) holds its position in connection \"%s\" (" TABLE
             "); this run's transaction is rolled back and it stops (a second instance running "
             "the stream without ha, a run paused and replaced, or a leader since ha was turned "
             "on)",
             cfg->name, stored, (long long) s->gen, cfg->exactly_once_pg);
   fw_stream_failed (s->e->w, msg);
}

/* The outcome of the pipeline's two results. */
static fw_sink_commit_t
judge (fw_stream_eo_pg_t *s, lua_State *L, PGresult *const *res)
{
   const char *state = PQresultErrorField (res[0], PG_DIAG_SQLSTATE);
   char why[512];

   if (state && strcmp (state, FENCED_SQLSTATE) == 0 && !*s->e->lease && s->gen > 0) {
      rollback (s); /* the generation is read outside the aborted transaction */
      fenced_without_ha (s);
      return FW_SINK_FENCED;
   }
   if (state && strcmp (state, FENCED_SQLSTATE) == 0) {
      fw_log (FW_LOG_WARN, s->e->cfg->name,
              "exactly_once: a newer leader holds the position in "
              "connection \"%s\" (or a run of the stream without ha); this transaction is "
              "rolled back",
              s->e->cfg->exactly_once_pg);
      return FW_SINK_FENCED;
   }
   for (int i = 0; i < 2; i++) {
      if (PQresultStatus (res[i]) != PGRES_PIPELINE_ABORTED && refused (res[i], why, sizeof why)) {
         /* 40001 or 40P01 at the upsert or the commit: retried as an attempt. */
         push_io_failure (s, L, FW_PG_OK, res[i], why);
         return FW_SINK_FAILED;
      }
   }
   if (strcmp (PQcmdStatus (res[1]), "COMMIT") != 0) {
      fw_pg_lua_push_failure (L, s->e->cfg->exactly_once_pg, NULL, false,
                              "the server rolled the exactly-once transaction back at COMMIT");
      return FW_SINK_FAILED;
   }
   return FW_SINK_COMMITTED;
}

/* Writes the position past the event and commits, in one round trip. */
static fw_sink_commit_t
position_and_commit (fw_stream_eo_pg_t *s, lua_State *L, const char *token)
{
   fw_stream_eo_t *e = s->e;
   char epoch[32], gen[32], why[512];
   const char *upsert[6] = {e->cfg->database,
                            e->cfg->name,
                            token,
                            epoch,
                            fw_lua_host_version (fw_dispatcher_host (e->d)),
                            gen};
   const char *const sqls[2] = {fenced_upsert_sql, commit_sql};
   const int nparams[2] = {6, 0};
   const char *const *const params[2] = {upsert, NULL};
   PGresult *res[2] = {NULL, NULL};
   fw_sink_commit_t out;
   fw_pg_io_t io;

   snprintf (epoch, sizeof epoch, "%lld", (long long) (*e->lease ? *e->epoch : 0));
   snprintf (gen, sizeof gen, "%lld", (long long) s->gen);
   io = fw_pg_exec_pipeline (s->conn, 2, sqls, nparams, params, deadline (), res, why, sizeof why);
   if (io != FW_PG_OK) {
      close_conn (s);
      return commit_unknown (s, L, token, why);
   }
   out = judge (s, L, res);
   PQclear (res[0]);
   PQclear (res[1]);
   return out;
}

/* Why the transaction cannot commit as the handler left it, or NULL. */
static const char *
not_committable (fw_stream_eo_pg_t *s)
{
   if (s->join.lost || !s->conn || PQstatus (s->conn) != CONNECTION_OK) {
      return "the connection was lost during the exactly-once transaction (the server rolled it "
             "back)";
   }
   switch (PQtransactionStatus (s->conn)) {
   case PQTRANS_INTRANS:
      return NULL;
   case PQTRANS_INERROR:
      return "a statement failed inside the exactly-once transaction (the handler caught its "
             "error), so the transaction cannot commit: it is rolled back";
   default:
      return "the handler ended the exactly-once transaction itself (COMMIT or ROLLBACK in its "
             "SQL): it is rolled back";
   }
}

static fw_sink_commit_t
sink_commit (void *ud, lua_State *L, const fw_event_t *ev)
{
   fw_stream_eo_pg_t *s = ud;
   const char *bad;
   char *token = NULL;
   fw_sink_commit_t out;

   leave (L);
   if ((bad = not_committable (s)) || !(token = token_json (ev))) {
      fw_pg_lua_push_failure (L, s->e->cfg->exactly_once_pg, NULL, false,
                              bad ? bad : "the event has no resume token to commit");
      rollback (s);
      return FW_SINK_FAILED;
   }
   if (*s->e->lease && *s->e->epoch <= 0) {
      fw_log (FW_LOG_WARN, s->e->cfg->name,
              "exactly_once: no longer leads; the transaction is "
              "rolled back");
      out = FW_SINK_FENCED;
   } else {
      out = position_and_commit (s, L, token);
   }
   if (out == FW_SINK_COMMITTED) {
      set_last (s, token);
   } else {
      rollback (s); /* what is still open (a fenced or failed upsert) */
      bson_free (token);
   }
   return out;
}

static void
sink_release (void *ud)
{
   close_conn (ud);
}

/* --- the stream's side ---------------------------------------------------- */

void
fw_stream_exactly_once_pg_wire (fw_stream_eo_t *e)
{
   fw_txn_sink_t sink = {sink_begin, sink_commit, sink_end, sink_release, NULL};

   if (!e->cfg->exactly_once_pg) {
      return;
   }
   if (!e->pg && !(e->pg = calloc (1, sizeof *e->pg))) {
      fw_log (FW_LOG_ERROR, e->cfg->name, "exactly_once: out of memory");
      return;
   }
   e->pg->e = e;
   e->advance = fw_stream_exactly_once_pg_advance;
   sink.ud = e->pg;
   fw_dispatcher_set_txn_sink (e->d, &sink);
}

void
fw_stream_exactly_once_pg_free (fw_stream_eo_t *e)
{
   if (e->pg) {
      close_conn (e->pg);
      set_last (e->pg, NULL);
      free (e->pg->claimed);
      free (e->pg);
      e->pg = NULL;
   }
}

/* Without ha: claims the run's writer generation in the table (s->gen),
 * before the position is read, so that a transaction of an earlier run
 * that commits after it commits nothing. */
static fw_pg_io_t
claim_gen (fw_stream_eo_pg_t *s, char *why, size_t len)
{
   fw_stream_eo_t *e = s->e;
   char now[32];
   const char *params[] = {e->cfg->database, e->cfg->name, now};
   PGresult *res = NULL;
   fw_pg_io_t io = ensure_conn (s, &res, why, len);

   s->gen = 0;
   snprintf (now, sizeof now, "%lld", (long long) fw_now_ms ());
   if (io == FW_PG_OK && !res) {
      io = exec (s, claim_sql, 3, params, &res, why, len);
   }
   if (io == FW_PG_OK && refused (res, why, len)) {
      io = FW_PG_LOST;
   } else if (io == FW_PG_OK && PQntuples (res) == 1) {
      s->gen = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
   }
   PQclear (res);
   if (io == FW_PG_OK && s->gen <= 0) {
      snprintf (why, len, "claiming the writer generation returned none");
      io = FW_PG_LOST;
   }
   return io;
}

/* Raises the stored epoch to this leader's and claims its writer generation
 * (ha), or claims the run's writer generation (without ha), in the row of
 * the database connected to (s->claimed names it). Under ha, while not
 * leading, nothing (no transaction commits then). */
static fw_pg_io_t
claim_row (fw_stream_eo_pg_t *s, char *why, size_t len)
{
   fw_stream_eo_t *e = s->e;
   PGresult *res = NULL;
   fw_pg_io_t io;

   if (*e->lease && *e->epoch <= 0) {
      return FW_PG_OK;
   }
   if (*e->lease) {
      char epoch[32], now[32];
      const char *params[] = {e->cfg->database, e->cfg->name, epoch, now};
      snprintf (epoch, sizeof epoch, "%lld", (long long) *e->epoch);
      snprintf (now, sizeof now, "%lld", (long long) fw_now_ms ());
      s->gen = 0;
      io = ensure_conn (s, &res, why, len);
      if (io == FW_PG_OK && !res) {
         io = exec (s, fence_sql, 4, params, &res, why, len);
      }
      if (io == FW_PG_OK && refused (res, why, len)) {
         io = FW_PG_LOST;
      } else if (io == FW_PG_OK && PQntuples (res) == 1) {
         s->gen = strtoll (PQgetvalue (res, 0, 0), NULL, 10);
      }
      PQclear (res);
   } else {
      io = claim_gen (s, why, len);
   }
   if (io == FW_PG_OK) {
      free (s->claimed);
      s->claimed = s->uri ? strdup (s->uri) : NULL; /* NULL: claimed again at the next write */
   }
   return io;
}

/* Claims the stream's row (claim_row), then reads the position. */
static fw_pg_io_t
fence_and_read (fw_stream_eo_pg_t *s, char **token, char *why, size_t len)
{
   fw_pg_io_t io = claim_row (s, why, len);

   return io != FW_PG_OK ? io : read_position (s, token, why, len);
}

bool
fw_stream_exactly_once_pg_load (fw_stream_eo_t *e, fw_checkpoint_t *cp, bool *found)
{
   char *token = NULL, why[512];
   bson_t doc;
   bson_error_t berr;

   if (!e->cfg->exactly_once_pg) {
      return true;
   }
   if (!e->pg) {
      /* Never run it without its transactions. */
      fw_stream_failed (e->w, "exactly_once: out of memory for its PostgreSQL sink");
      return false;
   }
   for (int tries = 1; fence_and_read (e->pg, &token, why, sizeof why) != FW_PG_OK; tries++) {
      int64_t delay = fw_backoff_delay_ms (&e->cfg->restart, tries, fw_backoff_random (e->rng));
      fw_log (FW_LOG_ERROR, e->cfg->name,
              "exactly_once: cannot read the position in "
              "connection \"%s\" (%s); retrying in %lld ms",
              e->cfg->exactly_once_pg, why, (long long) delay);
      if (fw_shutdown_wait_ms (e->shutdown, delay)) {
         return false;
      }
   }
   if (!token || e->cfg->start_latest) {
      bson_free (token);
      return true; /* nothing committed there yet: _fw_checkpoints' position, if any */
   }
   if (!bson_init_from_json (&doc, token, -1, &berr)) {
      fw_log (FW_LOG_ERROR, e->cfg->name,
              "exactly_once: the position in connection \"%s\" "
              "(%s) is not a resume token (%s); starting from _fw_checkpoints' position",
              e->cfg->exactly_once_pg, TABLE, berr.message);
      bson_free (token);
      return true;
   }
   fw_position_set_token (&cp->processed, &doc);
   cp->has_processed = true;
   set_last (e->pg, bson_strdup (token));
   *found = true;
   fw_log (FW_LOG_INFO, e->cfg->name,
           "exactly_once: resuming from the position committed in "
           "connection \"%s\"",
           e->cfg->exactly_once_pg);
   bson_destroy (&doc);
   bson_free (token);
   return true;
}

void
fw_stream_exactly_once_pg_advance (fw_stream_eo_t *e, const bson_t *processed, const bson_t *seen)
{
   fw_stream_eo_pg_t *s = e->pg;
   char epoch[32], gen[32], why[512], *token;
   const char *params[6];
   PGresult *res = NULL;
   fw_pg_io_t io;

   (void) seen; /* the table keeps the handled position only */
   if (!s || !e->cfg->exactly_once_pg || !processed || (*e->lease && *e->epoch <= 0)) {
      return;
   }
   if (!(token = bson_as_canonical_extended_json (processed, NULL))) {
      return;
   }
   if (s->last && strcmp (s->last, token) == 0) {
      bson_free (token); /* the last event's transaction stored it */
      return;
   }
   snprintf (epoch, sizeof epoch, "%lld", (long long) (*e->lease ? *e->epoch : 0));
   params[0] = e->cfg->database;
   params[1] = e->cfg->name;
   params[2] = token;
   params[3] = epoch;
   params[4] = fw_lua_host_version (fw_dispatcher_host (e->d));
   io = connect_claimed (s, &res, why, sizeof why);
   snprintf (gen, sizeof gen, "%lld", (long long) s->gen); /* the claim's, on that database */
   params[5] = gen;
   if (io == FW_PG_OK && !res) {
      io = exec (s, upsert_sql, 6, params, &res, why, sizeof why);
   }
   if (io == FW_PG_OK && !refused (res, why, sizeof why) && strcmp (PQcmdTuples (res), "0") == 0) {
      /* fenced: a newer leader's epoch, or a newer run's generation */
      fw_log (FW_LOG_WARN, e->cfg->name,
              "exactly_once: the position in connection \"%s\" is held by a newer %s; "
              "not stored",
              e->cfg->exactly_once_pg, *e->lease ? "leader" : "run of the stream");
   } else if (io == FW_PG_OK && !refused (res, why, sizeof why)) {
      set_last (s, token);
      token = NULL;
   } else {
      /* Those events (none of whose statements committed) may run again
       * after a crash; the next save tries again. */
      fw_log (FW_LOG_DEBUG, e->cfg->name,
              "exactly_once: cannot store the position past "
              "events that committed nothing (%s)",
              why);
   }
   PQclear (res);
   bson_free (token);
}
