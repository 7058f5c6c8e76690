/*
 * bson_check.h - the checks a document to write must pass before it is sent:
 * what libmongoc's client-side validation checks (BSON_VALIDATE_UTF8,
 * BSON_VALIDATE_UTF8_ALLOW_NULL, BSON_VALIDATE_EMPTY_KEYS, the flags of its
 * default for inserts, updates and replacements), done in one walk that can
 * say where the problem is. MongoDB itself stores strings that are not UTF-8
 * (its manual tells how to read such data back with enableUtf8Validation =
 * false), so the client is the only place they are stopped; and Debian's
 * libbson 1.23 bson_validate misses them (CDRIVER-4448).
 */
#ifndef FLOWWARDEN_BSON_CHECK_H
#define FLOWWARDEN_BSON_CHECK_H

#include <stddef.h>

#include <bson/bson.h>

typedef enum {
   FW_BSON_TEXT_OK = 0,
   FW_BSON_TEXT_EMPTY_KEY,  /* a key "" */
   FW_BSON_TEXT_BAD_KEY,    /* a key that is not UTF-8 */
   FW_BSON_TEXT_BAD_STRING, /* a string (or a code's scope's) that is not UTF-8 */
   FW_BSON_TEXT_CORRUPT     /* bytes that do not parse as BSON */
} fw_bson_text_t;

/* Checks every key (not empty, UTF-8) and every string value (UTF-8, NUL
 * bytes allowed) of doc at any depth, code-with-scope scopes included. On a
 * problem, writes where it is into where (size bytes): root, then the path of
 * the bad string or of the document holding the bad key ("update.$set.a",
 * array elements as 1-based "[i]"). Allocates nothing. */
fw_bson_text_t fw_bson_check_text (const bson_t *doc, const char *root, char *where, size_t size);

/* What a problem is, for messages: "is not valid UTF-8"... (static text). */
const char *fw_bson_text_problem (fw_bson_text_t t);

#endif
