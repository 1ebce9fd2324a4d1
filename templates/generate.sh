#!/usr/bin/env bash
# Renders every flavor under templates/flavors/<flavor> into templates/cluster-template-<flavor>.yaml
# (flavors named clusterclass-* render to templates/<name>.yaml). make generate-templates runs it;
# make verify-gen checks the outputs are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
KUSTOMIZE=(go tool -modfile=hack/tools/go.mod kustomize)
# The multi-site flavor's ClusterResourceSet carries the network add-on as built from network/config.
"${KUSTOMIZE[@]}" build network/config/default > templates/flavors/ssh-multi-site/yonder-network.yaml
for d in templates/flavors/*/; do
  f=$(basename "$d")
  [[ $f == base ]] && continue
  [[ -f $d/kustomization.yaml ]] || continue
  case $f in
    clusterclass-*) out=templates/$f.yaml ;;
    *) out=templates/cluster-template-$f.yaml ;;
  esac
  "${KUSTOMIZE[@]}" build --load-restrictor LoadRestrictionsNone "$d" > "$out"
  echo "$out"
done
