package configdrive

import (
	"io"
	"os"
	"testing"
)

// sparseDisk is a disk of size bytes whose first bytes are head and the rest zeros.
type sparseDisk struct {
	head []byte
	size int64
}

func (s sparseDisk) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.size-off))
	clear(p[:n])
	if off < int64(len(s.head)) {
		copy(p[:n], s.head[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// FuzzPlan feeds arbitrary partition tables (the first sectors of a disk) to the planner: the disk was
// written from a user's image, so its table is untrusted input. Whatever it holds, planning must not
// panic, and a plan must stay on the disk and never put the config drive over the table it rewrites.
func FuzzPlan(f *testing.F) {
	for _, script := range []string{
		"label: gpt\nstart=2048, type=L\n",
		"label: gpt\ntable-length: 4\nstart=2048, size=2048\nstart=4096, size=2048\n",
		"label: dos\nstart=2048, size=129024, type=83\n",
		"label: dos\nstart=2048, size=2048, type=83\nstart=4096, size=8192, type=5\nstart=6144, size=2048\n",
	} {
		b, err := os.ReadFile(image(f, 64*mib, script))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:64<<10], uint16(0), false)
		f.Add(b[:64<<10], uint16(200), false)
	}
	f.Add([]byte{}, uint16(0), true)
	f.Fuzz(func(t *testing.T, head []byte, extraMiB uint16, bigSectors bool) {
		sector := int64(512)
		if bigSectors {
			sector = 4096
		}
		size := 2*DriveSize + int64(extraMiB)*mib
		p, err := makePlan(diskView{r: sparseDisk{head, size}, size: size, sector: sector}, DriveSize, [16]byte{1})
		if err != nil {
			return
		}
		if p.offset%sector != 0 || p.offset < sector || p.size <= 0 || p.offset+p.size > size {
			t.Fatalf("plan %+v does not lie on the %d-byte disk in whole sectors past the first", p, size)
		}
		for _, w := range p.tableWrites {
			if w.off < 0 || w.off+int64(len(w.data)) > size {
				t.Fatalf("table write at %d (%d bytes) is off the %d-byte disk", w.off, len(w.data), size)
			}
			if w.off < p.offset+p.size && p.offset < w.off+int64(len(w.data)) {
				t.Fatalf("table write at %d (%d bytes) overlaps the config drive at %d+%d", w.off, len(w.data), p.offset, p.size)
			}
		}
	})
}
