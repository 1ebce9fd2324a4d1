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
failed=0
count=0
while IFS=: read -r file _ decl; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
  pkg="$(dirname "$file")"
  count=$((count + 1))
  echo "== fuzz ${pkg} ${name} (${FUZZTIME})"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZMINIMIZETIME}" "$pkg"; then
    echo "FAIL: fuzz target ${name} in ${pkg} (the failing input is under ${pkg}/testdata/fuzz/${name}/)"
    failed=$((failed + 1))
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | grep -v '^./hack/' | sort)
echo "fuzzing done: ${count} targets for ${FUZZTIME} each, ${failed} with a failure"
[ "$failed" -eq 0 ]
