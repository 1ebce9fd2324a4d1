package nodeimage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/registry"
)

// A node image pushed to a real registry (distribution, TLS with its own CA, htpasswd) is fetched with the
// CA and credentials, cached, unpacked into a tree whose kubelet reports its version; wrong credentials, an
// untrusted certificate and a tag reference are refused with what to do, and a cached blob corrupted on
// disk is fetched again.
func TestFetchVerifiesAndCachesANodeImage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg, err := registry.Start(ctx, registry.Options{Dir: t.TempDir(), Users: map[string]string{"puller": "s3cret"}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = reg.Stop() })

	img, err := ociimage.Build(ociimage.Image{Files: []ociimage.File{
		{Path: "lib", Dir: true}, {Path: "lib/systemd", Dir: true},
		{Path: "lib/systemd/systemd", Content: []byte("init"), Mode: 0o755},
		{Path: "usr", Dir: true}, {Path: "usr/local", Dir: true}, {Path: "usr/local/bin", Dir: true},
		{Path: "usr/local/bin/kubelet", Content: []byte("#!/bin/sh\necho Kubernetes v1.36.3\n"), Mode: 0o755},
		{Path: "etc", Dir: true}, {Path: "etc/hostname", Content: []byte("node\n"), Mode: 0o640},
	}})
	g.Expect(err).NotTo(HaveOccurred())
	digest, err := reg.Push(ctx, reg.Host+"/yonder/yonder-node:v1.36.3", img)
	g.Expect(err).NotTo(HaveOccurred())
	ref := reg.Host + "/yonder/yonder-node@" + digest.String()
	src := Source{Reference: ref, CACertificate: string(reg.CACertPEM), Username: "puller", Password: "s3cret"}

	cache := filepath.Join(t.TempDir(), "images")
	got, err := Fetch(ctx, src, cache)
	g.Expect(err).NotTo(HaveOccurred())
	gotDigest, err := got.Digest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gotDigest).To(Equal(digest))

	dir := filepath.Join(t.TempDir(), "machine")
	g.Expect(Unpack(ctx, got, dir, func(d string) bool { return fileExists(filepath.Join(d, "lib/systemd/systemd")) })).To(Succeed())
	st, err := os.Stat(filepath.Join(dir, "etc/hostname"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(BeEquivalentTo(0o640))
	g.Expect(KubeletVersion(ctx, dir)).To(Equal("v1.36.3"))
	g.Expect(dir + ".partial").NotTo(BeAnExistingFile())

	bad := src
	bad.Password = "wrong"
	_, err = Fetch(ctx, bad, filepath.Join(t.TempDir(), "images"))
	g.Expect(err).To(MatchError(ContainSubstring("check the pull secret")))
	untrusted := src
	untrusted.CACertificate = ""
	_, err = Fetch(ctx, untrusted, filepath.Join(t.TempDir(), "images"))
	g.Expect(err).To(MatchError(ContainSubstring("not trusted")))
	_, err = Fetch(ctx, Source{Reference: reg.Host + "/yonder/yonder-node:v1.36.3"}, cache)
	g.Expect(err).To(MatchError(ContainSubstring("not pinned by digest")))

	// The cache serves a second fetch without the registry; a corrupted blob is fetched again.
	m, err := got.Manifest()
	g.Expect(err).NotTo(HaveOccurred())
	blob := filepath.Join(cache, "blobs", "sha256", m.Layers[0].Digest.Hex)
	g.Expect(os.WriteFile(blob, []byte("corrupt"), 0o600)).To(Succeed())
	again, err := Fetch(ctx, src, cache)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(verifyBlobs(cache, again)).To(Succeed())
	g.Expect(reg.Stop()).To(Succeed())
	_, err = Fetch(ctx, src, cache)
	g.Expect(err).NotTo(HaveOccurred(), "served from the cache while the registry is down")
}

func TestDigestRequiresAPinnedReference(t *testing.T) {
	g := NewWithT(t)
	d, err := Digest("registry.example:5000/yonder/yonder-node@sha256:" + strings.Repeat("a", 64))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal("sha256:" + strings.Repeat("a", 64)))
	_, err = Digest("registry.example/yonder/yonder-node:v1.36.3")
	g.Expect(err).To(MatchError(ContainSubstring("not pinned by digest")))
	_, err = Digest("Not A Reference")
	g.Expect(err).To(MatchError(ContainSubstring("does not parse")))
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
