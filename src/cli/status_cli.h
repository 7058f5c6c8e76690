/*
 * status_cli.h - the commands that talk to a running flowwarden's admin
 * endpoint over HTTP (libcurl):
 *
 *   flowwarden status [--admin URL] [--json]
 *   flowwarden pause|resume|restart STREAM [--admin URL]
 *   flowwarden reload [--admin URL]
 *
 * URL defaults to FLOWWARDEN_ADMIN, else http://127.0.0.1:9464; the token
 * (for pause, resume, restart, reload) comes from FLOWWARDEN_ADMIN_TOKEN.
 */
#ifndef FLOWWARDEN_STATUS_CLI_H
#define FLOWWARDEN_STATUS_CLI_H

#define FW_ADMIN_DEFAULT_URL "http://127.0.0.1:9464"

/* argv[0] is the command ("status", "pause", ...). Returns the exit code: 0
 * done, 1 the endpoint could not be reached or refused (its message is
 * printed), 2 bad command line. */
int fw_status_cli_main (int argc, char **argv);

#endif
