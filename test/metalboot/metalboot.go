// Package metalboot builds the provisioning boot of a bare-metal test host: Debian's kernel
// (`hack/test-bins.sh --metal-kernel`, cached outside the tree) and an initramfs of busybox-static, the
// kernel's virtio modules and a static yonder-agent. The initramfs leases an address with udhcpc, runs
// `yonder-agent attest` with the VM's TPM and, when the boot server released its instructions, runs
// `yonder-agent provision` (write the image and config drive, clean the disks, or nothing for a live
// image) and keeps running (it prints marker lines on the serial console); refused, it powers itself off.
//
// The files are named as yonder-metal-manager's defaults expect them (--boot-kernel vmlinuz,
// --boot-initrd yonder-initrd.img), so a manager whose --boot-artifacts-dir is the directory serves them
// without further flags. Used by the e2e stack (test/stack) and with it the lab.
package metalboot

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/yonder-dev/yonder/pkg/sharedlibs"
	"github.com/yonder-dev/yonder/test/gobuild"

	"github.com/yonder-dev/yonder/test/testbins"
)

// Kernel and Initrd are the artifact names Build writes (the manager's defaults).
const (
	Kernel = "vmlinuz"
	Initrd = "yonder-initrd.img"
)

// AttestedMarker starts the console line the initramfs prints once it received its bootstrap data
// (AttestedLine).
const AttestedMarker = "YONDER: attested, "

// AttestedLine is the console line the initramfs prints once it received exactly data as its bootstrap
// data: its size and SHA-256, so that a test checks what arrived by content (the digest reveals nothing of
// the data's secrets).
func AttestedLine(data []byte) string {
	sum := sha256.Sum256(data)
	return fmt.Sprintf("%s%d bytes of bootstrap data, sha256 %s", AttestedMarker, len(data), hex.EncodeToString(sum[:]))
}

// ProvisionedMarker and ProvisionFailedMarker start the console line with `yonder-agent provision`'s
// output: the image and config drive written, the disks cleaned, or "action live".
const (
	// ServedKeyMarker is what `yonder-agent attest` prints when it verifies with the key the boot server
	// served beside a generic image (one built without a key).
	ServedKeyMarker       = "verifying with the provider key the boot server served beside the image"
	ProvisionedMarker     = "YONDER: provision done: "
	ProvisionFailedMarker = "YONDER: provision failed: "
)

// initScript is the initramfs's /init: drivers for the virtio NIC (the TPM TIS driver is built into
// Debian's kernel), DHCP with busybox udhcpc, then `yonder-agent attest` with the VM's TPM.
//
//nolint:dupword // "mount -t proc proc" names the filesystem type, then the device
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
# GNU tar, curl, nsenter and systemd-nspawn (/usr/bin) before busybox's applets of the same names.
export PATH=/usr/bin:/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
mkdir -p /run/yonder /tmp /var/log /var/lib/yonder /dev/pts /dev/shm
echo "YONDER: initramfs up"
# diskless_prep readies the ramdisk to be the Node's host (action run-node, customDeploy yonder-diskless):
# the node modules (kube-proxy's netfilter, the bridge, overlayfs, VXLAN, WireGuard; loaded on demand too),
# cgroup v2 with its controllers for systemd-nspawn and the kubelet, and the agent's state directory in
# memory, as large as the memory (tmpfs takes only what is written).
diskless_prep() {
  echo "YONDER: diskless: loading the node's kernel modules, mounting cgroup2 and the state tmpfs"
  echo /bin/modprobe > /proc/sys/kernel/modprobe
  kver=$(uname -r)
  modprobe crc32c_generic
  for m in $(cat /lib/modules/$kver/yonder-node-modules); do modprobe $m 2>/dev/null || echo "YONDER: diskless: module $m did not load"; done
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  for c in cpu cpuset io memory pids; do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; done
  mkdir -p /sys/fs/cgroup/init && echo $$ > /sys/fs/cgroup/init/cgroup.procs
  mount -t bpf bpf /sys/fs/bpf
  mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm
  mount -t tmpfs -o size=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)k,mode=0755 yonder-state /var/lib/yonder
}
# Modules in dependency order; further passes catch an order file written before a dependency was added.
for pass in 1 2 3; do
  for m in $(cat /lib/modules/order); do grep -q "^$m " /proc/modules || insmod /lib/modules/$m.ko 2>/dev/null; done
done
ip link set lo up
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.2; i=$((i+1)); done
ip link set eth0 up
udhcpc -i eth0 -s /etc/udhcpc.script -q -n -t 10 -T 2 || echo "YONDER: no DHCP lease"
# An image built knowingly without the provider's key says so by a file; any other image refuses unsigned data.
attest_flags=""; [ -e /etc/yonder/insecure-unsigned ] && attest_flags="--insecure-unsigned"
if /bin/yonder-agent attest $attest_flags --tpm /dev/tpmrm0 --output /run/yonder/bootstrap-data --instructions /run/yonder/instructions.json; then
  echo "` + AttestedMarker + `$(wc -c < /run/yonder/bootstrap-data) bytes of bootstrap data, sha256 $(sha256sum < /run/yonder/bootstrap-data | cut -d' ' -f1)"
  grep -q '"action": *"run-node"' /run/yonder/instructions.json && diskless_prep
  # Write the image and its config drive, clean the disks, or run the Node from memory, as the
  # instructions say, and report; the controller then boots the host from its disk, powers it off, or
  # counts it provisioned. A live image needs nothing. The output reaches the console as it comes.
  ( /bin/yonder-agent provision --instructions /run/yonder/instructions.json; echo $? > /run/yonder/provision.rc ) 2>&1 | tee /run/yonder/provision.log
  if [ "$(cat /run/yonder/provision.rc)" = 0 ]; then
    echo "` + ProvisionedMarker + `$(tr -d '\n' < /run/yonder/provision.log | tail -c 1500)"
  else
    echo "` + ProvisionFailedMarker + `$(tr -d '\n' < /run/yonder/provision.log | tail -c 1500)"
  fi
  while true; do sleep 3600; done
fi
echo "YONDER: attestation failed"
poweroff -f
`

const udhcpcScript = `#!/bin/sh
case "$1" in
bound|renew)
  ip addr flush dev "$interface"
  ip addr add "$ip/$mask" dev "$interface"
  [ -n "$router" ] && ip route add default via "$router"
  if [ -n "$dns" ]; then : > /etc/resolv.conf; for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done; fi
  echo "YONDER: leased $ip/$mask" ;;
esac
`

// KernelDir returns the directory of the cached Debian kernel and modules: $YONDER_TEST_METAL_KERNEL, else
// what `hack/test-bins.sh --metal-kernel-print` names.
func KernelDir(ctx context.Context) (string, error) {
	if d := os.Getenv("YONDER_TEST_METAL_KERNEL"); d != "" {
		return d, nil
	}
	out, err := exec.CommandContext(ctx, filepath.Join(testbins.RepoRoot(), "hack", "test-bins.sh"), "--metal-kernel-print").Output()
	if err != nil {
		return "", fmt.Errorf("failed to find the bare-metal boot kernel (run `hack/test-bins.sh --metal-kernel`): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Options are what Build puts into the boot image besides the kernel, busybox and the agent.
type Options struct {
	// ServerKey is the provider's Ed25519 public key (PEM, GenerateSigningKey): written to
	// /etc/yonder/boot-server.pub, where `yonder-agent attest` reads it and refuses unsigned data.
	// Without it the image is generic: the agent verifies with the key the boot server serves beside it
	// (a manager with --boot-signing-key), and refuses to run when there is none.
	ServerKey []byte
	// InsecureUnsigned builds an image whose agent, finding no key at all, runs unsigned instructions
	// (for a manager with --insecure-unsigned-boot-data).
	InsecureUnsigned bool
}

// GenerateSigningKey writes a new Ed25519 private key (PEM PKCS#8, mode 0600) to dir/boot-signing-key.pem,
// what --boot-signing-key reads, and returns its path and the public key (PEM) for Options.ServerKey.
func GenerateSigningKey(dir string) (keyFile string, publicPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", nil, fmt.Errorf("failed to generate the boot signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", nil, fmt.Errorf("failed to encode the boot signing key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", nil, fmt.Errorf("failed to encode the boot signing key: %w", err)
	}
	keyFile = filepath.Join(dir, "boot-signing-key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", nil, fmt.Errorf("failed to write the boot signing key: %w", err)
	}
	return keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// Build writes Kernel and Initrd into dir. It builds a static, stripped yonder-agent from this checkout.
func Build(ctx context.Context, dir string, opts ...Options) error {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	kdir, err := KernelDir(ctx)
	if err != nil {
		return err
	}
	for _, need := range []string{"/bin/busybox", filepath.Join(kdir, "vmlinuz")} {
		if _, err := os.Stat(need); err != nil {
			return fmt.Errorf("failed to find %s (run `hack/test-bins.sh --packages --metal-kernel`): %w", need, err)
		}
	}
	root, err := os.MkdirTemp("", "yonder-initramfs-")
	if err != nil {
		return fmt.Errorf("failed to create the initramfs tree: %w", err)
	}
	defer func() { _ = os.RemoveAll(root) }()
	for _, d := range []string{"bin", "etc/yonder", "lib/modules", "proc", "sys", "dev", "run", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil { //nolint:gosec // an initramfs tree
			return err
		}
	}
	if err := gobuild.Build(ctx, filepath.Join(root, "bin", "yonder-agent"), gobuild.Options{Static: true, Strip: true}, "./hostruntime/cmd/yonder-agent"); err != nil {
		return fmt.Errorf("failed to build the static yonder-agent for the initramfs: %w", err)
	}
	copies := map[string]string{"/bin/busybox": filepath.Join(root, "bin", "busybox")}
	mods, err := filepath.Glob(filepath.Join(kdir, "modules", "*"))
	if err != nil {
		return err
	}
	for _, m := range mods {
		copies[m] = filepath.Join(root, "lib", "modules", filepath.Base(m))
	}
	copies[filepath.Join(kdir, "vmlinuz")] = filepath.Join(dir, Kernel)
	for from, to := range copies {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(to, "busybox") {
			mode = 0o755
		}
		if err := copyFile(from, to, mode); err != nil {
			return err
		}
	}
	if err := addNodeHost(ctx, root, kdir); err != nil {
		return err
	}
	files := map[string]string{"init": initScript, "etc/udhcpc.script": udhcpcScript}
	if o.ServerKey != nil {
		files["etc/yonder/boot-server.pub"] = string(o.ServerKey)
	}
	if o.InsecureUnsigned {
		files["etc/yonder/insecure-unsigned"] = "the agent runs unsigned instructions when no provider key is found\n"
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o755); err != nil { //nolint:gosec // executables of the initramfs
			return fmt.Errorf("failed to write %s of the initramfs: %w", name, err)
		}
	}
	return writeInitramfs(root, filepath.Join(dir, Initrd))
}

// nodeHostTools are the host programs a diskless Node needs besides busybox, each with the shared
// libraries it loads: the agent's machine (systemd-nspawn, nsenter), its node image extraction (GNU tar:
// --xattrs, which busybox tar lacks) and the bootstrap data's agent installer (curl: a CA file and a
// registry's token exchange, which busybox wget lacks).
var nodeHostTools = []string{"systemd-nspawn", "nsenter", "tar", "curl"}

// nodeHostFiles are the files the tools expect: os-release (systemd-nspawn mounts it into the machine),
// the users and groups chown and the agent resolve, and the CA bundle curl trusts besides a given CA.
var nodeHostFiles = map[string]string{ //nolint:gosec // passwd names root with no password ("x"): no credential
	"usr/lib/os-release": "NAME=\"Yonder provisioning ramdisk\"\nID=yonder-ramdisk\n",
	"etc/passwd":         "root:x:0:0:root:/root:/bin/sh\n",
	"etc/group":          "root:x:0:\n",
	"etc/hosts":          "127.0.0.1 localhost\n::1 localhost\n",
}

// addNodeHost puts what a diskless Node needs of its host (customDeploy yonder-diskless) into the tree at
// root: nodeHostTools from this build host with their ldd closures (at the paths ldd names, which the
// loader searches), nodeHostFiles, the build host's CA bundle when it has one, and the node kernel
// modules of the cached kernel (node/, `hack/test-bins.sh --metal-kernel`). A provisioning boot that
// writes an image carries them unused; the init loads the modules only for action run-node.
func addNodeHost(ctx context.Context, root, kdir string) error {
	libs := map[string]bool{}
	for _, tool := range nodeHostTools {
		bin, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("the diskless node needs %s in the boot image (install it: hack/test-bins.sh --packages): %w", tool, err)
		}
		if tool == "tar" {
			if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err != nil || !strings.Contains(string(out), "GNU tar") {
				return fmt.Errorf("%s is not GNU tar, whose --xattrs the agent's node image extraction uses", bin)
			}
		}
		if err := copyFile(bin, filepath.Join(root, "usr", "bin", tool), 0o755); err != nil {
			return err
		}
		deps, err := sharedlibs.Closure(bin)
		if err != nil {
			return err
		}
		for _, lib := range deps {
			libs[lib] = true
		}
	}
	for lib := range libs {
		if err := copyFile(lib, filepath.Join(root, lib), 0o755); err != nil {
			return err
		}
	}
	for name, text := range nodeHostFiles {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil { //nolint:gosec // an initramfs tree
			return err
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil { //nolint:gosec // world-readable system files
			return err
		}
	}
	const caBundle = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(caBundle); err == nil {
		if err := copyFile(caBundle, filepath.Join(root, caBundle), 0o644); err != nil {
			return err
		}
	}
	node := filepath.Join(kdir, "node", "lib", "modules")
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("the cached kernel has no node modules (run `hack/test-bins.sh --metal-kernel` again): %w", err)
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", node+"/.", filepath.Join(root, "lib", "modules")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to copy the node modules: %s: %w", strings.TrimSpace(string(out)), err)
	}
	return nil
}

// copyFile copies the file at from (following symlinks) to the path to with mode, creating its directory:
// the cached kernel files, busybox, the diskless host tools and their libraries, the CA bundle.
func copyFile(from, to string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil { //nolint:gosec // an initramfs tree, or the boot artifacts directory
		return err
	}
	b, err := os.ReadFile(from) //nolint:gosec // files of this build host that Build names
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", from, err)
	}
	if err := os.WriteFile(to, b, mode); err != nil { //nolint:gosec // paths Build composed from its own directories
		return fmt.Errorf("failed to write %s: %w", to, err)
	}
	return nil
}
