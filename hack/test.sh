#!/usr/bin/env bash
# Runs the test suite the way `make test` documents it (Makefile: target test):
#   1. two lanes at once: the heavy suites (each brings up whole clusters, QEMU hosts or site labs) one after
#      another, and every other package one after another beside them. Two heavy suites never run together:
#      on a 2-core machine their stacks starved each other into timeouts (a host's agent waiting 5 minutes
#      for its Node, a Machine's deletion outlasting its test's bound);
#   2. every benchmark once at its tiny size, in only the packages that have benchmarks (a go test of its
#      own: with -bench set, cmd/go runs packages one at a time);
#   3. fuzzing (hack/fuzz.sh).
# Environment: HEAVY_PKGS (the heavy suites, ./paths), BENCH_PKGS, TEST_TIMEOUT, FUZZTIME; the Makefile
# sets them. Each lane's output is printed as it comes, every line prefixed with its lane.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_TIMEOUT=${TEST_TIMEOUT:-45m}
if [ -z "${HEAVY_PKGS:-}" ]; then echo "hack/test.sh: HEAVY_PKGS must name the heavy suites" >&2; exit 2; fi
read -r -a heavy <<<"${HEAVY_PKGS}"
read -r -a bench <<<"${BENCH_PKGS:-}"

# Every package of the module that is not a heavy suite, as import paths.
module=$(go list -m)
heavy_imports=$(go list "${heavy[@]}")
all=$(go list ./...)
mapfile -t light < <(grep -vxF -f <(printf '%s\n' "$heavy_imports") <<<"$all")
if [ "${#light[@]}" -eq 0 ] || [ "$(grep -cxF -f <(printf '%s\n' "$heavy_imports") <<<"$all")" -ne "${#heavy[@]}" ]; then
  echo "make test: the heavy suites (${heavy[*]}) are not all packages of ${module}, or nothing else is" >&2
  exit 1
fi

# lane NAME ARGS… runs go test on ARGS, each output line prefixed with [NAME].
lane() {
  local name=$1
  shift
  go test -count=1 -p 1 -timeout "${TEST_TIMEOUT}" "$@" 2>&1 | sed -u "s/^/[${name}] /"
}
lane heavy "${heavy[@]}" &
heavy_pid=$!
lane other "${light[@]}" &
light_pid=$!
status=0
wait "$heavy_pid" || { echo "make test: a heavy suite failed, see the lines marked [heavy] above"; status=1; }
wait "$light_pid" || { echo "make test: a package failed, see the lines marked [other] above"; status=1; }
[ "$status" -eq 0 ] || exit 1

if [ "${#bench[@]}" -gt 0 ]; then
  YONDER_BENCH_TINY=1 go test -count=1 -run '^$' -bench . -benchtime 1x -timeout "${TEST_TIMEOUT}" "${bench[@]}"
fi
hack/fuzz.sh
