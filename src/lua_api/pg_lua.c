/*
 * pg_lua.c - fw.pg's functions, connections and typed errors (see
 * pg_lua.h).
 *
 * Every native resource lives in a userdata with a __gc while Lua may raise:
 * a connection in its registry entry, a result in a box on the stack.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/lua_call.h"
#include "lua_api/pg_lua.h"
#include "pg_lua-private.h"

#define CONN_MT "flowwarden.pg_conn"
#define RESULT_MT "flowwarden.pg_result"
#define TX_MT "flowwarden.pg_tx"
#define VIEW_MT "flowwarden.pg_joined" /* no __gc: the joined connection is not L's */
/* Without a handler deadline: bound each call anyway. */
#define NO_DEADLINE_WAIT_MS 30000

static const char conns_key = 0; /* registry: name -> conn_t userdata */
static const char views_key = 0; /* registry: name -> conn_t viewing the joined connection */
static const char join_key = 0;  /* registry: the fw_pg_join_t of exactly_once, or nil */

typedef struct {
   PGconn *conn;        /* NULL: closed */
   char *uri;           /* the URI conn was opened with; a reload changing it reopens */
   bool in_tx;          /* inside fw.pg.transaction */
   lua_Integer gen;     /* counts the connections opened: a transaction is bound to one */
   fw_pg_join_t *join;  /* a view of exactly_once's connection (never closed here), or NULL */
   fw_pg_stmts_t stmts; /* the statements prepared on conn */
} conn_t;

typedef struct {
   PGresult *res;
} result_box_t;

typedef struct {
   const char *name;
   int64_t deadline_ns; /* the end of every wait of this call */
   bool bounded;        /* from the handler's deadline */
   bool own;            /* fw.pg's own statement (BEGIN, SAVEPOINT ...), not the script's */
} call_t;

/* SQLSTATE (or its class, two characters) -> type. */
static const struct {
   const char *state;
   const char *type;
} sqlstates[] = {
   {"40001", "Pg.Serialization"}, {"40P01", "Pg.Deadlock"}, {"23505", "Pg.UniqueViolation"},
   {"23503", "Pg.ForeignKey"},    {"42601", "Pg.Syntax"},   {"42501", "Pg.Permission"},
   {"57014", "Pg.Timeout"},    /* query_canceled: statement_timeout */
   {"57P01", "Pg.Connection"}, /* admin_shutdown */
   {"57P02", "Pg.Connection"}, /* crash_shutdown */
   {"57P03", "Pg.Connection"}, /* cannot_connect_now (starting up) */
   {"53300", "Pg.Connection"}, /* too_many_connections */
   {"08", "Pg.Connection"},    /* connection exceptions */
};

static const char *
type_of (const char *sqlstate)
{
   for (size_t i = 0; sqlstate && i < sizeof sqlstates / sizeof sqlstates[0]; i++) {
      if (strncmp (sqlstate, sqlstates[i].state, strlen (sqlstates[i].state)) == 0) {
         return sqlstates[i].type;
      }
   }
   return "Pg.Error";
}

static void
conn_close (conn_t *c)
{
   if (c->join) {
      /* exactly_once's transaction is gone with it; its owner closes it. */
      c->join->lost = true;
      c->conn = NULL;
      c->in_tx = false;
      return;
   }
   if (c->conn) {
      PQfinish (c->conn);
      c->conn = NULL;
   }
   fw_pg_stmts_clear (&c->stmts);
   c->in_tx = false;
}

static int
conn_gc (lua_State *L)
{
   conn_t *c = luaL_checkudata (L, 1, CONN_MT);
   conn_close (c);
   fw_pg_stmts_destroy (&c->stmts);
   free (c->uri);
   c->uri = NULL;
   return 0;
}

static int
result_gc (lua_State *L)
{
   result_box_t *b = luaL_checkudata (L, 1, RESULT_MT);
   PQclear (b->res);
   b->res = NULL;
   return 0;
}

/* Raises type with fields (a table at the top, or none when fields is
 * false) and "fw.pg: connection \"name\": <text at the top>". */
static int
raise_pg (lua_State *L, const call_t *call, const char *type, bool has_fields)
{
   int top = lua_gettop (L);
   int text = has_fields ? top - 1 : top;

   if (!has_fields) {
      lua_createtable (L, 0, 1);
   }
   lua_pushstring (L, call->name);
   lua_setfield (L, -2, "connection");
   if (strcmp (type, "Pg.Timeout") == 0 && call->bounded) {
      fw_lua_call_io_timed_out (L); /* the handler's deadline: this wait's type wins */
   }
   return fw_lua_raise_typed (L, type, lua_gettop (L), "fw.pg: connection \"%s\": %s", call->name,
                              lua_tostring (L, text));
}

static call_t
begin_call (lua_State *L, int name_idx)
{
   call_t call = {0};
   int64_t budget = fw_lua_call_budget_ms (L, "fw.pg");

   call.name = luaL_checkstring (L, name_idx);
   call.bounded = budget >= 0;
   if (budget < 0) {
      budget = NO_DEADLINE_WAIT_MS;
   } else {
      budget -= fw_lua_call_io_margin_ms (budget);
      if (budget <= 0) {
         lua_pushliteral (L, "the handler's time budget is spent");
         raise_pg (L, &call, "Pg.Timeout", false);
      }
   }
   call.deadline_ns = fw_mono_ns () + budget * 1000000;
   return call;
}

static fw_pg_join_t *
joined (lua_State *L)
{
   fw_pg_join_t *j;

   lua_rawgetp (L, LUA_REGISTRYINDEX, &join_key);
   j = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return j;
}

/* exactly_once: call->name's view of the joined connection j; another
 * PostgreSQL connection, or j's lost, raises. */
static conn_t *
joined_conn (lua_State *L, const call_t *call, fw_pg_join_t *j)
{
   int top = lua_gettop (L);
   conn_t *c;

   if (strcmp (call->name, j->connection) != 0) {
      fw_lua_raise_typed (L, "ArgumentError", 0,
                          "fw.pg: connection \"%s\": stream \"%s\" has exactly_once = { "
                          "connection = \"%s\" }, and connection \"%s\" cannot join its "
                          "transaction: write there from another stream, or drop exactly_once",
                          call->name, j->stream ? j->stream : "?", j->connection, call->name);
   }
   c = fw_lua_named_userdata (L, &views_key, call->name, sizeof *c, VIEW_MT);
   if (c->join != j || c->gen != (lua_Integer) j->serial) {
      c->join = j;
      c->gen = (lua_Integer) j->serial;
      c->conn = j->lost ? NULL : j->conn;
      c->in_tx = false;
   }
   if (!c->conn) {
      lua_pushliteral (L,
                       "the connection was lost during the exactly-once transaction (the "
                       "server rolled it back)");
      raise_pg (L, call, "Pg.Connection", false);
   }
   lua_settop (L, top);
   return c;
}

/* The open connection of call->name, opened when needed. */
static conn_t *
get_conn (lua_State *L, const call_t *call)
{
   int top = lua_gettop (L);
   conn_t *c;
   const char *uri;
   char why[512];
   fw_pg_join_t *j = joined (L);

   if (j) {
      return joined_conn (L, call, j);
   }
   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   lua_getfield (L, -1, "flowwarden.config");
   if (!lua_istable (L, -1) || lua_getfield (L, -1, "store_connection") != LUA_TFUNCTION) {
      luaL_error (L, "fw.pg: no script loaded in this state");
   }
   lua_pushstring (L, call->name);
   lua_pushliteral (L, "postgresql");
   lua_call (L, 2, 2);
   if (lua_isnil (L, -2)) {
      fw_lua_raise_typed (L, "ArgumentError", 0, "fw.pg: %s", lua_tostring (L, -1));
   }
   lua_getfield (L, -2, "uri");
   uri = lua_tostring (L, -1);
   c = fw_lua_named_userdata (L, &conns_key, call->name, sizeof *c, CONN_MT);
   if (!c->uri || strcmp (c->uri, uri) != 0) {
      conn_close (c);
      free (c->uri);
      if (!(c->uri = strdup (uri))) {
         luaL_error (L, "fw.pg: out of memory");
      }
   }
   if (c->conn && PQstatus (c->conn) == CONNECTION_BAD) {
      conn_close (c);
   }
   if (!c->conn) {
      fw_pg_io_t io = fw_pg_connect (uri, call->deadline_ns, &c->conn, why, sizeof why);
      c->gen++;
      if (io != FW_PG_OK) {
         lua_pushfstring (L, "cannot connect: %s", why);
         raise_pg (L, call, io == FW_PG_TIMEOUT ? "Pg.Timeout" : "Pg.Connection", false);
      }
   }
   lua_settop (L, top);
   return c;
}

/* Raises the server error of res (boxed at the top); row > 0: in
 * fields.row, the parameter row of execute_many that failed. */
static int
raise_result_at (lua_State *L, const call_t *call, const PGresult *res, lua_Integer row)
{
   const char *state = PQresultErrorField (res, PG_DIAG_SQLSTATE);
   const char *msg = PQresultErrorField (res, PG_DIAG_MESSAGE_PRIMARY);
   const char *constraint = PQresultErrorField (res, PG_DIAG_CONSTRAINT_NAME);
   const char *table = PQresultErrorField (res, PG_DIAG_TABLE_NAME);

   lua_pushstring (L, msg ? msg : PQresultErrorMessage (res));
   lua_createtable (L, 0, 4);
   lua_pushstring (L, state ? state : "");
   lua_setfield (L, -2, "sqlstate");
   if (constraint) {
      lua_pushstring (L, constraint);
      lua_setfield (L, -2, "constraint");
   }
   if (table) {
      lua_pushstring (L, table);
      lua_setfield (L, -2, "table");
   }
   if (row > 0) {
      lua_pushinteger (L, row);
      lua_setfield (L, -2, "row");
   }
   return raise_pg (L, call, type_of (state), true);
}

/* Whether sql's first word ends or starts a transaction (the extended
 * protocol fw.pg uses takes one statement a call, so the first word says). */
static bool
controls_transaction (const char *sql)
{
   static const char *const words[] = {"commit", "end",       "rollback", "abort", "begin",
                                       "start",  "savepoint", "release",  NULL};
   static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
   size_t n;

   sql += strspn (sql, " \t\r\n(");
   n = strspn (sql, letters);
   if (n == 7 && strncasecmp (sql, "prepare", 7) == 0) {
      /* PREPARE TRANSACTION ends it; PREPARE name AS ... does not. */
      sql += n + strspn (sql + n, " \t\r\n");
      return strspn (sql, letters) == 11 && strncasecmp (sql, "transaction", 11) == 0;
   }
   for (int i = 0; words[i]; i++) {
      if (n == strlen (words[i]) && strncasecmp (sql, words[i], n) == 0) {
         return true;
      }
   }
   return false;
}

static int
raise_result (lua_State *L, const call_t *call, const PGresult *res)
{
   return raise_result_at (L, call, res, 0);
}

/* Deallocates the cache's victim when it is full (one round trip), unless
 * the transaction has failed (the server would refuse). */
static fw_pg_io_t
make_room (conn_t *c, int64_t deadline_ns, char *why, size_t len)
{
   const char *victim = fw_pg_stmts_victim (&c->stmts);
   PGTransactionStatusType ts = PQtransactionStatus (c->conn);
   PGresult *res = NULL;
   char sql[48];
   fw_pg_io_t io;

   if (!victim || (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS)) {
      return FW_PG_OK;
   }
   snprintf (sql, sizeof sql, "DEALLOCATE %s", victim); /* a name of ours: fw_<n> */
   io = fw_pg_exec (c->conn, sql, 0, NULL, deadline_ns, &res, why, len);
   if (io == FW_PG_OK && PQresultStatus (res) == PGRES_COMMAND_OK) {
      fw_pg_stmts_remove (&c->stmts, victim);
   }
   PQclear (res);
   return io;
}

/*
 * Runs sql on c once per rows[i], in one round trip, as a statement
 * prepared on c: reused from c's cache, else prepared in the same round
 * trip (the least recently used one deallocated first when the cache is
 * full). When there is no room, sql runs as the unnamed statement.
 */
static fw_pg_io_t
exec_rows (conn_t *c, const char *sql, int n_rows, const fw_pg_params_t *rows, int64_t deadline_ns,
           fw_pg_batch_t *out, char *why, size_t len)
{
   const fw_pg_stmt_t *s;
   bool prepare;
   char name[sizeof s->name] = ""; /* "": the unnamed statement */
   fw_pg_io_t io;

   if (c->join) {
      /* exactly_once's connection is the sink's and outlives this state's
       * view of it (a reload, a rebuilt state): nothing is kept on it. */
      return fw_pg_pipeline (c->conn, sql, name, true, n_rows, rows, deadline_ns, out, why, len);
   }
   s = fw_pg_stmts_find (&c->stmts, sql);
   prepare = !s;
   if (!s && (io = make_room (c, deadline_ns, why, len)) != FW_PG_OK) {
      return io;
   }
   if (s || (s = fw_pg_stmts_add (&c->stmts, sql))) {
      memcpy (name, s->name, sizeof name);
   }
   io = fw_pg_pipeline (c->conn, sql, name, prepare, n_rows, rows, deadline_ns, out, why, len);
   if (io == FW_PG_OK && out->failed < n_rows && name[0]) {
      /* Not prepared (nothing on the server), or its plan went stale (0A000
       * "cached plan must not change result type" after an ALTER TABLE:
       * deallocated later): prepared again next time. */
      const char *state = PQresultErrorField (out->res, PG_DIAG_SQLSTATE);
      if (out->failed < 0) {
         fw_pg_stmts_remove (&c->stmts, name);
      } else if (state && strcmp (state, "0A000") == 0) {
         fw_pg_stmts_forget (&c->stmts, name);
      }
   }
   return io;
}

/*
 * Runs sql (a string at sql_idx) with the parameters at params_idx (0: none)
 * on connection call->name; pushes the result's box and returns the result.
 * Raises typed errors (closing the connection after a timeout or a loss).
 */
static PGresult *
run (lua_State *L, const call_t *call, int sql_idx, int params_idx)
{
   const char **values;
   int n;
   conn_t *c;
   result_box_t *box;
   fw_pg_batch_t batch;
   fw_pg_io_t io;
   char why[512];

   n = fw_pg_push_params (L, params_idx ? params_idx : lua_gettop (L) + 1, &values);
   c = get_conn (L, call);
   if (c->join && !call->own && controls_transaction (lua_tostring (L, sql_idx))) {
      fw_lua_raise_typed (L, "ArgumentError", 0,
                          "fw.pg: connection \"%s\": stream \"%s\" runs each event in one "
                          "transaction (exactly_once), which its handler cannot end or nest by "
                          "SQL (use fw.pg.transaction for a savepoint)",
                          call->name, c->join->stream ? c->join->stream : "?");
   }
   box = lua_newuserdatauv (L, sizeof *box, 0);
   box->res = NULL;
   luaL_setmetatable (L, RESULT_MT);
   io = exec_rows (c, lua_tostring (L, sql_idx), 1, &(fw_pg_params_t){n, values}, call->deadline_ns,
                   &batch, why, sizeof why);
   box->res = batch.res;
   if (io != FW_PG_OK) {
      conn_close (c);
      lua_pushstring (L,
                      io == FW_PG_TIMEOUT ? "no reply in time (the statement was cancelled)" : why);
      raise_pg (L, call, io == FW_PG_TIMEOUT ? "Pg.Timeout" : "Pg.Connection", false);
   }
   if (PQresultStatus (box->res) == PGRES_FATAL_ERROR ||
       PQresultStatus (box->res) == PGRES_BAD_RESPONSE) {
      if (PQstatus (c->conn) == CONNECTION_BAD) {
         conn_close (c);
      }
      raise_result (L, call, box->res);
   }
   return box->res;
}

/* The arguments of query/execute from index first: (sql [, params]). */
static PGresult *
run_args (lua_State *L, const call_t *call, int first)
{
   luaL_checkstring (L, first);
   if (!lua_isnoneornil (L, first + 1)) {
      luaL_checktype (L, first + 1, LUA_TTABLE);
   }
   lua_settop (L, first + 1);
   return run (L, call, first, first + 1);
}

/*
 * execute_many's arguments from index first: (sql, rows), rows a list of
 * parameter lists. Converts every row before sending anything (a bad value
 * raises ArgumentError and nothing is sent), then runs them in one round
 * trip; pushes the number of rows affected.
 */
static int
run_many (lua_State *L, const call_t *call, int first)
{
   lua_Integer n_rows;
   fw_pg_params_t *rows;
   fw_pg_batch_t batch;
   conn_t *c;
   result_box_t *box;
   fw_pg_io_t io;
   int keep;
   char why[512];

   luaL_checkstring (L, first);
   luaL_checktype (L, first + 1, LUA_TTABLE);
   lua_settop (L, first + 1);
   n_rows = luaL_len (L, first + 1);
   if (n_rows == 0) {
      lua_pushinteger (L, 0);
      return 1;
   }
   if (n_rows > INT32_MAX / 2) {
      fw_lua_raise_typed (L, "ArgumentError", 0, "fw.pg.execute_many: too many rows");
   }
   rows = lua_newuserdatauv (L, (size_t) n_rows * sizeof *rows, 0);
   lua_createtable (L, (int) n_rows * 2, 0); /* keeps each row's strings and pointers */
   keep = lua_gettop (L);
   for (lua_Integer i = 1; i <= n_rows; i++) {
      const char **values;
      if (lua_geti (L, first + 1, i) != LUA_TTABLE) {
         fw_lua_raise_typed (L, "ArgumentError", 0,
                             "fw.pg.execute_many: rows[%d] is a %s (expected a list of "
                             "parameters)",
                             (int) i, luaL_typename (L, -1));
      }
      rows[i - 1].n = fw_pg_push_params (L, lua_gettop (L), &values);
      rows[i - 1].values = values;
      lua_rawseti (L, keep, 2 * i);     /* the pointers */
      lua_rawseti (L, keep, 2 * i - 1); /* the strings */
      lua_pop (L, 1);
   }
   c = get_conn (L, call);
   box = lua_newuserdatauv (L, sizeof *box, 0);
   box->res = NULL;
   luaL_setmetatable (L, RESULT_MT);
   io = exec_rows (c, lua_tostring (L, first), (int) n_rows, rows, call->deadline_ns, &batch, why,
                   sizeof why);
   box->res = batch.res;
   if (io != FW_PG_OK) {
      conn_close (c);
      lua_pushstring (L, io == FW_PG_TIMEOUT ? "no reply in time (the statements were cancelled)"
                                             : why);
      raise_pg (L, call, io == FW_PG_TIMEOUT ? "Pg.Timeout" : "Pg.Connection", false);
   }
   if (batch.failed < n_rows) {
      if (PQstatus (c->conn) == CONNECTION_BAD) {
         conn_close (c);
      }
      raise_result_at (L, call, box->res, batch.failed < 0 ? 0 : batch.failed + 1);
   }
   lua_pushinteger (L, batch.affected);
   return 1;
}

static int
push_affected (lua_State *L, const PGresult *res)
{
   const char *n = PQcmdTuples ((PGresult *) res);
   lua_pushinteger (L, *n ? strtoll (n, NULL, 10) : 0);
   return 1;
}

/* fw.pg.query(conn, sql [, params]) -> { row, ... } */
static int
pg_query (lua_State *L)
{
   call_t call = begin_call (L, 1);
   fw_pg_push_rows (L, run_args (L, &call, 2));
   return 1;
}

/* fw.pg.execute(conn, sql [, params]) -> rows affected */
static int
pg_execute (lua_State *L)
{
   call_t call = begin_call (L, 1);
   return push_affected (L, run_args (L, &call, 2));
}

/* fw.pg.execute_many(conn, sql, { params, ... }) -> rows affected */
static int
pg_execute_many (lua_State *L)
{
   call_t call = begin_call (L, 1);
   return run_many (L, &call, 2);
}

/* tx:query(sql [, params]) and tx:execute(...): self.conn while self.live. */
static call_t
tx_call (lua_State *L)
{
   lua_Integer gen;
   conn_t *c = NULL;
   call_t call;

   luaL_checktype (L, 1, LUA_TTABLE);
   lua_getfield (L, 1, "live");
   if (!lua_toboolean (L, -1)) {
      fw_lua_raise_typed (L, "ArgumentError", 0,
                          "fw.pg: this transaction has ended (use tx only inside its function)");
   }
   lua_getfield (L, 1, "gen");
   gen = lua_tointeger (L, -1);
   lua_pop (L, 2);
   lua_getfield (L, 1, "connection");
   lua_replace (L, 1); /* 1: the connection's name */
   /* The connection the transaction began on, still open: after a loss the
    * next call would reconnect and run outside any transaction. Checked
    * before the time budget, so a statement after a lost one (a timed-out
    * one closes its connection) always says the transaction is gone. */
   call = (call_t){.name = luaL_checkstring (L, 1)};
   if (lua_rawgetp (L, LUA_REGISTRYINDEX, joined (L) ? &views_key : &conns_key) == LUA_TTABLE) {
      if (lua_getfield (L, -1, call.name) == LUA_TUSERDATA) {
         c = lua_touserdata (L, -1);
      }
      lua_pop (L, 1);
   }
   lua_pop (L, 1);
   if (!c || !c->conn || c->gen != gen || (c->join && c->join != joined (L))) {
      lua_pushliteral (L,
                       "the connection was lost during the transaction (the server rolled it "
                       "back)");
      raise_pg (L, &call, "Pg.Connection", false);
   }
   return begin_call (L, 1);
}

static int
tx_query (lua_State *L)
{
   call_t call = tx_call (L);
   fw_pg_push_rows (L, run_args (L, &call, 2));
   return 1;
}

static int
tx_execute (lua_State *L)
{
   call_t call = tx_call (L);
   return push_affected (L, run_args (L, &call, 2));
}

static int
tx_execute_many (lua_State *L)
{
   call_t call = tx_call (L);
   return run_many (L, &call, 2);
}

/* Runs a statement without parameters on the transaction's connection. */
static void
tx_statement (lua_State *L, int name_idx, const char *sql)
{
   int top = lua_gettop (L);
   call_t call = begin_call (L, name_idx);
   call.own = true;
   lua_pushstring (L, sql);
   run (L, &call, lua_gettop (L), 0);
   lua_settop (L, top);
}

/* fw.pg.transaction(conn, fn) -> fn's results; COMMIT after fn returns,
 * ROLLBACK when it raises (the error is raised again). */
static int
pg_transaction (lua_State *L)
{
   call_t call = begin_call (L, 1);
   conn_t *c;
   int tx, status;

   luaL_checktype (L, 2, LUA_TFUNCTION);
   lua_settop (L, 2);
   c = get_conn (L, &call);
   if (c->in_tx) {
      fw_lua_raise_typed (L, "ArgumentError", 0,
                          "fw.pg.transaction: connection \"%s\" is already in a transaction "
                          "(use the outer tx)",
                          call.name);
   }
   /* Inside exactly_once's transaction: a savepoint of it (documented). */
   tx_statement (L, 1, c->join ? "SAVEPOINT fw_tx" : "BEGIN");
   c->in_tx = true;
   lua_createtable (L, 0, 2);
   tx = lua_gettop (L);
   luaL_setmetatable (L, TX_MT);
   lua_pushvalue (L, 1);
   lua_setfield (L, tx, "connection");
   lua_pushinteger (L, c->gen);
   lua_setfield (L, tx, "gen");
   lua_pushboolean (L, 1);
   lua_setfield (L, tx, "live");
   lua_pushvalue (L, 2);
   lua_pushvalue (L, tx);
   status = lua_pcall (L, 1, LUA_MULTRET, 0);
   lua_pushboolean (L, 0);
   lua_setfield (L, tx, "live");
   c->in_tx = false;
   if (status != LUA_OK) {
      /* The connection may be gone (c->conn NULL): the server rolled back. */
      if (c->conn && PQstatus (c->conn) == CONNECTION_OK) {
         int64_t budget = fw_lua_call_budget_ms (L, "fw.pg");
         PGresult *res = NULL;
         char why[256];
         int64_t end = fw_mono_ns () + (budget < 0 || budget > 1000 ? 1000 : budget) * 1000000;
         if (budget == 0 ||
             fw_pg_exec (c->conn, c->join ? "ROLLBACK TO SAVEPOINT fw_tx" : "ROLLBACK", 0, NULL,
                         end, &res, why, sizeof why) != FW_PG_OK ||
             PQresultStatus (res) != PGRES_COMMAND_OK) {
            conn_close (c); /* closing rolls back too */
         }
         PQclear (res);
      }
      return lua_error (L);
   }
   tx_statement (L, 1, c->join ? "RELEASE SAVEPOINT fw_tx" : "COMMIT");
   return lua_gettop (L) - tx;
}

typedef struct {
   const char *name;
   int64_t timeout_ms;
} probe_t;

/* Protected: connects and runs SELECT 1. */
static int
probe (lua_State *L)
{
   probe_t *p = lua_touserdata (L, 1);
   call_t call = {.name = p->name, .deadline_ns = fw_mono_ns () + p->timeout_ms * 1000000};

   lua_pushliteral (L, "SELECT 1");
   run (L, &call, lua_gettop (L), 0);
   return 0;
}

bool
fw_pg_lua_probe (lua_State *L, const char *name, int64_t timeout_ms, char *why, size_t len)
{
   probe_t p = {name, timeout_ms};

   return fw_lua_call_protected (L, probe, &p, why, len);
}

/* pg_uri_check(uri) -> true | false, why: whether libpq parses it. */
static int
pg_uri_check (lua_State *L)
{
   const char *uri = luaL_checkstring (L, 1);
   char *err = NULL;
   PQconninfoOption *opts = PQconninfoParse (uri, &err);
   char why[512];

   if (opts) {
      PQconninfoFree (opts);
      lua_pushboolean (L, 1);
      return 1;
   }
   fw_log_redact_uri_error (uri, err ? err : "out of memory", why, sizeof why);
   PQfreemem (err);
   why[strcspn (why, "\n")] = '\0';
   lua_pushboolean (L, 0);
   lua_pushstring (L, why);
   return 2;
}

static const luaL_Reg pg_functions[] = {
   {"query", pg_query},
   {"execute", pg_execute},
   {"execute_many", pg_execute_many},
   {"transaction", pg_transaction},
   {NULL, NULL},
};

static const luaL_Reg tx_methods[] = {
   {"query", tx_query},
   {"execute", tx_execute},
   {"execute_many", tx_execute_many},
   {NULL, NULL},
};

void
fw_pg_lua_open (lua_State *L, int module_idx)
{
   module_idx = lua_absindex (L, module_idx);
   if (luaL_newmetatable (L, CONN_MT)) {
      lua_pushcfunction (L, conn_gc);
      lua_setfield (L, -2, "__gc");
   }
   if (luaL_newmetatable (L, RESULT_MT)) {
      lua_pushcfunction (L, result_gc);
      lua_setfield (L, -2, "__gc");
   }
   if (luaL_newmetatable (L, TX_MT)) {
      luaL_newlib (L, tx_methods);
      lua_setfield (L, -2, "__index");
   }
   luaL_newmetatable (L, VIEW_MT);
   lua_pop (L, 4);
   luaL_newlib (L, pg_functions);
   lua_setfield (L, module_idx, "pg");
   lua_pushcfunction (L, pg_uri_check);
   lua_setfield (L, module_idx, "pg_uri_check");
}

/* --- exactly_once into PostgreSQL (issue 40) ----------------------------- */

void
fw_pg_lua_join (lua_State *L, fw_pg_join_t *join)
{
   if (join) {
      lua_pushlightuserdata (L, join);
   } else {
      lua_pushnil (L);
   }
   lua_rawsetp (L, LUA_REGISTRYINDEX, &join_key);
}

typedef struct {
   const char *name;
   char *uri; /* out */
} uri_t;

/* Protected: u->uri = the declared URI of u->name (a PostgreSQL one). */
static int
find_uri (lua_State *L)
{
   uri_t *u = lua_touserdata (L, 1);

   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   lua_getfield (L, -1, "flowwarden.config");
   if (!lua_istable (L, -1) || lua_getfield (L, -1, "store_connection") != LUA_TFUNCTION) {
      return luaL_error (L, "no script loaded in this state");
   }
   lua_pushstring (L, u->name);
   lua_pushliteral (L, "postgresql");
   lua_call (L, 2, 2);
   if (lua_isnil (L, -2)) {
      return lua_error (L);
   }
   lua_getfield (L, -2, "uri");
   if (!lua_isstring (L, -1) || !(u->uri = strdup (lua_tostring (L, -1)))) {
      return luaL_error (L, "out of memory");
   }
   return 0;
}

char *
fw_pg_lua_uri (lua_State *L, const char *name, char *why, size_t len)
{
   uri_t u = {name, NULL};

   if (!fw_lua_call_protected (L, find_uri, &u, why, len)) {
      free (u.uri);
      return NULL;
   }
   return u.uri;
}

typedef struct {
   const char *connection;
   const PGresult *res;
   bool timed_out;
   const char *why;
} failure_t;

static int
raise_failure (lua_State *L)
{
   const failure_t *f = lua_touserdata (L, 1);
   call_t call = {.name = f->connection};

   if (f->res) {
      return raise_result (L, &call, f->res);
   }
   lua_pushstring (L, f->why ? f->why : "connection lost");
   return raise_pg (L, &call, f->timed_out ? "Pg.Timeout" : "Pg.Connection", false);
}

void
fw_pg_lua_push_failure (lua_State *L, const char *connection, const PGresult *res, bool timed_out,
                        const char *why)
{
   failure_t f = {connection, res, timed_out, why};

   lua_createtable (L, 0, 2);
   lua_pushcfunction (L, raise_failure);
   lua_pushlightuserdata (L, &f);
   if (lua_pcall (L, 1, 1, 0) != LUA_OK) {
      lua_setfield (L, -2, "value");
   } else {
      lua_pop (L, 1); /* never: raise_failure always raises */
      lua_pushstring (L, why ? why : "fw.pg failed");
      lua_setfield (L, -2, "value");
   }
   lua_pushliteral (L, "");
   lua_setfield (L, -2, "traceback");
}
