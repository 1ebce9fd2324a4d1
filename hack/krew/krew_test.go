package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// extract returns the contents and modes of the archive's files.
func extract(t *testing.T, path string) (map[string][]byte, map[string]int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = b, h.Mode
	}
}

// `make release-plugin` builds the released plugin, packs it with the LICENSE as krew expects, and writes
// yonder.yaml from the archive's real sha256; the manifest passes krew's rules, the binary in the archive is
// the release build (its `version` reports the release's version and commit, it has no lab).
func TestReleasePluginWritesAKrewManifest(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	root, err := filepath.Abs("../..")
	g.Expect(err).NotTo(HaveOccurred())
	mk := exec.Command("make", "--no-print-directory", "release-plugin", "RELEASE_DIR="+dir, "RELEASE_VERSION=v9.8.7",
		"PLUGIN_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH, "RELEASE_URL=https://example.test/yonder/v9.8.7")
	mk.Dir = root
	out, err := mk.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	manifest := filepath.Join(dir, "yonder.yaml")
	data, err := os.ReadFile(manifest)
	g.Expect(err).NotTo(HaveOccurred())
	p := &Plugin{}
	g.Expect(yaml.UnmarshalStrict(data, p)).To(Succeed(), "the manifest has only krew's fields")
	g.Expect(Validate(manifest, p)).To(Succeed())
	g.Expect(p.APIVersion).To(Equal("krew.googlecontainertools.github.com/v1alpha2"))
	g.Expect(p.Kind).To(Equal("Plugin"))
	g.Expect(p.Metadata.Name).To(Equal("yonder"))
	g.Expect(p.Spec.Version).To(Equal("v9.8.7"))
	archive := filepath.Join(dir, ArchiveName(runtime.GOOS, runtime.GOARCH))
	g.Expect(p.Spec.Platforms).To(HaveLen(1))
	pl := p.Spec.Platforms[0]
	g.Expect(pl.URI).To(Equal("https://example.test/yonder/v9.8.7/" + filepath.Base(archive)))
	g.Expect(pl.Sha256).To(Equal(sha256Of(t, archive)), "the archive's real sha256")
	g.Expect(pl.Selector.MatchLabels).To(Equal(map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}))
	g.Expect(pl.Bin).To(Equal("kubectl-yonder"))
	g.Expect(ValidateArchive(pl, archive)).To(Succeed())

	files, modes := extract(t, archive)
	g.Expect(files).To(HaveKey("LICENSE"))
	g.Expect(files).To(HaveKey("kubectl-yonder"))
	g.Expect(modes["kubectl-yonder"]).To(Equal(int64(0o755)))
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files["LICENSE"]).To(Equal(license))

	bin := filepath.Join(t.TempDir(), "kubectl-yonder")
	g.Expect(os.WriteFile(bin, files["kubectl-yonder"], 0o755)).To(Succeed())
	version, err := exec.Command(bin, "version", "--client", "-o", "json").Output()
	g.Expect(err).NotTo(HaveOccurred())
	var info struct {
		ClientVersion struct{ Version, Commit string } `json:"clientVersion"`
	}
	g.Expect(json.Unmarshal(version, &info)).To(Succeed(), string(version))
	g.Expect(info.ClientVersion.Version).To(Equal("v9.8.7"))
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.ClientVersion.Commit).To(Equal(strings.TrimSpace(string(head))))
	help, err := exec.Command(bin, "--help").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(help)).NotTo(MatchRegexp(`(?m)^\s+lab\s`))

	// The same inputs give the same archive (a release can be rebuilt and checked against its sha256).
	again := filepath.Join(t.TempDir(), filepath.Base(archive))
	g.Expect(WriteArchive(again, bin, filepath.Join(root, "LICENSE"))).To(Succeed())
	g.Expect(sha256Of(t, again)).To(Equal(pl.Sha256))
}

func validPlugin() *Plugin {
	platform := func(os, arch string) Platform {
		return Platform{URI: "https://example.test/" + ArchiveName(os, arch), Sha256: strings.Repeat("ab", 32),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": os, "arch": arch}},
			Files:    []FileOperation{{From: binName(os), To: "."}, {From: "LICENSE", To: "."}}, Bin: binName(os)}
	}
	return &Plugin{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}, Metadata: Metadata{Name: "yonder"},
		Spec: PluginSpec{Version: "v0.1.0", ShortDescription: "one line", Platforms: []Platform{platform("linux", "amd64"), platform("darwin", "arm64"), platform("windows", "amd64")}}}
}

// Each rule krew applies to a manifest refuses what krew refuses, with the field named.
func TestValidateAppliesKrewsRules(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Validate("yonder.yaml", validPlugin())).To(Succeed())
	for _, tc := range []struct {
		name   string
		file   string
		mutate func(p *Plugin)
		want   string
	}{
		{"file extension", "yonder.yml", func(*Plugin) {}, "<plugin>.yaml"},
		{"apiVersion", "", func(p *Plugin) { p.APIVersion = "krew.googlecontainertools.github.com/v1alpha1" }, "apiVersion"},
		{"kind", "", func(p *Plugin) { p.Kind = "Plugins" }, "kind"},
		{"name differs from the file", "", func(p *Plugin) { p.Metadata.Name = "yonder2" }, "metadata.name"},
		{"unsafe name", "yon.der.yaml", func(p *Plugin) { p.Metadata.Name = "yon.der" }, "plugin name"},
		{"Windows reserved name", "con.yaml", func(p *Plugin) { p.Metadata.Name = "con" }, "reserved Windows name"},
		{"no short description", "", func(p *Plugin) { p.Spec.ShortDescription = "" }, "spec.shortDescription: must be set"},
		{"two-line short description", "", func(p *Plugin) { p.Spec.ShortDescription = "a\nb" }, "one line"},
		{"version without v", "", func(p *Plugin) { p.Spec.Version = "0.1.0" }, "starting with v"},
		{"version not semantic", "", func(p *Plugin) { p.Spec.Version = "v1" }, "spec.version"},
		{"no platforms", "", func(p *Plugin) { p.Spec.Platforms = nil }, "at least one platform"},
		{"no uri", "", func(p *Plugin) { p.Spec.Platforms[1].URI = "" }, "spec.platforms[1]: uri"},
		{"no sha256", "", func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "" }, "sha256: must be set"},
		{"sha256 upper case", "", func(p *Plugin) { p.Spec.Platforms[0].Sha256 = strings.Repeat("AB", 32) }, "must match"},
		{"sha256 short", "", func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "abcd" }, "must match"},
		{"no bin", "", func(p *Plugin) { p.Spec.Platforms[2].Bin = "" }, "spec.platforms[2]: bin"},
		{"empty files", "", func(p *Plugin) { p.Spec.Platforms[0].Files = []FileOperation{} }, "files: must be left out"},
		{"files without to", "", func(p *Plugin) { p.Spec.Platforms[0].Files[1].To = "" }, "files[1]"},
		{"no selector", "", func(p *Plugin) { p.Spec.Platforms[0].Selector = nil }, "selector: must be set"},
		{"empty selector", "", func(p *Plugin) { p.Spec.Platforms[0].Selector = &metav1.LabelSelector{} }, "must not be empty"},
		{"empty matchLabels with expressions", "", func(p *Plugin) {
			p.Spec.Platforms[0].Selector = &metav1.LabelSelector{MatchLabels: map[string]string{},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "os", Operator: metav1.LabelSelectorOpIn, Values: []string{"linux"}}}}
		}, "matchLabels: set but empty"},
		{"unsupported key", "", func(p *Plugin) { p.Spec.Platforms[0].Selector.MatchLabels["distro"] = "debian" }, `key "distro"`},
		{"unknown platform", "", func(p *Plugin) { p.Spec.Platforms[0].Selector.MatchLabels["arch"] = "riscv64" }, "matches no platform krew supports"},
		{"overlapping selectors", "", func(p *Plugin) { p.Spec.Platforms[1].Selector.MatchLabels = map[string]string{"os": "linux"} }, "overlapping selectors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := validPlugin()
			tc.mutate(p)
			file := tc.file
			if file == "" {
				file = "yonder.yaml"
			}
			g.Expect(Validate(file, p)).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// An archive krew could not install from is refused: wrong sha256, no license, bin not executable, a
// files entry that matches nothing.
func TestValidateArchiveRefusesWhatKrewCannotInstall(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bin, license := filepath.Join(dir, "kubectl-yonder"), filepath.Join(dir, "LICENSE")
	g.Expect(os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(license, []byte("Apache-2.0\n"), 0o644)).To(Succeed())
	good := filepath.Join(dir, ArchiveName("linux", "amd64"))
	g.Expect(WriteArchive(good, bin, license)).To(Succeed())
	p, err := Build("v0.1.0", "https://example.test", []string{good})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Validate(filepath.Join(dir, "yonder.yaml"), p)).To(Succeed())
	pl := p.Spec.Platforms[0]
	g.Expect(ValidateArchive(pl, good)).To(Succeed())

	wrong := pl
	wrong.Sha256 = strings.Repeat("0", 64)
	g.Expect(ValidateArchive(wrong, good)).To(MatchError(ContainSubstring("the manifest says")))

	noLicense := filepath.Join(dir, "nolicense", ArchiveName("linux", "amd64"))
	g.Expect(os.MkdirAll(filepath.Dir(noLicense), 0o755)).To(Succeed())
	notes := filepath.Join(dir, "NOTES")
	g.Expect(os.WriteFile(notes, []byte("x"), 0o644)).To(Succeed())
	g.Expect(WriteArchive(noLicense, bin, notes)).To(Succeed())
	pn, err := Build("v0.1.0", "https://example.test", []string{noLicense})
	g.Expect(err).NotTo(HaveOccurred())
	pn.Spec.Platforms[0].Files = nil
	g.Expect(ValidateArchive(pn.Spec.Platforms[0], noLicense)).To(MatchError(ContainSubstring("no LICENSE")))
	g.Expect(ValidateArchive(Platform{Sha256: pn.Spec.Platforms[0].Sha256, Bin: "kubectl-yonder",
		Files: []FileOperation{{From: "kubectl-yonder", To: "."}, {From: "LICENSE", To: "."}}}, noLicense)).To(MatchError(ContainSubstring(`from "LICENSE" matches nothing`)))

	other := pl
	other.Bin = "kubectl-other"
	g.Expect(ValidateArchive(other, good)).To(MatchError(ContainSubstring(`bin "kubectl-other"`)))

	_, err = Build("v0.1.0", "https://example.test", []string{bin})
	g.Expect(err).To(MatchError(ContainSubstring("kubectl-yonder_<os>_<arch>.tar.gz")))
}
