package configdrive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"unicode/utf16"
)

// Partition tables are read and changed here rather than with a library: the work is small (find the
// last partition, add one entry, move GPT's backup to the disk's end) and has to be exactly sgdisk's and
// Ironic's, with every check done before the first byte is written.

const (
	tableGPT  = "gpt"
	tableMBR  = "mbr"
	tableNone = "none"

	mbrSlots       = 4
	mbrEntryOffset = 446
	gptMaxEntries  = 4096
)

// basicDataGUID is "Microsoft basic data" (EBD0A0A2-B9E5-4433-87C0-68B6B72699C7) in GPT's mixed-endian
// encoding: the type parted and Ironic give a FAT partition on GPT.
var basicDataGUID = [16]byte{0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26, 0x99, 0xc7}

// mbrTypeFAT16LBA is the MBR type of a FAT16 filesystem addressed by LBA, which is what the partition holds.
const mbrTypeFAT16LBA = 0x0e

// blockWrite is one write of partition-table bytes.
type blockWrite struct {
	off  int64
	data []byte
}

// plan is everything Write does, computed and checked before anything is written.
type plan struct {
	table     string
	partition int   // partition number (1-based); 0 without a table
	offset    int64 // where the filesystem goes
	size      int64 // the partition (or, without a table, the area) the filesystem fills
	reused    bool
	// tableWrites run after the filesystem is on the disk, in order: backup GPT, primary GPT, MBR.
	tableWrites []blockWrite
}

// diskView is a disk (or image file) being planned for.
type diskView struct {
	r      io.ReaderAt
	size   int64
	sector int64
}

func (d diskView) read(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > d.size {
		return nil, fmt.Errorf("read of %d bytes at %d is outside the %d-byte disk", n, off, d.size)
	}
	b := make([]byte, n)
	if _, err := d.r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// makePlan decides where the config drive of driveSize bytes goes on d.
func makePlan(d diskView, driveSize int64, partGUID [16]byte) (*plan, error) {
	if d.sector < 512 || d.sector&(d.sector-1) != 0 {
		return nil, fmt.Errorf("unsupported sector size %d", d.sector)
	}
	if d.size < 2*driveSize {
		return nil, fmt.Errorf("the disk has %d bytes; a %d MiB config drive needs a disk of at least %d MiB",
			d.size, driveSize>>20, 2*driveSize>>20)
	}
	mbr, err := d.read(0, 512)
	if err != nil {
		return nil, fmt.Errorf("failed to read the MBR: %w", err)
	}
	switch mbrKind(mbr) {
	case tableGPT:
		return planGPT(d, mbr, driveSize, partGUID)
	case tableMBR:
		return planMBR(d, mbr, driveSize)
	default:
		return planNone(d, driveSize)
	}
}

// mbrKind tells a protective MBR (GPT), a DOS partition table and no table apart. A boot sector whose
// partition entries do not have a valid status byte is not a table (a filesystem's boot sector, e.g. a
// whole-disk FAT image, also ends in 55 AA).
func mbrKind(mbr []byte) string {
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		return tableNone
	}
	used := false
	for i := range mbrSlots {
		e := mbr[mbrEntryOffset+16*i:]
		if e[0] != 0 && e[0] != 0x80 {
			return tableNone
		}
		if e[4] == 0xee {
			return tableGPT
		}
		used = used || e[4] != 0
	}
	if !used {
		return tableNone
	}
	return tableMBR
}

// planNone puts the drive in the disk's last driveSize bytes: on a whole-disk filesystem image written to
// a larger disk, the only bytes the image does not use. (Ironic has no such case: its parted call fails on
// a disk without a label.)
func planNone(d diskView, driveSize int64) (*plan, error) {
	if h, err := d.read(d.sector, 8); err == nil && string(h) == "EFI PART" {
		return nil, errors.New("the disk has a GPT header but no protective MBR (the kernel ignores such a table); repair the image's partition table first")
	}
	off := (d.size - driveSize) / d.sector * d.sector
	if isConfigDrive(d, off, d.size-off) {
		return &plan{table: tableNone, offset: off, size: d.size - off, reused: true}, nil
	}
	// A whole-disk filesystem as large as the disk would lose its last 64 MiB.
	if fs, end := wholeDiskFilesystem(d); end > off {
		return nil, fmt.Errorf("the disk has no partition table and its %s filesystem reaches byte %d, into the last %d MiB the config drive needs",
			fs, end, driveSize>>20)
	}
	return &plan{table: tableNone, offset: off, size: d.size - off}, nil
}

// wholeDiskFilesystem returns the type and the size in bytes of an ext2/3/4 or XFS filesystem that starts
// at the disk's first byte (a raw filesystem image), or "" and 0.
func wholeDiskFilesystem(d diskView) (string, int64) {
	if sb, err := d.read(1024, 1024); err == nil && binary.LittleEndian.Uint16(sb[56:]) == 0xef53 {
		logBlock := binary.LittleEndian.Uint32(sb[24:])
		blocks := uint64(binary.LittleEndian.Uint32(sb[4:]))
		if binary.LittleEndian.Uint32(sb[96:])&0x80 != 0 { // INCOMPAT_64BIT: the high half of the count
			blocks |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
		}
		if logBlock <= 6 && blocks < 1<<50 {
			return "ext4", int64(blocks) << (10 + logBlock)
		}
		return "ext4", d.size
	}
	if sb, err := d.read(0, 16); err == nil && string(sb[:4]) == "XFSB" {
		blockSize := binary.BigEndian.Uint32(sb[4:])
		blocks := binary.BigEndian.Uint64(sb[8:])
		if blockSize <= 1<<16 && blocks < 1<<44 {
			return "xfs", int64(blocks) * int64(blockSize)
		}
		return "xfs", d.size
	}
	return "", 0
}

// placeAtEnd returns the first sector of an n-sector partition that ends as late as it can before end
// (exclusive) and starts on a MiB boundary, and whether it starts at or after free, the first sector
// past the last partition. The end of the disk, as Ironic places it (`sgdisk -n 0:-64MB:0`, `parted mkpart
// -64MiB -0`): the image's last partition — its root filesystem — keeps the free space behind it, so
// cloud-init's growpart can still grow it up to the config drive.
func placeAtEnd(free, end, n, sector int64) (int64, bool) {
	align := (1 << 20) / sector
	start := (end - n) / align * align
	return start, start >= free && start > 0
}

func planMBR(d diskView, mbr []byte, driveSize int64) (*plan, error) {
	le := binary.LittleEndian
	sectors := d.size / d.sector
	free, lastEnd := -1, int64(1)
	for i := range mbrSlots {
		e := mbr[mbrEntryOffset+16*i:]
		typ := e[4]
		if typ == 0 {
			if free < 0 {
				free = i
			}
			continue
		}
		if typ == 0x05 || typ == 0x0f || typ == 0x85 {
			return nil, fmt.Errorf("the MBR has an extended partition (slot %d, type %#02x); a config drive is only added as a primary partition", i+1, typ)
		}
		start, n := int64(le.Uint32(e[8:])), int64(le.Uint32(e[12:]))
		if start == 0 || n == 0 || start+n > sectors {
			return nil, fmt.Errorf("MBR partition %d (sectors %d+%d) does not lie on the %d-sector disk: the table is corrupt", i+1, start, n, sectors)
		}
		if isConfigDrive(d, start*d.sector, n*d.sector) {
			return &plan{table: tableMBR, partition: i + 1, offset: start * d.sector, size: n * d.sector, reused: true}, nil
		}
		lastEnd = max(lastEnd, start+n)
	}
	if free < 0 {
		return nil, errors.New("all four primary MBR partition slots are in use; no slot is left for the config drive")
	}
	// MBR addresses 2^32 sectors: on a larger disk the drive ends there, as Ironic places it.
	end := min(sectors, 1<<32-1)
	n := driveSize / d.sector
	start, ok := placeAtEnd(lastEnd, end, n, d.sector)
	if !ok {
		limit := ""
		if end < sectors {
			limit = " (an MBR addresses only the disk's first 2 TiB)"
		}
		return nil, fmt.Errorf("not enough free space after the last MBR partition (ends at byte %d): the config drive needs %d MiB, the usable space ends at byte %d%s",
			lastEnd*d.sector, driveSize>>20, end*d.sector, limit)
	}
	out := bytes.Clone(mbr)
	e := out[mbrEntryOffset+16*free:]
	copy(e, []byte{0x00, 0xfe, 0xff, 0xff, mbrTypeFAT16LBA, 0xfe, 0xff, 0xff}) // CHS "use LBA"
	le.PutUint32(e[8:], uint32(start))                                         //nolint:gosec // checked above
	le.PutUint32(e[12:], uint32(n))                                            //nolint:gosec // checked above
	return &plan{table: tableMBR, partition: free + 1, offset: start * d.sector, size: n * d.sector,
		tableWrites: []blockWrite{{0, out}}}, nil
}

// gptHeader is the part of a GPT header this package reads and rewrites.
type gptHeader struct {
	raw                                                []byte // headerSize bytes
	myLBA, altLBA, firstUsable, lastUsable, entriesLBA int64
	count, entrySize                                   int64
}

func parseGPTHeader(d diskView, lba int64) (*gptHeader, error) {
	b, err := d.read(lba*d.sector, d.sector)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if !bytes.Equal(b[:8], []byte("EFI PART")) {
		return nil, fmt.Errorf("no GPT header signature at LBA %d", lba)
	}
	hs := int64(le.Uint32(b[12:]))
	if hs < 92 || hs > d.sector {
		return nil, fmt.Errorf("GPT header at LBA %d has an invalid size %d", lba, hs)
	}
	h := &gptHeader{raw: bytes.Clone(b[:hs])}
	want := le.Uint32(h.raw[16:])
	if gptCRC(h.raw) != want {
		return nil, fmt.Errorf("GPT header at LBA %d has a bad CRC", lba)
	}
	u := func(off int) int64 {
		v := le.Uint64(h.raw[off:])
		if v > 1<<62 {
			return -1
		}
		return int64(v)
	}
	h.myLBA, h.altLBA, h.firstUsable, h.lastUsable, h.entriesLBA = u(24), u(32), u(40), u(48), u(72)
	h.count, h.entrySize = int64(le.Uint32(h.raw[80:])), int64(le.Uint32(h.raw[84:]))
	lastLBA := d.size/d.sector - 1
	switch {
	case h.myLBA != lba:
		return nil, fmt.Errorf("GPT header at LBA %d says it is at LBA %d", lba, h.myLBA)
	case h.entrySize < 128 || h.entrySize%128 != 0 || h.entrySize > 4096 || h.count < 1 || h.count > gptMaxEntries:
		return nil, fmt.Errorf("GPT header at LBA %d has %d entries of %d bytes: not a valid table", lba, h.count, h.entrySize)
	case h.altLBA < 1 || h.altLBA > lastLBA:
		return nil, fmt.Errorf("GPT header at LBA %d puts its backup at LBA %d, beyond the disk's last LBA %d", lba, h.altLBA, lastLBA)
	case h.firstUsable < 2 || h.lastUsable < h.firstUsable || h.lastUsable > lastLBA:
		return nil, fmt.Errorf("GPT header at LBA %d has an invalid usable range %d-%d", lba, h.firstUsable, h.lastUsable)
	case h.entriesLBA < 2 || h.entriesLBA > lastLBA:
		return nil, fmt.Errorf("GPT header at LBA %d has its entries at an invalid LBA %d", lba, h.entriesLBA)
	}
	return h, nil
}

// gptCRC is the CRC32 of a header with its own CRC field taken as zero.
func gptCRC(hdr []byte) uint32 {
	c := bytes.Clone(hdr)
	clear(c[16:20])
	return crc32.ChecksumIEEE(c)
}

func planGPT(d diskView, mbr []byte, driveSize int64, partGUID [16]byte) (*plan, error) {
	le := binary.LittleEndian
	h, err := parseGPTHeader(d, 1)
	if err != nil {
		return nil, fmt.Errorf("the primary GPT header is invalid (%w); repair the image's partition table first", err)
	}
	entries, err := d.read(h.entriesLBA*d.sector, h.count*h.entrySize)
	if err != nil {
		return nil, fmt.Errorf("the GPT entry array does not fit the disk: %w", err)
	}
	if crc32.ChecksumIEEE(entries) != le.Uint32(h.raw[88:]) {
		return nil, errors.New("the GPT entry array has a bad CRC; repair the image's partition table first")
	}
	lastLBA := d.size/d.sector - 1
	entrySectors := (h.count*h.entrySize + d.sector - 1) / d.sector
	// The new partition starts at or after firstUsable; entries past it could end up under the filesystem.
	if h.entriesLBA+entrySectors > h.firstUsable {
		return nil, fmt.Errorf("the GPT entry array (LBA %d, %d sectors) reaches into the usable area starting at LBA %d: the table is corrupt",
			h.entriesLBA, entrySectors, h.firstUsable)
	}
	backupEntriesLBA := lastLBA - entrySectors
	newLastUsable := backupEntriesLBA - 1
	free, lastEnd := -1, h.firstUsable-1
	var reuse *plan
	for i := range h.count {
		e := entries[i*h.entrySize:]
		if bytes.Equal(e[:16], make([]byte, 16)) {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		first, last := int64(le.Uint64(e[32:])), int64(le.Uint64(e[40:])) //nolint:gosec // checked next
		if first < h.firstUsable || last < first || last > newLastUsable {
			return nil, fmt.Errorf("GPT partition %d (LBA %d-%d) lies outside the usable area %d-%d of the disk", i+1, first, last, h.firstUsable, newLastUsable)
		}
		if reuse == nil && isConfigDrive(d, first*d.sector, (last-first+1)*d.sector) {
			reuse = &plan{table: tableGPT, partition: int(i) + 1, offset: first * d.sector, size: (last - first + 1) * d.sector, reused: true}
		}
		lastEnd = max(lastEnd, last)
	}
	p := reuse
	if p == nil {
		if free < 0 {
			return nil, fmt.Errorf("all %d GPT partition entries are in use; no entry is left for the config drive", h.count)
		}
		n := driveSize / d.sector
		start, ok := placeAtEnd(lastEnd+1, newLastUsable+1, n, d.sector)
		if !ok {
			return nil, fmt.Errorf("not enough free space after the last GPT partition (ends at byte %d): the config drive needs %d MiB, the usable area ends at byte %d",
				(lastEnd+1)*d.sector, driveSize>>20, (newLastUsable+1)*d.sector)
		}
		e := entries[int64(free)*h.entrySize:]
		clear(e[:h.entrySize])
		copy(e[0:], basicDataGUID[:])
		copy(e[16:], partGUID[:])
		le.PutUint64(e[32:], uint64(start))     //nolint:gosec // positive
		le.PutUint64(e[40:], uint64(start+n-1)) //nolint:gosec // positive
		for j, u := range utf16.Encode([]rune(label)) {
			le.PutUint16(e[56+2*j:], u)
		}
		p = &plan{table: tableGPT, partition: free + 1, offset: start * d.sector, size: n * d.sector}
	}
	if p.reused && h.altLBA == lastLBA && h.lastUsable == newLastUsable {
		return p, nil // already a config drive on a table that spans the disk: only the filesystem is rewritten
	}
	p.tableWrites = gptWrites(d, h, entries, mbr, lastLBA, backupEntriesLBA, newLastUsable)
	// The image's own backup header, now in the free space or inside the config drive: cleared so no tool
	// finds a stale table in the middle of the disk, unless the filesystem just written covers it.
	if old := h.altLBA * d.sector; h.altLBA != lastLBA && h.altLBA > h.lastUsable && (old < p.offset || old >= p.offset+p.size) {
		p.tableWrites = append(p.tableWrites, blockWrite{old, make([]byte, d.sector)})
	}
	return p, nil
}

// gptWrites are the new backup (at the disk's end, as `sgdisk -e` moves it), then the new primary, then
// the protective MBR widened to the disk. Until the primary is written the image's primary table
// is untouched and valid, so an interruption leaves a disk that boots as the image did.
func gptWrites(d diskView, h *gptHeader, entries, mbr []byte, lastLBA, backupEntriesLBA, lastUsable int64) []blockWrite {
	le := binary.LittleEndian
	entriesCRC := crc32.ChecksumIEEE(entries)
	header := func(my, alt, entriesLBA int64) []byte {
		b := make([]byte, d.sector)
		copy(b, h.raw)
		le.PutUint64(b[24:], uint64(my))         //nolint:gosec // positive
		le.PutUint64(b[32:], uint64(alt))        //nolint:gosec // positive
		le.PutUint64(b[48:], uint64(lastUsable)) //nolint:gosec // positive
		le.PutUint64(b[72:], uint64(entriesLBA)) //nolint:gosec // positive
		le.PutUint32(b[88:], entriesCRC)
		le.PutUint32(b[16:], gptCRC(b[:len(h.raw)]))
		return b
	}
	padded := make([]byte, (int64(len(entries))+d.sector-1)/d.sector*d.sector)
	copy(padded, entries)
	writes := []blockWrite{
		{backupEntriesLBA * d.sector, padded},
		{lastLBA * d.sector, header(lastLBA, 1, backupEntriesLBA)},
		{h.entriesLBA * d.sector, padded},
		{d.sector, header(1, lastLBA, h.entriesLBA)},
	}
	if pm := widenProtectiveMBR(mbr, d.size/d.sector); pm != nil {
		writes = append(writes, blockWrite{0, pm})
	}
	return writes
}

// widenProtectiveMBR makes a protective MBR's 0xEE partition cover the whole disk again, as it did the
// image; a hybrid MBR (other entries beside 0xEE) is left as the image made it.
func widenProtectiveMBR(mbr []byte, sectors int64) []byte {
	out := bytes.Clone(mbr)
	var pe []byte
	for i := range mbrSlots {
		e := out[mbrEntryOffset+16*i:]
		switch e[4] {
		case 0:
		case 0xee:
			pe = e
		default:
			return nil
		}
	}
	if pe == nil {
		return nil
	}
	binary.LittleEndian.PutUint32(pe[12:], uint32(min(sectors-1, 1<<32-1))) //nolint:gosec // clamped
	copy(pe[5:8], []byte{0xfe, 0xff, 0xff})
	if bytes.Equal(out, mbr) {
		return nil
	}
	return out
}

// isConfigDrive says whether the filesystem at [off, off+n) is labelled config-2: FAT (the label in its
// boot sector) or ISO 9660 (the volume identifier), the two formats cloud-init reads a config drive from.
func isConfigDrive(d diskView, off, n int64) bool {
	l := fsLabel(d, off, n)
	return strings.EqualFold(l, label)
}

func fsLabel(d diskView, off, n int64) string {
	if n >= 32768+2048 {
		if b, err := d.read(off+32768, 2048); err == nil && b[0] == 1 && string(b[1:6]) == "CD001" {
			return strings.TrimRight(string(b[40:72]), " \x00")
		}
	}
	if n < 512 {
		return ""
	}
	b, err := d.read(off, 512)
	if err != nil || b[510] != 0x55 || b[511] != 0xaa || (b[0] != 0xeb && b[0] != 0xe9) {
		return ""
	}
	if binary.LittleEndian.Uint16(b[22:]) == 0 && b[66] == 0x29 { // FAT32: sectors per FAT in the extended BPB
		return strings.TrimRight(string(b[71:82]), " \x00")
	}
	if b[38] == 0x29 && bytes.HasPrefix(b[54:62], []byte("FAT")) {
		return strings.TrimRight(string(b[43:54]), " \x00")
	}
	return ""
}
