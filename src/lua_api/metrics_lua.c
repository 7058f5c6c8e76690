/*
 * metrics_lua.c - fw.metrics over the ops layer's registry (metrics.h).
 *
 * A handle caches the series it last used for its stream: an update without
 * labels is a registry read and a store; one with labels adds a lookup of
 * the label values in a table of the handle's own.
 */
#include <math.h>
#include <string.h>

#include <lauxlib.h>

#include "lua_api/metrics_lua.h"

#define OWN_REGISTRY_MT "flowwarden.metrics_registry"
#define MAX_LABEL_VALUE 256

static const char registry_key = 'r'; /* registry keys: their addresses */
static const char stream_key = 's';

typedef struct {
   fw_metric_t *metric;
   fw_stream_metrics_t *cache_stream; /* the stream the cached series belong to */
   fw_metric_series_t *plain;         /* the series without labels, once looked up */
} handle_t;

void
fw_metrics_lua_attach (lua_State *L, fw_metrics_t *registry)
{
   lua_pushlightuserdata (L, registry);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &registry_key);
}

void
fw_metrics_lua_bind_stream (lua_State *L, fw_stream_metrics_t *stream)
{
   lua_pushlightuserdata (L, stream);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &stream_key);
}

fw_stream_metrics_t *
fw_metrics_lua_stream (lua_State *L)
{
   fw_stream_metrics_t *stream;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &stream_key);
   stream = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return stream;
}

static int
own_registry_gc (lua_State *L)
{
   fw_metrics_t **box = luaL_checkudata (L, 1, OWN_REGISTRY_MT);
   fw_metrics_destroy (*box);
   *box = NULL;
   return 0;
}

/* The attached registry, else the state's own (made on first use). */
static fw_metrics_t *
get_registry (lua_State *L)
{
   fw_metrics_t **box;

   if (lua_rawgetp (L, LUA_REGISTRYINDEX, &registry_key) == LUA_TLIGHTUSERDATA &&
       lua_touserdata (L, -1)) {
      fw_metrics_t *m = lua_touserdata (L, -1);
      lua_pop (L, 1);
      return m;
   }
   if (lua_type (L, -1) == LUA_TUSERDATA) {
      box = lua_touserdata (L, -1);
      lua_pop (L, 1);
      return *box;
   }
   lua_pop (L, 1);
   /* The box is anchored (and collectable) before the registry exists, so a
    * memory error in between leaks nothing. */
   box = lua_newuserdatauv (L, sizeof *box, 0);
   *box = NULL;
   if (luaL_newmetatable (L, OWN_REGISTRY_MT)) {
      lua_pushcfunction (L, own_registry_gc);
      lua_setfield (L, -2, "__gc");
   }
   lua_setmetatable (L, -2);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &registry_key);
   if (!(*box = fw_metrics_new ())) {
      luaL_error (L, "fw.metrics: out of memory");
   }
   return *box;
}

/* --- defining ----------------------------------------------------------- */

static const char *const fn_names[] = {"fw.metrics.counter", "fw.metrics.gauge",
                                       "fw.metrics.histogram"};

/* Reads opts.labels (strings) into labels; they stay valid while opts is on
 * the stack. Returns the count. */
static int
read_labels (lua_State *L, const char *fn, int opts, const char **labels)
{
   int n;

   if (lua_getfield (L, opts, "labels") == LUA_TNIL) {
      lua_pop (L, 1);
      return 0;
   }
   if (!lua_istable (L, -1)) {
      luaL_error (L, "%s: labels must be an array of label names such as { \"kind\" }, got %s", fn,
                  luaL_typename (L, -1));
   }
   n = (int) lua_rawlen (L, -1);
   if (n > FW_METRIC_MAX_LABELS) {
      luaL_error (L, "%s: at most %d labels, got %d", fn, FW_METRIC_MAX_LABELS, n);
   }
   for (int i = 1; i <= n; i++) {
      if (lua_rawgeti (L, -1, i) != LUA_TSTRING) {
         luaL_error (L, "%s: labels[%d] must be a string, got %s", fn, i, luaL_typename (L, -1));
      }
      labels[i - 1] = lua_tostring (L, -1);
      lua_pop (L, 1); /* still referenced by the labels table */
   }
   lua_pop (L, 1);
   return n;
}

static int
read_buckets (lua_State *L, const char *fn, int idx, double *buckets)
{
   int n = (int) lua_rawlen (L, idx);

   if (n < 1 || n > FW_METRIC_MAX_BUCKETS) {
      luaL_error (L, "%s: buckets must be an array of 1 to %d upper bounds, got %d", fn,
                  FW_METRIC_MAX_BUCKETS, n);
   }
   for (int i = 1; i <= n; i++) {
      if (lua_rawgeti (L, idx, i) != LUA_TNUMBER) {
         luaL_error (L, "%s: buckets[%d] must be a number, got %s", fn, i, luaL_typename (L, -1));
      }
      buckets[i - 1] = lua_tonumber (L, -1);
      lua_pop (L, 1);
   }
   return n;
}

static void
check_option_keys (lua_State *L, const char *fn, int opts, fw_metric_type_t type)
{
   lua_pushnil (L);
   while (lua_next (L, opts)) {
      lua_pop (L, 1);
      if (lua_type (L, -1) == LUA_TNUMBER && type == FW_METRIC_HISTOGRAM) {
         continue; /* { 0.1, 1, 10 }: the buckets themselves */
      }
      if (lua_type (L, -1) != LUA_TSTRING ||
          (strcmp (lua_tostring (L, -1), "labels") != 0 &&
           (type != FW_METRIC_HISTOGRAM || strcmp (lua_tostring (L, -1), "buckets") != 0))) {
         luaL_error (L, "%s: unknown option %s (options: labels%s)", fn,
                     lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "(not a name)",
                     type == FW_METRIC_HISTOGRAM ? ", buckets" : "");
      }
   }
}

static int
define (lua_State *L, fw_metric_type_t type)
{
   const char *fn = fn_names[type];
   const char *labels[FW_METRIC_MAX_LABELS];
   double buckets[FW_METRIC_MAX_BUCKETS];
   fw_metric_spec_t spec = {0};
   fw_metrics_t *registry;
   fw_metric_t *metric;
   fw_error_t err;
   handle_t *h;

   if (lua_type (L, 1) != LUA_TSTRING) {
      return luaL_error (L, "%s: name must be a string such as \"shop_orders_total\", got %s", fn,
                         luaL_typename (L, 1));
   }
   if (lua_type (L, 2) != LUA_TSTRING) {
      return luaL_error (L, "%s: help must be a string saying what the metric measures, got %s", fn,
                         luaL_typename (L, 2));
   }
   spec.name = lua_tostring (L, 1);
   spec.help = lua_tostring (L, 2);
   spec.type = type;
   if (!lua_isnoneornil (L, 3)) {
      if (!lua_istable (L, 3)) {
         return luaL_error (L,
                            "%s: options must be a table such as { labels = { \"kind\" } }, "
                            "got %s",
                            fn, luaL_typename (L, 3));
      }
      check_option_keys (L, fn, 3, type);
      spec.labels = labels;
      spec.n_labels = read_labels (L, fn, 3, labels);
      if (type == FW_METRIC_HISTOGRAM) {
         if (lua_getfield (L, 3, "buckets") != LUA_TNIL) {
            if (!lua_istable (L, -1)) {
               return luaL_error (L,
                                  "%s: buckets must be an array of upper bounds such as "
                                  "{ 0.1, 1, 10 }, got %s",
                                  fn, luaL_typename (L, -1));
            }
            spec.n_buckets = read_buckets (L, fn, lua_gettop (L), buckets);
            spec.buckets = buckets;
         } else if (lua_rawlen (L, 3) > 0) {
            spec.n_buckets = read_buckets (L, fn, 3, buckets);
            spec.buckets = buckets;
         }
         lua_pop (L, 1);
      }
   }
   registry = get_registry (L);
   metric = fw_metrics_define (registry, &spec, fw_metrics_lua_stream (L) == NULL, &err);
   if (!metric) {
      return luaL_error (L, "%s: %s", fn, err.message);
   }
   h = lua_newuserdatauv (L, sizeof *h, 1);
   h->metric = metric;
   h->cache_stream = NULL;
   h->plain = NULL;
   lua_pushvalue (L, lua_upvalueindex (1));
   lua_setmetatable (L, -2);
   return 1;
}

static int
metrics_counter (lua_State *L)
{
   return define (L, FW_METRIC_COUNTER);
}

static int
metrics_gauge (lua_State *L)
{
   return define (L, FW_METRIC_GAUGE);
}

static int
metrics_histogram (lua_State *L)
{
   return define (L, FW_METRIC_HISTOGRAM);
}

/* --- updating -------------------------------------------------------------- */

static handle_t *
check_handle (lua_State *L, const char *method)
{
   handle_t *h = lua_touserdata (L, 1);
   /* The handles' metatable is every function's upvalue, not a registry
    * entry: nothing is added to the registry's names. */
   if (h && lua_getmetatable (L, 1)) {
      if (!lua_rawequal (L, -1, lua_upvalueindex (1))) {
         h = NULL;
      }
      lua_pop (L, 1);
   } else {
      h = NULL;
   }
   if (!h) {
      luaL_error (L, "fw.metrics: call %s with ':' on a metric (metric:%s(...)), got %s", method,
                  method, luaL_typename (L, 1));
   }
   return h;
}

static void
check_type (lua_State *L, const handle_t *h, const char *method, unsigned types)
{
   fw_metric_type_t t = fw_metric_type (h->metric);
   if (!(types & (1u << t))) {
      luaL_error (L, "fw.metrics: %s is a %s: use %s", fw_metric_name (h->metric),
                  fw_metric_type_name (t),
                  t == FW_METRIC_COUNTER ? ":inc([n] [, labels])"
                  : t == FW_METRIC_GAUGE ? ":set(v [, labels]) or :add(v [, labels])"
                                         : ":observe(v [, labels])");
   }
   (void) method;
}

/* Pushes the label value at the top as a string (replacing it). */
static void
label_value_to_string (lua_State *L, const handle_t *h, const char *label)
{
   int t = lua_type (L, -1);
   if (t == LUA_TNUMBER || t == LUA_TBOOLEAN) {
      luaL_tolstring (L, -1, NULL);
      lua_remove (L, -2);
   } else if (t != LUA_TSTRING) {
      luaL_error (L, "fw.metrics: %s: label %s %s (give a string)", fw_metric_name (h->metric),
                  label, t == LUA_TNIL ? "is missing" : "must be a string");
   }
}

/* The caller's labels at idx: exactly the declared ones. */
static void
check_label_keys (lua_State *L, const handle_t *h, int idx)
{
   int n = fw_metric_label_count (h->metric);

   lua_pushnil (L);
   while (lua_next (L, idx)) {
      bool known = false;
      lua_pop (L, 1);
      for (int i = 0; i < n && !known && lua_type (L, -1) == LUA_TSTRING; i++) {
         known = strcmp (lua_tostring (L, -1), fw_metric_label_name (h->metric, i)) == 0;
      }
      if (!known) {
         luaL_error (L, "fw.metrics: %s: unknown label %s (declared: %s%s%s%s)",
                     fw_metric_name (h->metric),
                     lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "(not a name)",
                     n ? fw_metric_label_name (h->metric, 0) : "none", n > 1 ? ", " : "",
                     n > 1 ? fw_metric_label_name (h->metric, 1) : "", n > 2 ? ", ..." : "");
      }
   }
}

/* The series of this update, or NULL when the metric has no room for new
 * label values (the registry logged it). */
static fw_metric_series_t *
resolve (lua_State *L, handle_t *h, int labels_idx, const char *method)
{
   fw_stream_metrics_t *stream = fw_metrics_lua_stream (L);
   int n = fw_metric_label_count (h->metric);
   const char *values[FW_METRIC_MAX_LABELS];
   size_t lens[FW_METRIC_MAX_LABELS];
   fw_metric_series_t *s;
   int top = lua_gettop (L);
   luaL_Buffer key;

   if (!stream) {
      luaL_error (L,
                  "fw.metrics: %s:%s() works inside handlers only (each stream has its own "
                  "series), not while the script loads",
                  fw_metric_name (h->metric), method);
   }
   if (h->cache_stream != stream) {
      h->cache_stream = stream;
      h->plain = NULL;
      lua_pushnil (L);
      lua_setiuservalue (L, 1, 1);
   }
   if (n == 0) {
      if (labels_idx && (lua_pushnil (L), lua_next (L, labels_idx))) {
         luaL_error (L, "fw.metrics: %s has no labels (declare them with { labels = { ... } })",
                     fw_metric_name (h->metric));
      }
      if (!h->plain) {
         h->plain = fw_metric_series_get (h->metric, stream, NULL);
      }
      lua_settop (L, top);
      return h->plain;
   }
   if (!labels_idx) {
      luaL_error (L, "fw.metrics: %s needs its labels: %s(..., { %s = ... })",
                  fw_metric_name (h->metric), method, fw_metric_label_name (h->metric, 0));
   }
   check_label_keys (L, h, labels_idx);
   luaL_checkstack (L, n + 4, "fw.metrics");
   for (int i = 0; i < n; i++) {
      lua_getfield (L, labels_idx, fw_metric_label_name (h->metric, i));
      label_value_to_string (L, h, fw_metric_label_name (h->metric, i));
      values[i] = lua_tolstring (L, -1, &lens[i]);
   }
   luaL_buffinit (L, &key);
   for (int i = 0; i < n; i++) {
      luaL_addlstring (&key, values[i], lens[i] + 1); /* with its terminating NUL */
   }
   luaL_pushresult (&key);
   if (lua_getiuservalue (L, 1, 1) != LUA_TTABLE) {
      lua_pop (L, 1);
      lua_newtable (L);
      lua_pushvalue (L, -1);
      lua_setiuservalue (L, 1, 1);
   }
   lua_pushvalue (L, -2);
   if (lua_rawget (L, -2) == LUA_TLIGHTUSERDATA) {
      s = lua_touserdata (L, -1);
      lua_settop (L, top);
      return s;
   }
   lua_pop (L, 1);
   for (int i = 0; i < n; i++) {
      if (lens[i] > MAX_LABEL_VALUE || !fw_metrics_label_value_ok (values[i], lens[i])) {
         luaL_error (L,
                     "fw.metrics: %s: label %s must be UTF-8 text of at most %d bytes "
                     "without NUL (and take few distinct values)",
                     fw_metric_name (h->metric), fw_metric_label_name (h->metric, i),
                     MAX_LABEL_VALUE);
      }
   }
   if ((s = fw_metric_series_get (h->metric, stream, values))) {
      lua_pushvalue (L, -2);
      lua_pushlightuserdata (L, s);
      lua_rawset (L, -3);
   }
   lua_settop (L, top);
   return s;
}

static double
check_value (lua_State *L, const handle_t *h, int idx, const char *method)
{
   if (lua_type (L, idx) != LUA_TNUMBER) {
      luaL_error (L, "fw.metrics: %s:%s: expected a number, got %s", fw_metric_name (h->metric),
                  method, luaL_typename (L, idx));
   }
   return lua_tonumber (L, idx);
}

/* Where the labels table is: the argument after the value, if any. */
static int
labels_arg (lua_State *L, const handle_t *h, int idx, const char *method)
{
   if (lua_isnoneornil (L, idx)) {
      return 0;
   }
   if (!lua_istable (L, idx)) {
      luaL_error (L,
                  "fw.metrics: %s:%s: labels must be a table such as { kind = \"paid\" }, got %s",
                  fw_metric_name (h->metric), method, luaL_typename (L, idx));
   }
   return idx;
}

static int
metric_inc (lua_State *L)
{
   handle_t *h = check_handle (L, "inc");
   double n = 1;
   int labels;
   fw_metric_series_t *s;

   check_type (L, h, "inc", 1u << FW_METRIC_COUNTER);
   if (lua_istable (L, 2)) {
      labels = labels_arg (L, h, 2, "inc");
   } else {
      if (!lua_isnoneornil (L, 2)) {
         n = check_value (L, h, 2, "inc");
      }
      labels = labels_arg (L, h, 3, "inc");
   }
   if (!(n >= 0) || isinf (n)) {
      return luaL_error (L,
                         "fw.metrics: %s:inc: counters only go up: n must be a finite number "
                         ">= 0 (use a gauge for values that go down)",
                         fw_metric_name (h->metric));
   }
   if ((s = resolve (L, h, labels, "inc"))) {
      fw_metric_series_add (s, n);
   }
   return 0;
}

static int
metric_set (lua_State *L)
{
   handle_t *h = check_handle (L, "set");
   double v;
   fw_metric_series_t *s;

   check_type (L, h, "set", 1u << FW_METRIC_GAUGE);
   v = check_value (L, h, 2, "set");
   if ((s = resolve (L, h, labels_arg (L, h, 3, "set"), "set"))) {
      fw_metric_series_set (s, v);
   }
   return 0;
}

static int
metric_add (lua_State *L)
{
   handle_t *h = check_handle (L, "add");
   double v;
   fw_metric_series_t *s;

   check_type (L, h, "add", 1u << FW_METRIC_GAUGE);
   v = check_value (L, h, 2, "add");
   if ((s = resolve (L, h, labels_arg (L, h, 3, "add"), "add"))) {
      fw_metric_series_add (s, v);
   }
   return 0;
}

static int
metric_observe (lua_State *L)
{
   handle_t *h = check_handle (L, "observe");
   double v;
   fw_metric_series_t *s;

   check_type (L, h, "observe", 1u << FW_METRIC_HISTOGRAM);
   v = check_value (L, h, 2, "observe");
   if (isnan (v)) {
      return luaL_error (L, "fw.metrics: %s:observe: the value is NaN", fw_metric_name (h->metric));
   }
   if ((s = resolve (L, h, labels_arg (L, h, 3, "observe"), "observe"))) {
      fw_metric_series_observe (s, v);
   }
   return 0;
}

static int
metric_tostring (lua_State *L)
{
   handle_t *h = check_handle (L, "__tostring");
   lua_pushfstring (L, "fw.metrics.%s(%s)", fw_metric_type_name (fw_metric_type (h->metric)),
                    fw_metric_name (h->metric));
   return 1;
}

static const luaL_Reg handle_methods[] = {{"inc", metric_inc},
                                          {"set", metric_set},
                                          {"add", metric_add},
                                          {"observe", metric_observe},
                                          {NULL, NULL}};

static const luaL_Reg metrics_funcs[] = {{"counter", metrics_counter},
                                         {"gauge", metrics_gauge},
                                         {"histogram", metrics_histogram},
                                         {NULL, NULL}};

void
fw_metrics_lua_open (lua_State *L, int module_idx)
{
   int mt;

   module_idx = lua_absindex (L, module_idx);
   lua_createtable (L, 0, 3); /* the handles' metatable */
   mt = lua_gettop (L);
   lua_pushliteral (L, "fw.metrics metric");
   lua_setfield (L, mt, "__name");
   luaL_newlibtable (L, handle_methods);
   lua_pushvalue (L, mt);
   luaL_setfuncs (L, handle_methods, 1);
   lua_setfield (L, mt, "__index");
   lua_pushvalue (L, mt);
   lua_pushcclosure (L, metric_tostring, 1);
   lua_setfield (L, mt, "__tostring");
   luaL_newlibtable (L, metrics_funcs);
   lua_pushvalue (L, mt);
   luaL_setfuncs (L, metrics_funcs, 1);
   lua_setfield (L, module_idx, "metrics");
   lua_pop (L, 1);
}
