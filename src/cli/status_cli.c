/*
 * status_cli.c - flowwarden status | pause | resume | restart | snapshot | reload: a
 * libcurl client of the admin endpoint. Answers are JSON, read with
 * lua-cjson in a small Lua state of its own (inside a protected call).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <lauxlib.h>
#include <lua5.4/lua-cjson.h>
#include <lualib.h>

#include "cli/status_cli.h"

static const char usage_text[] =
   "usage: flowwarden status [--admin URL]... [--json]\n"
   "       flowwarden pause|resume|restart STREAM [--admin URL]\n"
   "       flowwarden snapshot STREAM [--filter JSON] [--admin URL]\n"
   "       flowwarden reload [--admin URL]\n"
   "URL defaults to FLOWWARDEN_ADMIN, else " FW_ADMIN_DEFAULT_URL
   "; the token for pause,\n"
   "resume, restart, snapshot and reload comes from FLOWWARDEN_ADMIN_TOKEN.\n"
   "status with several --admin: the group's view (ha): each unit, its holder, lag, orphans.\n";

#define MAX_ADMINS 32

static int
bad_usage (const char *cmd, const char *fmt, const char *arg)
{
   fprintf (stderr, "flowwarden %s: ", cmd);
   fprintf (stderr, fmt, arg);
   fprintf (stderr, "\n%s", usage_text);
   return 2;
}

/* --- HTTP ------------------------------------------------------------------ */

typedef struct {
   char *data;
   size_t len;
   bool oom;
} body_t;

static size_t
collect (char *ptr, size_t size, size_t nmemb, void *ud)
{
   body_t *b = ud;
   size_t n = size * nmemb;
   char *grown;

   if (b->oom || !(grown = realloc (b->data, b->len + n + 1))) {
      b->oom = true;
      return 0;
   }
   b->data = grown;
   memcpy (b->data + b->len, ptr, n);
   b->len += n;
   b->data[b->len] = '\0';
   return n;
}

/* Sends the request; false (with why in err) when no HTTP answer came. */
static bool
request (const char *method, const char *url, long timeout_s, long *status, body_t *body, char *err,
         size_t errlen)
{
   CURL *curl = curl_easy_init ();
   struct curl_slist *headers = NULL;
   const char *token = getenv ("FLOWWARDEN_ADMIN_TOKEN");
   char auth[1024], curl_err[CURL_ERROR_SIZE] = "";
   CURLcode rc;

   if (!curl) {
      snprintf (err, errlen, "cannot initialise libcurl");
      return false;
   }
   if (strcmp (method, "POST") == 0) {
      curl_easy_setopt (curl, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE, 0L);
      if (token && *token) {
         snprintf (auth, sizeof auth, "Authorization: Bearer %s", token);
         headers = curl_slist_append (headers, auth);
      }
   }
   headers = curl_slist_append (headers, "Accept: application/json");
   curl_easy_setopt (curl, CURLOPT_URL, url);
   curl_easy_setopt (curl, CURLOPT_HTTPHEADER, headers);
   curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, collect);
   curl_easy_setopt (curl, CURLOPT_WRITEDATA, body);
   curl_easy_setopt (curl, CURLOPT_ERRORBUFFER, curl_err);
   curl_easy_setopt (curl, CURLOPT_CONNECTTIMEOUT, 5L);
   curl_easy_setopt (curl, CURLOPT_TIMEOUT, timeout_s);
   curl_easy_setopt (curl, CURLOPT_NOSIGNAL, 1L);
   curl_easy_setopt (curl, CURLOPT_USERAGENT, "flowwarden-cli");
   rc = curl_easy_perform (curl);
   if (rc == CURLE_OK) {
      curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, status);
   } else {
      snprintf (err, errlen, "%s", curl_err[0] ? curl_err : curl_easy_strerror (rc));
   }
   curl_slist_free_all (headers);
   curl_easy_cleanup (curl);
   return rc == CURLE_OK && !body->oom;
}

/* --- reading the answers ------------------------------------------------ */

typedef enum { SHOW_TABLE, SHOW_RESULT, SHOW_ERROR } show_mode_t;

typedef struct {
   const char *json;
   size_t len;
   show_mode_t mode;
   const char *what; /* "pause order-watcher", "reload" */
   long status;
} show_args_t;

/* t[key] as a string, or NULL (absent, null, another type). */
static const char *
field_string (lua_State *L, int t, const char *key)
{
   const char *s;
   lua_getfield (L, t, key);
   s = lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : NULL;
   lua_pop (L, 1); /* still held by the table */
   return s;
}

static bool
field_number (lua_State *L, int t, const char *key, double *out)
{
   bool ok;
   lua_getfield (L, t, key);
   ok = lua_type (L, -1) == LUA_TNUMBER;
   if (ok) {
      *out = lua_tonumber (L, -1);
   }
   lua_pop (L, 1);
   return ok;
}

static void
format_duration (double s, char *buf, size_t len)
{
   long long secs = (long long) s;

   if (s < 0) {
      snprintf (buf, len, "-");
   } else if (s < 10) {
      snprintf (buf, len, "%.3fs", s);
   } else if (secs < 60) {
      snprintf (buf, len, "%llds", secs);
   } else if (secs < 3600) {
      snprintf (buf, len, "%lldm%02llds", secs / 60, secs % 60);
   } else {
      snprintf (buf, len, "%lldh%02lldm", secs / 3600, (secs % 3600) / 60);
   }
}

static void
print_table (lua_State *L, int streams)
{
   int n = (int) lua_rawlen (L, streams);
   int width = 6;
   bool roles = false; /* ha.mode = "leader": a ROLE column */

   for (int i = 1; i <= n; i++) {
      const char *name;
      lua_rawgeti (L, streams, i);
      name = lua_istable (L, -1) ? field_string (L, lua_gettop (L), "name") : NULL;
      roles = roles || (lua_istable (L, -1) && field_string (L, lua_gettop (L), "role"));
      if (name && (int) strlen (name) > width) {
         width = (int) strlen (name);
      }
      lua_pop (L, 1);
   }
   printf ("%-*s  %-10s  %s%9s  %9s  %11s  %s\n", width, "STREAM", "STATE",
           roles ? "ROLE     " : "", "LAG", "EVENTS/S", "DLQ PENDING", "LAST ERROR");
   for (int i = 1; i <= n; i++) {
      int t;
      const char *name, *state, *error;
      double lag = -1, rate = 0, pending = -1, error_age = -1;
      char lag_text[32], pending_text[32], age_text[32], error_text[200];

      lua_rawgeti (L, streams, i);
      if (!lua_istable (L, -1)) {
         lua_pop (L, 1);
         continue;
      }
      t = lua_gettop (L);
      name = field_string (L, t, "name");
      state = field_string (L, t, "state");
      error = field_string (L, t, "last_error_type");
      field_number (L, t, "lag_seconds", &lag);
      field_number (L, t, "events_per_second", &rate);
      if (field_number (L, t, "dlq_pending", &pending)) {
         snprintf (pending_text, sizeof pending_text, "%.0f", pending);
      } else {
         snprintf (pending_text, sizeof pending_text, "-");
      }
      format_duration (lag, lag_text, sizeof lag_text);
      /* The last error stays shown once everything resolved: its age says
       * whether it is news. */
      if (error && field_number (L, t, "last_error_age_seconds", &error_age)) {
         format_duration (error_age, age_text, sizeof age_text);
         snprintf (error_text, sizeof error_text, "%.150s (%s ago)", error, age_text);
         error = error_text;
      }
      if (roles) {
         const char *role = field_string (L, t, "role");
         printf ("%-*s  %-10s  %-7s  %9s  %9.1f  %11s  %s\n", width, name ? name : "?",
                 state ? state : "?", role ? role : "-", lag_text, rate, pending_text,
                 error ? error : "-");
      } else {
         printf ("%-*s  %-10s  %9s  %9.1f  %11s  %s\n", width, name ? name : "?",
                 state ? state : "?", lag_text, rate, pending_text, error ? error : "-");
      }
      lua_pop (L, 1);
   }
   /* Why streams are not running, under the table. */
   for (int i = 1; i <= n; i++) {
      const char *name, *reason;
      lua_rawgeti (L, streams, i);
      if (lua_istable (L, -1)) {
         name = field_string (L, lua_gettop (L), "name");
         reason = field_string (L, lua_gettop (L), "reason");
         if (reason && *reason) {
            printf ("%s: %s\n", name ? name : "?", reason);
         }
      }
      lua_pop (L, 1);
   }
}

/* The oplog window and each stream's headroom (the window less its lag),
 * under the table: how far a stream may still fall behind before its
 * history is lost (issue 27). */
static void
print_oplog_window (lua_State *L, int streams)
{
   int n = (int) lua_rawlen (L, streams);
   double window = -1, headroom;
   char text[64] = "";

   for (int i = 1; i <= n && window < 0; i++) {
      lua_rawgeti (L, streams, i);
      if (lua_istable (L, -1)) {
         const char *why = field_string (L, lua_gettop (L), "oplog_window_unknown");
         field_number (L, lua_gettop (L), "oplog_window_seconds", &window);
         if (why && !text[0]) {
            snprintf (text, sizeof text, "%s", why);
         }
      }
      lua_pop (L, 1);
   }
   if (n == 0) {
      return;
   }
   if (window < 0) {
      /* The reason /v1/streams gives (an older instance gives none). */
      printf ("oplog window: unknown (%s)\n", text[0] ? text : "the log may say why");
      return;
   }
   format_duration (window, text, sizeof text);
   printf ("oplog window: %s; headroom:", text);
   for (int i = 1, shown = 0; i <= n; i++) {
      lua_rawgeti (L, streams, i);
      /* A standby's (ha) headroom is null: its holder's to say. */
      if (lua_istable (L, -1) && field_number (L, lua_gettop (L), "headroom_seconds", &headroom)) {
         const char *name = field_string (L, lua_gettop (L), "name");
         format_duration (headroom < 0 ? 0 : headroom, text, sizeof text);
         printf ("%s %s %s", shown++ ? "," : "", name ? name : "?",
                 headroom < 0 ? "0 (history lost)" : text);
      }
      lua_pop (L, 1);
   }
   printf ("\n");
}

/* Issue 29: a breaker that is not closed, and a rate limit, under the table:
 * "orders: circuit: open (Http.Connect) since T; next probe T". */
static void
print_outage (lua_State *L, int streams)
{
   int n = (int) lua_rawlen (L, streams);

   for (int i = 1; i <= n; i++) {
      const char *name, *state;
      double wait = 0;
      if (lua_rawgeti (L, streams, i) != LUA_TTABLE) {
         lua_pop (L, 1);
         continue;
      }
      name = field_string (L, lua_gettop (L), "name");
      if (lua_getfield (L, -1, "circuit") == LUA_TTABLE) {
         int c = lua_gettop (L);
         state = field_string (L, c, "state");
         if (state && strcmp (state, "closed") != 0) {
            const char *type = field_string (L, c, "error_type");
            const char *since = field_string (L, c, "since");
            const char *next = field_string (L, c, "next_probe");
            printf ("%s: circuit: %s (%s) since %s; next probe %s\n", name ? name : "?", state,
                    type ? type : "?", since ? since : "?", next ? next : "now");
         }
      }
      lua_pop (L, 1);
      if (lua_getfield (L, -1, "rate_limit") == LUA_TTABLE) {
         const char *rate = field_string (L, lua_gettop (L), "rate");
         field_number (L, lua_gettop (L), "wait_seconds", &wait);
         printf ("%s: rate_limit: %s (%.1f s waited for tokens)\n", name ? name : "?",
                 rate ? rate : "?", wait);
      }
      lua_pop (L, 2);
   }
}

/* Incremental snapshots (issue 28), under the table: one line a stream
 * that took one. */
static void
print_snapshots (lua_State *L, int streams)
{
   int n = (int) lua_rawlen (L, streams);

   for (int i = 1; i <= n; i++) {
      const char *name, *state;
      double docs = 0, chunks = 0;
      lua_rawgeti (L, streams, i);
      if (lua_istable (L, -1)) {
         name = field_string (L, lua_gettop (L), "name");
         if (lua_getfield (L, -1, "snapshot") == LUA_TTABLE) {
            int t = lua_gettop (L);
            state = field_string (L, t, "state");
            field_number (L, t, "documents", &docs);
            field_number (L, t, "chunks", &chunks);
            printf ("%s: snapshot %s: %.0f documents handed out%s\n", name ? name : "?",
                    state ? state : "?", docs,
                    state && strcmp (state, "running") == 0 ? " so far" : "");
         }
         lua_pop (L, 1);
      }
      lua_pop (L, 1);
   }
}

/* A failed last reload, under the table (the old script runs on). */
static void
print_last_reload (lua_State *L, int doc)
{
   const char *result, *message;
   double age = -1;
   char age_text[32];

   if (lua_getfield (L, doc, "last_reload") == LUA_TTABLE) {
      int t = lua_gettop (L);
      result = field_string (L, t, "result");
      message = field_string (L, t, "message");
      field_number (L, t, "age_seconds", &age);
      format_duration (age, age_text, sizeof age_text);
      if (result && strcmp (result, "failure") == 0) {
         printf ("last reload FAILED %s ago: %s\n", age_text, message ? message : "?");
      }
   }
   lua_pop (L, 1);
}

static int
pshow (lua_State *L)
{
   show_args_t *a = lua_touserdata (L, 1);
   int doc;

   luaL_requiref (L, "cjson", luaopen_cjson, 0);
   lua_getfield (L, -1, "decode");
   lua_pushlstring (L, a->json, a->len);
   lua_call (L, 1, 1);
   doc = lua_gettop (L);
   if (!lua_istable (L, doc)) {
      return luaL_error (L, "the answer is not a JSON object");
   }
   if (a->mode == SHOW_TABLE) {
      if (lua_getfield (L, doc, "streams") != LUA_TTABLE) {
         return luaL_error (L, "the answer has no streams");
      }
      print_table (L, lua_gettop (L));
      print_oplog_window (L, lua_gettop (L));
      print_outage (L, lua_gettop (L));
      print_snapshots (L, lua_gettop (L));
      print_last_reload (L, doc);
   } else if (a->mode == SHOW_ERROR) {
      const char *error = field_string (L, doc, "error");
      fprintf (stderr, "flowwarden %s: %s (HTTP %ld)\n", a->what, error ? error : "failed",
               a->status);
   } else {
      const char *result = field_string (L, doc, "result");
      const char *message = field_string (L, doc, "message");
      const char *state = NULL;
      if (lua_getfield (L, doc, "stream") == LUA_TTABLE) {
         state = field_string (L, lua_gettop (L), "state");
      }
      printf ("%s: %s%s%s%s%s\n", a->what, result ? result : "ok", message && *message ? ": " : "",
              message ? message : "", state ? "; state " : "", state ? state : "");
   }
   return 0;
}

/* Prints the answer; false when it cannot be read. */
static bool
show (show_mode_t mode, const char *what, long status, const body_t *body)
{
   lua_State *L = luaL_newstate ();
   show_args_t a = {body->data ? body->data : "", body->len, mode, what, status};
   bool ok;

   if (!L) {
      fprintf (stderr, "flowwarden %s: out of memory\n", what);
      return false;
   }
   luaL_openlibs (L);
   lua_pushcfunction (L, pshow);
   lua_pushlightuserdata (L, &a);
   ok = lua_pcall (L, 1, 0, 0) == LUA_OK;
   if (!ok) {
      fprintf (stderr, "flowwarden %s: unexpected answer (HTTP %ld): %s\n", what, status,
               lua_tostring (L, -1));
   }
   lua_close (L);
   return ok;
}

/* --- the group's view (issue 38) ------------------------------------------------ */

static char *base_url (const char *given);

/* Given answers = { {admin = URL, json = body | nil, err = why | nil}, ... }
 * (the members' /v1/streams), prints each member, then each unit once: who
 * holds it (the member whose unit is the leader; else the holder the
 * others name), its state there, its lag, and how long it has had no live
 * holder. Returns the number of members that did not answer. */
static const char group_lua[] =
   "local answers = ...\n"
   "local cjson = require('cjson')\n"
   "local function dur(s)\n"
   "  if type(s) ~= 'number' then return '-' end\n"
   "  if s < 10 then return string.format('%.3fs', s) end\n"
   "  if s < 60 then return string.format('%ds', math.floor(s)) end\n"
   "  if s < 3600 then return string.format('%dm%02ds', s // 60, math.floor(s % 60)) end\n"
   "  return string.format('%dh%02dm', s // 3600, math.floor(s % 3600) // 60)\n"
   "end\n"
   "local units, order, ids, failed = {}, {}, {}, 0\n"
   "for _, a in ipairs(answers) do\n"
   "  local ok, doc = pcall(cjson.decode, a.json or '')\n"
   "  if a.json and ok and type(doc) == 'table' and type(doc.streams) == 'table' then\n"
   "    a.doc = doc\n"
   "    for _, st in ipairs(doc.streams) do\n"
   "      if type(st) == 'table' and type(st.name) == 'string' then\n"
   "        if not units[st.name] then units[st.name] = {}; order[#order + 1] = st.name end\n"
   "        table.insert(units[st.name], {a = a, s = st})\n"
   "        if st.role == 'leader' and type(st.holder) == 'string' then\n"
   "          ids[st.holder] = a.admin; a.id = st.holder\n"
   "        end\n"
   "      end\n"
   "    end\n"
   "  else\n"
   "    failed = failed + 1\n"
   "    a.err = a.err or 'not a flowwarden status answer'\n"
   "  end\n"
   "end\n"
   "print(string.format('group: %d member%s asked, %d answered', #answers,\n"
   "  #answers == 1 and '' or 's', #answers - failed))\n"
   "for _, a in ipairs(answers) do\n"
   "  if a.doc then\n"
   "    local held, total, notready = 0, 0, {}\n"
   "    for _, st in ipairs(a.doc.streams) do\n"
   "      total = total + 1\n"
   "      if st.role == 'leader' or st.role == nil then held = held + 1 end\n"
   "      if st.ready == false then notready[#notready + 1] = st.name end\n"
   "    end\n"
   "    print(string.format('  %s  %s  holds %d of %d units, %s', a.admin,\n"
   "      a.id or '(member id unknown: holds no unit)', held, total,\n"
   "      #notready == 0 and 'ready' or ('NOT ready: ' .. table.concat(notready, ', '))))\n"
   "  else\n"
   "    print(string.format('  %s  DOES NOT ANSWER: %s', a.admin, a.err))\n"
   "  end\n"
   "end\n"
   "local w = 4\n"
   "for _, n in ipairs(order) do if #n > w then w = #n end end\n"
   "print(string.format('%-' .. w .. 's  %-28s  %-10s  %9s  %9s  %s', 'UNIT', 'HOLDER', 'STATE',\n"
   "  'LAG', 'EVENTS/S', 'ORPHANED'))\n"
   "local orphans = 0\n"
   "for _, n in ipairs(order) do\n"
   "  local lead, named, orphaned, seen, noha = nil, nil, nil, 0, false\n"
   "  for _, r in ipairs(units[n]) do\n"
   "    if r.s.role == nil then noha = true end\n"
   "    if r.s.role == 'leader' then lead = r end\n"
   "    if r.s.role == 'standby' and type(r.s.holder) == 'string' then named = r.s.holder end\n"
   "    if type(r.s.orphaned_seconds) == 'number' then\n"
   "      seen = seen + 1\n"
   "      if not orphaned or r.s.orphaned_seconds > orphaned then\n"
   "        orphaned = r.s.orphaned_seconds\n"
   "      end\n"
   "    end\n"
   "  end\n"
   "  local holder, state, lag, rate = 'none', '-', nil, nil\n"
   "  if noha then\n"
   "    local s = units[n][1].s\n"
   "    holder = 'each member (no ha)'; state = s.state; lag = s.lag_seconds\n"
   "    rate = s.events_per_second\n"
   "  elseif lead then\n"
   "    holder = lead.a.admin; state = lead.s.state; lag = lead.s.lag_seconds\n"
   "    rate = lead.s.events_per_second\n"
   "  elseif named and not orphaned then\n"
   "    holder = ids[named] or (named .. ' (not asked)'); state = 'standby here'\n"
   "  end\n"
   "  local otext = '-'\n"
   "  if orphaned and not lead then\n"
   "    orphans = orphans + 1\n"
   "    otext = string.format('%s (seen by %d member%s)', dur(orphaned), seen,\n"
   "      seen == 1 and '' or 's')\n"
   "    state = 'orphaned'\n"
   "  end\n"
   "  print(string.format('%-' .. w .. 's  %-28s  %-10s  %9s  %9s  %s', n, holder, state,\n"
   "    dur(lag),\n"
   "    type(rate) == 'number' and string.format('%.1f', rate) or '-', otext))\n"
   "end\n"
   "if orphans > 0 then\n"
   "  print(string.format('%d unit%s without a live holder', orphans,\n"
   "    orphans == 1 and '' or 's'))\n"
   "end\n"
   "return failed\n";

static int
group_status (const char **admins, int n, bool json)
{
   body_t bodies[MAX_ADMINS];
   char errs[MAX_ADMINS][CURL_ERROR_SIZE + 64];
   char *bases[MAX_ADMINS];
   lua_State *L;
   int failed = 0, rc = 1;

   memset (bodies, 0, sizeof bodies);
   for (int i = 0; i < n; i++) {
      char url[2048];
      long status = 0;
      errs[i][0] = '\0';
      if (!(bases[i] = base_url (admins[i]))) {
         snprintf (errs[i], sizeof errs[i], "out of memory");
         continue;
      }
      snprintf (url, sizeof url, "%s/v1/streams", bases[i]);
      if (!request ("GET", url, 10L, &status, &bodies[i], errs[i], sizeof errs[i])) {
         free (bodies[i].data);
         bodies[i].data = NULL;
      } else if (status != 200) {
         snprintf (errs[i], sizeof errs[i], "HTTP %ld", status);
         free (bodies[i].data);
         bodies[i].data = NULL;
      }
   }
   if (json) {
      printf ("{\"members\":[");
      for (int i = 0; i < n; i++) {
         printf ("%s{\"admin\":\"%s\",\"answer\":%s}", i ? "," : "", bases[i] ? bases[i] : "",
                 bodies[i].data ? bodies[i].data : "null");
         failed += !bodies[i].data;
      }
      printf ("]}\n");
      rc = failed ? 1 : 0;
   } else if (!(L = luaL_newstate ())) {
      fprintf (stderr, "flowwarden status: out of memory\n");
   } else {
      luaL_openlibs (L);
      luaL_requiref (L, "cjson", luaopen_cjson, 0);
      lua_pop (L, 1);
      if (luaL_loadbuffer (L, group_lua, sizeof group_lua - 1, "=status") != LUA_OK) {
         fprintf (stderr, "flowwarden status: %s\n", lua_tostring (L, -1));
      } else {
         lua_createtable (L, n, 0);
         for (int i = 0; i < n; i++) {
            lua_createtable (L, 0, 3);
            lua_pushstring (L, bases[i] ? bases[i] : admins[i]);
            lua_setfield (L, -2, "admin");
            if (bodies[i].data) {
               lua_pushlstring (L, bodies[i].data, bodies[i].len);
               lua_setfield (L, -2, "json");
            } else {
               lua_pushstring (L, errs[i][0] ? errs[i] : "no answer");
               lua_setfield (L, -2, "err");
            }
            lua_rawseti (L, -2, i + 1);
         }
         if (lua_pcall (L, 1, 1, 0) != LUA_OK) {
            fprintf (stderr, "flowwarden status: %s\n", lua_tostring (L, -1));
         } else {
            rc = lua_tointeger (L, -1) > 0 ? 1 : 0;
         }
      }
      lua_close (L);
   }
   for (int i = 0; i < n; i++) {
      free (bodies[i].data);
      free (bases[i]);
   }
   return rc;
}

/* --- the commands ------------------------------------------------------------ */

/* URL with its scheme (http:// added when missing) and no trailing '/'. */
static char *
base_url (const char *given)
{
   const char *url = given ? given : getenv ("FLOWWARDEN_ADMIN");
   size_t n;
   char *out;

   if (!url || !*url) {
      url = FW_ADMIN_DEFAULT_URL;
   }
   n = strlen (url);
   while (n > 0 && url[n - 1] == '/') {
      n--;
   }
   if (!(out = malloc (n + 8))) {
      return NULL;
   }
   if (strstr (url, "://")) {
      snprintf (out, n + 8, "%.*s", (int) n, url);
   } else {
      snprintf (out, n + 8, "http://%.*s", (int) n, url);
   }
   return out;
}

static int
run (const char *cmd, const char *admin, const char *stream, const char *filter, bool json)
{
   char *base = base_url (admin), *escaped = NULL, *query = NULL;
   char url[2048], what[512], err[CURL_ERROR_SIZE + 64];
   body_t body = {0};
   long status = 0;
   bool is_status = strcmp (cmd, "status") == 0;
   int rc = 1;

   if (!base) {
      fprintf (stderr, "flowwarden %s: out of memory\n", cmd);
      return 1;
   }
   if (stream) {
      if (!(escaped = curl_easy_escape (NULL, stream, 0))) {
         fprintf (stderr, "flowwarden %s: out of memory\n", cmd);
         free (base);
         return 1;
      }
      if (filter && !(query = curl_easy_escape (NULL, filter, 0))) {
         fprintf (stderr, "flowwarden %s: out of memory\n", cmd);
         curl_free (escaped);
         free (base);
         return 1;
      }
      if (snprintf (url, sizeof url, "%s/v1/streams/%s/%s%s%s", base, escaped, cmd,
                    query ? "?filter=" : "", query ? query : "") >= (int) sizeof url) {
         fprintf (stderr,
                  "flowwarden %s: the filter is too long (at most about 1,500 "
                  "characters)\n",
                  cmd);
         curl_free (query);
         curl_free (escaped);
         free (base);
         return 2;
      }
      snprintf (what, sizeof what, "%s %s", cmd, stream);
   } else if (is_status) {
      snprintf (url, sizeof url, "%s/v1/streams", base);
      snprintf (what, sizeof what, "status");
   } else {
      snprintf (url, sizeof url, "%s/v1/reload", base);
      snprintf (what, sizeof what, "reload");
   }
   if (!request (is_status ? "GET" : "POST", url, is_status ? 10L : 300L, &status, &body, err,
                 sizeof err)) {
      fprintf (stderr,
               "flowwarden %s: cannot reach the admin endpoint at %s: %s (is flowwarden running "
               "with --admin, or admin.listen in fw.defaults? give its address with --admin "
               "URL)\n",
               what, base, body.oom ? "out of memory" : err);
   } else if (status >= 400) {
      if (!show (SHOW_ERROR, what, status, &body)) {
         fprintf (stderr, "flowwarden %s: HTTP %ld\n", what, status);
      }
   } else if (json) {
      fwrite (body.data ? body.data : "", 1, body.len, stdout);
      rc = 0;
   } else if (show (is_status ? SHOW_TABLE : SHOW_RESULT, what, status, &body)) {
      rc = 0;
   }
   curl_free (query);
   curl_free (escaped);
   free (body.data);
   free (base);
   return rc;
}

int
fw_status_cli_main (int argc, char **argv)
{
   static const struct option longopts[] = {{"admin", required_argument, NULL, 'a'},
                                            {"json", no_argument, NULL, 'j'},
                                            {"filter", required_argument, NULL, 'f'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
   const char *cmd = argv[0], *admin = NULL, *stream = NULL, *filter = NULL;
   const char *admins[MAX_ADMINS];
   bool json = false, needs_stream;
   int c, rc, n_admins = 0;

   needs_stream = strcmp (cmd, "pause") == 0 || strcmp (cmd, "resume") == 0 ||
                  strcmp (cmd, "restart") == 0 || strcmp (cmd, "snapshot") == 0;
   opterr = 0;
   optind = 1;
   while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
      switch (c) {
      case 'a':
         if (n_admins > 0 && strcmp (cmd, "status") != 0) {
            return bad_usage (cmd, "--admin is given once here (several: status only)%s", "");
         }
         if (n_admins == MAX_ADMINS) {
            return bad_usage (cmd, "at most 32 --admin addresses%s", "");
         }
         admin = admins[n_admins++] = optarg;
         break;
      case 'j':
         if (strcmp (cmd, "status") != 0) {
            return bad_usage (cmd, "--json is an option of status only%s", "");
         }
         json = true;
         break;
      case 'f':
         if (strcmp (cmd, "snapshot") != 0) {
            return bad_usage (cmd, "--filter is an option of snapshot only%s", "");
         }
         filter = optarg;
         break;
      case 'h':
         fputs (usage_text, stdout);
         return 0;
      case ':':
         return bad_usage (cmd, "option %s needs a value", argv[optind - 1]);
      default:
         return bad_usage (cmd, "unknown option %s", argv[optind - 1]);
      }
   }
   if (needs_stream) {
      if (optind >= argc) {
         return bad_usage (cmd, "missing STREAM%s", "");
      }
      stream = argv[optind++];
   }
   if (optind < argc) {
      return bad_usage (cmd, "unexpected argument \"%s\"", argv[optind]);
   }
   curl_global_init (CURL_GLOBAL_DEFAULT);
   rc = n_admins > 1 ? group_status (admins, n_admins, json)
                     : run (cmd, admin, stream, filter, json);
   curl_global_cleanup ();
   return rc;
}
