/*
 * cli_args.c - what the commands' command lines check alike.
 */
#include "cli/cli_args.h"

int
fw_cli_one_script (int argc, char **argv, int first, fw_cli_usage_fn usage, const char **script)
{
   if (first >= argc) {
      return usage ("missing SCRIPT%s", "");
   }
   if (first + 1 < argc) {
      return usage ("unexpected argument \"%s\"", argv[first + 1]);
   }
   *script = argv[first];
   return -1;
}
