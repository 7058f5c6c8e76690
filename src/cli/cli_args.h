/*
 * cli_args.h - what the commands' command lines check alike.
 */
#ifndef FLOWWARDEN_CLI_ARGS_H
#define FLOWWARDEN_CLI_ARGS_H

/* Tells the user what is wrong with the command line: fmt holds one %s, filled
 * with arg. Returns the command's exit code. */
typedef int (*fw_cli_usage_fn) (const char *fmt, const char *arg);

/* The one SCRIPT argument left after the options, at argv[first] (getopt's
 * optind). -1 with *script set (pointing into argv), else what usage returned
 * after naming the problem: "missing SCRIPT" or "unexpected argument "X"". */
int fw_cli_one_script (int argc, char **argv, int first, fw_cli_usage_fn usage,
                       const char **script);

#endif
