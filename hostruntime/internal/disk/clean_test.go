package disk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// probe runs the real blkid on dev at offset: the signature type it finds, "" when it finds none.
func probe(t *testing.T, dev string, offset int64) string {
	t.Helper()
	out, err := exec.Command("blkid", "-p", "-O", strconv.FormatInt(offset, 10), "-o", "value", "-s", "TYPE", "-s", "PTTYPE", dev).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return ""
	}
	if err != nil {
		t.Fatalf("blkid -p -O %d %s: %v: %s", offset, dev, err, out)
	}
	return strings.TrimSpace(string(out))
}

type testPartition struct {
	start, size int64
	mkfs        []string // the command; the partition's device is appended
}

// TestCleanMetadata writes real partition tables with sfdisk and real filesystems with mkfs and mkswap
// (through loop devices over each partition's byte range: this machine's kernel parses no partition
// table, as a minimal ramdisk kernel may not either), cleans the whole disk, and checks with the real
// wipefs, blkid and sfdisk that nothing is left on the disk nor at any old partition's start.
func TestCleanMetadata(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		table string
		parts []testPartition
	}{
		{
			name:  "gpt",
			table: "label: gpt\nstart=1MiB, size=16MiB, type=uefi\nstart=17MiB, size=16MiB, type=linux\nstart=33MiB, size=8MiB, type=swap\nstart=41MiB, size=16MiB, type=linux\n",
			parts: []testPartition{
				{1 * mib, 16 * mib, []string{"mkfs.vfat", "-F", "32"}},
				{17 * mib, 16 * mib, []string{"mkfs.ext4", "-q", "-F"}},
				{33 * mib, 8 * mib, []string{"mkswap"}},
				{41 * mib, 16 * mib, []string{"mkfs.ext2", "-q", "-F"}},
			},
		},
		{
			name:  "mbr with logical partitions",
			table: "label: dos\nstart=1MiB, size=16MiB, type=83\nstart=17MiB, size=60MiB, type=5\nstart=18MiB, size=16MiB, type=83\nstart=35MiB, size=16MiB, type=82\n",
			parts: []testPartition{
				{1 * mib, 16 * mib, []string{"mkfs.ext4", "-q", "-F"}},
				{18 * mib, 16 * mib, []string{"mkfs.ext4", "-q", "-F"}},
				{35 * mib, 16 * mib, []string{"mkswap"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			img := filepath.Join(t.TempDir(), "disk.img")
			g.Expect(os.WriteFile(img, nil, 0o600)).To(Succeed())
			g.Expect(os.Truncate(img, 80*mib)).To(Succeed())
			dev := attach(t, img)
			sf := exec.Command("sfdisk", "--quiet", dev)
			sf.Stdin = strings.NewReader(tc.table)
			out, err := sf.CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), string(out))
			for _, p := range tc.parts {
				part := attachRange(t, img, p.start, p.size)
				run(t, p.mkfs[0], append(p.mkfs[1:], part)...)
				detach(t, part)
			}
			g.Expect(probe(t, dev, 0)).NotTo(BeEmpty(), "the partition table is there before cleaning")
			for _, p := range tc.parts {
				g.Expect(probe(t, dev, p.start)).NotTo(BeEmpty(), "%s made a signature at %d", p.mkfs[0], p.start)
			}

			rep, err := Clean(dev)
			g.Expect(err).NotTo(HaveOccurred())
			var found []int64
			for _, p := range rep.Partitions {
				found = append(found, p.StartBytes)
			}
			for _, p := range tc.parts {
				g.Expect(found).To(ContainElement(p.start), "Clean read every partition from the table")
			}
			g.Expect(run(t, "wipefs", "--no-act", "--noheadings", dev)).To(BeEmpty(), "wipefs finds no signature on the disk")
			g.Expect(probe(t, dev, 0)).To(BeEmpty(), "blkid finds no partition table")
			for _, p := range tc.parts {
				g.Expect(probe(t, dev, p.start)).To(BeEmpty(), "the signature at %d is gone", p.start)
				part := attachRange(t, img, p.start, p.size)
				g.Expect(run(t, "wipefs", "--no-act", "--noheadings", part)).To(BeEmpty(), "wipefs finds nothing in the old partition at %d", p.start)
				detach(t, part)
			}
			out, err = exec.Command("sfdisk", "--dump", dev).CombinedOutput()
			g.Expect(err).To(HaveOccurred())
			g.Expect(string(out)).To(ContainSubstring("does not contain a recognized partition table"))
		})
	}
}

// attachRange attaches [start, start+size) of img as its own loop device: a partition the kernel does not
// create here.
func attachRange(t *testing.T, img string, start, size int64) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", "--offset", strconv.FormatInt(start, 10),
		"--sizelimit", strconv.FormatInt(size, 10), img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	detachAtCleanup(t, dev, img)
	return dev
}

// TestCleanFindsBackupGPT: a disk whose primary GPT was destroyed still has the backup at its end, which
// firmware and partitioners restore from; Clean reads the partitions from it and removes both.
func TestCleanFindsBackupGPT(t *testing.T) {
	g := NewWithT(t)
	dev := loopDevice(t, 40<<20)
	sf := exec.Command("sfdisk", "--quiet", dev)
	sf.Stdin = strings.NewReader("label: gpt\nstart=4MiB, size=16MiB, type=linux\n")
	out, err := sf.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	run(t, "mkfs.ext4", "-q", "-F", "-E", "offset="+strconv.Itoa(4<<20), dev, "16M")
	g.Expect(probe(t, dev, 4<<20)).To(Equal("ext4"))
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteAt(make([]byte, 34*512), 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())

	rep, err := Clean(dev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Partitions).To(ConsistOf(Partition{StartBytes: 4 << 20, SizeBytes: 16 << 20, Source: "gpt"}))
	g.Expect(probe(t, dev, 4<<20)).To(BeEmpty())
	g.Expect(run(t, "wipefs", "--no-act", "--noheadings", dev)).To(BeEmpty())
}

func TestCleanRefusesADeviceInUse(t *testing.T) {
	g := NewWithT(t)
	dev := loopDevice(t, 8<<20)
	holder, err := os.OpenFile(dev, os.O_RDONLY|unix.O_EXCL, 0) // what a mounted filesystem holds
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = holder.Close() }()
	_, err = Clean(dev)
	g.Expect(err).To(MatchError(ContainSubstring("failed to open " + dev + " exclusively (mounted or in use?)")))
}
