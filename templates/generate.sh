#!/usr/bin/env bash
# Renders every flavor under templates/flavors/<flavor> into templates/cluster-template-<flavor>.yaml
# (flavors named clusterclass-* render to templates/<name>.yaml). make generate-templates runs it;
# make verify-gen checks the outputs are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in templates/flavors/*/; do
  f=$(basename "$d")
  [[ $f == base ]] && continue
  [[ -f $d/kustomization.yaml ]] || continue
  case $f in
    clusterclass-*) out=templates/$f.yaml ;;
    *) out=templates/cluster-template-$f.yaml ;;
  esac
  go tool -modfile=hack/tools/go.mod kustomize build --load-restrictor LoadRestrictionsNone "$d" > "$out"
  echo "$out"
done
