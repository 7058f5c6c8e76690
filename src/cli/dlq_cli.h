/*
 * dlq_cli.h - `flowwarden dlq`: the operator's tool for dead letters
 * (dlq_cli.c parses and runs the verbs, dlq_print.c formats what they print).
 */
#ifndef FLOWWARDEN_CLI_DLQ_CLI_H
#define FLOWWARDEN_CLI_DLQ_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <bson/bson.h>

/* The whole `dlq` command: argv[0] is "dlq", argv[1] the verb. Returns the
 * exit code: 0 success, 1 bad usage, bad input or a server error. */
int fw_dlq_cli_main (int argc, char **argv);

/* A table of list rows, printed with aligned columns once complete. */
typedef struct fw_dlq_table fw_dlq_table_t;

/* NULL when out of memory; free with fw_dlq_table_destroy (NULL: no-op). */
fw_dlq_table_t *fw_dlq_table_new (void);
void fw_dlq_table_destroy (fw_dlq_table_t *table);

/* Adds entry's row: id, stream, operation, document key, error type
 * ("(parked)" for an entry of a sequence with no error), attempts,
 * reprocess attempts, age (from now_ms), status, and, printed only once a
 * row has one, sequence id and index; a field that is missing or of the
 * wrong type prints as "?". False when out of memory. */
bool fw_dlq_table_add (fw_dlq_table_t *table, const bson_t *entry, int64_t now_ms);

/* A table of `list --sequences` rows (NULL when out of memory), filled with
 * fw_dlq_sequence_table_add from fw_dlq_admin_sequences's documents: id,
 * stream, state, size, head entry, its error type and message, age. */
fw_dlq_table_t *fw_dlq_sequence_table_new (void);
bool fw_dlq_sequence_table_add (fw_dlq_table_t *table, const bson_t *seq);

/* Number of rows added. */
int fw_dlq_table_rows (const fw_dlq_table_t *table);

/* Prints the header and every row. */
void fw_dlq_table_print (const fw_dlq_table_t *table, FILE *out);

/* Prints one entry, field by field (json: one line of relaxed Extended
 * JSON). Unless documents, fullDocument, fullDocumentBeforeChange and
 * updateDescription are not printed (the table says they are hidden). */
void fw_dlq_print_entry (const bson_t *entry, bool json, bool documents, FILE *out);

/* Prints what fw_dlq_admin_stats returned (json: one line). */
void fw_dlq_print_stats (const bson_t *stats, bool json, FILE *out);

/* One line of relaxed Extended JSON for doc, then "\n". */
void fw_dlq_print_json (const bson_t *doc, FILE *out);

#endif
