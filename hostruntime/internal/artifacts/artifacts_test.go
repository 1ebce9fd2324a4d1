package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestEnsureVerifiesLocalAndURLSources(t *testing.T) {
	content := []byte("#!/bin/sh\necho kubelet\n")
	bundle := filepath.Join(t.TempDir(), "kubelet")
	if err := os.WriteFile(bundle, content, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/kubelet" {
			_, _ = w.Write(content)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name    string
		a       agentv1.Artifact
		wantErr string
	}{
		{name: "local bundle", a: agentv1.Artifact{Name: "kubelet", Path: bundle, SHA256: digest(content)}},
		{name: "mirror URL", a: agentv1.Artifact{Name: "kubelet", URL: srv.URL + "/kubelet", SHA256: digest(content)}},
		{name: "wrong digest", a: agentv1.Artifact{Name: "kubelet", Path: bundle, SHA256: digest([]byte("other"))}, wantErr: "the configuration pins"},
		{name: "missing file", a: agentv1.Artifact{Name: "kubelet", Path: bundle + ".nope", SHA256: digest(content)}, wantErr: "cannot open the local bundle file"},
		{name: "404", a: agentv1.Artifact{Name: "kubelet", URL: srv.URL + "/nope", SHA256: digest(content)}, wantErr: "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := Cache{Dir: t.TempDir()}
			p, err := c.Ensure(context.Background(), tc.a)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				g.Expect(c.Path(tc.a.SHA256)).NotTo(BeAnExistingFile(), "nothing unverified may enter the cache")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(os.ReadFile(p)).To(Equal(content))
		})
	}
}

// A cached file that was corrupted on disk is never used: it is fetched again.
func TestEnsureReplacesACorruptedCachedCopy(t *testing.T) {
	g := NewWithT(t)
	content := []byte("containerd")
	bundle := filepath.Join(t.TempDir(), "containerd")
	g.Expect(os.WriteFile(bundle, content, 0o600)).To(Succeed())
	c := Cache{Dir: t.TempDir()}
	a := agentv1.Artifact{Name: "containerd", Path: bundle, SHA256: digest(content)}
	p, err := c.Ensure(context.Background(), a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(p, []byte("tampered"), 0o600)).To(Succeed())
	p, err = c.Ensure(context.Background(), a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(p)).To(Equal(content))

	// The bundle itself corrupted: rejected with a clear, typed error.
	g.Expect(os.WriteFile(bundle, []byte("tampered"), 0o600)).To(Succeed())
	g.Expect(os.Remove(p)).To(Succeed())
	_, err = c.Ensure(context.Background(), a)
	g.Expect(IsDigestMismatch(err)).To(BeTrue())
}
