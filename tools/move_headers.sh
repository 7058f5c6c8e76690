#!/bin/sh
# tools/move_headers.sh - moves each part's interface header from
# include/flowwarden/ beside its part's code in src/, and rewrites every
# reference to it.
#
# The scheme (docs/architecture.md, "Where a header lives"):
#   - include/flowwarden/ keeps what every layer uses: base/'s interfaces
#     (error.h, log.h, clock.h, check.h, ...) and the shared vocabulary with no
#     single home (collection_names.h, the generated lua_sources.h);
#   - a part's interface header sits beside its .c files and is named for
#     them: src/runtime/checkpoint/checkpoint_writer.h, included as
#     "runtime/checkpoint/checkpoint_writer.h" (the form the private headers
#     already use);
#   - a header shared by the files of one part only is <name>-private.h
#     beside them.
#
# What it does: for each header of the table below, `git mv` (plain mv
# outside git) include/flowwarden/NAME to src/DIR/NAME; then, in src/,
# tests/, bench/, cmake/, docs/, README.md and CMakeLists.txt, rewrites
# "include/flowwarden/NAME" to "src/DIR/NAME" (paths in docs) and
# "flowwarden/NAME" to "DIR/NAME" (#include lines and comments); and makes
# fwcore's src/ include directory PUBLIC, so the CLI, benchmarks, tests and
# fuzz targets find the moved headers.
#
# Idempotent: a header already moved is skipped, and once moved its old name
# is no longer written anywhere. Refuses (and changes nothing) when a
# destination exists beside a header that was not moved yet.
# The include lines it rewrites may end up out of alphabetical order within
# their block; tools/format.sh sorts them.
#
# Usage: tools/move_headers.sh [--dry-run]   (from anywhere in the checkout)
set -eu

cd "$(dirname "$0")/.."
dry=0
[ "${1-}" = "--dry-run" ] && dry=1

# header                destination folder under src/
table='
admin.h             ops
backoff.h           runtime/dispatch
batch_dispatch.h    runtime/dispatch
batch_lua.h         lua_api
batch_run.h         runtime/dispatch
bson_alloc.h        bson
bson_lua.h          bson
bson_redact.h       bson
bson_values.h       bson
bson_view.h         bson
checkpoint_store.h  runtime/checkpoint
checkpoint_writer.h runtime/checkpoint
circuit.h           runtime/dispatch
circuit_doc.h       runtime/checkpoint
connections.h       runtime/host
dispatcher.h        runtime/dispatch
dlq_admin.h         runtime/dlq
dlq_claim_keeper.h  runtime/replay
dlq_entry.h         runtime/dlq
dlq_replay.h        runtime/replay
dlq_replay_store.h  runtime/replay
dlq_sequence.h      runtime/dlq
dlq_store.h         runtime/dlq
doctor.h            runtime/doctor
event.h             bson
event_ctx.h         lua_api
event_settle.h      runtime/stream
http_lua.h          lua_api
http_policy.h       lua_api
http_transfer.h     lua_api
lease.h             runtime/ha
lua_call.h          lua_api
lua_core.h          lua_api
lua_host.h          runtime/host
metrics.h           ops
metrics_lua.h       lua_api
mongo_lua.h         lua_api
oplog_window.h      runtime/host
outcome.h           runtime/dispatch
owned_collections.h runtime/collections
pg_io.h             lua_api
pg_lua.h            lua_api
rate_limit.h        runtime/dispatch
redis_lua.h         lua_api
runtime.h           runtime
server_probe.h      runtime/host
sharding.h          runtime/collections
shared_units.h      runtime/ha
snapshot.h          runtime/snapshot
state_lua.h         lua_api
state_store.h       lua_api
status_cli.h        cli
stream_config.h     runtime/config
stream_worker.h     runtime/stream
test_app.h          runtime/testing
txn_sessions.h      runtime/checkpoint
write_reply.h       bson
'

ingit=0
git rev-parse --is-inside-work-tree >/dev/null 2>&1 && ingit=1

# Check first: nothing is changed when one destination is taken.
bad=$(echo "$table" | while read -r name dir; do
   [ -n "$name" ] || continue
   if [ -e "include/flowwarden/$name" ] && [ -e "src/$dir/$name" ]; then
      echo "src/$dir/$name exists and include/flowwarden/$name was not moved"
   elif [ ! -e "include/flowwarden/$name" ] && [ ! -e "src/$dir/$name" ]; then
      echo "neither include/flowwarden/$name nor src/$dir/$name exists"
   fi
done)
if [ -n "$bad" ]; then
   echo "$bad" | sed 's/^/move_headers: /' >&2
   exit 1
fi

# One sed program for every header: paths first, then the include form.
# "flowwarden/NAME" is only rewritten when not preceded by a letter, '/' or
# '_' (so lua/flowwarden/... and other paths are left alone).
prog=$(echo "$table" | while read -r name dir; do
   [ -n "$name" ] || continue
   n=$(printf '%s' "$name" | sed 's/\./\\./g')
   printf 's#include/flowwarden/%s#src/%s/%s#g\n' "$n" "$dir" "$name"
   printf 's#\\(^\\|[^A-Za-z0-9_/]\\)flowwarden/%s#\\1%s/%s#g\n' "$n" "$dir" "$name"
done)

moved=0
for pair in $(echo "$table" | awk 'NF == 2 { print $1 ":" $2 }'); do
   name=${pair%%:*}
   dir=${pair#*:}
   [ -e "include/flowwarden/$name" ] || continue
   moved=$((moved + 1))
   if [ $dry = 1 ]; then
      echo "would move include/flowwarden/$name -> src/$dir/$name"
      continue
   fi
   if [ $ingit = 1 ] && git ls-files --error-unmatch "include/flowwarden/$name" >/dev/null 2>&1; then
      git mv "include/flowwarden/$name" "src/$dir/$name"
   else
      mv "include/flowwarden/$name" "src/$dir/$name"
   fi
done

# The files whose text may name a header (the moved headers among them).
files=$(find include src tests bench cmake docs -type f \
           \( -name '*.c' -o -name '*.h' -o -name '*.md' -o -name '*.cmake' -o -name '*.txt' \
              -o -name '*.py' -o -name '*.lua' -o -name 'README' \) 2>/dev/null;
        echo README.md CMakeLists.txt)

changed=0
for f in $files; do
   [ -f "$f" ] || continue
   tmp="$f.move_headers.tmp"
   printf '%s\n' "$prog" | sed -f /dev/stdin "$f" >"$tmp"
   if cmp -s "$tmp" "$f"; then
      rm -f "$tmp"
      continue
   fi
   changed=$((changed + 1))
   if [ $dry = 1 ]; then
      echo "would rewrite $f"
      rm -f "$tmp"
   else
      cat "$tmp" >"$f" # keeps the file's mode
      rm -f "$tmp"
   fi
done

# fwcore's src/ include directory: PUBLIC, so its users find the moved headers.
if grep -q '^ *PRIVATE ${CMAKE_SOURCE_DIR}/src)$' CMakeLists.txt; then
   if [ $dry = 1 ]; then
      echo "would make fwcore's src/ include directory PUBLIC (CMakeLists.txt)"
   else
      sed -i 's|^\(target_include_directories(fwcore PUBLIC ${CMAKE_SOURCE_DIR}/include\)$|\1 ${CMAKE_SOURCE_DIR}/src)|; /^ *PRIVATE ${CMAKE_SOURCE_DIR}\/src)$/d' CMakeLists.txt
      changed=$((changed + 1))
   fi
fi

echo "move_headers: $moved headers moved, $changed files rewritten"
