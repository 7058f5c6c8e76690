/*
 * suggest.h - "did you mean": the name a mistyped word was most likely
 * meant to be, for every C error message that offers one (the DLQ verbs,
 * fw.mongo's options and bulk operation kinds). A script's own settings are
 * checked in Lua, with the same distance (flowwarden.config.fields).
 */
#ifndef FLOWWARDEN_SUGGEST_H
#define FLOWWARDEN_SUGGEST_H

#include <stddef.h>

/* The optimal string alignment distance between a and b: insertions,
 * deletions, substitutions and swaps of two neighbours, one edit each.
 * SIZE_MAX when either is 64 bytes or longer (too far to be a typo). */
size_t fw_edit_distance (const char *a, const char *b);

/* The name of names (NULL-terminated) closest to word, when it is a likely
 * typo of it: at most 2 edits, and fewer than half the word's length.
 * NULL otherwise. Returns one of names (borrowed). */
const char *fw_suggest (const char *word, const char *const *names);

#endif /* FLOWWARDEN_SUGGEST_H */
