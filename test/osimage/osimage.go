// Package osimage builds a real cloud image for the bare-metal e2e: a bootable Debian bookworm (amd64)
// with systemd, cloud-init and Debian's kernel, as a raw disk and its qcow2 copy. The layout is what
// cloud images have: an MBR with extlinux's boot code (SeaBIOS boots it), one active ext4 root partition
// from 1 MiB to the image's end holding /boot/extlinux, and no root password. cloud-init reads only the
// ConfigDrive datasource (then None), so a host provisioned with the image runs the user data of the
// config-2 drive the provisioning ramdisk adds after the image, and nothing probes the network for other
// clouds' metadata services. systemd-networkd leases an address on every wired NIC (cloud-init writes
// its own configuration first when the drive has network_data.json).
//
// The root filesystem comes from debootstrap (--variant=minbase, only the packages the image needs) from
// the Debian mirror apt on this machine uses; mkfs.ext4 -d writes it straight into the disk file at the
// partition's offset, and extlinux is installed through a loop device mapping that partition (this kernel
// scans no MBR partitions). Cached builds once per machine; a cold build takes minutes.
//
// Options may add packages, files and enabled units on top (a variant, variant.go), as image-builder makes
// a node image from a cloud image: test/kubeadm's node image is one.
package osimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/yonder-dev/yonder/test/cachedir"
)

// File names Build writes into its directory.
const (
	RawFile      = "debian-cloud.raw"
	QCOW2File    = "debian-cloud.qcow2"
	PackagesFile = "packages.txt"
)

// Suite is the Debian release the image is built from.
const Suite = "bookworm"

// RootLabel is the root filesystem's label.
const RootLabel = "cloudimg-rootfs"

// Packages debootstrap installs on top of minbase: the kernel (its initramfs-tools and udev come as
// dependencies), systemd as init, cloud-init, extlinux for the boot sector, iproute2 (cloud-init's
// networkd renderer needs `ip`) and dbus (systemd-hostnamed, systemd-logind). Nothing recommended.
// python3-cffi-backend is named because debootstrap resolves no virtual packages: python3-cryptography
// (cloud-init → python3-oauthlib) depends on python3-cffi-backend-api-min, which only it provides, and
// without it cloud-init stays unconfigured and debootstrap fails.
//
// The rest is what Debian's own cloud images carry and a Yonder node needs from its host OS (the image
// requirements docs/agent.md lists): cloud-guest-utils (growpart: cloud-init grows the root partition
// into the disk at first boot, so the agent's state has room), curl and ca-certificates (YonderConfig's
// installer fetches the agent), systemd-container (systemd-nspawn and machined, which run the node).
var Packages = []string{"linux-image-amd64", "systemd-sysv", "udev", "dbus", "cloud-init", "python3-cffi-backend", "extlinux", "iproute2",
	"cloud-guest-utils", "curl", "ca-certificates", "systemd-container"}

// partitionStart is the root partition's offset: 1 MiB, as partitioning tools align it.
const partitionStart = 1 << 20

const (
	defaultSizeMiB = 1536
	// minSizeMiB holds the root filesystem with room to spare (it is ~700 MB).
	minSizeMiB = 1024
	maxSizeMiB = 8192
)

// Options shape the image.
type Options struct {
	// SizeMiB of the raw image (default 1536, 1024 to 8192): the root partition fills it after the first MiB.
	SizeMiB int
	// Mirror is the Debian archive to bootstrap from (default: the first URI apt's sources on this machine
	// use for bookworm's main component).
	Mirror string
	// KernelArgs are appended to the kernel command line.
	KernelArgs string

	// ExtraPackages are Debian packages (bookworm's main component) installed on top of Packages, with
	// what they depend on and nothing they recommend. debootstrap installs them with Packages, so the tree
	// cached for debootstrap is one per package set.
	ExtraPackages []string
	// Files are written into the image after its configuration (so they win over the files the image is
	// configured with), owned by root, with missing parent directories created 0755. Their content is
	// part of the image's cache key: a changed Source file builds a new image.
	Files []File
	// EnabledUnits are systemd units (file names: "containerd.service") enabled as `systemctl enable`
	// does for a unit with WantedBy=multi-user.target. Each must be in /etc/systemd/system (Files can put
	// it there) or /lib/systemd/system of the image.
	EnabledUnits []string
}

// Image is a built disk image.
type Image struct {
	// Raw is the raw image's path (a sparse file), RawSize its length in bytes.
	Raw     string `json:"raw"`
	RawSize int64  `json:"rawSize"`
	// QCOW2 is the same disk converted with `qemu-img convert -O qcow2`, with its hex SHA-256 and length.
	QCOW2       string `json:"qcow2"`
	QCOW2SHA256 string `json:"qcow2SHA256"`
	QCOW2Size   int64  `json:"qcow2Size"`
	// Packages is the path of the image's package list (`dpkg-query -W`: name and version per line): the
	// versions the mirror served when the image was built.
	Packages string `json:"packages"`
	// RootUUID is the root filesystem's UUID (the kernel command line's root=UUID=…).
	RootUUID string `json:"rootUUID"`
	// BuildSeconds is how long the build took.
	BuildSeconds float64 `json:"buildSeconds"`
}

func (o Options) withDefaults() (Options, error) {
	if o.SizeMiB == 0 {
		o.SizeMiB = defaultSizeMiB
	}
	if o.SizeMiB < minSizeMiB || o.SizeMiB > maxSizeMiB {
		return o, fmt.Errorf("osimage: SizeMiB %d is outside %d..%d", o.SizeMiB, minSizeMiB, maxSizeMiB)
	}
	if strings.ContainsAny(o.KernelArgs, "\n\r") {
		return o, errors.New("osimage: KernelArgs must be one line (it goes into extlinux.conf's APPEND)")
	}
	if err := o.validateVariant(); err != nil {
		return o, err
	}
	if o.Mirror == "" {
		m, err := aptMirror("/etc/apt")
		if err != nil {
			return o, err
		}
		o.Mirror = m
	}
	if !strings.HasPrefix(o.Mirror, "http://") && !strings.HasPrefix(o.Mirror, "https://") && !strings.HasPrefix(o.Mirror, "file:/") {
		return o, fmt.Errorf("osimage: mirror %q is not an http(s):// or file:/ URL", o.Mirror)
	}
	return o, nil
}

// Build writes RawFile, QCOW2File and PackagesFile into dir (which must exist, on a filesystem that keeps
// device nodes and ownership: debootstrap's tree is made there) and returns them. It runs as root.
func Build(ctx context.Context, dir string, opts Options) (Image, error) {
	return build(ctx, dir, opts, "")
}

// build is Build with a cache of debootstrap's tree: when baseDir is set, the tree is restored from
// baseDir/<base key>.tar, or bootstrapped and saved there, so changing how the image is configured does
// not download and install every package again.
func build(ctx context.Context, dir string, opts Options, baseDir string) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	for _, tool := range []string{"debootstrap", "mkfs.ext4", "sfdisk", "losetup", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Image{}, fmt.Errorf("osimage: %s is missing (Debian packages debootstrap, e2fsprogs, fdisk, mount, qemu-utils): %w", tool, err)
		}
	}
	started := time.Now()
	work, err := os.MkdirTemp(dir, ".osimage-")
	if err != nil {
		return Image{}, fmt.Errorf("failed to create the build directory: %w", err)
	}
	// Whatever a failed debootstrap left mounted in its tree (proc, sys, dev/pts) goes before the tree does.
	defer func() {
		unmountUnder(work)
		_ = os.RemoveAll(work)
	}()

	root := filepath.Join(work, "root")
	if err := bootstrapCached(ctx, o, root, baseDir); err != nil {
		return Image{}, err
	}
	variant, err := variantKey(o)
	if err != nil {
		return Image{}, err
	}
	uuid := rootUUID(o, variant)
	if err := configure(root, o, uuid); err != nil {
		return Image{}, err
	}
	if err := applyVariant(root, o); err != nil {
		return Image{}, err
	}
	img := Image{Raw: filepath.Join(dir, RawFile), QCOW2: filepath.Join(dir, QCOW2File), Packages: filepath.Join(dir, PackagesFile), RootUUID: uuid}
	if err := writePackageList(ctx, root, img.Packages); err != nil {
		return Image{}, err
	}
	if err := writeDisk(ctx, o, root, uuid, img.Raw); err != nil {
		return Image{}, err
	}
	// A stale copy from an earlier build must not survive a failed conversion.
	_ = os.Remove(img.QCOW2)
	if out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", img.Raw, img.QCOW2).CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("failed to convert the image to qcow2 (qemu-img from qemu-utils): %w: %s", err, out)
	}
	st, err := os.Stat(img.Raw)
	if err != nil {
		return Image{}, err
	}
	img.RawSize = st.Size()
	if img.QCOW2SHA256, img.QCOW2Size, err = digest(img.QCOW2); err != nil {
		return Image{}, err
	}
	img.BuildSeconds = time.Since(started).Seconds()
	return img, nil
}

// bootstrap runs debootstrap into root. debootstrap mounts proc and sys inside the tree while packages
// configure; Build's deferred unmountUnder catches what a failure leaves.
func bootstrap(ctx context.Context, o Options, root string) error {
	args := []string{"--variant=minbase", "--arch=amd64", "--components=main", "--include=" + strings.Join(slices.Concat(Packages, o.ExtraPackages), ","), Suite, root, o.Mirror}
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// debootstrap's own log says which package failed.
		logText, _ := os.ReadFile(filepath.Join(root, "debootstrap", "debootstrap.log")) //nolint:gosec // Build's own tree
		return fmt.Errorf("failed to debootstrap %s from %s: %w: %s\n%s", Suite, o.Mirror, err, tail(out, 4000), tail(logText, 4000))
	}
	return nil
}

// bootstrapCached restores root from baseDir's tar of the same inputs, or bootstraps it and stores the
// tar (written beside, then renamed: concurrent builds store identical files).
func bootstrapCached(ctx context.Context, o Options, root, baseDir string) error {
	if baseDir == "" {
		return bootstrap(ctx, o, root)
	}
	key, err := baseKey(o)
	if err != nil {
		return err
	}
	tarball := filepath.Join(baseDir, key+".tar")
	if _, err := os.Stat(tarball); err == nil {
		if err := os.MkdirAll(root, 0o755); err != nil { //nolint:gosec // the image's root
			return err
		}
		if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", tarball, "-C", root).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to restore the debootstrapped tree from %s: %w: %s", tarball, err, tail(out, 2000))
		}
		return nil
	}
	if err := bootstrap(ctx, o, root); err != nil {
		return err
	}
	if err := os.MkdirAll(baseDir, 0o755); err != nil { //nolint:gosec // a cache of test images
		return err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", tarball, os.Getpid())
	defer func() { _ = os.Remove(tmp) }()
	if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-cf", tmp, "-C", root, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("failed to store the debootstrapped tree: %w: %s", err, tail(out, 2000))
	}
	return os.Rename(tmp, tarball)
}

// baseKey hashes what debootstrap's tree depends on: suite, mirror, packages and debootstrap itself.
// ExtraPackages are hashed only when there are any, so the default image's tree keeps its key.
func baseKey(o Options) (string, error) {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%s\x00", Suite, o.Mirror, strings.Join(Packages, ","))
	if len(o.ExtraPackages) > 0 {
		_, _ = fmt.Fprintf(h, "extra\x00%s\x00", strings.Join(o.ExtraPackages, ","))
	}
	for _, f := range []string{"/usr/sbin/debootstrap", "/usr/share/debootstrap/functions", "/usr/share/debootstrap/scripts/" + Suite} {
		b, err := os.ReadFile(f) //nolint:gosec // debootstrap's own files
		if err != nil {
			return "", fmt.Errorf("failed to read %s (Debian package debootstrap): %w", f, err)
		}
		_, _ = h.Write(b)
	}
	return "debootstrap-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// rootUUID derives the root filesystem's UUID from the options and the variant's key (variantKey), so the
// same inputs give the same image and two variants do not share a UUID (a machine with both disks would
// mount either as its root). The default image's UUID hashes no variant key: it is what it always was.
func rootUUID(o Options, variant string) string {
	in := fmt.Sprintf("osimage\x00%s\x00%d\x00%s", o.Mirror, o.SizeMiB, o.KernelArgs)
	if variant != "" {
		in += "\x00" + variant
	}
	s := sha256.Sum256([]byte(in))
	s[6] = s[6]&0x0f | 0x40 // version 4
	s[8] = s[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(s[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func writePackageList(ctx context.Context, root, dst string) error {
	out, err := exec.CommandContext(ctx, "dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"), "-W", "-f", "${Package} ${Version}\n").Output()
	if err != nil {
		return fmt.Errorf("failed to list the image's packages: %w", err)
	}
	return os.WriteFile(dst, out, 0o644) //nolint:gosec // a package list
}

// writeDisk lays out the raw disk: an MBR partition table (sfdisk) with one active Linux partition from
// 1 MiB to the end, the ext4 root filesystem written into it from the tree (mkfs.ext4 -d at that offset),
// extlinux's boot sector and ldlinux files installed into the mounted partition, and extlinux's mbr.bin
// as the disk's boot code (the first 440 bytes, before the disk signature and the table).
func writeDisk(ctx context.Context, o Options, root, uuid, raw string) (rerr error) {
	tmp := raw + ".tmp"
	f, err := os.Create(tmp) //nolint:gosec // the caller's output directory
	if err != nil {
		return fmt.Errorf("failed to create the disk image: %w", err)
	}
	defer func() {
		_ = f.Close()
		if rerr != nil {
			_ = os.Remove(tmp)
		}
	}()
	size := int64(o.SizeMiB) << 20
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("failed to size the disk image: %w", err)
	}
	sf := exec.CommandContext(ctx, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", tmp)
	sf.Stdin = strings.NewReader(fmt.Sprintf("label: dos\nlabel-id: 0x%s\nstart=%d, type=83, bootable\n", uuid[:8], partitionStart/512))
	if out, err := sf.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to partition the disk image (sfdisk from fdisk): %w: %s", err, out)
	}
	// 64bit off: extlinux reads the filesystem itself and Debian's syslinux 6.04 does not boot from a 64bit ext4.
	mkfs := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", RootLabel, "-U", uuid, "-O", "^64bit",
		"-E", fmt.Sprintf("offset=%d,root_owner=0:0", partitionStart), "-d", root, tmp, fmt.Sprintf("%dk", (size-partitionStart)>>10))
	mkfs.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME="+strconv.FormatInt(time.Now().Unix(), 10))
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to write the root filesystem (mkfs.ext4 -d from e2fsprogs): %w: %s", err, out)
	}
	if err := installExtlinux(ctx, root, tmp, size); err != nil {
		return err
	}
	mbr, err := os.ReadFile(filepath.Join(root, "usr/lib/EXTLINUX/mbr.bin")) //nolint:gosec // Build's own tree
	if err != nil {
		return fmt.Errorf("failed to read extlinux's MBR code from the image: %w", err)
	}
	if len(mbr) < 440 {
		return fmt.Errorf("extlinux's mbr.bin has %d bytes, expected at least 440", len(mbr))
	}
	if _, err := f.WriteAt(mbr[:440], 0); err != nil {
		return fmt.Errorf("failed to write the disk image's MBR: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write the disk image: %w", err)
	}
	return os.Rename(tmp, raw)
}

// installExtlinux maps the root partition of the disk file with a loop device (offset and size limit:
// no partition scanning needed), mounts it and runs the image's own extlinux on it — with the image's
// dynamic loader and libraries, so the host's C library does not matter. The loop device is detached and
// the mount removed whatever happens.
func installExtlinux(ctx context.Context, root, disk string, size int64) (rerr error) {
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--offset", strconv.Itoa(partitionStart),
		"--sizelimit", strconv.FormatInt(size-partitionStart, 10), disk).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to attach the root partition to a loop device: %w: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer func() {
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil && rerr == nil {
			rerr = fmt.Errorf("failed to detach %s: %w: %s", loop, err, out)
		}
	}()
	mnt := filepath.Join(filepath.Dir(root), "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil { //nolint:gosec // Build's own directory
		return err
	}
	if err := syscall.Mount(loop, mnt, "ext4", 0, ""); err != nil {
		return fmt.Errorf("failed to mount the root partition %s: %w", loop, err)
	}
	defer func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
			if rerr == nil {
				rerr = fmt.Errorf("failed to unmount the root partition: %w", err)
			}
		}
	}()
	ld := filepath.Join(root, "lib64", "ld-linux-x86-64.so.2")
	cmd := exec.CommandContext(ctx, ld, "--library-path", filepath.Join(root, "lib", "x86_64-linux-gnu"),
		filepath.Join(root, "usr", "bin", "extlinux"), "--install", filepath.Join(mnt, "boot", "extlinux"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to install extlinux into the root partition: %w: %s", err, out)
	}
	return nil
}

// unmountUnder detaches every mount point at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPoint(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range slices.Compact(points) {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// unescapeMountPoint undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPoint(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func digest(path string) (string, int64, error) {
	f, err := os.Open(path) //nolint:gosec // an image Build wrote
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("failed to hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Cached returns an image built once per machine: under $YONDER_CACHE_DIR (default ~/.cache/yonder)
// osimage/<key>/, where the key hashes every input Build controls (the options and mirror, the package
// list, every file the image is configured with, debootstrap's script), so a changed input builds anew
// and tests in different processes share one build. The package versions are the mirror's at build time
// (PackagesFile lists them). A directory appears only complete (built beside and renamed). debootstrap's
// tree is kept as osimage/base/<its key>.tar, so a change to the image's configuration alone rebuilds in
// a minute instead of bootstrapping again.
func Cached(ctx context.Context, opts Options) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	key, err := cacheKey(o)
	if err != nil {
		return Image{}, err
	}
	root, err := cachedir.Root()
	if err != nil {
		return Image{}, err
	}
	parent := filepath.Join(root, "osimage")
	final := filepath.Join(parent, key)
	if img, err := readImage(final); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil { //nolint:gosec // a cache of test images
		return Image{}, fmt.Errorf("failed to create the OS image cache: %w", err)
	}
	// One build per key at a time: on a machine without the image, the image's own test and the bare-metal
	// e2e (two lanes of make test) would otherwise each run a debootstrap of minutes, starving each other.
	unlock, err := cachedir.Lock(ctx, filepath.Join(parent, key+".lock"))
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	if img, err := readImage(final); err == nil {
		return img, nil // built by the process that held the lock
	}
	tmp, err := os.MkdirTemp(parent, key+".tmp-")
	if err != nil {
		return Image{}, fmt.Errorf("failed to create the OS image cache: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := os.Chmod(tmp, 0o755); err != nil { //nolint:gosec // a cache of test images
		return Image{}, err
	}
	img, err := build(ctx, tmp, o, filepath.Join(parent, "base"))
	if err != nil {
		return Image{}, err
	}
	img.Raw, img.QCOW2, img.Packages = filepath.Join(final, RawFile), filepath.Join(final, QCOW2File), filepath.Join(final, PackagesFile)
	b, err := json.Marshal(img)
	if err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), b, 0o644); err != nil { //nolint:gosec // cache metadata
		return Image{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process finished the same build first: use its image.
		if img, rerr := readImage(final); rerr == nil {
			return img, nil
		}
		return Image{}, fmt.Errorf("failed to store the OS image in its cache: %w", err)
	}
	return img, nil
}

func readImage(dir string) (Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, "image.json")) //nolint:gosec // the cache's own file
	if err != nil {
		return Image{}, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return Image{}, err
	}
	for _, f := range []string{img.Raw, img.QCOW2, img.Packages} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, err
		}
	}
	return img, nil
}

func cacheKey(o Options) (string, error) {
	h := sha256.New()
	// A hash.Hash's Write never fails.
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%s\x00%s\x00%d\x00", Suite, o.Mirror, o.SizeMiB, o.KernelArgs, strings.Join(Packages, ","), RootLabel, partitionStart)
	variant, err := variantKey(o)
	if err != nil {
		return "", err
	}
	files := imageFiles(o, rootUUID(o, variant), bootFiles{kernel: "K", initrd: "I"})
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		_, _ = fmt.Fprintf(h, "%s\x00%s\x00", name, files[name])
	}
	_, _ = fmt.Fprintf(h, "%s\x00", strings.Join(maskedUnits, ","))
	// The debootstrapped tree's own key covers debootstrap's program and its script for the suite.
	base, err := baseKey(o)
	if err != nil {
		return "", err
	}
	_, _ = h.Write([]byte(base))
	// The variant (empty for the default image, whose key stays as it was) comes last.
	_, _ = h.Write([]byte(variant))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
