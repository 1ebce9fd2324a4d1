#!/usr/bin/env bash
# Renders every flavor under templates/flavors/<flavor> into templates/cluster-template-<flavor>.yaml
# (flavors named clusterclass-* render to templates/<name>.yaml). make generate-templates runs it;
# make verify-gen checks the outputs are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
KUSTOMIZE=(go tool -modfile=hack/tools/go.mod kustomize)
# The multi-site flavor's ClusterResourceSet carries the network add-on as built from network/config, its
# images turned into clusterctl variables whose defaults are the manifests' own references:
# ${YONDER_NETWORK_CONTROLLER_IMAGE:=ghcr.io/yonder-dev/yonder-net-controller:dev} and
# ${YONDER_NETWORK_NODE_IMAGE:=…}. hack/release-repo.sh pins the defaults by digest in a release repository,
# as it pins the providers' images; the committed output stays the same on every machine.
"${KUSTOMIZE[@]}" build network/config/default |
  sed -E 's#^( *image: )(ghcr\.io/yonder-dev/yonder-net-(controller|node))(:[^[:space:]]+)$#\1${YONDER_NETWORK_\U\3\E_IMAGE:=\2\4}#' \
  > templates/flavors/ssh-multi-site/yonder-network.yaml
grep -q 'YONDER_NETWORK_CONTROLLER_IMAGE' templates/flavors/ssh-multi-site/yonder-network.yaml &&
  grep -q 'YONDER_NETWORK_NODE_IMAGE' templates/flavors/ssh-multi-site/yonder-network.yaml ||
  { echo "generate.sh: the network add-on's image references changed; update the image variables" >&2; exit 1; }
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
