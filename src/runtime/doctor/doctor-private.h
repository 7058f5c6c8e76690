/*
 * doctor-private.h - what doctor.c (the deployment's checks),
 * doctor_streams.c (each stream's) and doctor_partitions.c share.
 */
#ifndef FLOWWARDEN_DOCTOR_PRIVATE_H
#define FLOWWARDEN_DOCTOR_PRIVATE_H

#include "runtime/doctor/doctor.h"

/* What the deployment's checks learnt, for the streams' checks. */
typedef struct {
   int32_t max_wire;
   bool has_oplog;        /* the oplog's first entry could be read */
   int64_t oplog_first_s; /* its ts, seconds */
   int64_t oplog_last_s;
} fw_doctor_server_t;

/* The privileges, pre-images and checkpoint checks of one stream. */
void fw_doctor_privileges (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
                           fw_doctor_report_t *r);
void fw_doctor_pre_images (mongoc_client_t *client, const fw_stream_config_t *cfg,
                           const fw_doctor_server_t *srv, fw_doctor_report_t *r);
void fw_doctor_checkpoint (mongoc_client_t *client, const fw_stream_config_t *cfg,
                           const fw_doctor_server_t *srv, fw_doctor_report_t *r);

/* Issue 31: whether the server can hash the keys of partitioned streams,
 * and whether each stream's checkpoints are of its declared number of
 * partitions (doctor_partitions.c). */
void fw_doctor_partitions (mongoc_client_t *client, const fw_stream_config_t *cfgs, size_t n,
                           const fw_doctor_server_t *srv, fw_doctor_report_t *r);

#endif
