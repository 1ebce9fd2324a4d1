package ociarchive

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	. "github.com/onsi/gomega"
)

func TestWriteProducesANamedDeterministicOCILayout(t *testing.T) {
	g := NewWithT(t)
	img := Image{Name: "registry.k8s.io/pause:3.10", Files: Busybox([]byte("bb"), "sh"), Entrypoint: []string{"/bin/sh"}}
	var a, b bytes.Buffer
	g.Expect(Write(&a, img)).To(Succeed())
	g.Expect(Write(&b, img)).To(Succeed())
	g.Expect(a.Bytes()).To(Equal(b.Bytes()))
	tr := tar.NewReader(&a)
	names := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		data, _ := io.ReadAll(tr)
		names[h.Name] = data
	}
	g.Expect(names).To(HaveKey("oci-layout"))
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	g.Expect(json.Unmarshal(names["index.json"], &index)).To(Succeed())
	g.Expect(index.Manifests[0].Annotations).To(HaveKeyWithValue("io.containerd.image.name", "registry.k8s.io/pause:3.10"))
}
