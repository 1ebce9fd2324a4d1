package configdrive

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
)

// The filesystem is FAT16, written here rather than by mkfs.vfat (the ramdisk is busybox only) or by a
// library: a config drive is three small files in two directories, and FAT16 is what mkfs.vfat itself
// picks for 64 MiB (FAT32 needs at least 65525 clusters, which 64 MiB of 4 KiB-sector disks does not
// give). Names are stored as VFAT long names, so cloud-init sees "openstack", "meta_data.json"… exactly.

const (
	fatReservedSectors = 4
	fatRootEntries     = 512
	fatDirEntrySize    = 32
	fat16MinClusters   = 4085
	fat16MaxClusters   = 65524
)

// fatNode is a file or directory of the filesystem to build.
type fatNode struct {
	name     string
	dir      bool
	data     []byte
	children []*fatNode
	cluster  uint32 // first cluster, 0 for an empty file
	clusters uint32
}

// fatGeometry is the layout of a FAT16 filesystem of a given size, in sectors of the disk's sector size
// (a FAT whose logical sector is smaller than the device's does not mount).
type fatGeometry struct {
	sector, perCluster, fatSectors, rootSectors, total int64
	clusters                                           int64
}

func (g fatGeometry) clusterBytes() int64 { return g.sector * g.perCluster }
func (g fatGeometry) fatStart() int64     { return fatReservedSectors * g.sector }
func (g fatGeometry) rootStart() int64    { return g.fatStart() + 2*g.fatSectors*g.sector }
func (g fatGeometry) dataStart() int64    { return g.rootStart() + g.rootSectors*g.sector }
func (g fatGeometry) clusterOffset(c uint32) int64 {
	return g.dataStart() + int64(c-2)*g.clusterBytes()
}

// newFATGeometry picks the cluster size: 2 KiB like mkfs.vfat where the cluster count allows, else the
// next size that keeps the count inside FAT16's range.
func newFATGeometry(size, sector int64) (fatGeometry, error) {
	total := size / sector
	rootSectors := (fatRootEntries*fatDirEntrySize + sector - 1) / sector
	for _, clusterBytes := range []int64{2048, 4096, 8192, 16384, 32768, 1024, 512} {
		if clusterBytes < sector {
			continue
		}
		g := fatGeometry{sector: sector, perCluster: clusterBytes / sector, rootSectors: rootSectors, total: total}
		for g.fatSectors = 1; ; {
			g.clusters = (total - fatReservedSectors - 2*g.fatSectors - rootSectors) / g.perCluster
			need := ((g.clusters+2)*2 + sector - 1) / sector
			if need <= g.fatSectors {
				break
			}
			g.fatSectors = need
		}
		if g.clusters >= fat16MinClusters && g.clusters <= fat16MaxClusters {
			return g, nil
		}
	}
	return fatGeometry{}, fmt.Errorf("%d bytes with %d-byte sectors cannot hold a FAT16 filesystem", size, sector)
}

// buildFAT returns a FAT16 filesystem image of size bytes labelled config-2 holding root's children.
// hidden is the filesystem's first sector on the disk (the BPB's "hidden sectors", as mkfs.vfat sets it on
// a partition).
func buildFAT(size, sector, hidden int64, root *fatNode, now time.Time, serial uint32) ([]byte, error) {
	g, err := newFATGeometry(size, sector)
	if err != nil {
		return nil, err
	}
	next := uint32(2)
	if err := allocate(root, g, &next, true); err != nil {
		return nil, err
	}
	if int64(next-2) > g.clusters {
		return nil, fmt.Errorf("the config drive's files need %d clusters of %d bytes, the %d-byte filesystem has %d",
			next-2, g.clusterBytes(), size, g.clusters)
	}
	img := make([]byte, g.total*sector)
	writeBootSector(img, g, hidden, serial)
	fat := make([]byte, g.fatSectors*sector)
	binary.LittleEndian.PutUint16(fat[0:], 0xfff8)
	binary.LittleEndian.PutUint16(fat[2:], 0xffff)
	ts := fatTimestamp(now)
	rootDir := []byte(padLabel(label))
	rootDir = append(rootDir, make([]byte, fatDirEntrySize-11)...)
	rootDir[11] = 0x08 // volume label: blkid and Linux read the label from here before the boot sector's copy
	putTimes(rootDir, ts)
	entries, err := dirEntries(root, ts)
	if err != nil {
		return nil, err
	}
	rootDir = append(rootDir, entries...)
	if len(rootDir) > fatRootEntries*fatDirEntrySize {
		return nil, fmt.Errorf("the config drive's root directory has more than %d entries", fatRootEntries)
	}
	copy(img[g.rootStart():], rootDir)
	if err := writeTree(img, fat, g, root, 0, ts); err != nil {
		return nil, err
	}
	copy(img[g.fatStart():], fat)
	copy(img[g.fatStart()+g.fatSectors*sector:], fat)
	return img, nil
}

// allocate gives every directory and non-empty file a contiguous run of clusters, depth first.
func allocate(n *fatNode, g fatGeometry, next *uint32, isRoot bool) error {
	if !isRoot {
		var bytes int64
		if n.dir {
			entries, err := dirEntries(n, fatTimestamp(time.Time{}))
			if err != nil {
				return err
			}
			bytes = int64(len(entries)) + 2*fatDirEntrySize // "." and ".."
		} else {
			bytes = int64(len(n.data))
		}
		n.clusters = uint32((bytes + g.clusterBytes() - 1) / g.clusterBytes()) //nolint:gosec // bounded by the image size
		if n.clusters > 0 {
			n.cluster = *next
			if int64(*next)+int64(n.clusters) > g.clusters+2 {
				return fmt.Errorf("the config drive's files do not fit a %d-byte filesystem", g.total*g.sector)
			}
			*next += n.clusters
		}
	}
	for _, c := range n.children {
		if err := allocate(c, g, next, false); err != nil {
			return err
		}
	}
	return nil
}

// writeTree writes the clusters of n's children (directories' entries, files' data) and their FAT chains.
func writeTree(img, fat []byte, g fatGeometry, n *fatNode, parent uint32, ts fatTime) error {
	for _, c := range n.children {
		for i := range c.clusters {
			link := uint16(0xffff)
			if i+1 < c.clusters {
				link = uint16(c.cluster + i + 1) //nolint:gosec // FAT16 cluster numbers fit
			}
			binary.LittleEndian.PutUint16(fat[2*(c.cluster+i):], link)
		}
		if !c.dir {
			if c.clusters > 0 { // an empty file has no cluster (its entry says cluster 0)
				copy(img[g.clusterOffset(c.cluster):], c.data)
			}
			continue
		}
		dot := shortEntry(".          ", 0x10, c.cluster, 0, ts)
		dotdot := shortEntry("..         ", 0x10, parent, 0, ts)
		entries, err := dirEntries(c, ts)
		if err != nil {
			return err
		}
		off := g.clusterOffset(c.cluster)
		copy(img[off:], append(append(dot, dotdot...), entries...))
		if err := writeTree(img, fat, g, c, c.cluster, ts); err != nil {
			return err
		}
	}
	return nil
}

func writeBootSector(img []byte, g fatGeometry, hidden int64, serial uint32) {
	le := binary.LittleEndian
	copy(img[0:], []byte{0xeb, 0x3c, 0x90})
	copy(img[3:], "YONDER  ")
	le.PutUint16(img[11:], uint16(g.sector))   //nolint:gosec // 512 or 4096
	img[13] = byte(g.perCluster)               //nolint:gosec // at most 64
	le.PutUint16(img[14:], fatReservedSectors) // reserved sectors
	img[16] = 2                                // FATs
	le.PutUint16(img[17:], fatRootEntries)     // root directory entries
	if g.total < 1<<16 {
		le.PutUint16(img[19:], uint16(g.total)) //nolint:gosec // checked
	} else {
		le.PutUint32(img[32:], uint32(g.total)) //nolint:gosec // a config drive is far below 2 TiB
	}
	img[21] = 0xf8                                       // fixed disk
	le.PutUint16(img[22:], uint16(g.fatSectors))         //nolint:gosec // FAT16: at most 256 sectors of 512
	le.PutUint16(img[24:], 32)                           // sectors per track (unused with LBA)
	le.PutUint16(img[26:], 64)                           // heads (unused with LBA)
	le.PutUint32(img[28:], uint32(min(hidden, 1<<32-1))) //nolint:gosec // clamped
	img[36] = 0x80                                       // drive number
	img[38] = 0x29                                       // extended boot signature: serial, label and type follow
	le.PutUint32(img[39:], serial)
	copy(img[43:], padLabel(label))
	copy(img[54:], "FAT16   ")
	img[510], img[511] = 0x55, 0xaa
}

func padLabel(label string) string { return (label + strings.Repeat(" ", 11))[:11] }

// fatTime is a FAT date and time.
type fatTime struct{ date, time uint16 }

func fatTimestamp(t time.Time) fatTime {
	if t.Year() < 1980 {
		return fatTime{date: 1<<5 | 1} // 1980-01-01
	}
	return fatTime{
		date: uint16((t.Year()-1980)<<9 | int(t.Month())<<5 | t.Day()), //nolint:gosec // FAT's bit fields
		time: uint16(t.Hour()<<11 | t.Minute()<<5 | t.Second()/2),      //nolint:gosec // FAT's bit fields
	}
}

func putTimes(e []byte, ts fatTime) {
	le := binary.LittleEndian
	le.PutUint16(e[14:], ts.time) // created
	le.PutUint16(e[16:], ts.date)
	le.PutUint16(e[18:], ts.date) // accessed
	le.PutUint16(e[22:], ts.time) // written
	le.PutUint16(e[24:], ts.date)
}

func shortEntry(name string, attr byte, cluster, size uint32, ts fatTime) []byte {
	e := make([]byte, fatDirEntrySize)
	copy(e, name)
	e[11] = attr
	putTimes(e, ts)
	binary.LittleEndian.PutUint16(e[26:], uint16(cluster)) //nolint:gosec // FAT16 cluster numbers fit
	binary.LittleEndian.PutUint32(e[28:], size)
	return e
}

// dirEntries returns n's children as directory entries: each a run of long-name entries and its 8.3 alias.
func dirEntries(n *fatNode, ts fatTime) ([]byte, error) {
	var out []byte
	used := map[string]bool{}
	for _, c := range n.children {
		short, err := shortName(c.name, used)
		if err != nil {
			return nil, err
		}
		out = append(out, longNameEntries(c.name, short)...)
		attr := byte(0x20)          // archive
		size := uint32(len(c.data)) //nolint:gosec // Drive.tree keeps files below 64 MiB
		if c.dir {
			attr, size = 0x10, 0
		}
		out = append(out, shortEntry(short, attr, c.cluster, size, ts)...)
	}
	return out, nil
}

// shortName makes the 8.3 alias of a long name: the upper-cased name where it fits, else BASIS~N.
func shortName(name string, used map[string]bool) (string, error) {
	clean := func(s string) string {
		var b strings.Builder
		for _, r := range strings.ToUpper(s) {
			if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || strings.ContainsRune("!#$%&'()-@^_`{}~", r) {
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		base, ext = name[:i], name[i+1:]
	}
	b, e := clean(base), clean(ext)
	if b == "" {
		return "", fmt.Errorf("file name %q has no characters a FAT short name can hold", name)
	}
	if len(e) > 3 {
		e = e[:3]
	}
	if b == strings.ToUpper(base) && e == strings.ToUpper(ext) && len(b) <= 8 {
		s := fmt.Sprintf("%-8s%-3s", b, e)
		if !used[s] {
			used[s] = true
			return s, nil
		}
	}
	for i := 1; i < 1000; i++ {
		tail := "~" + strconv.Itoa(i)
		s := fmt.Sprintf("%-8s%-3s", b[:min(len(b), 8-len(tail))]+tail, e)
		if !used[s] {
			used[s] = true
			return s, nil
		}
	}
	return "", fmt.Errorf("too many files named like %q in one directory", name)
}

// longNameEntries are the VFAT entries that carry name in UTF-16, last part first, each with the checksum
// of the 8.3 alias they belong to.
func longNameEntries(name, short string) []byte {
	units := utf16.Encode([]rune(name))
	if len(units)%13 != 0 {
		units = append(units, 0)
		for len(units)%13 != 0 {
			units = append(units, 0xffff)
		}
	}
	var sum byte
	for i := range 11 {
		sum = (sum&1)<<7 + sum>>1 + short[i]
	}
	count := len(units) / 13
	out := make([]byte, 0, count*fatDirEntrySize)
	for k := count; k >= 1; k-- {
		e := make([]byte, fatDirEntrySize)
		e[0] = byte(k) //nolint:gosec // a name of at most 255 characters
		if k == count {
			e[0] |= 0x40
		}
		e[11], e[13] = 0x0f, sum
		part := units[(k-1)*13 : k*13]
		for i, u := range part {
			off := []int{1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30}[i]
			binary.LittleEndian.PutUint16(e[off:], u)
		}
		out = append(out, e...)
	}
	return out
}
