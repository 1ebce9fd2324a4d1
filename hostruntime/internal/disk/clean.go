package disk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// cleanBytes is how much is zeroed at the start and at the end of the disk and of every partition.
//
// Metadata cleaning zeroes the first and the last MiB of every partition and of the whole disk instead of
// replaying wipefs's list of magic offsets: every signature `wipefs -a` removes for the formats a
// provisioned host carries lies there — MBR and GPT primary (sector 0-33) and backup (last 33 sectors),
// ext2/3/4 (1 KiB), xfs (0), btrfs (64 KiB), vfat (0), swap (last bytes of the first page), LVM2 PV label
// (sector 1), mdraid 0.90/1.0 (last 64-128 KiB) and 1.1/1.2 (0, 4 KiB), LUKS (0, 16 KiB), ZFS labels (first
// and last 512 KiB), ISO 9660 (32 KiB) — and it needs no table of formats that could miss a new one.
// Ironic's metadata cleaning ends the same way (wipefs plus zeroed GPT/MBR areas). Data in between is
// not erased: that is what `metadata` means (a full erase is Metal3's separate `erase_devices` step).
const cleanBytes = 1 << 20

// CleanReport says what Clean zeroed on one disk.
type CleanReport struct {
	Device     string      `json:"device"`
	SizeBytes  int64       `json:"sizeBytes"`
	Partitions []Partition `json:"partitions,omitempty"`
	Zeroed     []ByteRange `json:"zeroed"`
}

// Partition is a partition found in an on-disk table.
type Partition struct {
	StartBytes int64  `json:"startBytes"`
	SizeBytes  int64  `json:"sizeBytes"`
	Source     string `json:"source"`
}

// ByteRange is a zeroed range of the disk.
type ByteRange struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// Clean removes the partition tables and the filesystem, RAID and LVM signatures of one whole disk and
// its partitions. Partitions are read from the on-disk GPT (primary, else the backup at the end) and MBR
// (with the logical partitions of an extended one), not from the kernel's view: the ramdisk's kernel may
// not have scanned the table, or may lack the partition format, and what matters is what is on the disk.
func Clean(device string) (*CleanReport, error) {
	t, err := openTarget(device)
	if err != nil {
		return nil, err
	}
	defer func() { _ = t.Close() }()
	rep := &CleanReport{Device: device, SizeBytes: t.size}
	sector := int64(512)
	if ss, err := unix.IoctlGetInt(int(t.f.Fd()), unix.BLKSSZGET); err == nil && ss >= 512 {
		sector = int64(ss)
	}
	parts, err := readPartitionTables(t.f, t.size, sector)
	if err != nil {
		return nil, fmt.Errorf("failed to read the partition table of %s: %w", device, err)
	}
	rep.Partitions = dedupPartitions(parts, t.size)
	var ranges []ByteRange
	add := func(start, size int64) {
		n := min(size, cleanBytes)
		ranges = append(ranges, ByteRange{start, n}, ByteRange{start + size - n, n})
	}
	for _, p := range rep.Partitions {
		add(p.StartBytes, p.SizeBytes)
	}
	add(0, t.size)
	rep.Zeroed = mergeRanges(ranges)
	for _, r := range rep.Zeroed {
		if err := t.writeZeros(r.Offset, r.Length); err != nil {
			return nil, err
		}
	}
	if err := t.flush(); err != nil {
		return nil, err
	}
	t.rereadPartitions()
	return rep, nil
}

// readPartitionTables parses GPT (primary header at LBA 1, else the backup in the last LBA) and MBR.
func readPartitionTables(f *os.File, size, sector int64) ([]Partition, error) {
	var parts []Partition
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return nil, err
	}
	if mbr[510] == 0x55 && mbr[511] == 0xaa {
		for i := range 4 {
			e := mbr[446+16*i:]
			typ := e[4]
			if typ == 0 || typ == 0xee {
				continue
			}
			start := int64(binary.LittleEndian.Uint32(e[8:])) * sector
			n := int64(binary.LittleEndian.Uint32(e[12:])) * sector
			parts = append(parts, Partition{start, n, "mbr"})
			if typ == 0x05 || typ == 0x0f || typ == 0x85 {
				parts = append(parts, logicalPartitions(f, start, sector, size)...)
			}
		}
	}
	for _, lba := range []int64{1, size/sector - 1} {
		if p, ok := gptPartitions(f, lba, sector, size); ok {
			return append(parts, p...), nil
		}
	}
	return parts, nil
}

// logicalPartitions walks an extended partition's chain of EBRs (bounded, a loop in it is garbage).
func logicalPartitions(f *os.File, extStart, sector, size int64) []Partition {
	var parts []Partition
	ebr := make([]byte, 512)
	next := extStart
	for range 128 {
		if next <= 0 || next >= size {
			break
		}
		if _, err := f.ReadAt(ebr, next); err != nil || ebr[510] != 0x55 || ebr[511] != 0xaa {
			break
		}
		e := ebr[446:]
		if e[4] != 0 {
			start := next + int64(binary.LittleEndian.Uint32(e[8:]))*sector
			parts = append(parts, Partition{start, int64(binary.LittleEndian.Uint32(e[12:])) * sector, "mbr-logical"})
		}
		link := ebr[446+16:]
		if link[4] == 0 {
			break
		}
		next = extStart + int64(binary.LittleEndian.Uint32(link[8:]))*sector
	}
	return parts
}

func gptPartitions(f *os.File, lba, sector, size int64) ([]Partition, bool) {
	hdr := make([]byte, 92)
	if lba <= 0 {
		return nil, false
	}
	if _, err := f.ReadAt(hdr, lba*sector); err != nil || !bytes.Equal(hdr[:8], []byte("EFI PART")) {
		return nil, false
	}
	le := binary.LittleEndian
	entriesLBA := int64(le.Uint64(hdr[72:])) //nolint:gosec // bounded below
	count := int64(le.Uint32(hdr[80:]))
	esize := int64(le.Uint32(hdr[84:]))
	if esize < 128 || esize > 4096 || count > 4096 || entriesLBA <= 0 || entriesLBA*sector+count*esize > size {
		return nil, false
	}
	tbl := make([]byte, count*esize)
	if _, err := f.ReadAt(tbl, entriesLBA*sector); err != nil {
		return nil, false
	}
	var parts []Partition
	for i := range count {
		e := tbl[i*esize:]
		if bytes.Equal(e[:16], make([]byte, 16)) {
			continue
		}
		first, last := int64(le.Uint64(e[32:])), int64(le.Uint64(e[40:])) //nolint:gosec // checked below
		if first <= 0 || last < first {
			continue
		}
		parts = append(parts, Partition{first * sector, (last - first + 1) * sector, "gpt"})
	}
	return parts, true
}

// dedupPartitions drops duplicates (a GPT partition its hybrid MBR repeats) and clips every
// partition to the disk: a corrupt table must not make the cleaner write past the end.
func dedupPartitions(parts []Partition, size int64) []Partition {
	seen := map[string]bool{}
	var out []Partition
	for _, p := range parts {
		if p.StartBytes >= size || p.SizeBytes <= 0 {
			continue
		}
		p.SizeBytes = min(p.SizeBytes, size-p.StartBytes)
		k := strconv.FormatInt(p.StartBytes, 10) + "+" + strconv.FormatInt(p.SizeBytes, 10)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartBytes < out[j].StartBytes })
	return out
}

func mergeRanges(rs []ByteRange) []ByteRange {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	var out []ByteRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.Offset <= out[n-1].Offset+out[n-1].Length {
			out[n-1].Length = max(out[n-1].Length, r.Offset+r.Length-out[n-1].Offset)
			continue
		}
		out = append(out, r)
	}
	return out
}
