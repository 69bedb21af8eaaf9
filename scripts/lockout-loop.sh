#!/usr/bin/env bash
# Runs test/lockout.test.ts N times (default 20) with both cores kept busy beside it, as a full
# `npm test` keeps them, and ends with the line `N passed, N failed`. Exits 1 if any run failed.
#
#   bash scripts/lockout-loop.sh [RUNS]
#
# Each failed run keeps its mesh's directory (.mesh/logs, the NATS store and log) and its output
# under $LOOP_DIR (default a new /tmp/lockout-loop.*), named in the summary.
set -uo pipefail

cd "$(dirname "$0")/.."
runs=${1:-20}
loop_dir=${LOOP_DIR:-$(mktemp -d /tmp/lockout-loop.XXXXXX)}
mkdir -p "$loop_dir"

npx tsc -b || exit 1

# One busy loop per core, bounded in time like everything else here (at most 2 h), ended on exit.
busy=()
for _ in $(seq "$(nproc)"); do
  timeout 7200 node -e 'for (;;) {}' &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT

passed=0
failed=0
for i in $(seq "$runs"); do
  out="$loop_dir/run-$i.log"
  start=$SECONDS
  if MESH_TEST_KEEP_DIRS=1 npx vitest run test/lockout.test.ts >"$out" 2>&1; then
    passed=$((passed + 1))
    verdict=passed
    # A passing run's mesh directory is not needed.
    grep -o 'kept /tmp/mesh-boot-[A-Za-z0-9]*' "$out" | cut -d' ' -f2 | xargs -r rm -rf
  else
    failed=$((failed + 1))
    verdict="FAILED (output: $out)"
  fi
  echo "run $i/$runs: $verdict in $((SECONDS - start)) s"
done
echo "$passed passed, $failed failed"
((failed == 0))
