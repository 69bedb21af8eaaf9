#!/usr/bin/env bash
# Runs one benchmark alternately in two checkouts of this repository (before, after, before,
# after …), so that both see the same load of the machine, and prints each run's output with
# every line labelled by its tree and run, then the rows of all runs side by side.
#
#   bench/compare-trees.sh BEFORE_DIR AFTER_DIR [NAME]      (NAME: default rotation-operator)
#
# Each tree must be built (npm ci, then npx tsc -b) and hold the same bench/ files: copy this
# tree's bench/ into an older checkout first (git worktree add /tmp/mesh-before <commit>); the
# script refuses trees whose bench/ differ. Figures taken on a busy machine say nothing, so
# before each run it waits, checking every 60 s, until the load average over the last minute
# is below COMPARE_MAX_LOAD (default 1.0); after COMPARE_MAX_WAIT seconds of waiting in all
# (default 1800) it stops, saying so. COMPARE_PAIRS (default 3) pairs of runs; the benchmark's
# own variables (BENCH_SIZES, BENCH_RUNS, BENCH_MODES …) pass through to it. Exits 1 when a
# run failed or the machine never got quiet, 2 on a usage error.
set -u

usage() { echo "usage: $0 BEFORE_DIR AFTER_DIR [NAME]   (COMPARE_PAIRS, COMPARE_MAX_LOAD, COMPARE_MAX_WAIT)" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
before=$1 after=$2 name=${3:-rotation-operator}
pairs=${COMPARE_PAIRS:-3} max_load=${COMPARE_MAX_LOAD:-1.0} max_wait=${COMPARE_MAX_WAIT:-1800}
for t in "$before" "$after"; do
  [ -f "$t/bench/run.mjs" ] || { echo "$t: no bench/run.mjs: not a checkout of this repository" >&2; exit 2; }
done
if ! diff -rq "$before/bench" "$after/bench" >/dev/null; then
  echo "the two trees' bench/ differ (diff -r $before/bench $after/bench): copy one over the other so both run the same benchmark" >&2
  exit 2
fi

waited=0
load1() { cut -d' ' -f1 /proc/loadavg; }
quiet() { awk -v l="$(load1)" -v m="$max_load" 'BEGIN { exit !(l < m) }'; }
# Waits until the machine is quiet; false once the wait budget is spent.
wait_quiet() {
  while ! quiet; do
    if [ "$waited" -ge "$max_wait" ]; then return 1; fi
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min): waiting for the last minute's to fall below $max_load ($waited s of $max_wait s waited)" >&2
    sleep 60
    waited=$((waited + 60))
  done
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
for i in $(seq 1 "$pairs"); do
  for side in before after; do
    dir=$before
    [ "$side" = after ] && dir=$after
    label="$side#$i"
    if ! wait_quiet; then
      echo "the machine was not quiet (load average below $max_load) within $max_wait s of waiting: stopped before run $label" >&2
      exit 1
    fi
    commit=$(git -C "$dir" rev-parse --short HEAD)
    echo "=== $label: $dir at $commit, load average $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min), $(date -u +%H:%M:%SZ) ===" | tee -a "$out/summary"
    (cd "$dir" && node bench/run.mjs "$name") 2>&1 | sed -u "s/^/[$label] /" | tee "$out/$label"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
    # The rows (size | figures …) and what they are of.
    grep -E '^\[[^]]*\] (SDK holders:|agent-held parts:| +[0-9]+ \|)' "$out/$label" | sed -E 's/^(\[[^]]*\] [^:|]+):.*/\1/' >>"$out/summary"
  done
done
echo
echo "=== all runs, in the order they ran ==="
cat "$out/summary"
exit "$failed"
