/*
 * collection_names.h - the names of the collections flowwarden keeps beside
 * a stream's own (owned_collections.h lists them for doctor and check;
 * each part that writes one includes this header, and no part needs
 * another's header for a name).
 */
#ifndef FLOWWARDEN_COLLECTION_NAMES_H
#define FLOWWARDEN_COLLECTION_NAMES_H

#define FW_CHECKPOINT_COLLECTION "_fw_checkpoints"
#define FW_LEASE_COLLECTION "_fw_leases"
#define FW_MEMBERS_COLLECTION "_fw_members"
#define FW_SNAPSHOT_MARKS_COLLECTION "_fw_snapshot_marks"

#endif
