#!/bin/sh
# tools/code_counts.sh - the size figures docs/architecture.md quotes:
#   functions of src/ over 80 lines (body, "{" to "}"), the largest structs
#   (top-level members; a nested struct or union counts as one), the files
#   including each private header of src/, and the lines over 100 columns.
# Usage: tools/code_counts.sh   (from anywhere in the checkout)
set -eu
cd "$(dirname "$0")/.."

echo "== functions over 80 lines (lines file:line name)"
find src -name '*.c' | sort | xargs awk '
   FNR == 1 { name = ""; candline = 0 }
   /^[A-Za-z_][A-Za-z0-9_]* \(/ { cand = $1; candline = FNR }
   /^\{/ { if (candline) { name = cand; start = FNR; defline = candline } }
   /^\}/ { if (name != "") print FNR - start + 1, FILENAME ":" defline, name; name = ""; candline = 0 }
' | sort -rn | awk '$1 > 80'

echo "== structs with the most members"
python3 - <<'PY'
import pathlib, re
res = []
for p in sorted(pathlib.Path('src').rglob('*.[ch]')) + sorted(pathlib.Path('include').rglob('*.h')):
    t = re.sub(r'//[^\n]*', '', re.sub(r'/\*.*?\*/', '', p.read_text(), flags=re.S))
    for m in re.finditer(r'\bstruct\s+(\w+)\s*\{', t):
        i, depth, n = m.end(), 1, 0
        while depth and i < len(t):
            c = t[i]
            depth += c == '{'
            depth -= c == '}'
            n += c == ';' and depth == 1
            i += 1
        res.append((n, str(p), m.group(1)))
for n, p, s in sorted(res, reverse=True)[:8]:
    print(n, p, s)
PY

echo "== private headers by the files including them (a header counts as a file)"
find src -name '*.h' | while read -r h; do
   rel=${h#src/}
   n=$( { grep -rlF "#include \"$rel\"" src tests bench 2>/dev/null;
          grep -lF "#include \"$(basename "$h")\"" "$(dirname "$h")"/*.[ch] 2>/dev/null; } |
        sort -u | grep -vx "$h" | wc -l)
   echo "$n $rel"
done | sort -rn | awk '$1 > 6'

echo "== lines over 100 columns in src/ and include/"
find src include -name '*.[ch]' | sort | xargs awk 'length > 100 { print FILENAME ":" FNR }'
