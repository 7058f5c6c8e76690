/*
 * error.h - the caller-owned error record every fallible function fills.
 *
 * Functions that can fail return bool (true on success) and take an
 * fw_error_t * that the caller allocates, usually on the stack. On failure
 * the callee writes a domain (what kind of thing failed), the underlying code
 * when there is one, and a complete, human-readable message saying what went
 * wrong and where: libmongoc's bson_error_t, with flowwarden's domains. A
 * NULL error pointer is allowed and means "don't care".
 */
#ifndef FLOWWARDEN_ERROR_H
#define FLOWWARDEN_ERROR_H

#include <stdarg.h>

/* Large enough for every validation error of a script, one per line. */
#define FW_ERROR_MESSAGE_MAX 8192

/* The domains. */
typedef enum {
   FW_ERROR_NONE = 0,
   FW_ERROR_INVALID = 1, /* bad input: script, config, document, argument */
   FW_ERROR_NOMEM = 2,   /* an allocation failed */
   FW_ERROR_MONGO = 3,   /* libmongoc reported an error */
   FW_ERROR_LUA = 4,     /* a Lua error (message carries the Lua text) */
   FW_ERROR_IO = 5       /* file system or OS call failed */
} fw_error_code_t;

typedef struct {
   int domain; /* an fw_error_code_t: what kind of thing failed */
   int code;   /* within the domain: the server's or libmongoc's code for
                * FW_ERROR_MONGO, errno for FW_ERROR_IO; 0 when there is none */
   char message[FW_ERROR_MESSAGE_MAX];
} fw_error_t;

/* Sets the domain and message (printf-style); the code is 0. error may be
 * NULL. */
void fw_error_set (fw_error_t *error, int domain, const char *fmt, ...)
   __attribute__ ((format (printf, 3, 4)));

/* As fw_error_set, with the underlying code. */
void fw_error_set_code (fw_error_t *error, int domain, int code, const char *fmt, ...)
   __attribute__ ((format (printf, 4, 5)));

#endif
