package configdrive

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The tests write config drives into sparse disk image files partitioned by the real sfdisk, then check
// the result with the real tools: sfdisk (table, backup GPT), the kernel's partition scan (losetup -P),
// blkid (type and label), fsck.fat (filesystem consistency) and mtools (the files' bytes, read back by
// an independent FAT implementation: this kernel has no vfat module to mount it).

const mib = 1 << 20

func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("%s is not installed: install the Debian package %s (hack/test-bins.sh installs the test packages)", name, debianPackage[name])
	}
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// debianPackage names the package of each tool the tests run.
var debianPackage = map[string]string{
	"sfdisk": "fdisk", "blkid": "util-linux", "losetup": "mount",
	"fsck.fat": "dosfstools", "mkfs.vfat": "dosfstools", "mkfs.ext4": "e2fsprogs", "e2fsck": "e2fsprogs", "mdir": "mtools", "mcopy": "mtools",
}

// image makes a sparse disk image of size bytes, partitioned by sfdisk with script ("" leaves it blank).
func image(t testing.TB, size int64, script string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	NewWithT(t).Expect(os.WriteFile(img, nil, 0o600)).To(Succeed())
	NewWithT(t).Expect(os.Truncate(img, size)).To(Succeed())
	if script != "" {
		run(t, script, "sfdisk", "--no-reread", "--no-tell-kernel", "-q", img)
	}
	return img
}

// imageGPT simulates a 64 MiB GPT cloud image (one partition) written to the start of a larger disk:
// the table is made on a 64 MiB file, then the file is grown, so the backup GPT sits at 64 MiB, not at
// the disk's end.
func imageGPT(t *testing.T, diskSize int64) string {
	t.Helper()
	img := image(t, 64*mib, "label: gpt\nstart=2048, type=L\n")
	NewWithT(t).Expect(os.Truncate(img, diskSize)).To(Succeed())
	return img
}

type sfdiskTable struct {
	PartitionTable struct {
		Label      string `json:"label"`
		FirstLBA   int64  `json:"firstlba"`
		LastLBA    int64  `json:"lastlba"`
		Partitions []struct {
			Node  string `json:"node"`
			Start int64  `json:"start"`
			Size  int64  `json:"size"`
			Type  string `json:"type"`
			Name  string `json:"name"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

// readTable is sfdisk's reading of img's table (its warnings, such as a misplaced backup GPT, go to stderr).
func readTable(t *testing.T, img string) sfdiskTable {
	t.Helper()
	var tbl sfdiskTable
	out, err := exec.Command("sfdisk", "--json", img).Output()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(json.Unmarshal(out, &tbl)).To(Succeed(), string(out))
	return tbl
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return sha256.Sum256(b)
}

// loopRange attaches [off, off+size) of img read-only, detached when the test ends, failed or not. (This
// kernel has no MSDOS or EFI partition parser, so `losetup --partscan` makes no partition devices; the
// ranges come from sfdisk's reading of the table instead.)
func loopRange(t *testing.T, img string, off, size int64) string {
	t.Helper()
	dev := strings.TrimSpace(run(t, "", "losetup", "--find", "--show", "--read-only",
		"--offset", strconv.FormatInt(off, 10), "--sizelimit", strconv.FormatInt(size, 10), img))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

// secondPartition attaches partition 2 (where the config drive goes after a one-partition image) as
// sfdisk reads it from img's table.
func secondPartition(t *testing.T, img string, sector int64) string {
	t.Helper()
	for _, p := range readTable(t, img).PartitionTable.Partitions {
		if strings.HasSuffix(p.Node, "2") {
			return loopRange(t, img, p.Start*sector, p.Size*sector)
		}
	}
	t.Fatalf("sfdisk finds no partition 2 on %s", img)
	return ""
}

// checkDrive checks the config drive filesystem on dev (the kernel's partition device or a loop over
// the range Write reported) with blkid, fsck.fat and mtools.
func checkDrive(t *testing.T, dev string, d Drive) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(strings.TrimSpace(run(t, "", "blkid", "-p", "-o", "value", "-s", "TYPE", dev))).To(Equal("vfat"))
	g.Expect(strings.TrimSpace(run(t, "", "blkid", "-p", "-o", "value", "-s", "LABEL", dev))).To(Equal("config-2"))
	fsck := run(t, "", "fsck.fat", "-n", "-v", "-l", dev) // -n: check only; exits non-zero on any error
	g.Expect(fsck).NotTo(ContainSubstring("differ"))
	listing := run(t, "", "mdir", "-/", "-b", "-i", dev, "::")
	want := []string{"::/openstack/latest/meta_data.json"}
	if d.UserData != nil {
		want = append(want, "::/openstack/latest/user_data")
	}
	if d.NetworkData != nil {
		want = append(want, "::/openstack/latest/network_data.json")
	}
	for _, w := range want {
		g.Expect(listing).To(ContainSubstring(w))
	}
	read := func(name string) []byte {
		out := filepath.Join(t.TempDir(), name)
		run(t, "", "mcopy", "-n", "-i", dev, "::/openstack/latest/"+name, out)
		b, err := os.ReadFile(out)
		g.Expect(err).NotTo(HaveOccurred())
		return b
	}
	g.Expect(read("meta_data.json")).To(MatchJSON(d.MetaData))
	if d.UserData != nil {
		g.Expect(read("user_data")).To(Equal(d.UserData))
	}
	if d.NetworkData != nil {
		g.Expect(read("network_data.json")).To(MatchJSON(d.NetworkData))
	}
}

var sample = Drive{
	UserData:    []byte("#cloud-config\nruncmd:\n  - [sh, -c, 'echo hello > /run/yonder']\n"),
	MetaData:    MetaData("4a1b9f0e-0c57-4f39-8a56-3bd1e6b0c2d1", "node-0", map[string]string{"yonder": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKq yonder"}),
	NetworkData: []byte(`{"links":[{"id":"eth0","type":"phy","ethernet_mac_address":"52:54:00:12:34:56"}],"networks":[{"id":"n0","link":"eth0","type":"ipv4_dhcp"}],"services":[]}`),
}

func TestWriteGPT(t *testing.T) {
	g := NewWithT(t)
	img := imageGPT(t, 256*mib)
	imageEnd := readTable(t, img).PartitionTable.Partitions[0]
	// The last whole MiB-aligned 64 MiB before the backup GPT (its entries take the disk's last 33 sectors).
	wantStart := int64(191 * mib / 512)
	res, err := Write(img, sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*res).To(Equal(Result{Device: img, Partition: 2, Table: "gpt", Offset: wantStart * 512, Size: 64 * mib, Filesystem: "vfat"}))

	tbl := readTable(t, img)
	g.Expect(tbl.PartitionTable.Label).To(Equal("gpt"))
	g.Expect(tbl.PartitionTable.LastLBA).To(Equal(int64(256*mib/512 - 34))) // backup moved to the disk's end
	g.Expect(tbl.PartitionTable.Partitions).To(HaveLen(2))
	g.Expect(tbl.PartitionTable.Partitions[0]).To(Equal(imageEnd))
	p := tbl.PartitionTable.Partitions[1]
	g.Expect(p.Start).To(Equal(wantStart))
	// The free space between the image and the config drive is where growpart grows the root partition.
	g.Expect(p.Start - (imageEnd.Start + imageEnd.Size)).To(BeNumerically(">", 100*mib/512))
	g.Expect(p.Size).To(Equal(int64(64 * mib / 512)))
	g.Expect(p.Type).To(Equal("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"))
	g.Expect(p.Name).To(Equal("config-2"))
	// sfdisk --verify reads both headers and both entry arrays and checks their CRCs and the backup's place.
	g.Expect(run(t, "", "sfdisk", "--verify", img)).To(ContainSubstring("No errors detected"))
	// The image's old backup header (its last sector, at 64 MiB) is gone.
	b, err := os.ReadFile(img)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b[64*mib-512 : 64*mib-512+8])).NotTo(Equal("EFI PART"))
	// The protective MBR covers the whole disk again.
	g.Expect(b[446+4]).To(Equal(byte(0xee)))
	g.Expect(binary.LittleEndian.Uint32(b[446+12:])).To(Equal(uint32(256*mib/512 - 1)))

	checkDrive(t, secondPartition(t, img, 512), sample)
}

func TestWriteGPTReusesTheConfigDrive(t *testing.T) {
	g := NewWithT(t)
	img := imageGPT(t, 256*mib)
	_, err := Write(img, sample)
	g.Expect(err).NotTo(HaveOccurred())
	before := readTable(t, img)

	second := Drive{UserData: []byte("#!/bin/sh\necho second\n"), MetaData: MetaData("second", "node-1", nil)}
	res, err := Write(img, second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Reused).To(BeTrue())
	g.Expect(res.Partition).To(Equal(2))
	g.Expect(readTable(t, img)).To(Equal(before))
	g.Expect(run(t, "", "sfdisk", "--verify", img)).To(ContainSubstring("No errors detected"))
	// network_data.json of the first write is gone: the filesystem is rebuilt, not patched.
	checkDrive(t, secondPartition(t, img, 512), second)
	out := run(t, "", "mdir", "-/", "-b", "-i", loopRange(t, img, res.Offset, res.Size), "::")
	g.Expect(out).NotTo(ContainSubstring("network_data.json"))
}

func TestWriteMBR(t *testing.T) {
	g := NewWithT(t)
	img := image(t, 256*mib, "label: dos\nstart=2048, size=129024, type=83\n")
	res, err := Write(img, sample)
	g.Expect(err).NotTo(HaveOccurred())
	// The disk's last 64 MiB.
	g.Expect(*res).To(Equal(Result{Device: img, Partition: 2, Table: "mbr", Offset: 192 * mib, Size: 64 * mib, Filesystem: "vfat"}))
	tbl := readTable(t, img)
	g.Expect(tbl.PartitionTable.Label).To(Equal("dos"))
	g.Expect(tbl.PartitionTable.Partitions).To(HaveLen(2))
	g.Expect(tbl.PartitionTable.Partitions[1].Start).To(Equal(int64(192 * mib / 512)))
	g.Expect(tbl.PartitionTable.Partitions[1].Size).To(Equal(int64(64 * mib / 512)))
	g.Expect(tbl.PartitionTable.Partitions[1].Type).To(Equal("e"))
	g.Expect(run(t, "", "sfdisk", "--verify", img)).To(ContainSubstring("No errors detected"))
	checkDrive(t, secondPartition(t, img, 512), sample)
	g.Expect(run(t, "", "fsck.fat", "-n", "-v", secondPartition(t, img, 512))).To(MatchRegexp(`\s393216 hidden sectors`))

	again, err := Write(img, sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Reused).To(BeTrue())
	g.Expect(again.Partition).To(Equal(2))
	g.Expect(readTable(t, img)).To(Equal(tbl))
}

// On an MBR disk larger than 2 TiB the config drive ends where MBR's addresses end (as Ironic places it).
func TestWriteMBRBeyond2TiB(t *testing.T) {
	g := NewWithT(t)
	img := image(t, 3<<40, "label: dos\nstart=2048, size=129024, type=83\n")
	res, err := Write(img, sample)
	g.Expect(err).NotTo(HaveOccurred())
	wantStart := (int64(1)<<32 - 1 - 64*mib/512) / 2048 * 2048
	g.Expect(res.Offset).To(Equal(wantStart * 512))
	tbl := readTable(t, img)
	g.Expect(tbl.PartitionTable.Partitions).To(HaveLen(2))
	g.Expect(tbl.PartitionTable.Partitions[1].Start).To(Equal(wantStart))
	g.Expect(tbl.PartitionTable.Partitions[1].Start + tbl.PartitionTable.Partitions[1].Size).To(BeNumerically("<=", int64(1)<<32))
	checkDrive(t, secondPartition(t, img, 512), sample)
}

// A whole-disk filesystem image (no partition table) written to a larger disk: the drive takes the disk's
// last 64 MiB, beyond the filesystem, which stays intact.
func TestWriteWithoutPartitionTable(t *testing.T) {
	g := NewWithT(t)
	img := image(t, 200*mib, "")
	run(t, "", "mkfs.ext4", "-q", "-F", img, "100M")
	d := Drive{MetaData: MetaData("u", "h", nil)} // no user_data, no network_data
	res, err := Write(img, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*res).To(Equal(Result{Device: img, Table: "none", Offset: 136 * mib, Size: 64 * mib, Filesystem: "vfat"}))
	checkDrive(t, loopRange(t, img, res.Offset, res.Size), d)
	run(t, "", "e2fsck", "-n", "-f", img)
	listing := run(t, "", "mdir", "-/", "-b", "-i", loopRange(t, img, res.Offset, res.Size), "::")
	g.Expect(listing).NotTo(ContainSubstring("user_data"))

	second := Drive{MetaData: []byte(`{"uuid":"u2"}`), UserData: []byte{}} // an empty user_data file
	again, err := Write(img, second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Reused).To(BeTrue())
	g.Expect(again.Offset).To(Equal(res.Offset))
	checkDrive(t, loopRange(t, img, res.Offset, res.Size), second)
}

// A config drive made by someone else (Ironic, an earlier tool, mkfs.vfat) in a partition of another size
// is found by its label, whatever its case and FAT flavour, and rewritten in place at that partition's
// size (at most 64 MiB of it); the table is left as it is.
func TestWriteReusesAnExistingConfigDrive(t *testing.T) {
	userData := make([]byte, 5*mib+123) // a chain of many clusters
	_, _ = rand.Read(userData)
	cases := []struct {
		name, script, table string
		mkfs                []string
		partSize            int64
		wantFS              int64
	}{{
		name:   "16 MiB FAT16 labelled CONFIG-2 in an MBR",
		script: "label: dos\nstart=2048, size=129024, type=83\nstart=131072, size=32768, type=c\n",
		table:  "mbr", mkfs: []string{"-n", "CONFIG-2"}, partSize: 16 * mib, wantFS: 16 * mib,
	}, {
		name:   "100 MiB FAT32 labelled config-2 in a GPT",
		script: "label: gpt\nstart=2048, size=129024, type=L\nstart=131072, size=204800, type=L\n",
		table:  "gpt", mkfs: []string{"-F", "32", "-n", "config-2"}, partSize: 100 * mib, wantFS: 64 * mib,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			img := image(t, 256*mib, c.script)
			args := append(append([]string{}, c.mkfs...), "--offset", "131072", img, strconv.FormatInt(c.partSize>>10, 10))
			run(t, "", "mkfs.vfat", args...)
			// The partition's last MiB holds a stale signature Write must clear (an mdraid 1.0 superblock lies there).
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = f.WriteAt([]byte("stale"), 64*mib+c.partSize-4096)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(f.Close()).To(Succeed())
			before := readTable(t, img)
			d := Drive{UserData: userData, MetaData: sample.MetaData}

			res, err := Write(img, d)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(*res).To(Equal(Result{Device: img, Partition: 2, Table: c.table, Offset: 64 * mib,
				Size: c.partSize, Reused: true, Filesystem: "vfat"}))
			g.Expect(readTable(t, img)).To(Equal(before))
			dev := secondPartition(t, img, 512)
			checkDrive(t, dev, d)
			g.Expect(run(t, "", "fsck.fat", "-n", "-v", dev)).To(ContainSubstring(strconv.FormatInt(c.wantFS/512, 10) + " sectors total"))
			b, err := os.ReadFile(img)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(b[64*mib+c.partSize-mib : 64*mib+c.partSize]).To(Equal(make([]byte, mib)))
		})
	}
}

func TestWriteRefusesWithoutChangingTheDisk(t *testing.T) {
	cases := []struct {
		name, script string
		size         int64
		mkfs         []string // run on the whole image
		wipeMBR      bool
		want         string
	}{{
		name: "MBR with four primary partitions",
		script: "label: dos\nstart=2048, size=20480, type=83\nstart=22528, size=20480, type=83\n" +
			"start=43008, size=20480, type=83\nstart=63488, size=20480, type=83\n",
		size: 256 * mib, want: "all four primary MBR partition slots are in use",
	}, {
		name: "MBR with an extended partition",
		script: "label: dos\nstart=2048, size=20480, type=83\nstart=22528, size=40960, type=5\n" +
			"start=24576, size=8192, type=83\n",
		size: 256 * mib, want: "extended partition",
	}, {
		name:   "MBR without 64 MiB free after the last partition",
		script: "label: dos\nstart=2048, size=300000, type=83\n",
		size:   200 * mib, want: "not enough free space after the last MBR partition",
	}, {
		name:   "GPT without 64 MiB free after the last partition",
		script: "label: gpt\nstart=2048, size=300000, type=L\n",
		size:   200 * mib, want: "not enough free space after the last GPT partition",
	}, {
		name:   "GPT with every entry in use",
		script: "label: gpt\ntable-length: 2\nstart=2048, size=2048, type=L\nstart=4096, size=2048, type=L\n",
		size:   256 * mib, want: "all 2 GPT partition entries are in use",
	}, {
		name: "disk too small", size: 100 * mib, want: "needs a disk of at least 128 MiB",
	}, {
		name: "whole-disk ext4 filesystem as large as the disk", size: 200 * mib, mkfs: []string{"mkfs.ext4", "-q", "-F"},
		want: "no partition table and its ext4 filesystem reaches byte 209715200",
	}, {
		name: "GPT without a protective MBR", script: "label: gpt\nstart=2048, size=2048, type=L\n", size: 200 * mib,
		wipeMBR: true, want: "GPT header but no protective MBR",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			img := image(t, c.size, c.script)
			if c.mkfs != nil {
				run(t, "", c.mkfs[0], append(c.mkfs[1:], img)...)
			}
			if c.wipeMBR {
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				g.Expect(err).NotTo(HaveOccurred())
				_, err = f.WriteAt(make([]byte, 512), 0)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(f.Close()).To(Succeed())
			}
			before := sum(t, img)
			_, err := Write(img, sample)
			g.Expect(err).To(MatchError(ContainSubstring(c.want)))
			g.Expect(err).To(MatchError(ContainSubstring(img)))
			g.Expect(sum(t, img)).To(Equal(before))
		})
	}
}

func TestWriteRefusesCorruptGPT(t *testing.T) {
	g := NewWithT(t)
	img := imageGPT(t, 256*mib)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteAt([]byte{0xff}, 2*512+56) // a byte of the first entry's name: the entries' CRC no longer matches
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	before := sum(t, img)
	_, err = Write(img, sample)
	g.Expect(err).To(MatchError(ContainSubstring("GPT entry array has a bad CRC")))
	g.Expect(sum(t, img)).To(Equal(before))
}

func TestWriteRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	img := image(t, 256*mib, "")
	before := sum(t, img)
	cases := []struct {
		name, device string
		drive        Drive
		want         string
	}{
		{"missing device", filepath.Join(dir, "absent"), sample, "no such file"},
		{"directory", dir, sample, "neither a block device nor a regular file"},
		{"character device", "/dev/null", sample, "neither a block device nor a regular file"},
		{"meta_data missing", img, Drive{UserData: []byte("#cloud-config\n")}, "meta_data.json is missing"},
		{"meta_data without uuid", img, Drive{MetaData: []byte(`{"hostname":"h"}`)}, `has no "uuid" string`},
		{"meta_data with an empty uuid", img, Drive{MetaData: []byte(`{"uuid":""}`)}, `has no "uuid" string`},
		{"meta_data not JSON", img, Drive{MetaData: []byte("uuid: x")}, "meta_data.json must be a JSON object"},
		{"meta_data an array", img, Drive{MetaData: []byte(`["x"]`)}, "meta_data.json must be a JSON object"},
		{"meta_data null", img, Drive{MetaData: []byte(`null`)}, "meta_data.json must be a JSON object: got null"},
		{"network_data not JSON", img, Drive{MetaData: sample.MetaData, NetworkData: []byte("{")}, "network_data.json must be a JSON object"},
		{"user_data too large", img, Drive{MetaData: sample.MetaData, UserData: make([]byte, DriveSize)}, "more than its 64 MiB filesystem holds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Write(c.device, c.drive)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(c.want)))
		})
	}
	NewWithT(t).Expect(sum(t, img)).To(Equal(before))
}

// A block device with 4 KiB logical sectors: size and sector size come from the kernel, the tables are in
// 4 KiB LBAs, and the FAT's logical sector is 4 KiB too (a smaller one does not mount on such a disk).
func TestWriteBlockDevice4KSectors(t *testing.T) {
	g := NewWithT(t)
	img := image(t, 256*mib, "")
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", "4096", img).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	run(t, "label: gpt\nstart=256, size=16128, type=L\n", "sfdisk", "--no-reread", "--no-tell-kernel", "-q", dev)

	res, err := Write(dev, sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*res).To(Equal(Result{Device: dev, Partition: 2, Table: "gpt", Offset: 191 * mib, Size: 64 * mib, Filesystem: "vfat"}))
	g.Expect(run(t, "", "sfdisk", "--verify", dev)).To(ContainSubstring("No errors detected"))
	tbl := readTable(t, dev)
	g.Expect(tbl.PartitionTable.Partitions).To(HaveLen(2))
	g.Expect(tbl.PartitionTable.Partitions[1].Start).To(Equal(int64(191 * mib / 4096)))
	g.Expect(tbl.PartitionTable.Partitions[1].Size).To(Equal(int64(64 * mib / 4096)))
	checkDrive(t, secondPartition(t, dev, 4096), sample)
	bps := run(t, "", "fsck.fat", "-n", "-v", secondPartition(t, dev, 4096))
	g.Expect(bps).To(ContainSubstring("4096 bytes per logical sector"))
}

func TestMetaData(t *testing.T) {
	g := NewWithT(t)
	g.Expect(MetaData("id-1", "node-0", map[string]string{"k": "ssh-ed25519 AAAA"})).To(MatchJSON(
		`{"uuid":"id-1","hostname":"node-0","name":"node-0","public_keys":{"k":"ssh-ed25519 AAAA"}}`))
	g.Expect(MetaData("id-1", "", nil)).To(MatchJSON(`{"uuid":"id-1"}`))
}
