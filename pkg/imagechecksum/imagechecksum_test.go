package imagechecksum

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
)

var content = []byte("an image's bytes\n")

// checksumServer serves a few checksum files; a request for /secret-only needs user info, which no
// error may repeat.
func checksumServer(t *testing.T) *httptest.Server {
	t.Helper()
	files := map[string]string{
		"/SHA256SUMS":   "# release\n" + strings.Repeat("0", 64) + "  other.iso\n" + Digest("sha256", content) + " *image.iso\n",
		"/image.md5":    Digest("md5", content) + "\n",
		"/BSD":          "SHA512 (image.iso) = " + Digest("sha512", content) + "\n",
		"/other-only":   strings.Repeat("0", 64) + "  other.iso\n",
		"/big-checksum": strings.Repeat("a", 2<<20),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(f))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestResolve(t *testing.T) {
	srv := checksumServer(t)
	sha := Digest("sha256", content)
	for _, tc := range []struct {
		name, checksum, typ string
		want                Expected
	}{
		{"no checksum", "", "", Expected{}},
		{"no checksum with a type", "", "sha256", Expected{}},
		{"md5", Digest("md5", content), "md5", Expected{"md5", Digest("md5", content)}},
		{"sha256 upper case, no type", strings.ToUpper(sha), "", Expected{"sha256", sha}},
		{"sha512 auto", Digest("sha512", content), "auto", Expected{"sha512", Digest("sha512", content)}},
		{"checksum file with names", srv.URL + "/SHA256SUMS", "auto", Expected{"sha256", sha}},
		{"checksum file with a bare digest", srv.URL + "/image.md5", "md5", Expected{"md5", Digest("md5", content)}},
		{"BSD checksum file", srv.URL + "/BSD", "", Expected{"sha512", Digest("sha512", content)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			img := metal3v1.Image{URL: "http://images.example/dist/image.iso?sig=1", Checksum: tc.checksum, ChecksumType: metal3v1.ChecksumType(tc.typ)}
			got, err := Resolve(context.Background(), srv.Client(), img)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			g.Expect(got.IsZero()).To(Equal(tc.checksum == ""))
			h := got.NewHash()
			_, _ = h.Write(content)
			g.Expect(got.Verify(h)).To(Succeed())
		})
	}
}

func TestResolveFailures(t *testing.T) {
	srv := checksumServer(t)
	withUser, err := url.Parse(srv.URL)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	withUser.User = url.UserPassword("admin", "hunter2")
	for _, tc := range []struct{ name, checksum, typ, errText string }{
		{"checksum file without the image", srv.URL + "/other-only", "", "has no digest for image.iso (it lists other.iso)"},
		{"missing checksum file", withUser.String() + "/nothing?token=hunter2", "", "failed to fetch the checksum file: failed to download " + srv.URL + "/nothing?REDACTED: HTTP 404 Not Found"},
		{"checksum file too large", srv.URL + "/big-checksum", "", "failed to read"},
		{"length for the type", strings.Repeat("ab", 32), "md5", "image checksum has 64 hex digits, a md5 digest has 32"},
		{"unknown type", strings.Repeat("0", 40), "sha1", `checksumType "sha1" is not one of md5, sha256, sha512, auto`},
		{"no length matches", strings.Repeat("0", 40), "auto", "40 hex digits: none of md5 (32), sha256 (64), sha512 (128)"},
		{"not hex", "zz", "md5", "is not a hex digest"},
		{"checksum URL of another scheme", "ftp://admin:hunter2@images.example/SHA256SUMS", "", "image checksum ftp://images.example/SHA256SUMS is neither a hex digest nor an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Resolve(context.Background(), srv.Client(), metal3v1.Image{URL: srv.URL + "/image.iso", Checksum: tc.checksum, ChecksumType: metal3v1.ChecksumType(tc.typ)})
			g.Expect(err).To(MatchError(ContainSubstring(tc.errText)))
			g.Expect(err.Error()).NotTo(ContainSubstring("hunter2"), "no URL credentials in an error")
			g.Expect(err.Error()).NotTo(ContainSubstring("admin"), "no URL user in an error")
		})
	}
}

func TestVerifyMismatch(t *testing.T) {
	g := NewWithT(t)
	want := strings.Repeat("ab", 32)
	e := Expected{Algorithm: "sha256", Hex: want}
	h := e.NewHash()
	_, _ = h.Write(content)
	err := e.Verify(h)
	g.Expect(err).To(MatchError(ErrMismatch))
	g.Expect(err).To(MatchError("image checksum mismatch: downloaded image has " + Digest("sha256", content) + ", spec.image.checksum says " + want))
}

func TestIsURL(t *testing.T) {
	g := NewWithT(t)
	g.Expect(IsURL(" https://example/SHA256SUMS")).To(BeTrue())
	g.Expect(IsURL("http://example/SHA256SUMS")).To(BeTrue())
	g.Expect(IsURL(strings.Repeat("a", 64))).To(BeFalse())
	g.Expect(IsURL("file:///SHA256SUMS")).To(BeFalse())
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://user:pass@images.example/a.iso?X-Amz-Signature=abc", "https://images.example/a.iso?REDACTED"},
		{"http://images.example/a.iso", "http://images.example/a.iso"},
		{"http://user@images.example/a.iso", "http://images.example/a.iso"},
		{"http://[::1:bad/a.iso?secret", "(unparsable URL)"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			NewWithT(t).Expect(RedactString(tc.in)).To(Equal(tc.want))
		})
	}
}

func TestParseChecksumFile(t *testing.T) {
	h := strings.Repeat("a", 64)
	o := strings.Repeat("b", 64)
	for _, tc := range []struct{ name, file, want, errText string }{
		{"bare", h + "\n", h, ""},
		{"gnu", o + "  other.img\n" + h + "  image.qcow2\n", h, ""},
		{"gnu binary with a directory", h + " *dist/image.qcow2\n", h, ""},
		{"bsd", "SHA256 (other.img) = " + o + "\nSHA256 (image.qcow2) = " + h + "\n", h, ""},
		{"comments and blanks", "# sums\n\n" + h + "  image.qcow2\n", h, ""},
		{"no match", o + "  other.img\n", "", "has no digest for image.qcow2 (it lists other.img)"},
		{"two bare", h + "\n" + o + "\n", "", "has 2 digests without file names"},
		{"empty", "", "", "has no digest for image.qcow2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseChecksumFile(strings.NewReader(tc.file), "image.qcow2")
			if tc.errText != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.errText)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// FuzzParseChecksumFile: a checksum file comes from the user's image server; whatever it holds, the
// parser never panics, and a digest it returns is one of the file's own words (never something
// made up), so a broken file can only fail verification.
func FuzzParseChecksumFile(f *testing.F) {
	f.Add("SHA256 (image.iso) = "+strings.Repeat("a", 64)+"\n", "image.iso")
	f.Add(strings.Repeat("b", 64)+" *dist/image.iso\n# c\n\n", "image.iso")
	f.Add(strings.Repeat("c", 32), "x")
	f.Add(" ( ) = \n) = (", "")
	f.Fuzz(func(t *testing.T, file, name string) {
		got, err := ParseChecksumFile(strings.NewReader(file), name)
		if err != nil {
			return
		}
		if !strings.Contains(file, got) {
			t.Fatalf("digest %q is not in the file %q", got, file)
		}
	})
}
