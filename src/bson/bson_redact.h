/*
 * bson_redact.h - a BSON document with the values of fw.env hidden
 * (secrets.h) in its strings and keys, at any depth: for documents a script
 * builds that flowwarden stores (an enqueue policy's diagnostics).
 */
#ifndef FLOWWARDEN_BSON_REDACT_H
#define FLOWWARDEN_BSON_REDACT_H

#include <stdbool.h>

#include <bson/bson.h>

/* Replaces doc by its copy with every registered secret in a string value or
 * a key replaced by FW_SECRETS_MARKER (other types as they were); doc is
 * untouched when no secret is registered or none occurs. False (doc as it
 * was) when out of memory. */
bool fw_bson_redact (bson_t *doc);

#endif
