package osimage

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestAptMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"deb822 as Debian 12 writes it", map[string]string{"sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\n" +
			"Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
			"Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"}, "http://deb.debian.org/debian"},
		{"deb822: a disabled stanza and a security-only one are skipped", map[string]string{"sources.list.d/a.sources": "Types: deb\nURIs: http://old.example/debian\n" +
			"Suites: bookworm\nComponents: main\nEnabled: no\n\nTypes: deb\nURIs: http://security.example/\nSuites: bookworm-security\nComponents: main\n\n" +
			"Types: deb-src deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\nComponents: main contrib\n"}, "http://mirror.example/debian"},
		{"one-line format with options, after comments and deb-src", map[string]string{"sources.list": "# deb http://commented.example/debian bookworm main\n" +
			"deb-src http://src.example/debian bookworm main\ndeb http://other.example/debian trixie main\n" +
			"deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main non-free-firmware\n"}, "http://mirror.example/debian"},
		{"sources.list without main for bookworm falls through to sources.list.d", map[string]string{"sources.list": "deb http://a.example/debian bookworm contrib\n",
			"sources.list.d/b.list": "deb http://b.example/debian bookworm main\n"}, "http://b.example/debian"},
		{"nothing for bookworm", map[string]string{"sources.list": "deb http://a.example/debian trixie main\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			g.Expect(os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)).To(Succeed())
			for name, content := range tc.files {
				g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)).To(Succeed())
			}
			got, err := aptMirror(dir)
			if tc.want == "" {
				g.Expect(err).To(MatchError(ContainSubstring("no apt source")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"too small", Options{SizeMiB: 512, Mirror: "http://m.example/debian"}, "outside 1024..8192"},
		{"too large", Options{SizeMiB: 9000, Mirror: "http://m.example/debian"}, "outside 1024..8192"},
		{"two lines of kernel arguments", Options{Mirror: "http://m.example/debian", KernelArgs: "quiet\nsingle"}, "one line"},
		{"a mirror that is no URL", Options{Mirror: "deb.debian.org/debian"}, "not an http(s)://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := tc.o.withDefaults()
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	g := NewWithT(t)
	o, err := Options{Mirror: "http://m.example/debian"}.withDefaults()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.SizeMiB).To(Equal(defaultSizeMiB))
	g.Expect(rootUUID(o, "")).To(MatchRegexp(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`))
	g.Expect(rootUUID(o, "")).To(Equal(rootUUID(o, "")), "the same inputs, the same filesystem UUID")
}
