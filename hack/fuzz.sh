#!/usr/bin/env bash
# Runs every Go fuzz target of the repository for a bounded time (FUZZTIME, default 10s each), so parsers of
# untrusted input (DHCP, TFTP, cloud-init, AgentConfig, attestation requests…) are fuzzed on every CI run and
# not only on their seed corpora. New targets are found automatically: any `func FuzzX(f *testing.F)`.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
# Minimizing each new interesting input may take 60 s by default, far beyond a target's FUZZTIME; targets
# whose inputs cost milliseconds (a whole Redfish read, a kubeconfig in a binary that links envtest) then
# spend their whole slot minimizing instead of fuzzing.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-2s}
# How many fuzzing workers a target runs (go test -parallel; default: one per CPU). make test sets 1: its
# fuzzing runs beside the QEMU suites, whose emulation needs a core of its own.
FUZZPARALLEL=${FUZZPARALLEL:-}
parallel=()
if [ -n "$FUZZPARALLEL" ]; then parallel=(-parallel "$FUZZPARALLEL"); fi

# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare "context deadline exceeded" and a
# failing status although nothing failed (go.dev/issue/75804, fixed in Go 1.27): the -fuzztime deadline
# races a worker's shutdown. A real finding always writes its input under testdata/fuzz/<target>/, so a
# failed run that wrote no new input and printed only that error is run once more; anything else fails.
corpus_listing() { find "$1" -type f 2>/dev/null | sort; }

# A failing input or a panic can print raw bytes: `cat -v` keeps the log text, so the summary's grep
# still names the failure (a CI run once printed only "binary file matches" for it).
fuzz_once() { # pkg name log
  go test -run '^$' -fuzz "^$2\$" -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZMINIMIZETIME}" "${parallel[@]}" "$1" 2>&1 | cat -v | tee "$3"
}

# The inputs a failed run wrote, printed into the log: CI's clone is gone by the time anyone reads it.
show_new_inputs() { # before after
  comm -13 <(printf '%s\n' "$1") <(printf '%s\n' "$2") | while read -r input; do
    [ -n "$input" ] || continue
    echo "== failing input ${input}:"
    head -c 4096 "$input" | cat -v
    echo
  done
}

# Prints "pass", "fail" or "deadline-race" for one run of a target.
fuzz_target() { # pkg name
  local pkg=$1 name=$2 dir="$1/testdata/fuzz/$2" log before after
  log=$(mktemp)
  before=$(corpus_listing "$dir")
  if fuzz_once "$pkg" "$name" "$log" >&2; then
    rm -f "$log"; echo pass; return
  fi
  after=$(corpus_listing "$dir")
  if [ "$before" = "$after" ] && grep -qx '[[:space:]]*context deadline exceeded' "$log" &&
    ! grep -q 'Failing input written to' "$log"; then
    rm -f "$log"; echo deadline-race; return
  fi
  show_new_inputs "$before" "$after" >&2
  rm -f "$log"; echo fail
}

failed=0
count=0
retried=0
while IFS=: read -r file _ decl; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
  pkg="./$(dirname "${file#./}")"
  count=$((count + 1))
  echo "== fuzz ${pkg} ${name} (${FUZZTIME})"
  result=$(fuzz_target "$pkg" "$name")
  if [ "$result" = deadline-race ]; then
    echo "== fuzz ${pkg} ${name}: Go's coordinator ended on its own deadline with no failing input (go.dev/issue/75804); running it once more"
    retried=$((retried + 1))
    result=$(fuzz_target "$pkg" "$name")
  fi
  if [ "$result" != pass ]; then
    echo "FAIL: fuzz target ${name} in ${pkg} (the failing input is under ${pkg}/testdata/fuzz/${name}/)"
    failed=$((failed + 1))
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | grep -v '^./hack/' | sort)
echo "fuzzing done: ${count} targets for ${FUZZTIME} each, ${failed} with a failure, ${retried} run again after Go's deadline race"
[ "$failed" -eq 0 ]
