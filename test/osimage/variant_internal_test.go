package osimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// legacyKeys are cacheKey, baseKey and rootUUID as they were before variants existed, frozen here: the
// default image is cached under these keys on the CI machines, and a change to them would rebuild it
// there (minutes of debootstrap in every lane that needs it).
func legacyKeys(t *testing.T, o Options) (cache, base, uuid string) {
	t.Helper()
	b := sha256.New()
	_, _ = fmt.Fprintf(b, "%s\x00%s\x00%s\x00", Suite, o.Mirror, strings.Join(Packages, ","))
	for _, f := range []string{"/usr/sbin/debootstrap", "/usr/share/debootstrap/functions", "/usr/share/debootstrap/scripts/" + Suite} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = b.Write(data)
	}
	base = "debootstrap-" + hex.EncodeToString(b.Sum(nil))[:16]

	s := sha256.Sum256([]byte(fmt.Sprintf("osimage\x00%s\x00%d\x00%s", o.Mirror, o.SizeMiB, o.KernelArgs)))
	s[6] = s[6]&0x0f | 0x40
	s[8] = s[8]&0x3f | 0x80
	x := hex.EncodeToString(s[:16])
	uuid = x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]

	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%s\x00%s\x00%d\x00", Suite, o.Mirror, o.SizeMiB, o.KernelArgs, strings.Join(Packages, ","), RootLabel, partitionStart)
	files := imageFiles(o, uuid, bootFiles{kernel: "K", initrd: "I"})
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		_, _ = fmt.Fprintf(h, "%s\x00%s\x00", name, files[name])
	}
	_, _ = fmt.Fprintf(h, "%s\x00", strings.Join(maskedUnits, ","))
	_, _ = h.Write([]byte(base))
	return hex.EncodeToString(h.Sum(nil))[:16], base, uuid
}

func keysOf(g Gomega, o Options) (cache, base, uuid string) {
	o, err := o.withDefaults()
	g.Expect(err).NotTo(HaveOccurred())
	cache, err = cacheKey(o)
	g.Expect(err).NotTo(HaveOccurred())
	base, err = baseKey(o)
	g.Expect(err).NotTo(HaveOccurred())
	v, err := variantKey(o)
	g.Expect(err).NotTo(HaveOccurred())
	return cache, base, rootUUID(o, v)
}

// The default image, and any options with an empty variant, keep the keys and root UUID they had before
// variants existed.
func TestDefaultImageKeysAreUnchanged(t *testing.T) {
	for _, o := range []Options{
		{},
		{ExtraPackages: nil, Files: nil, EnabledUnits: nil},
		{ExtraPackages: []string{}, Files: []File{}, EnabledUnits: []string{}},
		{SizeMiB: 2048, KernelArgs: "quiet"},
	} {
		g := NewWithT(t)
		o.Mirror = "http://deb.debian.org/debian"
		cache, base, uuid := keysOf(g, o)
		if o.SizeMiB == 0 {
			o.SizeMiB = defaultSizeMiB
		}
		wantCache, wantBase, wantUUID := legacyKeys(t, o)
		g.Expect([]string{cache, base, uuid}).To(Equal([]string{wantCache, wantBase, wantUUID}), "options %+v", o)
	}
	// The UUID hashes no file of this machine: it is the literal the default image has had.
	g := NewWithT(t)
	g.Expect(rootUUID(Options{Mirror: "http://deb.debian.org/debian", SizeMiB: 1536}, "")).To(Equal("5a629ecc-d875-4fc6-ae28-90389bdfef1e"))
}

// Each part of a variant makes a different image: a file (its path, mode or content, a Source file's
// current content included), a unit, a package; packages alone change debootstrap's tree.
func TestVariantKeyCoversEveryInput(t *testing.T) {
	g := NewWithT(t)
	src := filepath.Join(t.TempDir(), "kubelet")
	g.Expect(os.WriteFile(src, []byte("v1"), 0o755)).To(Succeed())
	base := Options{Mirror: "http://deb.debian.org/debian"}
	with := func(f func(*Options)) Options {
		o := base
		f(&o)
		return o
	}
	file := File{Path: "/usr/local/bin/kubelet", Mode: 0o755, Source: src}
	variants := map[string]Options{
		"default":          base,
		"a file":           with(func(o *Options) { o.Files = []File{{Path: "/etc/x", Mode: 0o644, Content: []byte("x")}} }),
		"another content":  with(func(o *Options) { o.Files = []File{{Path: "/etc/x", Mode: 0o644, Content: []byte("y")}} }),
		"another mode":     with(func(o *Options) { o.Files = []File{{Path: "/etc/x", Mode: 0o600, Content: []byte("y")}} }),
		"a Source file":    with(func(o *Options) { o.Files = []File{file} }),
		"a unit":           with(func(o *Options) { o.EnabledUnits = []string{"ssh.service"} }),
		"a package":        with(func(o *Options) { o.ExtraPackages = []string{"runc"} }),
		"another package":  with(func(o *Options) { o.ExtraPackages = []string{"socat"} }),
		"package and file": with(func(o *Options) { o.ExtraPackages, o.Files = []string{"runc"}, []File{file} }),
	}
	caches, uuids, bases := map[string]string{}, map[string]string{}, map[string]string{}
	for name, o := range variants {
		cache, b, uuid := keysOf(g, o)
		g.Expect(caches).NotTo(HaveKey(cache), "%s has a key of its own", name)
		g.Expect(uuids).NotTo(HaveKey(uuid), "%s has a root UUID of its own", name)
		caches[cache], uuids[uuid] = name, name
		bases[name] = b
	}
	g.Expect(bases["a file"]).To(Equal(bases["default"]), "files do not change debootstrap's tree")
	g.Expect(bases["a unit"]).To(Equal(bases["default"]))
	g.Expect(bases["a package"]).NotTo(Equal(bases["default"]), "packages do")
	g.Expect(bases["package and file"]).To(Equal(bases["a package"]))

	before, _, _ := keysOf(g, variants["a Source file"])
	again, _, _ := keysOf(g, variants["a Source file"])
	g.Expect(again).To(Equal(before), "the same inputs, the same key")
	g.Expect(os.WriteFile(src, []byte("v2"), 0o755)).To(Succeed())
	rebuilt, _, _ := keysOf(g, variants["a Source file"])
	g.Expect(rebuilt).NotTo(Equal(before), "a rebuilt binary makes a new image")
}

func TestVariantIsValidated(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bin")
	if err := os.WriteFile(src, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"an upper-case package", Options{ExtraPackages: []string{"Runc"}}, `"Runc" is not a Debian package name`},
		{"two packages in one name", Options{ExtraPackages: []string{"runc,socat"}}, "is not a Debian package name"},
		{"a one-letter package", Options{ExtraPackages: []string{"a"}}, "is not a Debian package name"},
		{"an option for a package", Options{ExtraPackages: []string{"-v"}}, "is not a Debian package name"},
		{"a relative path", Options{Files: []File{{Path: "etc/x"}}}, "not a clean absolute path"},
		{"an unclean path", Options{Files: []File{{Path: "/etc/../x"}}}, "not a clean absolute path"},
		{"the root", Options{Files: []File{{Path: "/"}}}, "not a clean absolute path"},
		{"a setuid mode", Options{Files: []File{{Path: "/x", Mode: 0o4755}}}, "more than permission bits"},
		{"a directory mode", Options{Files: []File{{Path: "/x", Mode: os.ModeDir | 0o755}}}, "more than permission bits"},
		{"Content and Source", Options{Files: []File{{Path: "/x", Content: []byte("x"), Source: src}}}, "both Content and Source"},
		{"a missing Source", Options{Files: []File{{Path: "/x", Source: filepath.Join(dir, "missing")}}}, "no such file"},
		{"a relative Source", Options{Files: []File{{Path: "/x", Source: "bin"}}}, "not an absolute path"},
		{"a directory as Source", Options{Files: []File{{Path: "/x", Source: dir}}}, "not a regular file"},
		{"a path twice", Options{Files: []File{{Path: "/x"}, {Path: "/x", Source: src}}}, "/x is given twice"},
		{"a unit in a directory", Options{EnabledUnits: []string{"../x.service"}}, "not a systemd unit name"},
		{"a unit without a type", Options{EnabledUnits: []string{"containerd"}}, "not a systemd unit name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.o.Mirror = "http://m.example/debian"
			_, err := tc.o.withDefaults()
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	g := NewWithT(t)
	_, err := Options{Mirror: "http://m.example/debian", ExtraPackages: []string{"runc", "g++", "libc6.1-dev"},
		Files: []File{{Path: "/x", Source: src}, {Path: "/etc/empty"}}, EnabledUnits: []string{"getty@ttyS0.service"}}.withDefaults()
	g.Expect(err).NotTo(HaveOccurred())
}

// The variant's files land in the tree with their modes and parents, replacing what is there (links
// too), through the tree's own relative links (merged /usr's /lib) but never out of it; units are linked
// to where their files are, /etc's copy first.
func TestVariantIsWrittenIntoTheTree(t *testing.T) {
	g := NewWithT(t)
	root, outside := t.TempDir(), t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(root, rel)
		g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(p, []byte(content), 0o644)).To(Succeed())
	}
	mk("usr/lib/systemd/system/packaged.service", "")
	mk("usr/lib/systemd/system/both.service", "")
	mk("etc/systemd/system/both.service", "")
	mk("etc/old", "old")
	g.Expect(os.Symlink("usr/lib", filepath.Join(root, "lib"))).To(Succeed())
	g.Expect(os.Symlink("/etc/passwd", filepath.Join(root, "etc/link"))).To(Succeed())
	src := filepath.Join(outside, "kubelet")
	g.Expect(os.WriteFile(src, []byte("ELF"), 0o600)).To(Succeed())

	o := Options{
		Files: []File{
			{Path: "/usr/local/bin/kubelet", Mode: 0o755, Source: src},
			{Path: "/etc/old", Mode: 0o600, Content: []byte("new")},
			{Path: "/etc/link", Mode: 0o644, Content: []byte("not /etc/passwd")},
			{Path: "/etc/systemd/system/own.service", Mode: 0o644, Content: []byte("[Unit]\n")},
			{Path: "/var/lib/deep/down/file", Mode: 0o640},
		},
		EnabledUnits: []string{"packaged.service", "both.service", "own.service"},
	}
	g.Expect(applyVariant(root, o)).To(Succeed())
	for _, want := range []struct {
		rel     string
		mode    os.FileMode
		content string
	}{
		{"usr/local/bin/kubelet", 0o755, "ELF"}, {"etc/old", 0o600, "new"}, {"etc/link", 0o644, "not /etc/passwd"},
		{"var/lib/deep/down/file", 0o640, ""},
	} {
		st, err := os.Lstat(filepath.Join(root, want.rel))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Mode()).To(Equal(want.mode), want.rel)
		g.Expect(os.ReadFile(filepath.Join(root, want.rel))).To(Equal([]byte(want.content)), want.rel)
	}
	st, err := os.Stat(filepath.Join(root, "var/lib/deep"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	for unit, target := range map[string]string{
		"packaged.service": "/lib/systemd/system/packaged.service",
		"both.service":     "/etc/systemd/system/both.service",
		"own.service":      "/etc/systemd/system/own.service",
	} {
		g.Expect(os.Readlink(filepath.Join(wants, unit))).To(Equal(target))
	}

	g.Expect(applyVariant(root, Options{EnabledUnits: []string{"missing.service"}})).To(
		MatchError(ContainSubstring("missing.service in the image: it is in neither")))
	// /var/run is a link to /run in Debian: written through, it would land on this machine.
	g.Expect(os.Symlink(outside, filepath.Join(root, "run"))).To(Succeed())
	g.Expect(applyVariant(root, Options{Files: []File{{Path: "/run/escaped", Content: []byte("x")}}})).NotTo(Succeed())
	g.Expect(filepath.Join(outside, "escaped")).NotTo(BeAnExistingFile())
}
