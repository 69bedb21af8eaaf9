#!/usr/bin/env bash
# Runs the whole suite (`npm test`) RUNS times, each on a fresh clone of this repository's HEAD
# (as committed: uncommitted changes are not in it) after its own `npm ci`, to find the tests
# that fail only now and then. Ends with the line `N passed, M failed`, then the failing tests
# of each failed run. Exits 0 when every run passed, 1 when one failed, 2 on bad arguments.
#
#   bash scripts/suite-loop.sh [--busy] RUNS
#
# --busy keeps every core busy beside each `npm test`, as scripts/lockout-loop.sh does, for the
# timing of a loaded machine. A run takes about 10 minutes on two cores.
#
# Each run's output (clone, npm ci, npm test) is kept in $LOOP_DIR/run-<i>.log (default a new
# /tmp/suite-loop.*); the clones are removed. The tests run with MESH_TEST_KEEP_DIRS=1, so each
# mesh and server they start leaves its directory (services' logs, NATS store and log) in the
# temporary directory: a failed run's are moved to $LOOP_DIR/run-<i>-kept/ for its timeline, a
# passed run's are removed. To try the loop itself on something short,
# SUITE_LOOP_INSTALL and SUITE_LOOP_TEST replace `npm ci` and `npm test` (run by bash in the clone).
set -uo pipefail

usage="usage: bash scripts/suite-loop.sh [--busy] RUNS   (RUNS: how many times to run npm test, 1 or more)"
fail_usage() {
  echo "suite-loop: $1" >&2
  echo "$usage" >&2
  exit 2
}

busy=false
runs=""
for arg in "$@"; do
  case "$arg" in
    --busy) busy=true ;;
    -h | --help)
      echo "$usage"
      exit 0
      ;;
    -[0-9]*) fail_usage "RUNS must be a whole number from 1, not \"$arg\"" ;;
    -*) fail_usage "unknown option $arg" ;;
    *)
      [[ -z $runs ]] || fail_usage "one RUNS only, not $runs and $arg"
      runs=$arg
      ;;
  esac
done
[[ -n $runs ]] || fail_usage "say how many runs"
[[ $runs =~ ^[1-9][0-9]*$ ]] || fail_usage "RUNS must be a whole number from 1, not \"$runs\""

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 2
head=$(git -C "$repo" rev-parse HEAD) || exit 2
install=${SUITE_LOOP_INSTALL:-npm ci}
test_cmd=${SUITE_LOOP_TEST:-npm test}
loop_dir=${LOOP_DIR:-$(mktemp -d /tmp/suite-loop.XXXXXX)}
mkdir -p "$loop_dir" || exit 2
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
  echo "suite-loop: the working tree has uncommitted changes; the runs test HEAD ${head:0:12} without them" >&2
fi
echo "suite-loop: $runs run(s) of '$test_cmd' on HEAD ${head:0:12}$($busy && echo ', every core kept busy'), logs in $loop_dir"

# One busy loop per core beside each `npm test`, bounded in time like everything else here (at most 2 h).
busy_pids=()
start_busy() {
  for _ in $(seq "$(nproc)"); do
    timeout 7200 node -e 'for (;;) {}' &
    busy_pids+=($!)
  done
}
stop_busy() {
  ((${#busy_pids[@]})) || return 0
  kill "${busy_pids[@]}" 2>/dev/null
  wait "${busy_pids[@]}" 2>/dev/null
  busy_pids=()
}
clone=""
trap 'stop_busy; [[ -z $clone ]] || rm -rf "$clone"' EXIT
trap 'exit 130' INT TERM

# The failing tests a run's log names: vitest's `FAIL` lines (file > describe > test, and
# suites whose hooks failed), else its `×` lines (a run cut short before the summary).
failing_tests() {
  local plain fails
  plain=$(sed 's/\x1b\[[0-9;]*m//g' "$1")
  fails=$(grep -E '^ *FAIL ' <<<"$plain" | sed -E 's/^ *FAIL +//' | awk '!seen[$0]++')
  [[ -n $fails ]] || fails=$(grep -E '^ *× ' <<<"$plain" | sed -E 's/^ *× +//; s/ [0-9]+ms$//' | awk '!seen[$0]++')
  if [[ -n $fails ]]; then
    sed 's/^/    /' <<<"$fails"
  else
    echo "    (no FAIL or × line: the build, the setup or vitest itself failed; see the log)"
  fi
}

passed=0
failed=0
failures=()
declare -A why_of
for i in $(seq "$runs"); do
  log="$loop_dir/run-$i.log"
  start=$SECONDS
  why=""
  clone=$(mktemp -d "${TMPDIR:-/tmp}/suite-loop-clone.XXXXXX")
  echo "run $i/$runs: HEAD $head in $clone" >"$log"
  if ! { git clone -q "$repo" "$clone" && git -C "$clone" checkout -q --detach "$head"; } >>"$log" 2>&1; then
    why="the clone failed"
  elif ! (cd "$clone" && bash -c "$install") >>"$log" 2>&1; then
    why="'$install' failed"
  else
    $busy && start_busy
    marker="$loop_dir/.run-$i-started"
    touch "$marker"
    (cd "$clone" && MESH_TEST_KEEP_DIRS=1 bash -c "$test_cmd") >>"$log" 2>&1
    rc=$?
    stop_busy
    ((rc == 0)) || why="'$test_cmd' exited with $rc"
    # What the tests of this run kept (harness directories are named mesh-*), for a failure's timeline.
    mapfile -t kept < <(find "${TMPDIR:-/tmp}" -maxdepth 1 -type d -name 'mesh-*' -newer "$marker" 2>/dev/null)
    if ((${#kept[@]})); then
      if [[ -n $why ]]; then
        mkdir -p "$loop_dir/run-$i-kept" && mv "${kept[@]}" "$loop_dir/run-$i-kept/" 2>/dev/null
      else
        rm -rf "${kept[@]}"
      fi
    fi
    rm -f "$marker"
  fi
  rm -rf "$clone"
  clone=""
  if [[ -z $why ]]; then
    passed=$((passed + 1))
    echo "run $i/$runs: passed in $((SECONDS - start)) s (log: $log)"
  else
    failed=$((failed + 1))
    failures+=("$i")
    why_of[$i]=$why
    echo "run $i/$runs: FAILED in $((SECONDS - start)) s: $why (log: $log)"
  fi
done

echo "$passed passed, $failed failed"
for i in ${failures[@]+"${failures[@]}"}; do
  echo "run $i, ${why_of[$i]} ($loop_dir/run-$i.log$([[ -d $loop_dir/run-$i-kept ]] && echo ", its tests' directories in $loop_dir/run-$i-kept"):"
  failing_tests "$loop_dir/run-$i.log"
done
((failed == 0))
