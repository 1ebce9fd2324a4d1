#!/usr/bin/env bash
# Installs the Debian packages Yonder's tests use and builds, once, every third-party binary that the tests
# and the lab run for real, from the Go module proxy (no downloads of prebuilt binaries are possible here).
# Everything is cached OUTSIDE the work tree, keyed by version, so that a fresh clone on the same machine
# (CI) reuses it.
#
#   hack/test-bins.sh            install/build what is missing (packages, binaries, node rootfs, metal
#                                kernel), print the assembled bin directory on stdout's last line
#   hack/test-bins.sh --preflight check only what this script cannot install (root, Go, free disk)
#   hack/test-bins.sh --print    print the bin directory without building (exit 1 if incomplete)
#   hack/test-bins.sh --packages install only the Debian packages the tests need
#   hack/test-bins.sh --rootfs   build (once) the node rootfs archive for yonder-agent host tests, print its path
#   hack/test-bins.sh --rootfs-print  print the rootfs archive path without building (exit 1 if missing)
#   hack/test-bins.sh --fullos-rootfs build (once) the full-OS hosts' tree (test/fullos), print its path
#   hack/test-bins.sh --fullos-rootfs-print  print that path without building (exit 1 if missing)
#   hack/test-bins.sh --metal-kernel  fetch (once) the Debian kernel + virtio modules for bare-metal PXE e2e, print its dir
#   hack/test-bins.sh --metal-kernel-print  print that dir without fetching (exit 1 if missing)
#   hack/test-bins.sh --list-packages  print DEB_PACKAGES, one per line (the test of test/testbins reads it)
#
# A warm run returns in well under a second: each component has a stamp file and is skipped when present.
# A failing step names itself, the line and command that failed, and the last lines of its output; the whole
# output of each step is kept in <cache>/logs/<step>.log.
set -Eeuo pipefail

KUBERNETES_VERSION=${KUBERNETES_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CAPI_VERSION=${CAPI_VERSION:-v1.14.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.1.5}
# The OCI registry the e2e suite and the lab push Yonder's images to (github.com/distribution/distribution/v3).
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.1.2}
# A second, kubelet-only Kubernetes version: the node image of a version bump (a MachineDeployment rolled
# from this kubelet to KUBERNETES_VERSION's). Its binary is kubelet-<version> in the bin directory.
KUBELET_PREVIOUS_VERSION=${KUBELET_PREVIOUS_VERSION:-v1.36.2}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# cert-manager's controller, cainjector and webhook, which the tests run as real peers (test/certmanager): our own
# mains in the nested module hack/certmanager, whose go.mod is the one place the version is written
# (hack/release-repo.sh reads it there too, for the CRDs and the chart). CERT_MANAGER_SOURCES keys the build
# on every Go file of that module as well (the mains and the packages they share, at any depth), so that a
# change to any of them rebuilds the binaries.
CERT_MANAGER_MOD="${ROOT}/hack/certmanager"
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-$(awk '$1 == "github.com/cert-manager/cert-manager" {print $2} $1 == "require" && $2 == "github.com/cert-manager/cert-manager" {print $3}' "${CERT_MANAGER_MOD}/go.mod")}
[ -n "$CERT_MANAGER_VERSION" ] || { echo "hack/certmanager/go.mod requires no github.com/cert-manager/cert-manager" >&2; exit 1; }
CERT_MANAGER_SOURCES=$(cd "$CERT_MANAGER_MOD" && find . -name '*.go' -type f | LC_ALL=C sort | xargs cat go.mod go.sum | sha256sum | cut -c1-8)
CACHE_ROOT=${YONDER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/yonder}
KEY="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_capi-${CAPI_VERSION}_containerd-${CONTAINERD_VERSION}_registry-${REGISTRY_VERSION}_kubelet-${KUBELET_PREVIOUS_VERSION}_certmanager-${CERT_MANAGER_VERSION}-${CERT_MANAGER_SOURCES}_kubeadm_kube-proxy"
BIN_DIR="${CACHE_ROOT}/bin/${KEY}"
BUILD_ROOT="${CACHE_ROOT}/build"
LOG_DIR="${CACHE_ROOT}/logs"
# Free space a cold build needs where the caches live (Go's module and build caches and ours): measured
# 8.1 GiB after a cold build on 2 cores (build cache 5.8, modules 1.6, ours 0.7); the margin covers the
# tree's own builds, the tests' and the lab's files.
MIN_FREE_GIB=${YONDER_MIN_FREE_GIB:-12}

# Debian packages the test tiers and the lab use. Every command a test or script runs comes from one of
# these, from a binary this script builds, or from an Essential package (test/testbins checks it: see
# commands.go there). Keep this list in step with docs/development.md.
DEB_PACKAGES=(openssh-server openssh-client iproute2 iptables util-linux procps kmod bridge-utils
  runc systemd systemd-container containernetworking-plugins busybox-static zstd xz-utils curl ca-certificates
  isc-dhcp-client tftp-hpa atftp swtpm swtpm-tools ipxe qemu-system-x86 ovmf kea-admin kea-dhcp4-server debootstrap
  iperf3 iputils-ping conntrack clang-14 llvm libbpf-dev tftpd-hpa nginx haproxy nftables prometheus fdisk qemu-utils dosfstools
  syslinux syslinux-common isolinux mtools genisoimage)
if [ -n "${YONDER_DEB_PACKAGES:-}" ]; then
  # Override for the script's own test (test/testbins), never needed otherwise.
  read -r -a DEB_PACKAGES <<<"${YONDER_DEB_PACKAGES}"
fi

# Progress goes to the caller's stderr (fd 3) even while a step's output goes to its log file.
exec 3>&2
log() { printf '[test-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&3; }
fail() { log "ERROR: $*"; exit 1; }

# Error reporting: the ERR trap names the step, the line and the command; a step's log tail shows why.
# It fires in subshells too (set -E); the mark file keeps the report from repeating in every parent.
STEP="setup"
STEP_LOG=""
STEP_CMD=""
ERR_MARK="${TMPDIR:-/tmp}/yonder-test-bins.$$.failed"
on_error() {
  local rc=$1 line=$2 cmd=$3
  if [ -e "$ERR_MARK" ]; then exit "$rc"; fi
  : >"$ERR_MARK"
  log "FAILED: step '${STEP}', hack/test-bins.sh line ${line}, exit status ${rc}: ${cmd}"
  if [ -n "$STEP_CMD" ]; then log "the step ran: ${STEP_CMD}"; fi
  if [ -n "$STEP_LOG" ] && [ -s "$STEP_LOG" ]; then
    log "last lines of the step's output (all of it: ${STEP_LOG}):"
    tail -n 25 "$STEP_LOG" | sed 's/^/    /' >&3
  fi
  exit "$rc"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
# POLICY_WRITTEN is the policy-rc.d this run wrote for its package install (see install_packages).
POLICY_WRITTEN=""
trap 'rm -f "$ERR_MARK"; if [ -n "$POLICY_WRITTEN" ]; then rm -f "$POLICY_WRITTEN"; fi' EXIT

# run_step NAME CMD...: runs CMD with its output in <cache>/logs/NAME.log (shown by the ERR trap on failure).
run_step() {
  local name=$1; shift
  mkdir -p "$LOG_DIR"
  STEP=$name STEP_LOG="${LOG_DIR}/${name}.log" STEP_CMD="$*"
  : >"$STEP_LOG"
  "$@" >>"$STEP_LOG" 2>&1
  STEP_LOG="" STEP_CMD=""
}

# ---------------------------------------------------------------------------------------------------------
# What the script cannot install: root (packages, debootstrap, and the tests' namespaces), Go at the version
# go.mod names (at /usr/local/go or on PATH), and free disk for a cold build.
find_go() {
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH=/usr/local/go/bin:$PATH; fi
  command -v go >/dev/null || fail "Go is not installed: install Go $(go_wanted) or newer at /usr/local/go (https://go.dev/doc/install; the README's Requirements)"
}
go_wanted() { sed -n 's/^go \([0-9.]*\)$/\1/p' "$ROOT/go.mod"; }
# version_ge A B: A >= B for dotted versions.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }
check_go() {
  find_go
  local have want
  have=$(go env GOVERSION 2>/dev/null); have=${have#go}
  want=$(go_wanted)
  version_ge "${have%%[-+ ]*}" "$want" || fail "Go ${have} is too old: go.mod needs Go ${want} or newer (GOTOOLCHAIN=local: nothing is downloaded); install it at /usr/local/go"
}
check_root() {
  [ "$(id -u)" -eq 0 ] || fail "run as root: the tests make network namespaces, bridges and systemd-nspawn machines, and this script installs Debian packages with apt-get"
}
# check_disk GIB: the filesystem of the cache root (and Go's caches, usually the same) has GIB free.
check_disk() {
  local want=$1 dir=$CACHE_ROOT free
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
  free=$(df -Pk "$dir" | awk 'NR==2 {print int($4 / 1048576)}')
  [ "$free" -ge "$want" ] || fail "only ${free} GiB free on the filesystem of ${CACHE_ROOT}: a cold build needs ${want} GiB (Go's build cache, Kubernetes, containerd, the node rootfs); free some space or set YONDER_CACHE_DIR elsewhere"
}
preflight() {
  check_root
  check_go
  if ! cold_parts_ready; then check_disk "$MIN_FREE_GIB"; fi
}
cold_parts_ready() { [ -f "${BIN_DIR}/.complete" ] && [ -f "$(rootfs_archive)" ] && metal_kernel_ready; }

# ---------------------------------------------------------------------------------------------------------
# Debian packages.
APT_UPDATED=0
apt_update_once() {
  [ "$APT_UPDATED" -eq 1 ] && return 0
  log "apt-get update"
  run_step apt-update env DEBIAN_FRONTEND=noninteractive apt-get update -q
  APT_UPDATED=1
}
# missing_packages: prints the packages of DEB_PACKAGES that dpkg does not list as installed. dpkg-query
# exits 1 when any of them is unknown to it, which is exactly the case to handle, so its status is ignored
# and only its output counts.
missing_packages() {
  local installed p
  installed=$({ dpkg-query -W -f='${Package} ${Status}\n' "${DEB_PACKAGES[@]}" 2>/dev/null || true; } |
    awk '$NF == "installed" && $(NF-1) == "ok" {print $1}')
  for p in "${DEB_PACKAGES[@]}"; do
    grep -qxF "$p" <<<"$installed" || echo "$p"
  done
}
install_packages() {
  command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
    fail "dpkg-query/apt-get not found: the tests need a Debian-like machine; install by hand: ${DEB_PACKAGES[*]}"
  local missing=()
  mapfile -t missing < <(missing_packages)
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  [ "$(id -u)" -eq 0 ] || fail "missing Debian packages: ${missing[*]} — run: sudo apt-get install -y ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  apt_update_once
  # Some packages are only peers the benchmarks start themselves (nginx, tftpd-hpa): their daemons must not
  # start on install (they would hold :80 and :69 on every address, which the boot services' tests bind).
  # Debian's policy-rc.d protocol (exit 101: do not start) does that, for the install only; a policy the
  # machine already has is left alone.
  local policy=${YONDER_POLICY_RC_D:-/usr/sbin/policy-rc.d}
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by hack/test-bins.sh while it installs packages: start no daemons\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    POLICY_WRITTEN=$policy # removed on exit, failed install or not
  fi
  run_step apt-install env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  if [ -n "$POLICY_WRITTEN" ]; then rm -f "$POLICY_WRITTEN"; POLICY_WRITTEN=""; fi
  local still=()
  mapfile -t still < <(missing_packages)
  [ ${#still[@]} -eq 0 ] || fail "apt-get install succeeded but these packages are still not installed: ${still[*]}"
  log "installed ${#missing[@]} Debian packages"
}

# ---------------------------------------------------------------------------------------------------------
# Third-party binaries from the Go module proxy.

# build_component NAME VERSION FUNC: runs FUNC in a scratch module dir unless the stamp exists.
build_component() {
  local name=$1 version=$2 fn=$3
  local out="${BUILD_ROOT}/${name}-${version}"
  if [ -f "${out}/.done" ]; then return 0; fi
  local start=$SECONDS
  log "building ${name} ${version} (cold builds take minutes on 2 cores)…"
  rm -rf "${out}.tmp" && mkdir -p "${out}.tmp/src" "${out}.tmp/bin"
  run_step "build-${name}" in_dir "${out}.tmp/src" "$fn" "${out}.tmp/bin" "$version"
  rm -rf "${out}" && mkdir -p "${out}" && mv "${out}.tmp/bin" "${out}/bin" && rm -rf "${out}.tmp"
  touch "${out}/.done"
  log "built ${name} ${version} in $((SECONDS - start))s: $(ls "${out}/bin" | tr '\n' ' ')"
}
# in_dir DIR CMD...: CMD in DIR, in a subshell so the script's own directory never changes (a build's scratch
# directory is removed afterwards, and debootstrap then failed getcwd()).
in_dir() { local d=$1; shift; (cd "$d"; "$@"); }

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build_kubernetes() {
  k8s_module "$2" yonder.local/k8sbins
  k8s_build "$1" "$2" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
}

# build_kubelet BIN VERSION: only the kubelet of another Kubernetes version, as kubelet-<version>.
build_kubelet() {
  k8s_module "$2" yonder.local/kubeletbin
  k8s_build "$1" "$2" k8s.io/kubernetes/cmd/kubelet
  mv "$1/kubelet" "$1/kubelet-$2"
}

# build_kubeadm BIN VERSION: kubeadm, which CABPK's bootstrap data runs on a full-OS host (kubeadm init/join).
build_kubeadm() {
  k8s_module "$2" yonder.local/kubeadmbin
  k8s_build "$1" "$2" k8s.io/kubernetes/cmd/kubeadm
}

# build_kube_proxy BIN VERSION: kube-proxy, which the lab's workload cluster runs on every Node as a DaemonSet
# (as kubeadm's clusters do), so that ClusterIP Services work on Yonder's nodes the way they do on a user's.
build_kube_proxy() {
  k8s_module "$2" yonder.local/kubeproxybin
  k8s_build "$1" "$2" k8s.io/kubernetes/cmd/kube-proxy
}

# k8s_module VERSION NAME: a scratch module requiring k8s.io/kubernetes at VERSION.
k8s_module() {
  local v=$1 staging=${1/v1./v0.}
  go mod init "$2"
  go mod edit -require="k8s.io/kubernetes@${v}"
  # k8s.io/kubernetes requires its staging repos at v0.0.0 and replaces them with ./staging; point them at
  # the published tags instead.
  local mods
  mods=$(go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$mods" ] || { echo "go mod download k8s.io/kubernetes@${v} gave no go.mod"; return 1; }
  local m
  for m in $(awk '/^require \(/{f=1;next} f&&/^\)/{f=0} f&&$2=="v0.0.0"{print $1}' "$mods"); do
    [ "$m" = "k8s.io/sample-cli-plugin" ] && continue
    go mod edit -replace="${m}=${m}@${staging}"
  done
}

# k8s_build BIN VERSION PKG...: one go build of the packages (shared packages compile once), the version
# set with ldflags (CAPI rejects an apiserver that reports v0.0.0).
k8s_build() {
  local bin=$1 v=$2 minor=${2#v}; shift 2
  minor=${minor#*.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  go build -trimpath -o "$bin/" -ldflags "-s -w -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z" "$@"
}

build_etcd() {
  local bin=$1 v=$2
  go mod init yonder.local/etcdbin
  go mod edit -require="go.etcd.io/etcd/server/v3@${v}"
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}

# capi_module VERSION NAME: a scratch module requiring sigs.k8s.io/cluster-api at VERSION, with the replace
# directives of cluster-api's own go.mod that point at versions (those do not apply to a module that requires
# it). Sets CAPI_LDFLAGS, which stamp CAPI's version.
capi_module() {
  local v=$1
  go mod init "$2"
  go mod edit -require="sigs.k8s.io/cluster-api@${v}" -require="sigs.k8s.io/cluster-api/api@${v}"
  local mods
  mods=$(go mod download -json "sigs.k8s.io/cluster-api@${v}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$mods" ] || { echo "go mod download sigs.k8s.io/cluster-api@${v} gave no go.mod"; return 1; }
  local from to
  while read -r from to; do
    [ -n "$to" ] && go mod edit -replace="${from}=${to}"
  done < <(awk '/^replace /{print $2" "$5; next} /^replace \(/{f=1;next} f&&/^\)/{f=0} f&&$3=="=>"&&NF==5{print $1" "$4"@"$5}' "$mods")
  go mod edit -replace="sigs.k8s.io/cluster-api/api=sigs.k8s.io/cluster-api/api@${v}"
  CAPI_LDFLAGS="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${v} -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
}

build_capi() {
  local bin=$1 v=$2
  capi_module "$v" yonder.local/capibins
  go build -trimpath -ldflags "$CAPI_LDFLAGS" -o "$bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
  go build -trimpath -ldflags "$CAPI_LDFLAGS" -o "$bin/capi-manager" sigs.k8s.io/cluster-api/core
}

# build_capi_kubeadm BIN VERSION: CAPI's kubeadm bootstrap provider (CABPK) and kubeadm control plane (KCP),
# the real peers that Yonder's infrastructure composes with (docs/compatibility.md). A component of its own,
# so that adding it left the core build's cache valid.
build_capi_kubeadm() {
  local bin=$1 v=$2
  capi_module "$v" yonder.local/capikubeadmbins
  go build -trimpath -ldflags "$CAPI_LDFLAGS" -o "$bin/capi-kubeadm-bootstrap-manager" sigs.k8s.io/cluster-api/bootstrap/kubeadm
  go build -trimpath -ldflags "$CAPI_LDFLAGS" -o "$bin/capi-kubeadm-control-plane-manager" sigs.k8s.io/cluster-api/controlplane/kubeadm
}

build_containerd() {
  local bin=$1 v=$2
  go mod init yonder.local/containerdbins
  go mod edit -require="github.com/containerd/containerd/v2@${v}"
  local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=${v}"
  go build -trimpath -ldflags "$ld" -o "$bin/" github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
}

build_registry() {
  local bin=$1 v=$2
  go mod init yonder.local/registrybin
  go mod edit -require="github.com/distribution/distribution/v3@${v}"
  go build -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=${v}" -o "$bin/registry" \
    github.com/distribution/distribution/v3/cmd/registry
}

# build_certmanager BIN VERSION: the mains of hack/certmanager (upstream's cmd/* modules are not on the
# proxy), built in the scratch directory from a copy so that the work tree's module is never rewritten.
# VERSION is the component's stamp (version and sources); the module version is CERT_MANAGER_VERSION.
build_certmanager() {
  local bin=$1 v=$CERT_MANAGER_VERSION
  cp -R "${CERT_MANAGER_MOD}/." .
  go mod edit -require="github.com/cert-manager/cert-manager@${v}"
  local ld="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=${v}"
  go build -trimpath -ldflags "$ld" -o "$bin/cert-manager-controller" ./controller
  go build -trimpath -ldflags "$ld" -o "$bin/cert-manager-cainjector" ./cainjector
  go build -trimpath -ldflags "$ld" -o "$bin/cert-manager-webhook" ./webhook
}

# BUILT_BINARIES: what build_binaries puts into BIN_DIR (test/testbins checks commands against it).
BUILT_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd clusterctl capi-manager
  containerd ctr containerd-shim-runc-v2 registry "kubelet-${KUBELET_PREVIOUS_VERSION}"
  cert-manager-controller cert-manager-cainjector cert-manager-webhook kubeadm capi-kubeadm-bootstrap-manager capi-kubeadm-control-plane-manager kube-proxy)

build_binaries() {
  if [ -f "${BIN_DIR}/.complete" ]; then return 0; fi
  build_component etcd "${ETCD_VERSION}" build_etcd
  build_component capi "${CAPI_VERSION}" build_capi
  build_component kubernetes "${KUBERNETES_VERSION}" build_kubernetes
  build_component containerd "${CONTAINERD_VERSION}" build_containerd
  build_component registry "${REGISTRY_VERSION}" build_registry
  build_component kubelet "${KUBELET_PREVIOUS_VERSION}" build_kubelet
  build_component certmanager "${CERT_MANAGER_VERSION}-${CERT_MANAGER_SOURCES}" build_certmanager
  build_component capi-kubeadm "${CAPI_VERSION}" build_capi_kubeadm
  build_component kubeadm "${KUBERNETES_VERSION}" build_kubeadm
  build_component kube-proxy "${KUBERNETES_VERSION}" build_kube_proxy
  STEP=assemble
  mkdir -p "${BIN_DIR}"
  local c f
  for c in "kubernetes-${KUBERNETES_VERSION}" "etcd-${ETCD_VERSION}" "capi-${CAPI_VERSION}" "containerd-${CONTAINERD_VERSION}" \
    "registry-${REGISTRY_VERSION}" "kubelet-${KUBELET_PREVIOUS_VERSION}" "certmanager-${CERT_MANAGER_VERSION}-${CERT_MANAGER_SOURCES}" \
    "capi-kubeadm-${CAPI_VERSION}" "kubeadm-${KUBERNETES_VERSION}" "kube-proxy-${KUBERNETES_VERSION}"; do
    for f in "${BUILD_ROOT}/${c}/bin/"*; do ln -sf "$f" "${BIN_DIR}/$(basename "$f")"; done
  done
  for f in "${BUILT_BINARIES[@]}"; do
    [ -x "${BIN_DIR}/$f" ] || fail "assembling ${BIN_DIR}: ${f} was not built (remove ${BUILD_ROOT} to rebuild)"
  done
  touch "${BIN_DIR}/.complete"
}

# ---------------------------------------------------------------------------------------------------------
# Node rootfs for yonder-agent host tests (hostruntime). Separate from the binaries above: a debootstrap
# minbase bookworm with the packages below, from the apt mirror this machine is configured with, cached as
# a tar.zst keyed by suite + package list (~1-4.5 min cold, restores in seconds). Tests find it with
# `hack/test-bins.sh --rootfs-print` or YONDER_TEST_ROOTFS.
ROOTFS_SUITE=${ROOTFS_SUITE:-bookworm}
ROOTFS_PACKAGES=${ROOTFS_PACKAGES:-systemd,systemd-sysv,dbus,iproute2,ca-certificates,runc,containernetworking-plugins,iptables,kmod}
# The full-OS hosts' tree (test/fullos: systemd-nspawn --boot machines that CAPI's kubeadm providers bootstrap
# over SSH): the node's packages plus OpenSSH and what kubeadm's preflight looks for (conntrack, socat, ethtool).
# containerd, kubelet and kubeadm are the binaries built above, bound in when a host boots.
FULLOS_PACKAGES=${FULLOS_PACKAGES:-${ROOTFS_PACKAGES},openssh-server,conntrack,socat,ethtool}
# rootfs_archive [PACKAGES]: the cached archive of a tree with PACKAGES (default: the node's).
rootfs_archive() {
  local key packages=${1:-$ROOTFS_PACKAGES}
  key=$(printf '%s %s' "${ROOTFS_SUITE}" "${packages}" | sha256sum | cut -c1-12)
  echo "${CACHE_ROOT}/rootfs/${ROOTFS_SUITE}-minbase-${key}.tar.zst"
}
apt_mirror() {
  local mirror
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\) *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
  echo "${mirror:-http://deb.debian.org/debian}"
}
# build_rootfs [PACKAGES]: debootstrap a tree with PACKAGES (default: the node's) once, and pack it.
build_rootfs() {
  local packages=${1:-$ROOTFS_PACKAGES}
  local out; out=$(rootfs_archive "$packages")
  if [ -f "$out" ]; then return 0; fi
  check_root
  command -v debootstrap >/dev/null || install_packages
  local mirror; mirror=$(apt_mirror)
  local start=$SECONDS tmp="${out%.tar.zst}.tmp"
  log "rootfs: debootstrap --variant=minbase ${ROOTFS_SUITE} from ${mirror} with ${packages} (~1-4.5 min cold)…"
  rm -rf "$tmp" && mkdir -p "$tmp/root"
  run_step rootfs debootstrap_filtered "$tmp/root" "$mirror" "$packages"
  STEP=rootfs
  [ -x "$tmp/root/lib/systemd/systemd" ] || fail "rootfs: debootstrap left no systemd in the tree (its output: ${LOG_DIR}/rootfs.log)"
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  # A package's install may generate keys (openssh-server's host keys): every host generates its own.
  rm -f "$tmp/root/etc/ssh/ssh_host_"*
  log "rootfs: packing $(du -sm "$tmp/root" | cut -f1) MB as tar.zst…"
  tar -C "$tmp/root" --numeric-owner --xattrs -cf - . | zstd -q -T0 -3 -o "$tmp/rootfs.tar.zst"
  mv "$tmp/rootfs.tar.zst" "$out" && rm -rf "$tmp"
  log "rootfs: ready in $((SECONDS - start))s: $out ($(du -m "$out" | cut -f1) MB)"
}
# debootstrap_filtered ROOT MIRROR PACKAGES: debootstrap with its progress lines shown, the download chatter only logged.
debootstrap_filtered() {
  debootstrap --variant=minbase --include="$3" "${ROOTFS_SUITE}" "$1" "$2" 2>&1 |
    while IFS= read -r line; do
      echo "$line"
      case "$line" in I:\ Retriev*|I:\ Valid*) ;; *) log "rootfs: $line" ;; esac
    done
}

# ---------------------------------------------------------------------------------------------------------
# Kernel for bare-metal PXE boots (infrastructure-baremetal e2e): Debian's linux-image-amd64 (apt-get download
# + dpkg -x, no install), cached as <cache>/metal-kernel/<package>_modules-<hash of the list>/ with vmlinuz
# and the few modules a QEMU host needs that Debian builds as modules (the TPM TIS driver, the MBR partition
# table and NLS are built in): the virtio NIC, before the agent runs; the virtio disk, which the
# provisioning ramdisk writes the image to; FAT and ISO 9660 with their code pages, to read a config drive
# (cloud-init's config-2 partition: vfat mounts need nls_cp437, nls_ascii and nls_utf8 as Debian sets its
# defaults; isofs needs cdrom). The list is in load order, dependencies first. The e2e builds its initramfs
# itself (busybox-static + the static yonder-agent of the tree under test; test/bootdisk's disk boots one too).
# Tests find it with `hack/test-bins.sh --metal-kernel-print` or YONDER_TEST_METAL_KERNEL.
# <cache>/metal-kernel/current names the package fetched, so a warm run never asks apt (whose lists may be
# gone) which kernel is current; the directory's name carries the module list's hash, so a changed list
# fetches again instead of serving a cache that lacks a module.
METAL_KERNEL_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net virtio_blk fat vfat nls_cp437 nls_ascii nls_utf8 cdrom isofs"
# A diskless host (customDeploy yonder-diskless) runs the Node from its ramdisk, whose kernel then needs
# what a node's kernel loads: netfilter for kube-proxy and the CNI (nf_tables, x_tables, conntrack, NAT),
# the bridge with br_netfilter, traffic control, overlayfs for containerd, and the links the network add-on
# makes (veth, VXLAN, WireGuard, dummy, tun). These roots (directories of kernel/ or single modules) and
# their dependencies go to node/lib/modules/<version>/ with a depmod index, which busybox modprobe reads;
# crc32c_generic is named because libcrc32c only soft-depends on it, which busybox modprobe ignores.
METAL_NODE_MODULE_ROOTS="net/netfilter net/ipv4/netfilter net/ipv6/netfilter net/bridge net/sched fs/overlayfs drivers/net/veth.ko drivers/net/vxlan/vxlan.ko drivers/net/wireguard/wireguard.ko drivers/net/dummy.ko drivers/net/tun.ko crypto/crc32c_generic.ko"
METAL_KERNEL_MODULES_KEY=$(echo "$METAL_KERNEL_MODULES $METAL_NODE_MODULE_ROOTS builtin" | sha256sum | cut -c1-8)
METAL_KERNEL_ROOT="${CACHE_ROOT}/metal-kernel"
metal_kernel_dir() {
  local pkg
  pkg=$(cat "${METAL_KERNEL_ROOT}/current" 2>/dev/null || true)
  [ -n "$pkg" ] && [ -f "${METAL_KERNEL_ROOT}/${pkg}_modules-${METAL_KERNEL_MODULES_KEY}/.complete" ] &&
    echo "${METAL_KERNEL_ROOT}/${pkg}_modules-${METAL_KERNEL_MODULES_KEY}"
}
metal_kernel_ready() { metal_kernel_dir >/dev/null; }
build_metal_kernel() {
  if metal_kernel_ready; then return 0; fi
  # xz and zstd unpack the modules; depmod and modprobe (kmod) index them and resolve their dependencies.
  command -v xz >/dev/null && command -v zstd >/dev/null && command -v depmod >/dev/null && command -v modprobe >/dev/null || install_packages
  apt_update_once
  STEP=metal-kernel
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ && !seen {print $2; seen = 1}')
  [ -n "$pkg" ] || fail "metal kernel: apt-cache knows no linux-image-amd64 after apt-get update (is a Debian main mirror configured?)"
  local out="${METAL_KERNEL_ROOT}/${pkg}_modules-${METAL_KERNEL_MODULES_KEY}"
  local tmp="${out}.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp/dl" "$tmp/x" "$tmp/modules"
  log "metal kernel: apt-get download ${pkg}…"
  run_step metal-kernel in_dir "$tmp/dl" apt-get download "$pkg"
  STEP=metal-kernel
  dpkg -x "$tmp/dl/"*.deb "$tmp/x"
  cp "$tmp/x/boot/vmlinuz-"* "$tmp/vmlinuz"
  local m f
  for m in $METAL_KERNEL_MODULES; do
    f=$(find "$tmp/x/lib/modules" -name "${m}.ko*" -print -quit)
    [ -n "$f" ] || fail "metal kernel: module ${m} missing in ${pkg} (built in? grep its boot/config-*)"
    case "$f" in
      *.ko.xz) xz -dc "$f" >"$tmp/modules/${m}.ko" ;;
      *.ko.zst) zstd -qdc "$f" >"$tmp/modules/${m}.ko" ;;
      *) cp "$f" "$tmp/modules/${m}.ko" ;;
    esac
  done
  echo "$METAL_KERNEL_MODULES" >"$tmp/modules/order"
  metal_node_modules "$tmp/x" "$tmp/node"
  rm -rf "$tmp/dl" "$tmp/x" && touch "$tmp/.complete"
  rm -rf "$out" && mv "$tmp" "$out"
  echo "$pkg" >"${METAL_KERNEL_ROOT}/current.tmp" && mv "${METAL_KERNEL_ROOT}/current.tmp" "${METAL_KERNEL_ROOT}/current"
  log "metal kernel: ready in $out"
}

# metal_node_modules EXTRACTED OUT: the diskless node's modules (METAL_NODE_MODULE_ROOTS and their
# dependencies, decompressed) from the extracted kernel package into OUT/lib/modules/<version>/, indexed by
# depmod, and the roots' module names, dependencies first, in OUT/lib/modules/<version>/yonder-node-modules.
metal_node_modules() {
  local x=$1 out=$2 kver dir r m f rel roots=()
  kver=$(ls "$x/lib/modules")
  dir="$x/lib/modules/$kver"
  for r in $METAL_NODE_MODULE_ROOTS; do
    [ -e "$dir/kernel/$r" ] || fail "metal kernel: $r missing in $kver (see METAL_NODE_MODULE_ROOTS)"
    while IFS= read -r f; do roots+=("$(basename "${f%%.ko*}")"); done < <(find "$dir/kernel/$r" -name '*.ko*' | sort)
  done
  depmod -b "$x" "$kver"
  mkdir -p "$out/lib/modules/$kver"
  for m in "${roots[@]}"; do
    modprobe -d "$x" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done | sort -u | while IFS= read -r f; do
    rel=${f#"$dir"/}
    mkdir -p "$out/lib/modules/$kver/$(dirname "$rel")"
    case "$f" in
      *.ko.xz) xz -dc "$f" >"$out/lib/modules/$kver/${rel%.xz}" ;;
      *.ko.zst) zstd -qdc "$f" >"$out/lib/modules/$kver/${rel%.zst}" ;;
      *) cp "$f" "$out/lib/modules/$kver/$rel" ;;
    esac
  done
  # The built-in list, so that modprobe of a built-in module (ipv6) succeeds instead of failing.
  cp "$dir"/modules.builtin "$dir"/modules.builtin.modinfo "$out/lib/modules/$kver/"
  depmod -b "$out" "$kver"
  printf '%s\n' "${roots[@]}" >"$out/lib/modules/$kver/yonder-node-modules"
}

# ---------------------------------------------------------------------------------------------------------

case "${1:-}" in
  --list-packages) printf '%s\n' "${DEB_PACKAGES[@]}"; exit 0 ;;
  --list-built) printf '%s\n' "${BUILT_BINARIES[@]}"; exit 0 ;;
  --preflight) STEP=preflight; preflight; exit 0 ;;
  --packages) STEP=packages; install_packages; exit 0 ;;
  --rootfs) STEP=rootfs; build_rootfs; rootfs_archive; exit 0 ;;
  --rootfs-print)
    f=$(rootfs_archive); [ -f "$f" ] || { echo "node rootfs not built: run hack/test-bins.sh --rootfs" >&2; exit 1; }
    echo "$f"; exit 0 ;;
  --print)
    [ -f "${BIN_DIR}/.complete" ] || { echo "test binaries not built: run make test-bins" >&2; exit 1; }
    echo "${BIN_DIR}"; exit 0 ;;
  --fullos-rootfs) STEP=rootfs; build_rootfs "$FULLOS_PACKAGES"; rootfs_archive "$FULLOS_PACKAGES"; exit 0 ;;
  --fullos-rootfs-print)
    f=$(rootfs_archive "$FULLOS_PACKAGES"); [ -f "$f" ] || { echo "full-OS rootfs not built: run hack/test-bins.sh --fullos-rootfs" >&2; exit 1; }
    echo "$f"; exit 0 ;;
  --metal-kernel) STEP=metal-kernel; build_metal_kernel; metal_kernel_dir; exit 0 ;;
  --metal-kernel-print)
    metal_kernel_dir || { echo "metal kernel not fetched: run hack/test-bins.sh --metal-kernel" >&2; exit 1; }
    exit 0 ;;
  "" | --force) ;;
  *) echo "unknown argument ${1}: see the usage at the top of hack/test-bins.sh" >&2; exit 2 ;;
esac

total=$SECONDS
STEP=preflight
preflight
STEP=packages
install_packages
if [ "${1:-}" = "--force" ]; then rm -f "${BIN_DIR}/.complete"; fi
build_binaries
build_rootfs
build_rootfs "$FULLOS_PACKAGES"
build_metal_kernel
if [ $((SECONDS - total)) -gt 1 ]; then
  log "all test binaries, packages, the node and full-OS rootfs and the metal kernel ready in ${BIN_DIR} ($((SECONDS - total))s)"
fi
echo "${BIN_DIR}"
