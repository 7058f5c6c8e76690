#!/bin/sh
# tools/format.sh - formats the C sources with the checkout's .clang-format.
#
#   tools/format.sh            formats every .c/.h of src/, include/, tests/ and bench/ in place
#   tools/format.sh FILE...    formats those files only
#   tools/format.sh --check    changes nothing; lists the files that would change (exit 1 if any)
#
# Needs clang-format (Debian: clang-format; version 14 or later). The
# generated and vendored files are left alone.
set -eu

cd "$(dirname "$0")/.."
cf=
for c in clang-format-14 clang-format clang-format-15 clang-format-16; do
   if command -v "$c" >/dev/null 2>&1; then
      cf=$c
      break
   fi
done
if [ -z "$cf" ]; then
   echo "format.sh: clang-format not found (apt-get install clang-format)" >&2
   exit 2
fi

check=0
if [ "${1-}" = "--check" ]; then
   check=1
   shift
fi
if [ $# -gt 0 ]; then
   files=$*
else
   files=$(find src include tests bench -type f \( -name '*.c' -o -name '*.h' \) | sort)
fi

if [ $check = 1 ]; then
   bad=0
   for f in $files; do
      if ! "$cf" --style=file "$f" | cmp -s - "$f"; then
         echo "$f"
         bad=1
      fi
   done
   exit $bad
fi
for f in $files; do
   "$cf" -i --style=file "$f"
done
