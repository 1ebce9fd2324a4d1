package bootdisk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/bootdisk"
	"github.com/yonder-dev/yonder/test/metalboot"
)

// The image is what SeaBIOS needs to boot it: syslinux's MBR code, one active partition at 1 MiB holding a
// FAT filesystem with syslinux installed, the kernel, the initramfs and syslinux.cfg; the qcow2 copy holds
// the same disk. Cached builds once and answers the same image from its cache afterwards.
func TestBuildLaysOutABootableDisk(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// A cache of its own; the kernel stays the machine's (its lookup would follow YONDER_CACHE_DIR too).
	kdir, err := metalboot.KernelDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Setenv("YONDER_TEST_METAL_KERNEL", kdir)
	t.Setenv("YONDER_CACHE_DIR", t.TempDir())
	start := time.Now()
	img, err := bootdisk.Cached(ctx, bootdisk.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("built in %v: raw %d bytes, qcow2 %d bytes", time.Since(start).Round(time.Millisecond), img.RawSize, img.QCOW2Size)
	g.Expect(img.RawSize).To(Equal(int64(64 << 20)))

	raw, err := os.ReadFile(img.Raw)
	g.Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(raw)
	g.Expect(img.RawSHA256).To(Equal(hex.EncodeToString(sum[:])))
	mbr, err := os.ReadFile("/usr/lib/syslinux/mbr/mbr.bin")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw[:440]).To(Equal(mbr[:440]), "syslinux's MBR boot code")
	g.Expect(raw[510:512]).To(Equal([]byte{0x55, 0xaa}), "the MBR signature")

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
	g.Expect(p.Start + p.Size).To(Equal(int64(64 << 11)))
	g.Expect(p.Bootable).To(BeTrue())
	g.Expect(raw[1<<20+54 : 1<<20+59]).To(Equal([]byte("FAT16")))

	mdir := exec.CommandContext(ctx, "mdir", "-a", "-b", "-i", img.Raw+"@@1M", "::/")
	mdir.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err = mdir.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	for _, f := range []string{"VMLINUZ", "INITRD.IMG", "SYSLINUX.CFG", "LDLINUX.SYS", "LDLINUX.C32"} {
		g.Expect(strings.ToUpper(string(out))).To(ContainSubstring("::/"+f), "the boot partition holds %s", f)
	}
	cfg := exec.CommandContext(ctx, "mtype", "-i", img.Raw+"@@1M", "::/syslinux.cfg")
	cfg.Env = mdir.Env
	out, err = cfg.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("APPEND console=ttyS0"))

	out, err = exec.CommandContext(ctx, "qemu-img", "info", "--output=json", img.QCOW2).Output()
	g.Expect(err).NotTo(HaveOccurred())
	var info struct {
		Format      string
		VirtualSize int64 `json:"virtual-size"`
	}
	g.Expect(json.Unmarshal(out, &info)).To(Succeed())
	g.Expect(info.Format).To(Equal("qcow2"))
	g.Expect(info.VirtualSize).To(Equal(img.RawSize))
	out, err = exec.CommandContext(ctx, "qemu-img", "compare", "-f", "raw", "-F", "qcow2", img.Raw, img.QCOW2).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "the qcow2 copy holds the same disk: %s", out)

	// The live ISO: ISO 9660 with an El Torito boot record whose no-emulation image is ISOLINUX, booting
	// the same kernel and initramfs told they run live.
	iso, err := os.ReadFile(img.ISO)
	g.Expect(err).NotTo(HaveOccurred())
	isoSum := sha256.Sum256(iso)
	g.Expect(img.ISOSHA256).To(Equal(hex.EncodeToString(isoSum[:])))
	g.Expect(iso[16*2048+1:16*2048+6]).To(Equal([]byte("CD001")), "the primary volume descriptor")
	g.Expect(string(iso[17*2048+7:17*2048+30])).To(Equal("EL TORITO SPECIFICATION"), "the boot record volume descriptor")
	g.Expect(string(iso)).To(ContainSubstring("yonder.medium=live-iso"), "isolinux.cfg's APPEND")
	isoinfo := exec.CommandContext(ctx, "isoinfo", "-R", "-f", "-i", img.ISO)
	out, err = isoinfo.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(strings.Fields(string(out))).To(ContainElements("/vmlinuz", "/initrd.img", "/isolinux/isolinux.bin", "/isolinux/ldlinux.c32", "/isolinux/isolinux.cfg"))

	again, err := bootdisk.Cached(ctx, bootdisk.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(img), "the second call answers from the cache")
	other, err := bootdisk.Cached(ctx, bootdisk.Options{SizeMiB: 32})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.Raw).NotTo(Equal(img.Raw), "other options, another cache entry")
	g.Expect(other.RawSize).To(Equal(int64(32 << 20)))
}

func TestOptionsAreValidated(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	for _, o := range []bootdisk.Options{{SizeMiB: 8}, {SizeMiB: 129}, {KernelArgs: "quiet\nDEFAULT other"}} {
		_, err := bootdisk.Build(context.Background(), dir, o)
		g.Expect(err).To(MatchError(ContainSubstring("bootdisk:")), "%+v", o)
	}
	left, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "refused before anything is written")
}

func TestParseReadsTheMarkerLines(t *testing.T) {
	g := NewWithT(t)
	sum := strings.Repeat("ab", 32)
	console := []byte("SYSLINUX 6.04\r\nYONDER: disk initramfs up\r\n" +
		"YONDER: disk device vda serial=D-vm0 sectors=4194304\r\n" +
		"YONDER: disk boot; user_data sha256=" + sum + " bytes=42; hostname=vm0\r\n")
	b, ok, err := bootdisk.Parse(console)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(b).To(Equal(bootdisk.Boot{ConfigDrive: true, UserDataSHA256: sum, UserDataBytes: 42, Hostname: "vm0"}))
	g.Expect(bootdisk.ParseDisks(console)).To(Equal([]bootdisk.Disk{{Name: "vda", Serial: "D-vm0", Sectors: 4194304}}))

	b, ok, err = bootdisk.Parse([]byte("x\n" + bootdisk.NoConfigDrive + "\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(b.ConfigDrive).To(BeFalse())

	_, ok, err = bootdisk.Parse([]byte("YONDER: disk initramfs up\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse(), "no marker yet")

	// Read while the VM writes it: the marker line is not complete yet, so it does not count.
	_, ok, err = bootdisk.Parse([]byte("YONDER: disk initramfs up\n" + bootdisk.DiskBootMarker + "user_data sha256=" + sum + " bytes=42; hostname=vm"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse(), "a line cut short is no marker yet")

	_, _, err = bootdisk.Parse([]byte(bootdisk.DiskBootMarker + "config drive /dev/vda2 has no openstack/latest/user_data; hostname=\n"))
	g.Expect(err).To(MatchError(ContainSubstring("has no openstack/latest/user_data")))

	// A later boot's disks replace an earlier boot's.
	two := bytes.Join([][]byte{console, []byte("YONDER: disk initramfs up\nYONDER: disk device vdb serial=X sectors=8\n")}, nil)
	g.Expect(bootdisk.ParseDisks(two)).To(Equal([]bootdisk.Disk{{Name: "vdb", Serial: "X", Sectors: 8}}))
}

// writeFile is a small helper for test inputs.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
