package disk

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
)

// sysfsFixture builds a /sys/block and /dev tree shaped like a real server's: a SATA SSD behind SCSI
// (HCTL link, VPD serial, NAA wwid with vendor extension), an NVMe disk (EUI-64), a spinning SAS disk, and
// everything that must never be chosen.
func sysfsFixture(t *testing.T) (sys, dev string) {
	t.Helper()
	root := t.TempDir()
	sys, dev = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	write := func(p, v string) {
		t.Helper()
		p = filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	disk := func(name string, gib int64, ro, removable, rotational string, device string) {
		write("block/"+name+"/size", itoa(gib<<30/512)+"\n")
		write("block/"+name+"/ro", ro+"\n")
		write("block/"+name+"/removable", removable+"\n")
		write("block/"+name+"/queue/rotational", rotational+"\n")
		if device != "" {
			link("../../devices/"+device, filepath.Join(sys, "block", name, "device"))
		}
	}
	// sda: 480 GiB SATA SSD.
	write("devices/0:0:0:0/model", "SAMSUNG MZ7LH480  \n")
	write("devices/0:0:0:0/vendor", "ATA     \n")
	write("devices/0:0:0:0/vpd_pg80", "\x00\x80\x00\x0eS45NNE0M123456")
	write("devices/0:0:0:0/wwid", "naa.5002538e40a1b2c3\n")
	disk("sda", 480, "0", "0", "0", "0:0:0:0")
	// sdb: 4 TiB SAS disk with an NAA type 6 identifier.
	write("devices/1:0:2:0/model", "ST4000NM0025\n")
	write("devices/1:0:2:0/vendor", "SEAGATE\n")
	write("devices/1:0:2:0/vpd_pg80", "\x00\x80\x00\x08ZC1ABCDE")
	write("devices/1:0:2:0/wwid", "naa.6000c2912345678f1234567890abcdef\n")
	disk("sdb", 4096, "0", "0", "1", "1:0:2:0")
	// nvme0n1: 960 GiB, serial on the controller, EUI-64 on the namespace.
	write("devices/nvme0/model", "Dell Ent NVMe v2 AGN RI U.2 960GB\n")
	write("devices/nvme0/serial", "  S6CRNA0R500123      \n")
	write("block/nvme0n1/wwid", "eui.36344730525001230025384500000001\n")
	disk("nvme0n1", 960, "0", "0", "0", "nvme0")
	// Never candidates.
	disk("sdc", 32, "0", "1", "0", "") // a USB stick
	disk("sdd", 0, "0", "0", "0", "")  // a card reader without a card
	disk("vdb", 8, "1", "0", "0", "")  // read-only
	for _, n := range []string{"loop0", "ram0", "zram0", "dm-0", "md127", "sr0", "nbd0"} {
		disk(n, 8, "0", "0", "0", "")
	}
	link("../../sda", filepath.Join(dev, "disk/by-path/pci-0000:00:17.0-ata-1"))
	link("../../nvme0n1", filepath.Join(dev, "disk/by-path/pci-0000:5e:00.0-nvme-1"))
	return sys, dev
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func TestListFromSysfs(t *testing.T) {
	g := NewWithT(t)
	sys, dev := sysfsFixture(t)
	inv, err := List(ListOptions{SysRoot: sys, DevRoot: dev})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.Devices).To(Equal([]Device{
		{Name: "sda", Path: filepath.Join(dev, "sda"), SizeBytes: 480 << 30, Model: "SAMSUNG MZ7LH480", Vendor: "ATA",
			SerialNumber: "S45NNE0M123456", WWN: "0x5002538e40a1b2c3", WWNWithExtension: "0x5002538e40a1b2c3", HCTL: "0:0:0:0"},
		{Name: "nvme0n1", Path: filepath.Join(dev, "nvme0n1"), SizeBytes: 960 << 30, Model: "Dell Ent NVMe v2 AGN RI U.2 960GB",
			SerialNumber: "S6CRNA0R500123", WWN: "eui.36344730525001230025384500000001"},
		{Name: "sdb", Path: filepath.Join(dev, "sdb"), SizeBytes: 4096 << 30, Model: "ST4000NM0025", Vendor: "SEAGATE",
			SerialNumber: "ZC1ABCDE", WWN: "0x6000c2912345678f", WWNWithExtension: "0x6000c2912345678f1234567890abcdef",
			WWNVendorExtension: "0x1234567890abcdef", HCTL: "1:0:2:0", Rotational: true},
	}), "sorted by size")
	reasons := map[string]string{}
	for _, e := range inv.Excluded {
		reasons[e.Name] = e.Reason
	}
	g.Expect(reasons).To(Equal(map[string]string{
		"sdc": "removable", "sdd": "no medium (size 0)", "vdb": "read-only",
		"loop0": "loop device (only with --include-loop)", "ram0": "RAM disk", "zram0": "compressed RAM disk",
		"dm-0":  "device-mapper device (its underlying disks are listed themselves)",
		"md127": "software RAID device (its member disks are listed themselves)", "sr0": "optical drive",
		"nbd0": "network block device",
	}))
	withLoop, err := List(ListOptions{SysRoot: sys, DevRoot: dev, IncludeLoop: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(withLoop.Devices[0].Name).To(Equal("loop0"))
}

func TestChooseByHints(t *testing.T) {
	sys, dev := sysfsFixture(t)
	inv, err := List(ListOptions{SysRoot: sys, DevRoot: dev})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	yes, no := true, false
	for _, tc := range []struct {
		name  string
		hints *metal3v1.RootDeviceHints
		want  string
	}{
		{"no hints: the smallest disk", nil, "sda"},
		{"empty hints are no hints", &metal3v1.RootDeviceHints{}, "sda"},
		{"deviceName", &metal3v1.RootDeviceHints{DeviceName: "/dev/sdb"}, "sdb"},
		{"deviceName by-path", &metal3v1.RootDeviceHints{DeviceName: "/dev/disk/by-path/pci-0000:5e:00.0-nvme-1"}, "nvme0n1"},
		{"hctl", &metal3v1.RootDeviceHints{HCTL: "1:0:2:0"}, "sdb"},
		{"model substring", &metal3v1.RootDeviceHints{Model: "NVMe"}, "nvme0n1"},
		{"vendor substring", &metal3v1.RootDeviceHints{Vendor: "GATE"}, "sdb"},
		{"serialNumber", &metal3v1.RootDeviceHints{SerialNumber: "ZC1ABCDE"}, "sdb"},
		{"wwn", &metal3v1.RootDeviceHints{WWN: "0x5002538e40a1b2c3"}, "sda"},
		{"wwn of an NVMe namespace", &metal3v1.RootDeviceHints{WWN: "eui.36344730525001230025384500000001"}, "nvme0n1"},
		{"wwnWithExtension", &metal3v1.RootDeviceHints{WWNWithExtension: "0x6000c2912345678f1234567890abcdef"}, "sdb"},
		{"wwnVendorExtension", &metal3v1.RootDeviceHints{WWNVendorExtension: "0x1234567890abcdef"}, "sdb"},
		{"minSizeGigabytes: the smallest large enough", &metal3v1.RootDeviceHints{MinSizeGigabytes: 500}, "nvme0n1"},
		{"minSizeGigabytes equal to the size", &metal3v1.RootDeviceHints{MinSizeGigabytes: 480}, "sda"},
		{"rotational", &metal3v1.RootDeviceHints{Rotational: &yes}, "sdb"},
		{"all hints together", &metal3v1.RootDeviceHints{Rotational: &no, MinSizeGigabytes: 100, Model: "U.2"}, "nvme0n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := inv.Choose(tc.hints)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Name).To(Equal(tc.want))
		})
	}
}

func TestChooseRejectsWithReasons(t *testing.T) {
	g := NewWithT(t)
	sys, dev := sysfsFixture(t)
	inv, err := List(ListOptions{SysRoot: sys, DevRoot: dev})
	g.Expect(err).NotTo(HaveOccurred())
	no := false
	_, err = inv.Choose(&metal3v1.RootDeviceHints{Model: "SAMSUNG", SerialNumber: "S45NNE0M12345", Rotational: &no})
	g.Expect(err).To(MatchError(ErrNoRootDevice))
	g.Expect(err.Error()).To(Equal(`no disk matches the root device hints {model="SAMSUNG", serialNumber="S45NNE0M12345", rotational=false}: ` +
		`sda (480.0 GiB): serialNumber "S45NNE0M123456" is not "S45NNE0M12345"; ` +
		`nvme0n1 (960.0 GiB): model "Dell Ent NVMe v2 AGN RI U.2 960GB" does not contain "SAMSUNG", serialNumber "S6CRNA0R500123" is not "S45NNE0M12345"; ` +
		`sdb (4.0 TiB): model "ST4000NM0025" does not contain "SAMSUNG", serialNumber "ZC1ABCDE" is not "S45NNE0M12345", rotational is true; ` +
		`dm-0: excluded, device-mapper device (its underlying disks are listed themselves); loop0: excluded, loop device (only with --include-loop); ` +
		`md127: excluded, software RAID device (its member disks are listed themselves); nbd0: excluded, network block device; ram0: excluded, RAM disk; ` +
		`sdc: excluded, removable; sdd: excluded, no medium (size 0); sr0: excluded, optical drive; vdb: excluded, read-only; zram0: excluded, compressed RAM disk`))

	_, err = inv.Choose(&metal3v1.RootDeviceHints{DeviceName: "/dev/disk/by-path/pci-0000:99:00.0-nvme-1"})
	g.Expect(err).To(MatchError(ContainSubstring("deviceName /dev/disk/by-path/pci-0000:99:00.0-nvme-1 does not exist (by-* links exist only where udev runs")))
	_, err = inv.Choose(&metal3v1.RootDeviceHints{DeviceName: "sda"})
	g.Expect(err).To(MatchError(ContainSubstring(`deviceName "sda" is not a /dev path`)))
}

// TestChooseLoopDeviceFromRealSysfs reads the machine's own /sys and /dev: a loop device attached by the
// test is listed with its size only when loop devices are included, and a deviceName hint picks it.
func TestChooseLoopDeviceFromRealSysfs(t *testing.T) {
	g := NewWithT(t)
	dev := loopDevice(t, 24<<20)
	name := filepath.Base(dev)
	inv, err := List(ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.Excluded).To(ContainElement(Excluded{Name: name, Reason: "loop device (only with --include-loop)"}))
	inv, err = List(ListOptions{IncludeLoop: true})
	g.Expect(err).NotTo(HaveOccurred())
	d, err := inv.Choose(&metal3v1.RootDeviceHints{DeviceName: dev})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Path).To(Equal(dev))
	g.Expect(d.SizeBytes).To(Equal(int64(24 << 20)))
	_, err = inv.Choose(&metal3v1.RootDeviceHints{DeviceName: dev, MinSizeGigabytes: 1})
	g.Expect(err).To(MatchError(ContainSubstring(name + " (24.0 MiB): size 24.0 MiB is below minSizeGigabytes 1")))
}
