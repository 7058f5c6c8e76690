/*
 * error.h - the caller-owned error record every fallible function fills.
 *
 * Functions that can fail return bool (true on success) and take an
 * fw_error_t * that the caller allocates, usually on the stack. On failure
 * the callee writes a code and a complete, human-readable message saying what
 * went wrong and where. A NULL error pointer is allowed and means "don't
 * care".
 */
#ifndef FLOWWARDEN_ERROR_H
#define FLOWWARDEN_ERROR_H

#include <stdarg.h>

/* Large enough for every validation error of a script, one per line. */
#define FW_ERROR_MESSAGE_MAX 8192

typedef enum {
   FW_ERROR_NONE = 0,
   FW_ERROR_INVALID = 1,   /* bad input: script, config, document, argument */
   FW_ERROR_NOMEM = 2,     /* an allocation failed */
   FW_ERROR_MONGO = 3,     /* libmongoc reported an error */
   FW_ERROR_LUA = 4,       /* a Lua error (message carries the Lua text) */
   FW_ERROR_IO = 5         /* file system or OS call failed */
} fw_error_code_t;

typedef struct {
   int code;
   char message[FW_ERROR_MESSAGE_MAX];
} fw_error_t;

/* Sets code and message (printf-style). error may be NULL. */
void fw_error_set (fw_error_t *error, int code, const char *fmt, ...)
   __attribute__ ((format (printf, 3, 4)));

#endif
