#!/usr/bin/env bash
# Builds, once, every third-party binary that Yonder's tests and lab run for real, from the Go module
# proxy (no downloads of prebuilt binaries are possible here), and caches them OUTSIDE the work tree,
# keyed by version, so that a fresh clone on the same machine (CI) reuses them.
#
#   hack/test-bins.sh            build what is missing (binaries and the node rootfs), print the assembled bin
#                                directory on stdout's last line
#   hack/test-bins.sh --print    print the bin directory without building (exit 1 if incomplete)
#   hack/test-bins.sh --packages install only the Debian packages the tests need
#   hack/test-bins.sh --rootfs   build (once) the node rootfs archive for yonder-agent host tests, print its path
#   hack/test-bins.sh --rootfs-print  print the rootfs archive path without building (exit 1 if missing)
#   hack/test-bins.sh --metal-kernel  fetch (once) the Debian kernel + virtio modules for bare-metal PXE e2e, print its dir
#   hack/test-bins.sh --metal-kernel-print  print that dir without fetching (exit 1 if missing)
#
# A warm run returns in well under a second: each component has a stamp file and is skipped when present.
set -euo pipefail

KUBERNETES_VERSION=${KUBERNETES_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CAPI_VERSION=${CAPI_VERSION:-v1.14.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.1.5}

CACHE_ROOT=${YONDER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/yonder}
KEY="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_capi-${CAPI_VERSION}_containerd-${CONTAINERD_VERSION}"
BIN_DIR="${CACHE_ROOT}/bin/${KEY}"
BUILD_ROOT="${CACHE_ROOT}/build"

# Debian packages the test tiers use. Keep this list in step with docs/development.md.
DEB_PACKAGES=(openssh-server openssh-client iproute2 iptables util-linux procps kmod bridge-utils
  runc systemd-container containernetworking-plugins busybox-static zstd curl ca-certificates
  isc-dhcp-client tftp-hpa swtpm swtpm-tools ipxe qemu-system-x86 ovmf kea-admin kea-dhcp4-server debootstrap
  iperf3 iputils-ping clang-14 llvm libbpf-dev)

log() { printf '[test-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

install_packages() {
  local missing=() installed
  # One dpkg-query for the whole list keeps a warm run well under a second.
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${DEB_PACKAGES[@]}" 2>/dev/null | awk '/install ok installed/ {print $1}')
  for p in "${DEB_PACKAGES[@]}"; do
    grep -qx "$p" <<<"$installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]} — run: sudo apt-get install -y ${missing[*]}"
    return 1
  fi
  log "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# build_component NAME VERSION FUNC: runs FUNC in a scratch module dir unless the stamp exists.
build_component() {
  local name=$1 version=$2 fn=$3
  local out="${BUILD_ROOT}/${name}-${version}"
  if [ -f "${out}/.done" ]; then return 0; fi
  local start=$SECONDS
  log "building ${name} ${version} (cold builds take minutes on 2 cores)…"
  rm -rf "${out}.tmp" && mkdir -p "${out}.tmp/src" "${out}.tmp/bin"
  ( cd "${out}.tmp/src" && "$fn" "${out}.tmp/bin" "$version" )
  rm -rf "${out}" && mkdir -p "${out}" && mv "${out}.tmp/bin" "${out}/bin" && rm -rf "${out}.tmp"
  touch "${out}/.done"
  log "built ${name} ${version} in $((SECONDS - start))s: $(ls "${out}/bin" | tr '\n' ' ')"
}

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build_kubernetes() {
  local bin=$1 v=$2 minor=${2#v}; minor=${minor#*.}; minor=${minor%%.*}
  local staging=${v/v1./v0.}
  go mod init yonder.local/k8sbins >/dev/null 2>&1
  go mod edit -require="k8s.io/kubernetes@${v}"
  # k8s.io/kubernetes requires its staging repos at v0.0.0 and replaces them with ./staging; point them at
  # the published tags instead.
  local mods
  mods=$(go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  for m in $(awk '/^require \(/{f=1;next} f&&/^\)/{f=0} f&&$2=="v0.0.0"{print $1}' "$mods"); do
    [ "$m" = "k8s.io/sample-cli-plugin" ] && continue
    go mod edit -replace="${m}=${m}@${staging}"
  done
  local pkg=k8s.io/component-base/version
  go build -trimpath -o "$bin/" -ldflags "-s -w -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  local bin=$1 v=$2
  go mod init yonder.local/etcdbin >/dev/null 2>&1
  go mod edit -require="go.etcd.io/etcd/server/v3@${v}"
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}

build_capi() {
  local bin=$1 v=$2
  go mod init yonder.local/capibins >/dev/null 2>&1
  go mod edit -require="sigs.k8s.io/cluster-api@${v}" -require="sigs.k8s.io/cluster-api/api@${v}"
  local mods
  mods=$(go mod download -json "sigs.k8s.io/cluster-api@${v}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # cluster-api's own replace directives do not apply to us; copy the ones that point at versions.
  awk '/^replace /{print $2" "$5; next} /^replace \(/{f=1;next} f&&/^\)/{f=0} f&&$3=="=>"&&NF==5{print $1" "$4"@"$5}' "$mods" | \
    while read -r from to; do [ -n "$to" ] && go mod edit -replace="${from}=${to}"; done || true
  go mod edit -replace="sigs.k8s.io/cluster-api/api=sigs.k8s.io/cluster-api/api@${v}"
  local ld="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${v} -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
  go build -trimpath -ldflags "$ld" -o "$bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
  go build -trimpath -ldflags "$ld" -o "$bin/capi-manager" sigs.k8s.io/cluster-api/core
}

build_containerd() {
  local bin=$1 v=$2
  go mod init yonder.local/containerdbins >/dev/null 2>&1
  go mod edit -require="github.com/containerd/containerd/v2@${v}"
  local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=${v}"
  go build -trimpath -ldflags "$ld" -o "$bin/" github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
}

assemble() {
  mkdir -p "${BIN_DIR}"
  local c
  for c in "kubernetes-${KUBERNETES_VERSION}" "etcd-${ETCD_VERSION}" "capi-${CAPI_VERSION}" "containerd-${CONTAINERD_VERSION}"; do
    for f in "${BUILD_ROOT}/${c}/bin/"*; do ln -sf "$f" "${BIN_DIR}/$(basename "$f")"; done
  done
  touch "${BIN_DIR}/.complete"
}


# ---------------------------------------------------------------------------------------------------------
# Node rootfs for yonder-agent host tests (hostruntime). Separate from the binaries above: a debootstrap
# minbase bookworm with the packages below, from the apt mirror this machine is configured with, cached as
# a tar.zst keyed by suite + package list (~4.5 min cold, restores in seconds). Tests find it with
# `hack/test-bins.sh --rootfs-print` or YONDER_TEST_ROOTFS.
ROOTFS_SUITE=${ROOTFS_SUITE:-bookworm}
ROOTFS_PACKAGES=${ROOTFS_PACKAGES:-systemd,systemd-sysv,dbus,iproute2,ca-certificates,runc,containernetworking-plugins,iptables,kmod}
rootfs_archive() {
  local key
  key=$(printf '%s %s' "${ROOTFS_SUITE}" "${ROOTFS_PACKAGES}" | sha256sum | cut -c1-12)
  echo "${CACHE_ROOT}/rootfs/${ROOTFS_SUITE}-minbase-${key}.tar.zst"
}
build_rootfs() {
  local out; out=$(rootfs_archive)
  if [ -f "$out" ]; then echo "$out"; return 0; fi
  [ "$(id -u)" -eq 0 ] || { log "the rootfs build needs root (debootstrap)"; return 1; }
  command -v debootstrap >/dev/null || install_packages
  local mirror
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\) *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  local start=$SECONDS tmp="${out%.tar.zst}.tmp"
  log "rootfs: debootstrap --variant=minbase ${ROOTFS_SUITE} from ${mirror} with ${ROOTFS_PACKAGES} (~4.5 min cold)…"
  rm -rf "$tmp" && mkdir -p "$tmp/root"
  debootstrap --variant=minbase --include="${ROOTFS_PACKAGES}" "${ROOTFS_SUITE}" "$tmp/root" "$mirror" 2>&1 | \
    while IFS= read -r line; do case "$line" in I:\ Retriev*|I:\ Valid*) ;; *) log "rootfs: $line";; esac; done
  [ -x "$tmp/root/lib/systemd/systemd" ] || { log "rootfs: debootstrap failed (no systemd in the tree)"; return 1; }
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  log "rootfs: packing $(du -sm "$tmp/root" | cut -f1) MB as tar.zst…"
  tar -C "$tmp/root" --numeric-owner --xattrs -cf - . | zstd -q -T0 -3 -o "$tmp/rootfs.tar.zst"
  mv "$tmp/rootfs.tar.zst" "$out" && rm -rf "$tmp"
  log "rootfs: ready in $((SECONDS - start))s: $out ($(du -m "$out" | cut -f1) MB)"
  echo "$out"
}
# ---------------------------------------------------------------------------------------------------------
# Kernel for bare-metal PXE boots (infrastructure-baremetal e2e): Debian's linux-image-amd64 (apt-get download
# + dpkg -x, no install), cached as <cache>/metal-kernel/<package>/ with vmlinuz and the few modules a QEMU
# host needs before its agent runs (virtio NIC; the TPM TIS driver is built in). The e2e builds the initramfs
# itself (busybox-static + the static yonder-agent of the tree under test). Tests find it with
# `hack/test-bins.sh --metal-kernel-print` or YONDER_TEST_METAL_KERNEL.
METAL_KERNEL_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net"
metal_kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
build_metal_kernel() {
  local pkg; pkg=$(metal_kernel_pkg)
  [ -n "$pkg" ] || { log "metal kernel: apt-cache knows no linux-image-amd64 (apt-get update?)"; return 1; }
  local out="${CACHE_ROOT}/metal-kernel/${pkg}"
  if [ -f "$out/.complete" ]; then echo "$out"; return 0; fi
  local tmp="${out}.tmp"; rm -rf "$tmp" && mkdir -p "$tmp/dl" "$tmp/x" "$tmp/modules"
  log "metal kernel: apt-get download ${pkg}…"
  (cd "$tmp/dl" && apt-get download "$pkg" >/dev/null 2>&1) || { log "metal kernel: apt-get download ${pkg} failed"; return 1; }
  dpkg -x "$tmp/dl/"*.deb "$tmp/x"
  cp "$tmp/x/boot/vmlinuz-"* "$tmp/vmlinuz"
  local m f
  for m in $METAL_KERNEL_MODULES; do
    f=$(find "$tmp/x/lib/modules" -name "${m}.ko*" | head -1)
    [ -n "$f" ] || { log "metal kernel: module ${m} missing in ${pkg}"; return 1; }
    case "$f" in *.ko.xz) xz -dc "$f" > "$tmp/modules/${m}.ko" ;; *.ko.zst) zstd -qdc "$f" > "$tmp/modules/${m}.ko" ;; *) cp "$f" "$tmp/modules/${m}.ko" ;; esac
  done
  echo "$METAL_KERNEL_MODULES" > "$tmp/modules/order"
  rm -rf "$tmp/dl" "$tmp/x" && touch "$tmp/.complete"
  rm -rf "$out" && mv "$tmp" "$out"
  log "metal kernel: ready in $out"
  echo "$out"
}
# ---------------------------------------------------------------------------------------------------------

case "${1:-}" in
  --rootfs) build_rootfs; exit $? ;;
  --rootfs-print)
    f=$(rootfs_archive); [ -f "$f" ] || { echo "node rootfs not built: run hack/test-bins.sh --rootfs" >&2; exit 1; }
    echo "$f"; exit 0 ;;
  --print)
    [ -f "${BIN_DIR}/.complete" ] || { echo "test binaries not built: run make test-bins" >&2; exit 1; }
    echo "${BIN_DIR}"; exit 0 ;;
  --packages) install_packages; exit $? ;;
  --metal-kernel) build_metal_kernel; exit $? ;;
  --metal-kernel-print)
    d="${CACHE_ROOT}/metal-kernel/$(metal_kernel_pkg)"; [ -f "$d/.complete" ] || { echo "metal kernel not fetched: run hack/test-bins.sh --metal-kernel" >&2; exit 1; }
    echo "$d"; exit 0 ;;
esac

if [ -f "${BIN_DIR}/.complete" ] && [ "${1:-}" != "--force" ]; then
  install_packages
  build_rootfs >/dev/null
  build_metal_kernel >/dev/null
  echo "${BIN_DIR}"; exit 0
fi

total=$SECONDS
install_packages
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
build_component etcd "${ETCD_VERSION}" build_etcd
build_component capi "${CAPI_VERSION}" build_capi
build_component kubernetes "${KUBERNETES_VERSION}" build_kubernetes
build_component containerd "${CONTAINERD_VERSION}" build_containerd
assemble
build_rootfs >/dev/null
build_metal_kernel >/dev/null
log "all test binaries and the node rootfs ready in ${BIN_DIR} ($((SECONDS - total))s)"
echo "${BIN_DIR}"
