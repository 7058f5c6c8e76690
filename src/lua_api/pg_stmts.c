/*
 * pg_stmts.c - the prepared statements of one connection, keyed by their
 * SQL text (see pg_lua-private.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_lua-private.h"

/* FNV-1a: a quick first filter before comparing whole texts. */
static uint64_t
hash_text (const char *sql, size_t len)
{
   uint64_t h = 1469598103934665603ull;

   for (size_t i = 0; i < len; i++) {
      h = (h ^ (unsigned char) sql[i]) * 1099511628211ull;
   }
   return h;
}

const fw_pg_stmt_t *
fw_pg_stmts_find (fw_pg_stmts_t *cache, const char *sql)
{
   size_t len = strlen (sql);
   uint64_t h = hash_text (sql, len);

   for (int i = 0; i < cache->count; i++) {
      fw_pg_stmt_t *s = &cache->items[i];
      if (s->sql && s->hash == h && s->len == len && memcmp (s->sql, sql, len) == 0) {
         s->used = ++cache->clock;
         return s;
      }
   }
   return NULL;
}

const char *
fw_pg_stmts_victim (const fw_pg_stmts_t *cache)
{
   const fw_pg_stmt_t *v = NULL;

   if (cache->count < FW_PG_STMTS_MAX) {
      return NULL;
   }
   for (int i = 0; i < cache->count; i++) {
      const fw_pg_stmt_t *s = &cache->items[i];
      if (!s->sql) {
         return s->name; /* forgotten: the first to go */
      }
      if (!v || s->used < v->used) {
         v = s;
      }
   }
   return v ? v->name : NULL;
}

const fw_pg_stmt_t *
fw_pg_stmts_add (fw_pg_stmts_t *cache, const char *sql)
{
   fw_pg_stmt_t *s;
   size_t len = strlen (sql);

   if (cache->count >= FW_PG_STMTS_MAX) {
      return NULL;
   }
   if (!cache->items && !(cache->items = calloc (FW_PG_STMTS_MAX, sizeof *cache->items))) {
      return NULL;
   }
   s = &cache->items[cache->count];
   if (!(s->sql = malloc (len + 1))) {
      return NULL;
   }
   memcpy (s->sql, sql, len + 1);
   s->len = len;
   s->hash = hash_text (sql, len);
   s->used = ++cache->clock;
   cache->next_id++;
   snprintf (s->name, sizeof s->name, "fw_%u", cache->next_id);
   cache->count++;
   return s;
}

void
fw_pg_stmts_forget (fw_pg_stmts_t *cache, const char *name)
{
   for (int i = 0; i < cache->count; i++) {
      fw_pg_stmt_t *s = &cache->items[i];
      if (strcmp (s->name, name) == 0) {
         free (s->sql); /* the name stays: it may still exist on the server */
         s->sql = NULL;
         return;
      }
   }
}

void
fw_pg_stmts_remove (fw_pg_stmts_t *cache, const char *name)
{
   for (int i = 0; i < cache->count; i++) {
      if (strcmp (cache->items[i].name, name) == 0) {
         free (cache->items[i].sql);
         cache->items[i] = cache->items[cache->count - 1];
         cache->count--;
         return;
      }
   }
}

void
fw_pg_stmts_clear (fw_pg_stmts_t *cache)
{
   for (int i = 0; i < cache->count; i++) {
      free (cache->items[i].sql);
   }
   cache->count = 0;
}

void
fw_pg_stmts_destroy (fw_pg_stmts_t *cache)
{
   fw_pg_stmts_clear (cache);
   free (cache->items);
   cache->items = NULL;
}
