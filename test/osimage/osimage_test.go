package osimage_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/osimage"
)

// The machine's image (built on first use, minutes; then from the cache) is what SeaBIOS and cloud-init
// need: extlinux's MBR code, one active Linux partition at 1 MiB to the end holding an ext4 root (no
// 64bit feature: extlinux reads it) with the UUID the kernel command line names, extlinux installed in
// /boot/extlinux, cloud-init limited to the config drive, networkd enabled, timers masked, root without a
// password; the qcow2 copy holds the same disk and its digest is recorded. Whether it boots and runs the
// user data is the bare-metal e2e's TestQEMUHostBootsCloudImageAndRunsCloudInit.
func TestCachedImageIsABootableCloudImage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("image ready in %v (cold build took %.0f s): raw %d MiB, qcow2 %d MiB", time.Since(start).Round(time.Millisecond), img.BuildSeconds, img.RawSize>>20, img.QCOW2Size>>20)
	g.Expect(img.RawSize).To(Equal(int64(1536 << 20)))
	again, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(img), "the second call answers from the cache")

	raw, err := os.Open(img.Raw)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = raw.Close() }()
	head := make([]byte, 512)
	_, err = raw.ReadAt(head, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(head[510:512]).To(Equal([]byte{0x55, 0xaa}), "the MBR signature")
	g.Expect(bytes.Count(head[:440], []byte{0})).To(BeNumerically("<", 300), "boot code in the MBR")

	var table struct {
		PartitionTable struct {
			Label      string
			Partitions []struct {
				Start, Size int64
				Type        string
				Bootable    bool
			}
		}
	}
	out, err := exec.CommandContext(ctx, "sfdisk", "--json", img.Raw).Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(out, &table)).To(Succeed())
	g.Expect(table.PartitionTable.Label).To(Equal("dos"))
	g.Expect(table.PartitionTable.Partitions).To(HaveLen(1))
	p := table.PartitionTable.Partitions[0]
	g.Expect(p.Start).To(Equal(int64(2048)))
	g.Expect(p.Start + p.Size).To(Equal(img.RawSize / 512))
	g.Expect(p.Bootable).To(BeTrue())
	g.Expect(p.Type).To(Equal("83"))

	// The ext4 superblock, 1 KiB into the partition.
	sb := make([]byte, 1024)
	_, err = raw.ReadAt(sb, 1<<20+1024)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(binary.LittleEndian.Uint16(sb[0x38:])).To(Equal(uint16(0xef53)), "ext2/3/4 magic")
	g.Expect(string(bytes.TrimRight(sb[0x78:0x88], "\x00"))).To(Equal(osimage.RootLabel))
	g.Expect(hex.EncodeToString(sb[0x68:0x78])).To(Equal(strings.ReplaceAll(img.RootUUID, "-", "")))
	g.Expect(binary.LittleEndian.Uint32(sb[0x60:])&0x80).To(BeZero(), "no 64bit feature")
	g.Expect(binary.LittleEndian.Uint32(sb[0x60:])&0x40).NotTo(BeZero(), "extents: ext4")

	// Files inside, read with debugfs at the partition's offset.
	fs := img.Raw + "?offset=1048576"
	g.Expect(debugfs(t, fs, "cat /boot/extlinux/extlinux.conf")).To(And(
		ContainSubstring("APPEND root=UUID="+img.RootUUID+" ro console=ttyS0,115200"),
		MatchRegexp(`LINUX /boot/vmlinuz-\S+-amd64`), MatchRegexp(`INITRD /boot/initrd.img-\S+-amd64`)))
	g.Expect(debugfs(t, fs, "ls -l /boot/extlinux")).To(And(ContainSubstring("ldlinux.sys"), ContainSubstring("ldlinux.c32")))
	g.Expect(debugfs(t, fs, "cat /etc/cloud/cloud.cfg.d/90_yonder.cfg")).To(ContainSubstring("datasource_list: [ ConfigDrive, None ]"))
	g.Expect(debugfs(t, fs, "cat /etc/fstab")).To(HavePrefix("UUID=" + img.RootUUID + " / ext4 "))
	g.Expect(debugfs(t, fs, "stat /etc/systemd/system/apt-daily.timer")).To(ContainSubstring(`"/dev/null"`), "masked")
	g.Expect(debugfs(t, fs, "stat /etc/systemd/system/multi-user.target.wants/systemd-networkd.service")).To(ContainSubstring("systemd-networkd.service"))
	g.Expect(debugfs(t, fs, "cat /etc/shadow")).To(MatchRegexp(`(?m)^root:\*:`), "root has no password")
	g.Expect(debugfs(t, fs, "stat /etc/machine-id")).To(MatchRegexp(`Size: 0\b`), "every host generates its own")

	pkgs, err := os.ReadFile(img.Packages)
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{"cloud-init ", "linux-image-amd64 ", "systemd-sysv ", "extlinux ", "dbus ", "systemd-container ", "curl ", "ca-certificates ", "cloud-guest-utils "} {
		g.Expect(string(pkgs)).To(ContainSubstring("\n"+want), "the image has %s", want)
	}
	g.Expect(string(pkgs)).NotTo(ContainSubstring("\nopenssh-server "), "nothing recommended came along")

	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
	}
	out, err = exec.CommandContext(ctx, "qemu-img", "info", "--output=json", img.QCOW2).Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(out, &info)).To(Succeed())
	g.Expect(info).To(Equal(struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
	}{"qcow2", img.RawSize}))
	out, err = exec.CommandContext(ctx, "qemu-img", "compare", "-f", "raw", "-F", "qcow2", img.Raw, img.QCOW2).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "the qcow2 holds the raw disk: %s", out)
	out, err = exec.CommandContext(ctx, "sha256sum", img.QCOW2).Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(string(out))[0]).To(Equal(img.QCOW2SHA256))
}

func debugfs(t *testing.T, fs, request string) string {
	t.Helper()
	// stdout only: debugfs prints its banner on stderr.
	out, err := exec.Command("debugfs", "-R", request, fs).Output()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v: %s", request, err, out)
	}
	return string(out)
}

// The image's own cloud-init checks cloud-config: valid data passes, invalid data is refused with
// cloud-init's reasons, and the check leaves no mount or loop device behind.
func TestCloudInitSchema(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	out, err := img.CloudInitSchema(ctx, []byte("#cloud-config\nwrite_files:\n  - path: /etc/x\n    content: hi\n    permissions: \"0600\"\nruncmd:\n  - [echo, hi]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Valid cloud-config"))

	out, err = img.CloudInitSchema(ctx, []byte("#cloud-config\nruncmd: echo\nwrite_files:\n  - content: hi\n"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(out).To(And(ContainSubstring("runcmd: 'echo' is not of type 'array'"), ContainSubstring("'path' is a required property")))

	// Other tests make loop devices at the same time: only ours (backed by the image's own path) must be
	// gone. (Not losetup -j, which matches the file's inode: RunInCopy's loop devices, running in another
	// package's test meanwhile, read the same file through a bind mount of their own path.)
	loops, err := exec.CommandContext(ctx, "losetup", "--list", "--noheadings", "--output", "BACK-FILE").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(string(loops))).NotTo(ContainElement(img.Raw), "no loop device left on the image")
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mounts)).NotTo(ContainSubstring("osimage-schema-"), "no mount left")
}
