package configdrive

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The FAT builder over the sizes a reused partition may have and both common sector sizes, each image
// checked by the real fsck.fat and read back by mtools.
func TestBuildFATSizes(t *testing.T) {
	d := Drive{UserData: []byte("#cloud-config\n"), MetaData: MetaData("id", "host", nil)}
	for _, c := range []struct{ size, sector int64 }{
		{3 * mib, 512}, {16 * mib, 512}, {64 * mib, 512}, {64 * mib, 4096}, {32 * mib, 4096}, {100 * mib, 512},
	} {
		t.Run(strconv.FormatInt(c.size>>20, 10)+"MiB-"+strconv.FormatInt(c.sector, 10), func(t *testing.T) {
			g := NewWithT(t)
			tree, err := d.tree()
			g.Expect(err).NotTo(HaveOccurred())
			b, err := buildFAT(c.size, c.sector, 0, tree, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(int64(len(b))).To(Equal(c.size))
			img := filepath.Join(t.TempDir(), "fs.img")
			g.Expect(os.WriteFile(img, b, 0o600)).To(Succeed())
			dev := img
			if c.sector != 512 {
				dev = run(t, "", "losetup", "--find", "--show", "--read-only", "--sector-size", strconv.FormatInt(c.sector, 10), img)
				dev = dev[:len(dev)-1]
				t.Cleanup(func() { run(t, "", "losetup", "--detach", dev) })
			}
			checkDrive(t, dev, d)
		})
	}
}

func TestBuildFATRefusesWhatDoesNotFit(t *testing.T) {
	g := NewWithT(t)
	tree, err := Drive{MetaData: MetaData("id", "", nil)}.tree()
	g.Expect(err).NotTo(HaveOccurred())
	_, err = buildFAT(1*mib, 512, 0, tree, time.Now(), 1)
	g.Expect(err).To(MatchError(ContainSubstring("cannot hold a FAT16 filesystem")))

	tree, err = Drive{MetaData: MetaData("id", "", nil), UserData: make([]byte, 3*mib)}.tree()
	g.Expect(err).NotTo(HaveOccurred())
	_, err = buildFAT(3*mib, 512, 0, tree, time.Now(), 1)
	g.Expect(err).To(MatchError(ContainSubstring("do not fit")))
}

func TestShortNames(t *testing.T) {
	g := NewWithT(t)
	used := map[string]bool{}
	for _, c := range []struct{ long, short string }{
		{"latest", "LATEST     "},
		{"openstack", "OPENST~1   "},
		{"meta_data.json", "META_D~1JSO"},
		{"meta_data.jsonx", "META_D~2JSO"},
		{"user_data", "USER_D~1   "},
		{"LATEST", "LATEST~1   "},
	} {
		s, err := shortName(c.long, used)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s).To(Equal(c.short), c.long)
	}
	_, err := shortName("...", used)
	g.Expect(err).To(HaveOccurred())
}
