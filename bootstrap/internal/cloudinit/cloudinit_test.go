package cloudinit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func runScript(t *testing.T, script string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(f, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(context.Background(), "/bin/sh", f).CombinedOutput()
	return string(out), err
}

// The installer really downloads (curl against a local HTTP server) or copies the agent, verifies its
// sha256, refuses a wrong digest, and is idempotent.
func TestInstallerVerifiesTheDigest(t *testing.T) {
	g := NewWithT(t)
	payload := []byte("#!/bin/sh\necho agent\n")
	sum := sha256.Sum256(payload)
	digest := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(payload) }))
	defer srv.Close()
	dir := t.TempDir()
	local := filepath.Join(dir, "bundle-agent")
	g.Expect(os.WriteFile(local, payload, 0o600)).To(Succeed())

	for _, src := range []AgentSource{{URL: srv.URL + "/yonder-agent", SHA256: digest}, {Path: local, SHA256: digest}} {
		dest := filepath.Join(t.TempDir(), "bin", "yonder-agent")
		script, err := installer(src, dest)
		g.Expect(err).NotTo(HaveOccurred())
		out, err := runScript(t, script)
		g.Expect(err).NotTo(HaveOccurred(), out)
		got, err := os.ReadFile(dest)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(payload))
		st, err := os.Stat(dest)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Mode().Perm()).To(BeEquivalentTo(0o755))
		// Running again keeps the verified agent.
		out, err = runScript(t, script)
		g.Expect(err).NotTo(HaveOccurred(), out)

		bad := src
		bad.SHA256 = strings.Repeat("0", 64)
		dest2 := filepath.Join(t.TempDir(), "yonder-agent")
		script, err = installer(bad, dest2)
		g.Expect(err).NotTo(HaveOccurred())
		out, err = runScript(t, script)
		g.Expect(err).To(HaveOccurred())
		g.Expect(out).To(ContainSubstring("sha256 is " + digest))
		g.Expect(dest2).NotTo(BeAnExistingFile())
	}
}

func TestRenderRejectsBadSources(t *testing.T) {
	g := NewWithT(t)
	_, err := Render(nil, AgentSource{})
	g.Expect(err).To(MatchError(ContainSubstring("exactly one of URL and Path")))
	_, err = Render(nil, AgentSource{URL: "http://x", SHA256: "nope"})
	g.Expect(err).To(MatchError(ContainSubstring("sha256")))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("#cloud-config\nwrite_files: []\nruncmd: []\n"))
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: /etc/yonder/agent-config.yaml\n  encoding: b64\n  content: e30=\n"))
	f.Fuzz(func(_ *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		_, _ = c.AgentConfig()
	})
}
