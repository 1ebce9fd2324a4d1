#!/usr/bin/env bash
# Runs the test suite the way `make test` documents it (Makefile: target test), in two lanes at once:
#   heavy: the heavy suites (each brings up whole clusters, QEMU hosts or site labs) one after another,
#          with each top-level test's time printed (hack/testtimes).
#          Two heavy suites never run together: on a 2-core machine their stacks starved each other into
#          timeouts (a host's agent waiting 5 minutes for its Node, a Machine's deletion outlasting its
#          test's bound);
#   other: the early suites (EARLY_PKGS) first, beside the heavy lane's first suite, then every other
#          package one after another, then every benchmark once at its tiny size in only the
#          packages that have benchmarks (a go test of its own: with -bench set, cmd/go runs packages one at
#          a time), then fuzzing (hack/fuzz.sh). The heavy lane is the longer one, so the benchmarks and the
#          fuzzing cost no wall time of their own.
# Every step runs even when an earlier one failed, and the script ends with a summary of what failed (the
# failing packages and tests of every step, with what each failing test said): a CI log that keeps only its
# last lines still says what broke and why.
# Environment: HEAVY_PKGS (the heavy suites, ./paths), EARLY_PKGS (./paths), BENCH_PKGS, TEST_TIMEOUT,
# FUZZTIME; the Makefile
# sets them. Each step's output is printed as it comes, every line prefixed with the step's name.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_TIMEOUT=${TEST_TIMEOUT:-45m}
if [ -z "${HEAVY_PKGS:-}" ]; then echo "hack/test.sh: HEAVY_PKGS must name the heavy suites" >&2; exit 2; fi
read -r -a heavy <<<"${HEAVY_PKGS}"
read -r -a early <<<"${EARLY_PKGS:-}"
read -r -a bench <<<"${BENCH_PKGS:-}"

# Every package of the module that is not a heavy suite, as import paths.
module=$(go list -m)
if ! heavy_imports=$(go list "${heavy[@]}"); then
  echo "make test: the heavy suites (${heavy[*]}) are not all packages of ${module}" >&2
  exit 1
fi
all=$(go list ./...)
mapfile -t light < <(grep -vxF -f <(printf '%s\n' "$heavy_imports") <<<"$all")
if [ "${#light[@]}" -eq 0 ] || [ "$(grep -cxF -f <(printf '%s\n' "$heavy_imports") <<<"$all")" -ne "${#heavy[@]}" ]; then
  echo "make test: the heavy suites (${heavy[*]}) are not all packages of ${module}, or nothing else is" >&2
  exit 1
fi
# The early suites lead the second lane (go test -p 1 runs packages in the order given).
if [ "${#early[@]}" -gt 0 ]; then
  if ! early_imports=$(go list "${early[@]}") ||
    [ "$(grep -cxF -f <(printf '%s\n' "$early_imports") <<<"$(printf '%s\n' "${light[@]}")")" -ne "${#early[@]}" ]; then
    echo "make test: the early suites (${early[*]}) are not all packages of ${module} outside the heavy suites" >&2
    exit 1
  fi
  mapfile -t light < <(printf '%s\n' "$early_imports"; grep -vxF -f <(printf '%s\n' "$early_imports") < <(printf '%s\n' "${light[@]}"))
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# record NAME prints its input as it comes, every line prefixed with [NAME], and keeps it in $logs/NAME.log.
record() { tee "$logs/$1.log" | sed -u "s/^/[$1] /"; }
# failed NAME notes that step NAME failed (the summary at the end lists them).
failed() { echo "$1" >>"$logs/failed"; }
# done_at NAME prints when step NAME ended, in seconds since make test started, so a CI log shows which
# lane is the critical path (not through record: its log file is the step's, for the failure summary).
done_at() { echo "[$1] == $1 done at +${SECONDS}s"; }

# The heavy suites' output goes through hack/testtimes: what plain go test prints, plus each top-level
# test's time (`--- PASS: TestScenarios (512.34s)`), from which the suite's time budget is planned.
testtimes="$logs/testtimes"
# The test binaries are linked without DWARF (-ldflags=-w): nothing here runs a debugger on them, and
# linking is a large share of the second lane (a hundred test binaries, most of them linking client-go and
# controller-runtime: 6.7 s each with DWARF, 5.6 s without, on an idle core). Stack traces come from the
# symbol and line tables, which stay.
link=(-ldflags=-w)

heavy_lane() {
  if ! go build -o "$testtimes" ./hack/testtimes 2>&1 | record heavy; then failed heavy; return; fi
  go test -count=1 -p 1 "${link[@]}" -json -timeout "${TEST_TIMEOUT}" "${heavy[@]}" 2>&1 | "$testtimes" | record heavy || failed heavy
  done_at heavy
}

other_lane() {
  go test -count=1 -p 1 "${link[@]}" -timeout "${TEST_TIMEOUT}" "${light[@]}" 2>&1 | record other || failed other
  done_at other
  if [ "${#bench[@]}" -gt 0 ]; then
    YONDER_BENCH_TINY=1 go test -count=1 "${link[@]}" -run '^$' -bench . -benchtime 1x -timeout "${TEST_TIMEOUT}" "${bench[@]}" 2>&1 |
      record bench || failed bench
    done_at bench
  fi
  # Fuzzing runs for a fixed time per target, beside the QEMU suites at the end of the heavy lane: at the
  # lowest priority it takes only the CPU the emulation leaves (a fresh-clone run of 6 Dec: the metal
  # lifecycle took 1141 s beside bench and fuzzing, 794 s alone), and explores a little less.
  FUZZPARALLEL=1 nice -n 19 hack/fuzz.sh 2>&1 | record fuzz || failed fuzz
  done_at fuzz
}

heavy_lane &
heavy_pid=$!
other_lane &
other_pid=$!
wait "$heavy_pid"
wait "$other_pid"

if [ ! -s "$logs/failed" ]; then
  echo "make test: every step passed (heavy, other, bench, fuzz)"
  exit 0
fi
echo "make test: FAILED: $(sort "$logs/failed" | tr '\n' ' ')"
for f in $(sort "$logs/failed"); do
  echo "== what failed in step ${f}:"
  # Each failing test with what it said (the indented lines go test prints beneath it, up to 25 each), so
  # the summary alone tells why.
  awk '/^[[:space:]]*--- FAIL: /{print; said=0; infail=1; found=1; next}
    infail && (/^[[:space:]]+[^[:space:]-]/ || /^[[:space:]]*$/) {if (said++ < 25) print; else if (said == 26) print "        (…)"; next}
    {infail=0}
    /^(FAIL[[:space:]]|FAIL: |panic: )/{print; found=1}
    END{exit !found}' "$logs/$f.log" || echo "(no failing test named; see the lines marked [${f}] above)"
done
exit 1
