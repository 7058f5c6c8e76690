/*
 * write_reply.h - the one check of a write command's reply (issue 37).
 *
 * libmongoc's generic command functions (mongoc_*_write_command_with_opts)
 * return true for a reply with ok: 1 that carries writeErrors: an update
 * refused by a unique index or a validator would otherwise count as done.
 * (libmongoc 1.23 does fail them on a writeConcernError; the check covers it
 * too, so no caller depends on that.) Every insert, update, delete,
 * findAndModify and createIndexes run that way goes through this check.
 */
#ifndef FLOWWARDEN_WRITE_REPLY_H
#define FLOWWARDEN_WRITE_REPLY_H

#include <stdbool.h>

#include <mongoc/mongoc.h>

/* Whether the write was applied as asked: sent (the libmongoc call's
 * result) and reply (borrowed; NULL counts as none) without ok: 0,
 * writeErrors or writeConcernError. When sent is false, error is left as the
 * call set it. Otherwise, on false, error names the first problem with the
 * server's code: domain MONGOC_ERROR_SERVER (ok: 0, a write error) or
 * MONGOC_ERROR_WRITE_CONCERN, message "write error: ..." / "write concern
 * error: ..." (the server's errmsg). */
bool fw_write_reply_ok (bool sent, const bson_t *reply, bson_error_t *error);

#endif
