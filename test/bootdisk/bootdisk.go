// Package bootdisk builds the user image of the bare-metal e2e: a small raw disk image (and its qcow2 copy)
// that SeaBIOS boots — syslinux's MBR, one bootable FAT partition holding syslinux, Debian's kernel
// (test/metalboot's KernelDir) and an initramfs of busybox-static and the kernel's virtio-blk, FAT and
// ISO 9660 modules. The provisioning ramdisk writes it to a host's disk and appends a config drive
// (cloud-init's ConfigDrive layout: a FAT or ISO 9660 partition labelled config-2 with
// openstack/latest/user_data and meta_data.json); booted from disk, the image's /init lists its virtio
// disks with their serials, finds that partition and prints on the serial console what it read:
//
//	YONDER: disk device vda serial=<serial> sectors=<n>
//	YONDER: disk boot; user_data sha256=<hex> bytes=<n>; hostname=<meta_data.json's hostname>
//	YONDER: disk boot; no config drive
//
// so a test proves from the console alone that the host booted its own disk with the data it was given.
// Parse and ParseDisks read those lines back. The image is built with mtools and `syslinux --install` on an image file, so
// no loop device or mount is needed; Cached builds it once per machine (keyed by every input) for the tests
// that share it.
//
// The same kernel and initramfs also make a live ISO (ISOFile: ISO 9660 with ISOLINUX's El Torito boot, as
// distributions build theirs), which a host SAN-boots for Metal3's format live-iso; booted from it, the
// initramfs prints LiveISOMarker and does nothing else.
package bootdisk

import (
	"bufio"
	"bytes"
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
	"regexp"
	"strconv"
	"strings"

	"github.com/yonder-dev/yonder/test/cachedir"
	"github.com/yonder-dev/yonder/test/metalboot"
)

// DiskBootMarker starts the console line the disk-booted initramfs prints once it looked for its config drive.
const DiskBootMarker = "YONDER: disk boot; "

// NoConfigDrive is the whole console line when no partition labelled config-2 was found.
const NoConfigDrive = DiskBootMarker + "no config drive"

// DiskLineMarker starts the console line the initramfs prints for each virtio disk it sees, before it looks
// for the config drive: "YONDER: disk device vda serial=<serial> sectors=<512-byte sectors>".
const DiskLineMarker = "YONDER: disk device "

// LiveISOMarker is the console line of the initramfs booted from the live ISO.
const LiveISOMarker = "YONDER: live ISO booted"

// initramfsUp is the first line the initramfs prints: a new boot.
const initramfsUp = "YONDER: disk initramfs up"

// ConfigDriveLabel is the filesystem label cloud-init's ConfigDrive datasource looks for.
const ConfigDriveLabel = "config-2"

// File names Build writes into its directory.
const (
	RawFile   = "yonder-bootdisk.raw"
	QCOW2File = "yonder-bootdisk.qcow2"
	ISOFile   = "yonder-live.iso"
)

// ISOLINUX's files, from Debian's isolinux (the El Torito boot image) and syslinux-common (its library).
const (
	isolinuxBin = "/usr/lib/ISOLINUX/isolinux.bin"
	ldlinuxC32  = "/usr/lib/syslinux/modules/bios/ldlinux.c32"
)

// Syslinux's files, from Debian's syslinux-common (mbr.bin: the MBR boot code that chain-loads the active
// partition) and syslinux (the installer that writes the FAT partition's boot sector and ldlinux.sys).
const mbrBin = "/usr/lib/syslinux/mbr/mbr.bin"

// The boot partition starts at 1 MiB, as partitioning tools align it; its FAT's hidden-sectors field must
// say so, because syslinux's boot sector adds it to every sector it reads.
const partitionStartSector = 2048

const (
	defaultSizeMiB = 64
	minSizeMiB     = 16
	// maxSizeMiB keeps the image small enough that a 2 GiB test disk has room for the config drive after it.
	maxSizeMiB = 128
)

// Options shape the image.
type Options struct {
	// SizeMiB of the raw image (default 64, 16 to 128): the boot partition fills it after the first MiB.
	SizeMiB int
	// KernelArgs are appended to the kernel command line (console=ttyS0 panic=-1 loglevel=4).
	KernelArgs string
}

// Image is a built disk image.
type Image struct {
	// Raw is the raw image's path; RawSHA256 its hex digest, RawSize its length in bytes.
	Raw       string `json:"raw"`
	RawSHA256 string `json:"rawSHA256"`
	RawSize   int64  `json:"rawSize"`
	// QCOW2 is the same disk converted with `qemu-img convert -O qcow2`.
	QCOW2       string `json:"qcow2"`
	QCOW2SHA256 string `json:"qcow2SHA256"`
	QCOW2Size   int64  `json:"qcow2Size"`
	// ISO is the live ISO of the same kernel and initramfs (ISOFile).
	ISO       string `json:"iso"`
	ISOSHA256 string `json:"isoSHA256"`
	ISOSize   int64  `json:"isoSize"`
}

func (o Options) withDefaults() (Options, error) {
	if o.SizeMiB == 0 {
		o.SizeMiB = defaultSizeMiB
	}
	if o.SizeMiB < minSizeMiB || o.SizeMiB > maxSizeMiB {
		return o, fmt.Errorf("bootdisk: SizeMiB %d is outside %d..%d", o.SizeMiB, minSizeMiB, maxSizeMiB)
	}
	if strings.ContainsAny(o.KernelArgs, "\n\r") {
		return o, errors.New("bootdisk: KernelArgs must be one line (it goes into syslinux.cfg's APPEND)")
	}
	return o, nil
}

// initScript is the image's /init. Modules load as test/metalboot's do (the order file lists dependencies
// first; later passes catch the rest). The config drive is found by its label, read from the filesystem
// itself with dd — Debian's busybox-static has no blkid, and findfs alone would not say which filesystem to
// mount: FAT12/16 keep the label at byte 43 of the boot sector, FAT32 at 71, ISO 9660 at 32808 (the primary
// volume descriptor's volume identifier). Labels compare case-insensitively, as cloud-init's do.
//
//nolint:dupword // "mount -t proc proc" names the filesystem type, then the device
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
mkdir -p /mnt/config /tmp
echo "` + initramfsUp + `"
if grep -q 'yonder.medium=live-iso' /proc/cmdline; then
  echo "` + LiveISOMarker + `"
  while true; do sleep 3600; done
fi
for pass in 1 2 3; do
  for m in $(cat /lib/modules/order); do grep -q "^$m " /proc/modules || insmod /lib/modules/$m.ko 2>/dev/null; done
done
# virtio-blk probes its disks asynchronously after the module loads; partitions appear with the disk.
i=0; while ! ls /sys/block/ | grep -q '^vd' && [ $i -lt 100 ]; do sleep 0.2; i=$((i+1)); done
sleep 0.5
# Each disk as the guest sees it: the serial is what rootDeviceHints' serialNumber matches.
for d in $(ls /sys/block/ | grep '^vd'); do echo "` + DiskLineMarker + `$d serial=$(cat /sys/block/$d/serial 2>/dev/null) sectors=$(cat /sys/block/$d/size)"; done
label_at() { dd if="$1" bs=1 skip="$2" count="$3" 2>/dev/null | tr -d '\000' | sed 's/ *$//' | tr 'A-Z' 'a-z'; }
found=""
for b in $(ls /sys/class/block/); do
  case "$b" in loop*|ram*) continue ;; esac
  dev=/dev/$b
  [ -b "$dev" ] || continue
  fs=""
  if [ "$(label_at "$dev" 32808 32)" = "` + ConfigDriveLabel + `" ] && [ "$(label_at "$dev" 32769 5)" = "cd001" ]; then fs=iso9660
  elif [ "$(label_at "$dev" 43 11)" = "` + ConfigDriveLabel + `" ] && label_at "$dev" 54 8 | grep -q '^fat'; then fs=vfat
  elif [ "$(label_at "$dev" 71 11)" = "` + ConfigDriveLabel + `" ] && label_at "$dev" 82 8 | grep -q '^fat'; then fs=vfat
  fi
  [ -n "$fs" ] || continue
  if mount -o ro -t "$fs" "$dev" /mnt/config; then found=$dev; break; fi
  echo "YONDER: cannot mount $dev ($fs) labelled ` + ConfigDriveLabel + `"
done
if [ -z "$found" ]; then
  echo "` + NoConfigDrive + `"
else
  ud=/mnt/config/openstack/latest/user_data
  md=/mnt/config/openstack/latest/meta_data.json
  host=""
  [ -f "$md" ] && host=$(tr -d '\n' < "$md" | sed -n 's/.*"hostname"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  if [ -f "$ud" ]; then
    sum=$(sha256sum < "$ud" | cut -d' ' -f1)
    n=$(wc -c < "$ud" | tr -d ' ')
    echo "` + DiskBootMarker + `user_data sha256=$sum bytes=$n; hostname=$host"
  else
    echo "` + DiskBootMarker + `config drive $found has no openstack/latest/user_data; hostname=$host"
  fi
fi
while true; do sleep 3600; done
`

func syslinuxConfig(o Options) string {
	args := strings.TrimSpace("console=ttyS0 panic=-1 loglevel=4 " + o.KernelArgs)
	return "SERIAL 0 115200\nDEFAULT yonder\nPROMPT 0\nTIMEOUT 0\nLABEL yonder\n  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND " + args + "\n"
}

// isolinuxConfig boots the same kernel and initramfs from the ISO, telling the init it runs live.
func isolinuxConfig() string {
	return "SERIAL 0 115200\nDEFAULT live\nPROMPT 0\nTIMEOUT 0\nLABEL live\n  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND console=ttyS0 panic=-1 loglevel=4 yonder.medium=live-iso\n"
}

// Build writes RawFile and QCOW2File into dir (which must exist) and returns them with their digests.
func Build(ctx context.Context, dir string, opts Options) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	in, err := findInputs(ctx)
	if err != nil {
		return Image{}, err
	}
	work, err := os.MkdirTemp(dir, ".bootdisk-")
	if err != nil {
		return Image{}, fmt.Errorf("failed to create the build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()

	initrd := filepath.Join(work, "initrd.img")
	if err := writeInitramfs(in, work, initrd); err != nil {
		return Image{}, err
	}
	part := filepath.Join(work, "boot.fat")
	if err := writeBootPartition(ctx, in, o, work, part, initrd); err != nil {
		return Image{}, err
	}
	raw := filepath.Join(dir, RawFile)
	if err := writeDisk(ctx, o, part, raw); err != nil {
		return Image{}, err
	}
	qcow := filepath.Join(dir, QCOW2File)
	_ = os.Remove(qcow) // a stale copy from an earlier build must not survive a failed conversion
	if out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, qcow).CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("failed to convert the boot disk to qcow2 (qemu-img from qemu-utils): %w: %s", err, out)
	}
	iso := filepath.Join(dir, ISOFile)
	if err := writeLiveISO(ctx, in, work, initrd, iso); err != nil {
		return Image{}, err
	}
	img := Image{Raw: raw, QCOW2: qcow, ISO: iso}
	if img.RawSHA256, img.RawSize, err = digest(raw); err != nil {
		return Image{}, err
	}
	if img.QCOW2SHA256, img.QCOW2Size, err = digest(qcow); err != nil {
		return Image{}, err
	}
	if img.ISOSHA256, img.ISOSize, err = digest(iso); err != nil {
		return Image{}, err
	}
	return img, nil
}

// writeLiveISO makes the live ISO with genisoimage: ISO 9660 (Rock Ridge) with ISOLINUX as its El Torito
// no-emulation boot image, patched with the boot info table ISOLINUX needs — the layout of distributions'
// BIOS-bootable ISOs, which iPXE's sanboot presents to the firmware as a CD-ROM.
func writeLiveISO(ctx context.Context, in inputs, work, initrd, dst string) error {
	tree := filepath.Join(work, "iso")
	if err := os.MkdirAll(filepath.Join(tree, "isolinux"), 0o755); err != nil { //nolint:gosec // an ISO tree
		return err
	}
	for _, f := range []struct {
		from, to string
	}{{isolinuxBin, "isolinux/isolinux.bin"}, {ldlinuxC32, "isolinux/ldlinux.c32"}, {in.kernel, "vmlinuz"}, {initrd, "initrd.img"}} {
		if err := copyFile(f.from, filepath.Join(tree, f.to), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "isolinux", "isolinux.cfg"), []byte(isolinuxConfig()), 0o644); err != nil { //nolint:gosec // a boot configuration
		return err
	}
	out, err := exec.CommandContext(ctx, "genisoimage", "-quiet", "-o", dst, "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
		"-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", "-R", "-V", "YONDER_LIVE", tree).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to build the live ISO (genisoimage): %w: %s", err, out)
	}
	return nil
}

// inputs are the host files an image is made of.
type inputs struct {
	kernel, busybox string
	modules         []string // the kernel directory's modules/ files, order included
}

func findInputs(ctx context.Context) (inputs, error) {
	kdir, err := metalboot.KernelDir(ctx)
	if err != nil {
		return inputs{}, err
	}
	in := inputs{kernel: filepath.Join(kdir, "vmlinuz"), busybox: "/bin/busybox"}
	for _, need := range []string{in.busybox, in.kernel, mbrBin, isolinuxBin, ldlinuxC32} {
		if _, err := os.Stat(need); err != nil {
			return inputs{}, fmt.Errorf("failed to find %s (run `hack/test-bins.sh --packages --metal-kernel`): %w", need, err)
		}
	}
	if in.modules, err = filepath.Glob(filepath.Join(kdir, "modules", "*")); err != nil {
		return inputs{}, err
	}
	for _, m := range []string{"virtio_blk.ko", "vfat.ko", "isofs.ko", "order"} {
		if _, err := os.Stat(filepath.Join(kdir, "modules", m)); err != nil {
			return inputs{}, fmt.Errorf("the metal kernel in %s lacks modules/%s (an older cache: run `hack/test-bins.sh --metal-kernel`): %w", kdir, m, err)
		}
	}
	return in, nil
}

func writeInitramfs(in inputs, work, dst string) error {
	root := filepath.Join(work, "initramfs")
	for _, d := range []string{"bin", "lib/modules", "proc", "sys", "dev", "mnt", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil { //nolint:gosec // an initramfs tree
			return err
		}
	}
	if err := copyFile(in.busybox, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	for _, m := range in.modules {
		if err := copyFile(m, filepath.Join(root, "lib", "modules", filepath.Base(m)), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(initScript), 0o755); err != nil { //nolint:gosec // the initramfs's init
		return fmt.Errorf("failed to write the initramfs's init: %w", err)
	}
	return metalboot.WriteInitramfs(root, dst)
}

// writeBootPartition makes the FAT filesystem of the boot partition as an image file: mkfs.vfat, the files
// copied in with mcopy, then syslinux's boot sector and ldlinux.sys/ldlinux.c32 installed by `syslinux`
// (the mtools installer: it works on an image file, no mount).
func writeBootPartition(ctx context.Context, in inputs, o Options, work, part, initrd string) error {
	cfg := filepath.Join(work, "syslinux.cfg")
	if err := os.WriteFile(cfg, []byte(syslinuxConfig(o)), 0o644); err != nil { //nolint:gosec // a boot configuration
		return err
	}
	kib := (o.SizeMiB - 1) * 1024
	env := append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	steps := []struct {
		what string
		cmd  *exec.Cmd
	}{
		// FAT16 whatever the size (mkfs would pick FAT12 for the smallest), hidden sectors = the partition start.
		{"mkfs.vfat (dosfstools)", exec.CommandContext(ctx, "mkfs.vfat", "-C", "-F", "16", "-n", "YONDERBOOT", "-i", "59444b31",
			"-h", strconv.Itoa(partitionStartSector), part, strconv.Itoa(kib))},
		{"mcopy (mtools)", exec.CommandContext(ctx, "mcopy", "-i", part, in.kernel, "::/vmlinuz")},
		{"mcopy (mtools)", exec.CommandContext(ctx, "mcopy", "-i", part, initrd, "::/initrd.img")},
		{"mcopy (mtools)", exec.CommandContext(ctx, "mcopy", "-i", part, cfg, "::/syslinux.cfg")},
		{"syslinux --install (syslinux)", exec.CommandContext(ctx, "syslinux", "--install", part)},
	}
	for _, s := range steps {
		s.cmd.Env = env
		if out, err := s.cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("failed to build the boot partition: %s: %w: %s", s.what, err, out)
		}
	}
	return nil
}

// writeDisk lays out the raw disk: an MBR partition table (sfdisk) with one active FAT16-LBA partition from
// sector 2048 to the end, syslinux's mbr.bin as the boot code (the first 440 bytes, before the disk
// signature and the table), and the partition image copied in at 1 MiB.
func writeDisk(ctx context.Context, o Options, part, raw string) (rerr error) {
	tmp := raw + ".tmp"
	f, err := os.Create(tmp) //nolint:gosec // the caller's output directory
	if err != nil {
		return fmt.Errorf("failed to create the boot disk: %w", err)
	}
	defer func() {
		_ = f.Close()
		if rerr != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Truncate(int64(o.SizeMiB) << 20); err != nil {
		return fmt.Errorf("failed to size the boot disk: %w", err)
	}
	sf := exec.CommandContext(ctx, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", tmp)
	sf.Stdin = strings.NewReader(fmt.Sprintf("label: dos\nlabel-id: 0x59444b31\nstart=%d, type=e, bootable\n", partitionStartSector))
	if out, err := sf.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to partition the boot disk (sfdisk from fdisk): %w: %s", err, out)
	}
	mbr, err := os.ReadFile(mbrBin)
	if err != nil {
		return fmt.Errorf("failed to read syslinux's MBR (syslinux-common): %w", err)
	}
	if len(mbr) < 440 {
		return fmt.Errorf("%s has %d bytes, expected at least 440", mbrBin, len(mbr))
	}
	if _, err := f.WriteAt(mbr[:440], 0); err != nil {
		return fmt.Errorf("failed to write the boot disk's MBR: %w", err)
	}
	p, err := os.Open(part) //nolint:gosec // Build's own work file
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	if _, err := io.Copy(io.NewOffsetWriter(f, partitionStartSector*512), p); err != nil {
		return fmt.Errorf("failed to write the boot partition into the disk: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write the boot disk: %w", err)
	}
	return os.Rename(tmp, raw)
}

func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from) //nolint:gosec // the cached kernel's files and busybox
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", from, err)
	}
	if err := os.WriteFile(to, b, mode); err != nil { //nolint:gosec // paths Build composed under the caller's directory
		return fmt.Errorf("failed to write %s: %w", to, err)
	}
	return nil
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

// Cached returns an image built once per machine: under $YONDER_CACHE_DIR (default ~/.cache/yonder)
// bootdisk/<key>/, where the key hashes every input (kernel, modules, busybox, syslinux's files, the init
// script, the options), so a changed input builds anew and tests in different processes share one build.
// A directory appears only complete (built beside and renamed).
func Cached(ctx context.Context, opts Options) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	in, err := findInputs(ctx)
	if err != nil {
		return Image{}, err
	}
	key, err := cacheKey(in, o)
	if err != nil {
		return Image{}, err
	}
	root, err := cachedir.Root()
	if err != nil {
		return Image{}, err
	}
	parent := filepath.Join(root, "bootdisk")
	final := filepath.Join(parent, key)
	if img, err := readImage(final); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil { //nolint:gosec // a cache of test images
		return Image{}, fmt.Errorf("failed to create the boot disk cache: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, key+".tmp-")
	if err != nil {
		return Image{}, fmt.Errorf("failed to create the boot disk cache: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	img, err := Build(ctx, tmp, o)
	if err != nil {
		return Image{}, err
	}
	img.Raw, img.QCOW2, img.ISO = filepath.Join(final, RawFile), filepath.Join(final, QCOW2File), filepath.Join(final, ISOFile)
	b, err := json.Marshal(img)
	if err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), b, 0o644); err != nil { //nolint:gosec // cache metadata
		return Image{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process finished the same build first: use its (identical) image.
		if img, rerr := readImage(final); rerr == nil {
			return img, nil
		}
		return Image{}, fmt.Errorf("failed to store the boot disk in its cache: %w", err)
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
	for _, f := range []string{img.Raw, img.QCOW2, img.ISO} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, err
		}
	}
	return img, nil
}

func cacheKey(in inputs, o Options) (string, error) {
	h := sha256.New()
	// A hash.Hash's Write never fails.
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%s\x00", initScript, syslinuxConfig(o), isolinuxConfig(), o.SizeMiB, o.KernelArgs)
	files := append([]string{in.kernel, in.busybox, mbrBin, isolinuxBin, ldlinuxC32}, in.modules...)
	if p, err := exec.LookPath("syslinux"); err == nil {
		files = append(files, p) // the installer carries the boot sector and ldlinux.sys it writes
	}
	for _, f := range files {
		fh, err := os.Open(f) //nolint:gosec // the image's inputs
		if err != nil {
			return "", fmt.Errorf("failed to read %s: %w", f, err)
		}
		_, _ = fmt.Fprintf(h, "%s\x00", filepath.Base(f))
		_, err = io.Copy(h, fh)
		_ = fh.Close()
		if err != nil {
			return "", fmt.Errorf("failed to read %s: %w", f, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Boot is what a disk-booted image reported on its console.
type Boot struct {
	// ConfigDrive says a config-2 partition was found and mounted.
	ConfigDrive bool
	// UserDataSHA256 (hex) and UserDataBytes describe its openstack/latest/user_data.
	UserDataSHA256 string
	UserDataBytes  int64
	// Hostname is meta_data.json's hostname ("" when absent).
	Hostname string
}

var bootLine = regexp.MustCompile(`^` + regexp.QuoteMeta(DiskBootMarker) + `user_data sha256=([0-9a-f]{64}) bytes=([0-9]+); hostname=(.*)$`)

// Parse finds the last disk-boot line in a console log. ok is false when the log has none yet (or only a
// line this package does not print, such as a config drive without user_data, which it reports as an error).
func Parse(console []byte) (b Boot, ok bool, err error) {
	var last string
	// Only complete lines count: the console file is read while the VM writes it, and a marker line cut
	// short ("hostname=vm" of "hostname=vm0.example") would parse as a wrong value.
	if i := bytes.LastIndexByte(console, '\n'); i >= 0 {
		console = console[:i+1]
	} else {
		console = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(console))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, DiskBootMarker); i >= 0 {
			last = line[i:]
		}
	}
	switch last {
	case "":
		return Boot{}, false, nil
	case NoConfigDrive:
		return Boot{}, true, nil
	}
	m := bootLine.FindStringSubmatch(last)
	if m == nil {
		return Boot{}, false, fmt.Errorf("the disk boot reported: %s", last)
	}
	n, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return Boot{}, false, fmt.Errorf("the disk boot reported a bad size: %s", last)
	}
	return Boot{ConfigDrive: true, UserDataSHA256: m[1], UserDataBytes: n, Hostname: m[3]}, true, nil
}

// Disk is one virtio disk the disk-booted initramfs listed.
type Disk struct {
	// Name is the kernel's (vda); Serial the serial number it reads; Sectors its size in 512-byte sectors.
	Name, Serial string
	Sectors      int64
}

var diskLine = regexp.MustCompile(regexp.QuoteMeta(DiskLineMarker) + `(\S+) serial=(\S*) sectors=([0-9]+)`)

// ParseDisks lists the disks of the last boot in a console log.
func ParseDisks(console []byte) []Disk {
	var disks []Disk
	for _, line := range strings.Split(string(console), "\n") {
		if strings.Contains(line, initramfsUp) {
			disks = nil // a new boot
		}
		if m := diskLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[3], 10, 64) // digits only: the pattern matched them
			disks = append(disks, Disk{Name: m[1], Serial: m[2], Sectors: n})
		}
	}
	return disks
}
