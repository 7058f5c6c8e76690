/*
 * test_cli.h - the offline commands of issue 15: `flowwarden test`,
 * `flowwarden replay` (test_cli.c) and `flowwarden record` (record_cli.c).
 * Each takes argv with argv[0] the command's name and returns the process
 * exit code.
 */
#ifndef FLOWWARDEN_TEST_CLI_H
#define FLOWWARDEN_TEST_CLI_H

/* busted's runner in-process; busted's exit code. */
int fw_test_cli_main (int argc, char **argv);

/* Recorded events through a script offline: 0, 3 when an event ended in
 * dlq or lost, 1 on bad input, 2 on bad usage. */
int fw_replay_cli_main (int argc, char **argv);

/* A stream's live change events to a file, canonical Extended JSON lines. */
int fw_record_cli_main (int argc, char **argv);

/* `flowwarden doctor SCRIPT [--uri URI] [--json]` (doctor_cli.c): 0 all good,
 * 1 warnings, 2 failures. */
int fw_doctor_cli_main (int argc, char **argv);

#endif
