package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
)

// The same files give the same digest; the archive is an OCI layout that names the image for
// `ctr images import`; the architecture is the build's.
func TestImagesAreReproducibleAndArchivesNamed(t *testing.T) {
	g := NewWithT(t)
	spec := Image{Files: Busybox([]byte("bb"), "sh"), Entrypoint: []string{"/bin/sh"}}
	a, err := Build(spec)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := Build(spec)
	g.Expect(err).NotTo(HaveOccurred())
	da, _ := a.Digest()
	db, _ := b.Digest()
	g.Expect(da).To(Equal(db))
	cf, err := a.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cf.Architecture).To(Equal(runtime.GOARCH))
	g.Expect(cf.Config.Env).To(Equal(DefaultEnv))
	g.Expect(cf.Config.User).To(BeEmpty(), "root unless the image names a user")
	nonroot, err := Build(Image{Files: spec.Files, Entrypoint: spec.Entrypoint, User: "65532"})
	g.Expect(err).NotTo(HaveOccurred())
	ncf, err := nonroot.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ncf.Config.User).To(Equal("65532"))

	var buf bytes.Buffer
	g.Expect(WriteArchive(&buf, "registry.k8s.io/pause:3.10", a)).To(Succeed())
	tr := tar.NewReader(&buf)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		files[h.Name], _ = io.ReadAll(tr)
	}
	g.Expect(files).To(HaveKey("oci-layout"))
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	g.Expect(json.Unmarshal(files["index.json"], &index)).To(Succeed())
	g.Expect(index.Manifests).To(HaveLen(1))
	g.Expect(index.Manifests[0].Digest).To(Equal(da.String()))
	g.Expect(index.Manifests[0].Annotations).To(HaveKeyWithValue("io.containerd.image.name", "registry.k8s.io/pause:3.10"))
}

// A layout keeps one image per name; a compressed tar file becomes a layer as it is.
func TestLayoutAndCompressedLayer(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	l, err := OpenLayout(filepath.Join(dir, "layout"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, content := range []string{"one", "two"} {
		img, err := Build(Image{Files: []File{{Path: "f", Content: []byte(content)}}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Add("example.test/x:1", img)).To(Succeed())
	}
	l, err = OpenLayout(filepath.Join(dir, "layout"))
	g.Expect(err).NotTo(HaveOccurred())
	imgs, err := l.Images()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(imgs).To(HaveLen(1))

	layer, err := Layer([]File{{Path: "a", Content: []byte("a")}})
	g.Expect(err).NotTo(HaveOccurred())
	rc, err := layer.Compressed()
	g.Expect(err).NotTo(HaveOccurred())
	gz, _ := io.ReadAll(rc)
	p := filepath.Join(dir, "layer.tar.gz")
	g.Expect(os.WriteFile(p, gz, 0o600)).To(Succeed())
	cl, err := CompressedLayer(p)
	g.Expect(err).NotTo(HaveOccurred())
	want, _ := layer.Digest()
	g.Expect(cl.Digest()).To(Equal(want))
	g.Expect(os.WriteFile(p, []byte("plain"), 0o600)).To(Succeed())
	_, err = CompressedLayer(p)
	g.Expect(err).To(MatchError(ContainSubstring("neither gzip- nor zstd-compressed")))
}
