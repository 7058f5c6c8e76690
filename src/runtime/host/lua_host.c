/*
 * lua_host.c - builds sandboxed Lua states, loads operators' scripts and
 * calls into them under a time and memory budget.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/lua_sources.h"
#include "flowwarden/secrets.h"
#include "lua_api/lua_call.h"
#include "lua_api/lua_core.h"
#include "runtime/host/lua_host.h"

/* Handler timeouts: a watchdog thread looks at every host's deadline each
 * tick; when a call overruns, it signals the thread running it, whose signal
 * handler arms a count hook on that thread's own Lua state (the pattern
 * lua.c uses for Ctrl-C: lua_sethook is safe in a signal handler). A call
 * that finishes in time costs one clock read and nothing else. */
#define FW_WATCHDOG_TICK_NS 5000000 /* timeouts are enforced within 5 ms */
#define FW_WATCHDOG_SIGNAL (SIGRTMIN + 3)

/* ThreadSanitizer delivers a signal only when the thread next enters a
 * function it intercepts, which a Lua loop never does: in a TSan build
 * (FW_SANITIZE=thread, tests only) every call also arms the count hook
 * every FW_TSAN_HOOK_COUNT instructions, so the deadline is still kept. */
#if defined(__SANITIZE_THREAD__)
#define FW_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FW_TSAN_BUILD 1
#endif
#endif
#define FW_TSAN_HOOK_COUNT 10000

/* How many times the timeout hook lets an IO function finish building its
 * typed timeout (a few dozen instructions) before raising its own. */
#define FW_IO_TIMEOUT_WAITS 10000

/* A call starts with a full collection when the state grew by more than
 * this (plus a quarter) since the last one (fw_lua_host_call). */
#define FW_LUA_GC_AFTER_BYTES ((size_t) 4 * 1024 * 1024)

/* Lua's small blocks that it frees are kept per state, in size classes of
 * POOL_STEP bytes up to POOL_MAX, for its next requests of the same class:
 * a handler makes the same few objects every event (the ctx, the document's
 * copy, a nested view, a string) and the collector frees them in bursts,
 * which glibc's per-thread cache (7 blocks a size) mostly missed (issue 41:
 * malloc and free were ~10% of S2's instructions). At most POOL_BYTES are
 * kept a state; memory_limit counts what Lua holds, as before. */
#define POOL_STEP 16
#define POOL_MAX 512
#define POOL_CLASSES (POOL_MAX / POOL_STEP)
#define POOL_BYTES ((size_t) 64 * 1024)

typedef struct pool_block {
   struct pool_block *next;
} pool_block_t;

struct fw_lua_host {
   lua_State *L;
   pool_block_t *pool[POOL_CLASSES]; /* kept blocks by class (POOL_STEP * (c + 1) bytes) */
   size_t pool_bytes;                /* ... their bytes in all */
   size_t used;
   size_t gc_base; /* used after fw_lua_host_call's last full collection */
   size_t limit;
   bool refused; /* the allocator refused a request over the limit */
   bool timed_out;
   fw_lua_call_t call;   /* in_call and deadline_ns (0 = no call under a deadline, atomic) */
   int io_timeout_waits; /* count_hook's waits for an IO timeout (this call) */
   pthread_t caller;     /* the thread running the call under the deadline (atomic:
                      * the watchdog reads it while the next call sets it) */
   int has_caller;       /* caller runs a call of fw_lua_host_call now (atomic): a
                         * deadline set otherwise has no thread to signal */
   int poking;           /* the watchdog is signalling caller (atomic): the call's end
                         * waits for it, so the thread is alive when signalled */
   int poked;            /* the watchdog signalled this call (watchdog's own flag) */
   fw_lua_host_t *next;  /* the watchdog's list of hosts */
   fw_lua_host_t *prev;
   int specs_ref;           /* registry ref: list of validated stream specs */
   int uri_ref;             /* registry ref: the effective URI */
   int config_ref;          /* registry ref: the whole effective configuration */
   char version[17];        /* hash of the script and its modules */
   int64_t call_started_ns; /* CLOCK_MONOTONIC start of the last call with a timeout */
   fw_lua_push_fn push;     /* fw_lua_host_call_with's argument builder ... */
   void *push_ud;           /* ... and its data, for protected_push */
   bool panicked;           /* a panic left the state unusable */
};

/* Whether a block of n bytes (as Lua sizes it) is a pooled one: its
 * allocation is then its class's whole size. */
static bool
pool_sized (size_t n)
{
   return n > 0 && n <= POOL_MAX;
}

static size_t
pool_class (size_t n)
{
   return (n - 1) / POOL_STEP;
}

/* A block for n bytes (pool_sized): a kept one of its class, else a new
 * one of the class's size. NULL when out of memory. */
static void *
pool_get (fw_lua_host_t *host, size_t n)
{
   size_t c = pool_class (n);
   pool_block_t *b = host->pool[c];

   if (!b) {
      return malloc ((c + 1) * POOL_STEP);
   }
   host->pool[c] = b->next;
   host->pool_bytes -= (c + 1) * POOL_STEP;
   return b;
}

/* Keeps p (a block Lua sized n, pool_sized) for its class, or frees it when
 * POOL_BYTES are kept already. */
static void
pool_put (fw_lua_host_t *host, void *p, size_t n)
{
   size_t c = pool_class (n);
   size_t size = (c + 1) * POOL_STEP;
   pool_block_t *b = p;

   if (host->pool_bytes + size > POOL_BYTES) {
      free (p);
      return;
   }
   b->next = host->pool[c];
   host->pool[c] = b;
   host->pool_bytes += size;
}

static void
block_free (fw_lua_host_t *host, void *p, size_t n)
{
   if (pool_sized (n)) {
      pool_put (host, p, n);
   } else {
      free (p);
   }
}

/* ptr (osize bytes) resized to nsize > 0 where either is pooled: the same
 * block within one class, else a new block and a copy. */
static void *
pool_resize (fw_lua_host_t *host, void *ptr, size_t osize, size_t nsize)
{
   void *p;

   if (ptr && pool_sized (osize) && pool_sized (nsize) &&
       pool_class (osize) == pool_class (nsize)) {
      return ptr;
   }
   p = pool_sized (nsize) ? pool_get (host, nsize) : malloc (nsize);
   if (p && ptr) {
      memcpy (p, ptr, osize < nsize ? osize : nsize);
      block_free (host, ptr, osize);
   }
   return p;
}

/* Counts bytes so the state can be held to its memory_limit. Per the
 * lua_Alloc contract osize is meaningless when ptr is NULL, and otherwise
 * the size Lua gave the block (which tells a pooled block from another). */
static void *
host_alloc (void *ud, void *ptr, size_t osize, size_t nsize)
{
   fw_lua_host_t *host = ud;
   void *p;

   if (ptr == NULL) {
      osize = 0;
   }
   if (nsize == 0) {
      if (ptr) {
         block_free (host, ptr, osize);
      }
      host->used -= osize;
      return NULL;
   }
   if (host->limit && nsize > osize && host->used + (nsize - osize) > host->limit) {
      host->refused = true;
      return NULL;
   }
   p = pool_sized (nsize) || (ptr && pool_sized (osize)) ? pool_resize (host, ptr, osize, nsize)
                                                         : realloc (ptr, nsize);
   if (!p) {
      return NULL;
   }
   host->used = host->used - osize + nsize;
   return p;
}

/* Frees the kept blocks (after lua_close). */
static void
pool_drain (fw_lua_host_t *host)
{
   for (size_t c = 0; c < POOL_CLASSES; c++) {
      while (host->pool[c]) {
         pool_block_t *b = host->pool[c];
         host->pool[c] = b->next;
         free (b);
      }
   }
   host->pool_bytes = 0;
}

static fw_lua_host_t *
host_of (lua_State *L)
{
   return *(fw_lua_host_t **) lua_getextraspace (L);
}

static void count_hook (lua_State *L, lua_Debug *ar);

/* Process-wide by nature: one watchdog serves every Lua state. */
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static fw_lua_host_t *watched;
static pthread_once_t watch_once = PTHREAD_ONCE_INIT;
static __thread fw_lua_host_t *calling; /* the host whose call runs on this thread */

static void
on_watchdog_signal (int sig)
{
   fw_lua_host_t *host = calling;
   (void) sig;
   if (host) {
      lua_sethook (host->L, count_hook, LUA_MASKCOUNT, 1);
   }
}

static void *
watchdog_main (void *arg)
{
   (void) arg;
   for (;;) {
      struct timespec tick = {0, FW_WATCHDOG_TICK_NS};
      int64_t now;
      nanosleep (&tick, NULL);
      now = fw_mono_ns ();
      pthread_mutex_lock (&watch_mu);
      for (fw_lua_host_t *h = watched; h; h = h->next) {
         int64_t deadline = __atomic_load_n (&h->call.deadline_ns, __ATOMIC_ACQUIRE);
         if (!deadline || now <= deadline || __atomic_load_n (&h->poked, __ATOMIC_ACQUIRE) ||
             !__atomic_load_n (&h->has_caller, __ATOMIC_SEQ_CST)) {
            continue;
         }
         /* Announced, then checked again: a call that ends meanwhile either
          * is seen ended here or, in fw_lua_host_call, waits for the signal. */
         __atomic_store_n (&h->poking, 1, __ATOMIC_SEQ_CST);
         if (__atomic_load_n (&h->has_caller, __ATOMIC_SEQ_CST)) {
            __atomic_store_n (&h->poked, 1, __ATOMIC_RELEASE);
            pthread_kill (__atomic_load_n (&h->caller, __ATOMIC_ACQUIRE), FW_WATCHDOG_SIGNAL);
         }
         __atomic_store_n (&h->poking, 0, __ATOMIC_SEQ_CST);
      }
      pthread_mutex_unlock (&watch_mu);
   }
   return NULL;
}

static void
watchdog_start (void)
{
   struct sigaction sa;
   pthread_attr_t attr;
   pthread_t thread;
   sigset_t all, old;

   memset (&sa, 0, sizeof sa);
   sa.sa_handler = on_watchdog_signal;
   sa.sa_flags = SA_RESTART;
   sigemptyset (&sa.sa_mask);
   sigaction (FW_WATCHDOG_SIGNAL, &sa, NULL);
   /* The watchdog takes no signal meant for the process. */
   sigfillset (&all);
   pthread_sigmask (SIG_BLOCK, &all, &old);
   pthread_attr_init (&attr);
   pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
   if (pthread_create (&thread, &attr, watchdog_main, NULL) != 0) {
      fprintf (stderr, "flowwarden: cannot start the handler watchdog: timeouts are off\n");
   }
   pthread_attr_destroy (&attr);
   pthread_sigmask (SIG_SETMASK, &old, NULL);
}

static void
watch (fw_lua_host_t *host)
{
   pthread_once (&watch_once, watchdog_start);
   pthread_mutex_lock (&watch_mu);
   host->next = watched;
   if (watched) {
      watched->prev = host;
   }
   watched = host;
   pthread_mutex_unlock (&watch_mu);
}

static void
unwatch (fw_lua_host_t *host)
{
   pthread_mutex_lock (&watch_mu);
   if (host->prev) {
      host->prev->next = host->next;
   } else if (watched == host) {
      watched = host->next;
   }
   if (host->next) {
      host->next->prev = host->prev;
   }
   host->next = host->prev = NULL;
   pthread_mutex_unlock (&watch_mu);
}

/* Finds the flowwarden library's own modules inside the binary. */
static int
embedded_searcher (lua_State *L)
{
   const char *name = luaL_checkstring (L, 1);

   for (const fw_lua_source_t *s = fw_lua_sources; s->module; s++) {
      if (strcmp (s->module, name) == 0) {
         lua_pushfstring (L, "@[flowwarden]/%s", s->path);
         if (luaL_loadbufferx (L, s->source, s->length, lua_tostring (L, -1), "t") != LUA_OK) {
            return lua_error (L);
         }
         lua_pushstring (L, s->path);
         return 2;
      }
   }
   lua_pushfstring (L, "no embedded module '%s'", name);
   return 1;
}

#define MODULE_FILES_KEY "flowwarden.module_files"

/* Wraps Lua's own file searcher to note every module file a script loads,
 * so the script version covers the modules as well as the script. Each
 * module adds two entries: its name as required, then the file found. */
static int
recording_searcher (lua_State *L)
{
   int n;
   luaL_checkstring (L, 1);
   lua_pushvalue (L, lua_upvalueindex (1));
   lua_pushvalue (L, 1);
   lua_call (L, 1, 2);
   n = 2;
   if (lua_isfunction (L, -2) && lua_type (L, -1) == LUA_TSTRING) {
      lua_getfield (L, LUA_REGISTRYINDEX, MODULE_FILES_KEY);
      lua_pushvalue (L, 1);
      lua_rawseti (L, -2, (lua_Integer) lua_rawlen (L, -2) + 1);
      lua_pushvalue (L, -2);
      lua_rawseti (L, -2, (lua_Integer) lua_rawlen (L, -2) + 1);
      lua_pop (L, 1);
   }
   return n;
}

/* A coroutine is a thread of its own: the hook the watchdog arms on the
 * state's main thread does not run in it, so a handler looping inside one
 * was never stopped. Every coroutine gets a count hook of its own, which
 * looks at the call's deadline every COROUTINE_CHECK instructions. */
#define COROUTINE_CHECK 10000

static void
coroutine_hook (lua_State *L, lua_Debug *ar)
{
   fw_lua_host_t *host = host_of (L); /* a thread's extra space is its main thread's */
   int64_t deadline = __atomic_load_n (&host->call.deadline_ns, __ATOMIC_ACQUIRE);
   (void) ar;
   if (host->timed_out || (deadline && fw_mono_ns () > deadline)) {
      host->timed_out = true;
      luaL_error (L, "handler exceeded its timeout");
   }
}

static void
watch_coroutine (lua_State *co)
{
   lua_sethook (co, coroutine_hook, LUA_MASKCOUNT, COROUTINE_CHECK);
}

/* coroutine.create, the original as upvalue 1: the new thread is watched. */
static int
watched_create (lua_State *L)
{
   lua_pushvalue (L, lua_upvalueindex (1));
   lua_insert (L, 1);
   lua_call (L, lua_gettop (L) - 1, 1);
   if (lua_type (L, -1) == LUA_TTHREAD) {
      watch_coroutine (lua_tothread (L, -1));
   }
   return 1;
}

/* coroutine.wrap, the original as upvalue 1: the function it returns holds
 * its thread as its upvalue, which is watched. */
static int
watched_wrap (lua_State *L)
{
   lua_pushvalue (L, lua_upvalueindex (1));
   lua_insert (L, 1);
   lua_call (L, lua_gettop (L) - 1, 1);
   if (lua_type (L, -1) == LUA_TFUNCTION && lua_getupvalue (L, -1, 1)) {
      if (lua_type (L, -1) == LUA_TTHREAD) {
         watch_coroutine (lua_tothread (L, -1));
      }
      lua_pop (L, 1);
   }
   return 1;
}

static void
watch_coroutines (lua_State *L)
{
   lua_getglobal (L, "coroutine");
   lua_getfield (L, -1, "create");
   lua_pushcclosure (L, watched_create, 1);
   lua_setfield (L, -2, "create");
   lua_getfield (L, -1, "wrap");
   lua_pushcclosure (L, watched_wrap, 1);
   lua_setfield (L, -2, "wrap");
   lua_pop (L, 1);
}

/* print as Lua's (tostring of each argument, tabs between, a newline, to
 * stdout), with the values of fw.env hidden as in every other text
 * flowwarden writes (secrets.h). */
static int
redacting_print (lua_State *L)
{
   int n = lua_gettop (L);
   luaL_Buffer b;
   const char *text, *shown;
   char *owned = NULL;
   size_t len, shown_len;

   luaL_buffinit (L, &b);
   for (int i = 1; i <= n; i++) {
      if (i > 1) {
         luaL_addchar (&b, '\t');
      }
      luaL_tolstring (L, i, NULL); /* __tostring and __name as Lua's print */
      luaL_addvalue (&b);
   }
   luaL_addchar (&b, '\n');
   luaL_pushresult (&b);
   text = lua_tolstring (L, -1, &len);
   shown = fw_secrets_redact (text, len, &owned, &shown_len);
   if (shown == text) {
      shown_len = len;
   } else if (!owned) {
      shown_len = strlen (shown); /* out of memory: the marker alone */
   }
   fwrite (shown, 1, shown_len, stdout);
   fflush (stdout);
   free (owned);
   return 0;
}

static int
pmain_open (lua_State *L)
{
   luaL_openlibs (L);
   lua_pushcfunction (L, redacting_print);
   lua_setglobal (L, "print");
   watch_coroutines (L);
   fw_lua_call_attach (L, &host_of (L)->call);

   /* package.searchers: preload, embedded, then the usual path searchers. */
   lua_getglobal (L, "package");
   lua_getfield (L, -1, "searchers");
   for (lua_Integer i = (lua_Integer) luaL_len (L, -1); i >= 2; i--) {
      lua_geti (L, -1, i);
      lua_seti (L, -2, i + 1);
   }
   lua_pushcfunction (L, embedded_searcher);
   lua_seti (L, -2, 2);
   lua_newtable (L);
   lua_setfield (L, LUA_REGISTRYINDEX, MODULE_FILES_KEY);
   lua_geti (L, -1, 3); /* the Lua file searcher, now third */
   lua_pushcclosure (L, recording_searcher, 1);
   lua_seti (L, -2, 3);
   lua_pop (L, 1);

   lua_getfield (L, -1, "preload");
   lua_pushcfunction (L, fw_lua_core_open);
   lua_setfield (L, -2, "flowwarden.core");
   lua_pop (L, 2);
   return 0;
}

/* The calling thread's innermost fw_lua_host_guard, whatever state it
 * runs (a reload may give the thread a new one). */
static __thread jmp_buf *recover_point;

/* An error raised outside any protected call: a bug of the host's callers.
 * Lua aborts the process when this returns; inside fw_lua_host_guard it
 * does not return. */
static int
on_panic (lua_State *L)
{
   fw_lua_host_t *host = host_of (L);
   const char *msg = lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : NULL;

   fw_log (FW_LOG_ERROR, NULL, "Lua panic (an error outside any protected call): %s%s",
           msg ? msg : "an error object that is not a string",
           recover_point ? "" : "; no recovery point: the process aborts");
   host->panicked = true;
   if (recover_point) {
      longjmp (*recover_point, 1);
   }
   return 0;
}

bool
fw_lua_host_guard (bool (*fn) (void *ud), void *ud)
{
   jmp_buf here;
   jmp_buf *volatile outer = recover_point;
   bool ok;

   if (setjmp (here) != 0) {
      recover_point = outer;
      return false;
   }
   recover_point = &here;
   ok = fn (ud);
   recover_point = outer;
   return ok;
}

bool
fw_lua_host_panicked (const fw_lua_host_t *host)
{
   return host->panicked;
}

fw_lua_host_t *
fw_lua_host_new (fw_error_t *error)
{
   fw_lua_host_t *host = calloc (1, sizeof *host);

   if (!host) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory creating a Lua state");
      return NULL;
   }
   host->specs_ref = LUA_NOREF;
   host->uri_ref = LUA_NOREF;
   host->config_ref = LUA_NOREF;
   host->L = lua_newstate (host_alloc, host);
   if (!host->L) {
      pool_drain (host);
      free (host);
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory creating a Lua state");
      return NULL;
   }
   *(fw_lua_host_t **) lua_getextraspace (host->L) = host;
   lua_atpanic (host->L, on_panic);
   watch (host);
   /* Handlers make many short-lived objects per event (ctx, views, strings):
    * the generational collector is built for that pattern. */
   lua_gc (host->L, LUA_GCGEN, 0, 0);
   lua_pushcfunction (host->L, pmain_open);
   if (lua_pcall (host->L, 0, 0, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "cannot open the Lua libraries: %s",
                    lua_tostring (host->L, -1));
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host;
}

void
fw_lua_host_destroy (fw_lua_host_t *host)
{
   if (!host) {
      return;
   }
   unwatch (host);
   if (host->L) {
      lua_close (host->L);
   }
   pool_drain (host);
   free (host);
}

lua_State *
fw_lua_host_state (fw_lua_host_t *host)
{
   return host->L;
}

void
fw_lua_host_set_memory_limit (fw_lua_host_t *host, size_t bytes)
{
   host->limit = bytes;
}

size_t
fw_lua_host_memory_used (const fw_lua_host_t *host)
{
   return host->used;
}

typedef struct {
   const char *path;
   const char *option_uri;
} load_args_t;

/* Runs inside lua_pcall: flowwarden.config runs the script (with its folder
 * on the module path) and validates what it declared; the effective
 * configuration stays in the registry. */
static int
pmain_load (lua_State *L)
{
   const load_args_t *args = lua_touserdata (L, 1);
   fw_lua_host_t *host = host_of (L);

   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.config");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "load_file");
   lua_pushstring (L, args->path);
   lua_createtable (L, 0, 2);
   if (args->option_uri) {
      lua_pushstring (L, args->option_uri);
      lua_setfield (L, -2, "uri");
   }
   lua_pushstring (L, args->path);
   lua_setfield (L, -2, "script");
   lua_call (L, 2, 2); /* cfg, errors */
   if (lua_istable (L, -1) && lua_rawlen (L, -1) > 0) {
      lua_getglobal (L, "table");
      lua_getfield (L, -1, "concat");
      lua_pushvalue (L, -3);
      lua_pushliteral (L, "\n");
      lua_call (L, 2, 1);
      return lua_error (L);
   }
   lua_pop (L, 1);
   luaL_checktype (L, -1, LUA_TTABLE);
   lua_pushvalue (L, -1);
   host->config_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   lua_getfield (L, -1, "streams");
   luaL_checktype (L, -1, LUA_TTABLE);
   host->specs_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   lua_getfield (L, -1, "uri");
   host->uri_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   return 0;
}

/* FNV-1a, 64 bits: a change detector for scripts, not a security hash. */
static uint64_t
fnv1a (uint64_t h, const unsigned char *p, size_t n)
{
   for (size_t i = 0; i < n; i++) {
      h ^= p[i];
      h *= 0x100000001b3ULL;
   }
   return h;
}

/* A 64-bit number, little-endian whatever the machine. */
static uint64_t
hash_u64 (uint64_t h, uint64_t v)
{
   unsigned char b[8];
   for (int i = 0; i < 8; i++) {
      b[i] = (unsigned char) (v >> (8 * i));
   }
   return fnv1a (h, b, sizeof b);
}

/* Bytes with their length first, so that the boundary between two hashed
 * items is part of the hash. */
static uint64_t
hash_item (uint64_t h, const void *p, size_t n)
{
   return fnv1a (hash_u64 (h, (uint64_t) n), (const unsigned char *) p, n);
}

/* The file's contents only, never its path: one script has one version
 * whatever path it is given by and on whatever machine. */
static uint64_t
hash_file (uint64_t h, const char *path)
{
   unsigned char buf[8192];
   size_t n;
   uint64_t total = 0;
   uint64_t body = 0xcbf29ce484222325ULL;
   FILE *f = fopen (path, "rb");

   if (!f) {
      return hash_item (h, "", 0); /* the loader read it a moment ago */
   }
   while ((n = fread (buf, 1, sizeof buf, f)) > 0) {
      body = fnv1a (body, buf, n);
      total += n;
   }
   fclose (f);
   return hash_u64 (hash_u64 (h, total), body);
}

/* The version covers the script's contents and every module it loaded from
 * disk (the module's name as required and the file's contents): not where
 * the files are, so `a.lua`, `./a.lua` and `/abs/a.lua` are one version. */
static void
compute_version (fw_lua_host_t *host, const char *path)
{
   lua_State *L = host->L;
   uint64_t h = hash_file (0xcbf29ce484222325ULL, path);

   lua_getfield (L, LUA_REGISTRYINDEX, MODULE_FILES_KEY);
   for (lua_Integer i = 1; lua_istable (L, -1) && i + 1 <= (lua_Integer) lua_rawlen (L, -1);
        i += 2) {
      size_t len = 0;
      const char *name;
      lua_rawgeti (L, -1, i);
      name = lua_tolstring (L, -1, &len);
      h = hash_item (h, name ? name : "", name ? len : 0);
      lua_pop (L, 1);
      lua_rawgeti (L, -1, i + 1);
      h = hash_file (h, lua_tostring (L, -1));
      lua_pop (L, 1);
   }
   lua_pop (L, 1);
   snprintf (host->version, sizeof host->version, "%016llx", (unsigned long long) h);
   host->version[12] = '\0';
}

const char *
fw_lua_host_version (const fw_lua_host_t *host)
{
   return host->version;
}

bool
fw_lua_host_load_script (fw_lua_host_t *host, const char *path, const char *option_uri,
                         fw_error_t *error)
{
   lua_State *L = host->L;
   load_args_t args = {path, option_uri};

   lua_pushcfunction (L, pmain_load);
   lua_pushlightuserdata (L, &args);
   if (lua_pcall (L, 1, 0, 0) != LUA_OK) {
      const char *msg = lua_tostring (L, -1);
      fw_error_set (error, FW_ERROR_INVALID, "%s", msg ? msg : "(error object is not a string)");
      lua_pop (L, 1);
      return false;
   }
   compute_version (host, path);
   return true;
}

int
fw_lua_host_stream_count (fw_lua_host_t *host)
{
   int n;
   lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->specs_ref);
   n = lua_istable (host->L, -1) ? (int) lua_rawlen (host->L, -1) : 0;
   lua_pop (host->L, 1);
   return n;
}

void
fw_lua_host_push_spec (fw_lua_host_t *host, int i)
{
   lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->specs_ref);
   lua_rawgeti (host->L, -1, i + 1);
   lua_remove (host->L, -2);
}

void
fw_lua_host_push_specs (fw_lua_host_t *host)
{
   lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->specs_ref);
}

void
fw_lua_host_push_uri (fw_lua_host_t *host)
{
   lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->uri_ref);
}

void
fw_lua_host_push_connections (fw_lua_host_t *host)
{
   lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->config_ref);
   if (!lua_istable (host->L, -1) || lua_getfield (host->L, -1, "connections") != LUA_TTABLE) {
      lua_pop (host->L, 1);
      lua_newtable (host->L);
   }
   lua_remove (host->L, -2);
}

void
fw_lua_host_push_admin (fw_lua_host_t *host)
{
   if (lua_rawgeti (host->L, LUA_REGISTRYINDEX, host->config_ref) == LUA_TTABLE) {
      lua_getfield (host->L, -1, "admin");
      lua_remove (host->L, -2);
   }
   if (!lua_istable (host->L, -1)) {
      lua_pop (host->L, 1);
      lua_newtable (host->L);
   }
}

static int
pmain_describe (lua_State *L)
{
   fw_lua_host_t *host = host_of (L);
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.describe");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "text");
   lua_rawgeti (L, LUA_REGISTRYINDEX, host->config_ref);
   lua_call (L, 1, 2);
   luaL_checktype (L, -2, LUA_TSTRING);
   luaL_checkinteger (L, -1);
   return 2;
}

char *
fw_lua_host_describe (fw_lua_host_t *host, int *warnings, fw_error_t *error)
{
   char *out = NULL;

   lua_pushcfunction (host->L, pmain_describe);
   if (lua_pcall (host->L, 0, 2, 0) != LUA_OK) {
      fw_error_set (error, FW_ERROR_LUA, "cannot describe the script: %s",
                    lua_tostring (host->L, -1));
      lua_pop (host->L, 1);
      return NULL;
   }
   if (!(out = strdup (lua_tostring (host->L, -2)))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
   } else if (warnings) {
      *warnings = (int) lua_tointeger (host->L, -1);
   }
   lua_pop (host->L, 2);
   return out;
}

/* Armed by the watchdog's signal. Once the budget is spent it raises on
 * every instruction, so a handler cannot swallow the timeout with pcall and
 * carry on. A hook armed too late (the call had finished) removes itself. */
static void
count_hook (lua_State *L, lua_Debug *ar)
{
   fw_lua_host_t *host = host_of (L);
   int64_t deadline = __atomic_load_n (&host->call.deadline_ns, __ATOMIC_ACQUIRE);
   (void) ar;
   if (host->timed_out || (deadline && fw_mono_ns () > deadline)) {
      host->timed_out = true;
      /* An IO function's wait, bounded by this deadline, ran out first: its
       * typed timeout is the outcome. While it builds that error the hook
       * waits (a bounded number of times: the build may fail), then raises
       * it again wherever the handler goes. */
      if (host->call.io_timeout == 1 && host->io_timeout_waits++ < FW_IO_TIMEOUT_WAITS) {
         return;
      }
      if (fw_lua_call_push_io_timeout (L)) {
         lua_error (L);
      }
      luaL_error (L, "handler exceeded its timeout");
   }
#ifdef FW_TSAN_BUILD
   lua_sethook (L, count_hook, LUA_MASKCOUNT, FW_TSAN_HOOK_COUNT);
#else
   lua_sethook (L, NULL, 0, 0);
#endif
}

/* Gives a failure the shape fw_lua_host_call promises, {value, traceback}:
 * Lua skips the message handler for memory errors. The ceiling is lifted
 * while doing so, then the collector takes back what the failed call held. */
static void
shape_failure (fw_lua_host_t *host, int status)
{
   lua_State *L = host->L;
   size_t saved_limit = host->limit;

   if (status == LUA_ERRMEM || !lua_istable (L, -1)) {
      host->limit = 0;
      lua_createtable (L, 0, 2);
      lua_insert (L, -2);
      lua_setfield (L, -2, "value");
      lua_pushliteral (L, "");
      lua_setfield (L, -2, "traceback");
      host->limit = saved_limit;
   }
   lua_gc (L, LUA_GCCOLLECT);
}

/* Message handler: keeps what was raised and adds the traceback. */
static int
message_handler (lua_State *L)
{
   lua_createtable (L, 0, 2);
   lua_pushvalue (L, 1);
   lua_setfield (L, -2, "value");
   luaL_traceback (L, L, NULL, 1);
   lua_setfield (L, -2, "traceback");
   return 1;
}

int64_t
fw_lua_host_call_started_ns (const fw_lua_host_t *host)
{
   return host->call_started_ns;
}

bool
fw_lua_host_call (fw_lua_host_t *host, int nargs, int nresults, int64_t timeout_ms,
                  fw_lua_stop_t *stop)
{
   lua_State *L = host->L;
   int base = lua_gettop (L) - nargs; /* index of the function */
   int status;
   bool io_timeout;

   host->refused = false;
   host->timed_out = false;
   host->io_timeout_waits = 0;
   if (host->call.io_timeout) {
      fw_lua_call_clear_io_timeout (L);
   }
   *stop = FW_LUA_STOP_NONE;
   if (host->used > host->gc_base + FW_LUA_GC_AFTER_BYTES + host->gc_base / 4) {
      /* The state grew this much since the last such collection: most
       * likely the last event's copies and strings (a large event's, which
       * nothing holds any more, its ctx being replaced), collected before
       * this call stacks its own on them. */
      lua_gc (L, LUA_GCCOLLECT);
      host->gc_base = host->used;
   }
   lua_pushcfunction (L, message_handler);
   lua_insert (L, base);
   host->call_started_ns = 0;
   if (timeout_ms > 0) {
      __atomic_store_n (&host->caller, pthread_self (), __ATOMIC_RELEASE);
      __atomic_store_n (&host->poked, 0, __ATOMIC_RELEASE);
      __atomic_store_n (&host->has_caller, 1, __ATOMIC_SEQ_CST);
      calling = host;
      host->call_started_ns = fw_mono_ns ();
      __atomic_store_n (&host->call.deadline_ns, host->call_started_ns + timeout_ms * 1000000,
                        __ATOMIC_RELEASE);
#ifdef FW_TSAN_BUILD
      lua_sethook (L, count_hook, LUA_MASKCOUNT, FW_TSAN_HOOK_COUNT);
#endif
   }
   host->call.in_call = 1;
   status = lua_pcall (L, nargs, nresults, base);
   host->call.in_call = 0;
   if (timeout_ms > 0) {
      calling = NULL;
      __atomic_store_n (&host->call.deadline_ns, 0, __ATOMIC_RELEASE);
      /* No signal for this thread after this: it may end once the call has. */
      __atomic_store_n (&host->has_caller, 0, __ATOMIC_SEQ_CST);
      while (__atomic_load_n (&host->poking, __ATOMIC_SEQ_CST)) {
         sched_yield ();
      }
      if (lua_gethook (L)) {
         lua_sethook (L, NULL, 0, 0);
      }
   }
   lua_remove (L, base);
   io_timeout = host->call.io_timeout == 2;
   if (host->call.io_timeout) {
      fw_lua_call_clear_io_timeout (L); /* and the error it kept */
   }
   if (status == LUA_OK) {
      return true;
   }

   /* Past the deadline, an IO function's typed timeout (it was what waited)
    * is the failure, classified like any error it raises. */
   if (host->timed_out && !io_timeout) {
      *stop = FW_LUA_STOP_TIMEOUT;
   } else if (status == LUA_ERRMEM) {
      /* Only an uncaught allocation failure: a handler that caught one with
       * pcall and then raised its own error keeps its error's type. */
      *stop = FW_LUA_STOP_MEMORY;
   }
   shape_failure (host, status);
   return false;
}

static int
protected_push (lua_State *L)
{
   fw_lua_host_t *host = host_of (L);
   return host->push (L, host->push_ud);
}

bool
fw_lua_host_call_with (fw_lua_host_t *host, int nargs, fw_lua_push_fn push, void *ud, int nresults,
                       int64_t timeout_ms, fw_lua_stop_t *stop)
{
   lua_State *L = host->L;
   int top = lua_gettop (L), status;

   /* Neither lua_checkstack nor pushing a C function without upvalues can
    * raise: nothing here runs unprotected. Far enough below the memory
    * limit, push cannot fail either (the allocator refuses only growth past
    * the limit; the system's malloc failing is a panic, fw_lua_host_guard's
    * business), so the common case pays no second protected call. */
   if (!lua_checkstack (L, LUA_MINSTACK)) {
      lua_settop (L, top - nargs - 1);
      lua_pushliteral (L, "not enough memory");
      status = LUA_ERRMEM;
   } else if (!host->limit || host->used + FW_LUA_PUSH_MAX_BYTES <= host->limit) {
      return fw_lua_host_call (host, nargs + push (L, ud), nresults, timeout_ms, stop);
   } else {
      host->push = push;
      host->push_ud = ud;
      lua_pushcfunction (L, protected_push);
      status = lua_pcall (L, 0, LUA_MULTRET, 0);
      if (status == LUA_OK) {
         return fw_lua_host_call (host, nargs + lua_gettop (L) - top, nresults, timeout_ms, stop);
      }
      /* The call is not made: what was raised takes the function's place. */
      lua_replace (L, top - nargs);
      lua_settop (L, top - nargs);
   }
   *stop = status == LUA_ERRMEM ? FW_LUA_STOP_MEMORY : FW_LUA_STOP_NONE;
   shape_failure (host, status);
   return false;
}

bool
fw_lua_host_call_timed (fw_lua_host_t *host, int nargs, fw_lua_push_fn push, void *ud, int nresults,
                        int64_t timeout_ms, fw_lua_stop_t *stop, int64_t *started_ns)
{
   bool ok = fw_lua_host_call_with (host, nargs, push, ud, nresults, timeout_ms, stop);
   *started_ns = host->call_started_ns;
   return ok;
}
