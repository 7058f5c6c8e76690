/*
 * dlq_admin-private.h - what dlq_admin.c (the script's targets, reading,
 * stats), dlq_admin_change.c (discard, purge, import) and
 * dlq_admin_sequences.c (the sequences of a sequenced DLQ) share.
 */
#ifndef FLOWWARDEN_DLQ_ADMIN_PRIVATE_H
#define FLOWWARDEN_DLQ_ADMIN_PRIVATE_H

#include "runtime/dlq/dlq_admin.h"

typedef struct {
   char *uri;
   mongoc_client_t *client;
} client_t;

struct fw_dlq_admin {
   fw_dlq_target_t *targets;
   int n_targets;
   int only; /* the target fw_dlq_admin_restrict chose, or -1 */
   const char *only_stream;
   char **streams; /* every stream of the script, for messages */
   int n_streams;
   client_t *clients;       /* one per distinct URI, made on first use */
   fw_dlq_store_t **stores; /* per target: its DLQ store, made on first use */
   int n_clients;
   char **seq_streams; /* the streams declaring dlq = { sequenced = true } */
   int n_seq_streams;
};

bool fw_dlq__same (const char *a, const char *b);

/* Appends a strdup of s to *arr; NULL when out of memory. */
char **fw_dlq__push_string (char ***arr, int *n, const char *s);

/* "a", "b", "c" into buf, for messages. */
void fw_dlq__name_list (char *const *names, int n, char *buf, size_t len);

/* Whether target i is in the operation's scope (fw_dlq_admin_restrict). */
bool fw_dlq__selected (const fw_dlq_admin_t *admin, int i);

/* The string at path in doc, or "?" when it is missing or not a string. */
const char *fw_dlq__string_at (const bson_t *doc, const char *path);

/* The DLQ store of target i (a reader's MongoDB store on a client of the
 * target's URI), made on first use and owned by the admin. NULL with error
 * filled when libmongoc rejects the URI or memory runs out. */
fw_dlq_store_t *fw_dlq__store (fw_dlq_admin_t *admin, int i, fw_error_t *error);

/* Appends fw_dlq_admin_stats's "sequences" to out when there is anything
 * to say about stream's (NULL: every stream's) sequences. */
bool fw_dlq__sequence_stats (fw_dlq_admin_t *admin, const char *stream, bson_t *out,
                             fw_error_t *error);

#endif
