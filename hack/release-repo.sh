#!/usr/bin/env bash
# Lays out a LOCAL clusterctl repository and a clusterctl config from the components YAML that
# `make release-manifests` built, so `clusterctl init`, `clusterctl generate cluster` and
# `clusterctl generate provider` work from this directory without any download:
#
#   out/repository/<provider-label>/<version>/<components file>, metadata.yaml, templates
#   out/clusterctl.yaml   providers: + cert-manager: with file:// URLs into out/repository
#
# The core provider (cluster-api) and CAPI's kubeadm providers (bootstrap-kubeadm, control-plane-kubeadm) are
# built with kustomize from the CAPI module's own config at the version go.mod pins, the images set to the
# upstream release images of that version. cert-manager is the
# real cert-manager CRDs of the version hack/certmanager/go.mod requires (from its Go module); see
# docs/clusterctl.md for why only the CRDs and who issues the certificates in the e2e suite.
#
# Versions accumulate: laying out a version replaces only that version's directories (and the core provider
# and cert-manager), so a repository that has v0.1.0 and then gets v0.2.0 offers both — what `clusterctl
# upgrade plan` lists. out/clusterctl.yaml points at the version laid out last (clusterctl init's default).
#
# Usage: hack/release-repo.sh <out dir> <yonder version>
set -euo pipefail

OUT=${1:?usage: release-repo.sh <out dir> <version>}
VERSION=${2:?usage: release-repo.sh <out dir> <version>}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The version of cert-manager whose controller the tests run (hack/certmanager/go.mod, built by
# hack/test-bins.sh): the CRDs must be the ones that controller serves.
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-$(awk '$1 == "github.com/cert-manager/cert-manager" {print $2} $1 == "require" && $2 == "github.com/cert-manager/cert-manager" {print $3}' "$ROOT/hack/certmanager/go.mod")}
[[ -n $CERT_MANAGER_VERSION ]] || { echo "hack/certmanager/go.mod requires no github.com/cert-manager/cert-manager" >&2; exit 1; }
cd "$ROOT"
KUSTOMIZE=(go tool -modfile=hack/tools/go.mod kustomize)

[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "version must look like v0.1.0, got $VERSION" >&2; exit 1; }
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
REPO=$OUT/repository
mkdir -p "$REPO"
rm -rf "$REPO"/cluster-api "$REPO"/bootstrap-kubeadm "$REPO"/control-plane-kubeadm "$REPO"/cert-manager "$REPO"/*/"$VERSION"

# Core provider: the CAPI version the module pins (what the e2e suite runs as capi-manager), and CAPI's
# kubeadm bootstrap (CABPK) and control-plane (KCP) providers of the same version, which users compose with
# Yonder's (docs/compatibility.md): the e2e suite runs them as capi-kubeadm-bootstrap-manager and
# capi-kubeadm-control-plane-manager (hack/test-bins.sh).
capi_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
capi_version=$(go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
kdir=$(mktemp -d)
trap 'rm -rf "$kdir"' EXIT
# capi_provider <provider label> <config dir in the module> <image name> <components file>: kustomize of
# the module's config/default, the image set to the upstream release image of that version.
capi_provider() {
  local label=$1 config=$capi_dir/$2 image=$3 file=$4
  [[ -d $config/default ]] || { echo "no $2/default in $capi_dir" >&2; exit 1; }
  local d=$REPO/$label/$capi_version
  rm -rf "$d" "$kdir/config" && mkdir -p "$d"
  # kustomize only accepts bases below or beside the kustomization: link the module's config in.
  ln -s "$config" "$kdir/config"
  cat > "$kdir/kustomization.yaml" <<EOF
resources:
- config/default
images:
- name: gcr.io/k8s-staging-cluster-api/$image
  newName: registry.k8s.io/cluster-api/$image
  newTag: $capi_version
EOF
  "${KUSTOMIZE[@]}" build --load-restrictor LoadRestrictionsNone "$kdir" > "$d/$file"
  cat "$capi_dir/metadata.yaml" > "$d/metadata.yaml"
}
capi_provider cluster-api core/config cluster-api-controller core-components.yaml
capi_provider bootstrap-kubeadm bootstrap/kubeadm/config kubeadm-bootstrap-controller bootstrap-components.yaml
capi_provider control-plane-kubeadm controlplane/kubeadm/config kubeadm-control-plane-controller control-plane-components.yaml
core=$REPO/cluster-api/$capi_version

# cert-manager: what its release publishes as cert-manager.yaml, built from its Go module: the namespace, its
# real CRDs (deploy/crds), and its chart (deploy/charts/cert-manager) rendered with the default values the way
# `helm template` renders it (hack/chartrender: Helm's own engine; hooks left out, as in a static manifest):
# RBAC, ServiceAccounts, Services, the controller's, cainjector's and webhook's Deployments (images
# quay.io/jetstack/cert-manager-*:<version>) and the webhook configurations. clusterctl installs it and checks
# the API with its test resources, which pass only once the webhook serves. A cluster with kubelets runs the
# Deployments (test/stack's pivot: the images are our builds of those binaries); on the test stack's
# management clusters, which have no Deployment controller, the stack runs the same binaries as processes
# (test/certmanager).
cm_dir=$(go env GOMODCACHE)/github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION
if [[ ! -d $cm_dir/deploy/crds ]]; then
  (cd "$kdir" && go mod download github.com/cert-manager/cert-manager@"$CERT_MANAGER_VERSION" >/dev/null)
fi
cm=$REPO/cert-manager/$CERT_MANAGER_VERSION
mkdir -p "$cm"
chart=$(cd "$ROOT/hack/chartrender" && go run . "$cm_dir/deploy/charts/cert-manager" cert-manager cert-manager "$CERT_MANAGER_VERSION")
{
  echo "# cert-manager $CERT_MANAGER_VERSION: namespace, CRDs (deploy/crds of github.com/cert-manager/cert-manager),"
  echo "# and its chart rendered with the default values (hack/chartrender)."
  printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n'
  for f in "$cm_dir"/deploy/crds/*.yaml; do echo "---"; cat "$f"; done
  printf '%s\n' "$chart"
} > "$cm/cert-manager.yaml.tmp"
mv "$cm/cert-manager.yaml.tmp" "$cm/cert-manager.yaml"

# Pin our images by digest where `go run ./hack/images` built them (make release-manifests does), and the
# agent's sha256: the bootstrap manager's default, with which hosts fetch the agent's blob from the image
# repository.
if [[ -f $OUT/images/digests.txt ]]; then
  while read -r repo digest; do
    [[ -n $repo ]] || continue
    for f in "$OUT"/*/*.yaml; do
      sed -i "s|image: $repo:[^[:space:]]*|image: $repo@$digest|" "$f"
    done
  done < "$OUT/images/digests.txt"
fi
if [[ -f $OUT/images/agent.sha256 ]]; then
  agent_sha=$(tr -d '[:space:]' < "$OUT/images/agent.sha256")
  for f in "$OUT"/*/*.yaml; do
    sed -i "s|\${YONDER_AGENT_SHA256:=\"\"}|\${YONDER_AGENT_SHA256:=$agent_sha}|" "$f"
  done
fi

# Yonder providers: <dir> <clusterctl name> <type>.
providers=(
  "bootstrap yonder BootstrapProvider bootstrap-yonder"
  "controlplane yonder ControlPlaneProvider control-plane-yonder"
  "infrastructure-ssh yonder-ssh InfrastructureProvider infrastructure-yonder-ssh"
  "infrastructure-baremetal yonder-metal InfrastructureProvider infrastructure-yonder-metal"
)
cfg=$OUT/clusterctl.yaml
{
  echo "# clusterctl configuration for the local repository in $REPO (generated by hack/release-repo.sh)."
  echo "providers:"
  echo "- name: cluster-api"
  echo "  type: CoreProvider"
  echo "  url: file://$core/core-components.yaml"
  echo "- name: kubeadm"
  echo "  type: BootstrapProvider"
  echo "  url: file://$REPO/bootstrap-kubeadm/$capi_version/bootstrap-components.yaml"
  echo "- name: kubeadm"
  echo "  type: ControlPlaneProvider"
  echo "  url: file://$REPO/control-plane-kubeadm/$capi_version/control-plane-components.yaml"
} > "$cfg"
for p in "${providers[@]}"; do
  read -r dir name type label <<<"$p"
  file=$(sed -n 's/.*"componentsFile": "\(.*\)".*/\1/p' "$dir/clusterctl-settings.json")
  if [[ ! -f $OUT/$dir/$file ]]; then
    echo "skipping $label: no $OUT/$dir/$file" >&2
    continue
  fi
  d=$REPO/$label/$VERSION
  mkdir -p "$d"
  cp "$OUT/$dir/$file" "$d/$file"
  cp metadata.yaml "$d/metadata.yaml"
  case $label in
    infrastructure-yonder-ssh) cp templates/cluster-template.yaml templates/cluster-template-ssh*.yaml templates/clusterclass-yonder-ssh*.yaml "$d/" 2>/dev/null || true ;;
    infrastructure-yonder-metal) cp templates/cluster-template-metal*.yaml templates/clusterclass-yonder-metal*.yaml "$d/" 2>/dev/null || true
      # Metal3's BareMetalHost CRD, apart from the components (see infrastructure-baremetal/config/default).
      cp "$OUT/$dir/metal3-crds.yaml" "$d/" ;;
  esac
  # Image variables' defaults in the templates (the multi-site flavor's network add-on) are pinned like
  # the components: ${YONDER_NETWORK_NODE_IMAGE:=<repo>:dev} becomes ${…:=<repo>@<digest>}.
  if [[ -f $OUT/images/digests.txt ]]; then
    while read -r repo digest; do
      [[ -n $repo ]] || continue
      for f in "$d"/cluster-template*.yaml; do
        if [[ -f $f ]]; then sed -i "s|:=$repo:[^}[:space:]]*}|:=$repo@$digest}|" "$f"; fi
      done
    done < "$OUT/images/digests.txt"
  fi
  printf -- '- name: %s\n  type: %s\n  url: file://%s/%s\n' "$name" "$type" "$d" "$file" >> "$cfg"
done
cat >> "$cfg" <<EOF
cert-manager:
  url: file://$cm/cert-manager.yaml
  version: $CERT_MANAGER_VERSION
EOF
echo "$cfg"
