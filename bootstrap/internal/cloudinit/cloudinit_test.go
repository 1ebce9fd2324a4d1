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

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"

	"github.com/yonder-dev/yonder/test/registry"

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

// FuzzInstaller: whatever the agent source holds (a URL or path with quotes, newlines, `$(…)`; a CA;
// credentials), the installer Render writes is a script that /bin/sh (dash here, the shell its #!/bin/sh
// names and runcmd runs it with) parses, and it carries the source as one quoted word. Parse renders no script: it
// hands back write_files and runcmd, which FuzzParse covers.
func FuzzInstaller(f *testing.F) {
	f.Add("https://reg.example/v2/yonder/yonder-agent/blobs/sha256:abc", "", "", "u", "p@ss:word")
	f.Add("", "/opt/bundle/yonder-agent", "", "", "")
	f.Add("http://x/'a'\n$(id)`id`\\", "", "-----BEGIN CERTIFICATE-----\n'\n-----END CERTIFICATE-----\n", "it's", "\"}{{")
	f.Add("", "/a b/'c'\nd", "", "", "")
	f.Fuzz(func(t *testing.T, url, localPath, ca, user, password string) {
		if url == "" && localPath == "" {
			return
		}
		src := AgentSource{URL: url, Path: localPath, SHA256: strings.Repeat("a", 64), CACertificate: ca, Username: user, Password: password}
		script, err := installer(src, AgentPath)
		if err != nil {
			t.Fatalf("installer: %v", err)
		}
		if !strings.HasPrefix(script, "#!/bin/sh\n") {
			t.Fatalf("the installer is not for /bin/sh:\n%s", script)
		}
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sh -n refuses the installer for %+v: %v: %s\n%s", src, err, out, script)
		}
		want := "cp " + shellQuote(localPath) + " "
		if url != "" {
			want = "src=" + shellQuote(url) + "\n"
		}
		if !strings.Contains(script, want) {
			t.Fatalf("the installer does not carry the source as %q:\n%s", want, script)
		}
	})
}

// The installer fetches the agent as a blob of a real registry (distribution, TLS with its own CA,
// htpasswd): with the CA written beside it and the pull credentials, by the binary's sha256; wrong
// credentials fail with the status, nothing installed.
func TestInstallerFetchesTheAgentFromARegistry(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg, err := registry.Start(ctx, registry.Options{Dir: t.TempDir(), Users: map[string]string{"u": "p@ss:word"}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = reg.Stop() })
	payload := []byte("#!/bin/sh\necho agent\n")
	sum := sha256.Sum256(payload)
	digest := hex.EncodeToString(sum[:])
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(payload, "application/vnd.yonder.agent.binary.v1"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = reg.Push(ctx, reg.Host+"/yonder/yonder-agent:test", img)
	g.Expect(err).NotTo(HaveOccurred())

	ca := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(ca, reg.CACertPEM, 0o600)).To(Succeed())
	src := AgentSource{URL: "https://" + reg.Host + "/v2/yonder/yonder-agent/blobs/sha256:" + digest, SHA256: digest,
		CACertificate: string(reg.CACertPEM), Username: "u", Password: "p@ss:word"}
	dest := filepath.Join(t.TempDir(), "yonder-agent")
	script, err := installer(src, dest)
	g.Expect(err).NotTo(HaveOccurred())
	script = strings.ReplaceAll(script, AgentCAPath, ca)
	out, err := runScript(t, script)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(os.ReadFile(dest)).To(Equal(payload))

	src.Password = "wrong"
	dest2 := filepath.Join(t.TempDir(), "yonder-agent")
	script, err = installer(src, dest2)
	g.Expect(err).NotTo(HaveOccurred())
	// One try is enough to see the refusal: the retries would wait 5 s each.
	script = strings.ReplaceAll(strings.ReplaceAll(script, AgentCAPath, ca), `[ "$i" -lt 5 ]`, `[ "$i" -lt 1 ]`)
	out, err = runScript(t, script)
	g.Expect(err).To(HaveOccurred())
	g.Expect(out).To(ContainSubstring("refused the credentials (401)"))
	g.Expect(dest2).NotTo(BeAnExistingFile())
}

// Against a registry that hands out bearer tokens (a simulator of the token protocol ghcr.io and Docker
// Hub speak: no such registry runs here), the installer follows WWW-Authenticate to the token service and
// retries with the token, anonymously.
func TestInstallerFollowsABearerChallenge(t *testing.T) {
	g := NewWithT(t)
	payload := []byte("agent-bytes")
	sum := sha256.Sum256(payload)
	digest := hex.EncodeToString(sum[:])
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token" && r.URL.Query().Get("scope") == "repository:yonder/yonder-agent:pull":
			_, _ = w.Write([]byte(`{"token":"abc.def","expires_in":300}`))
		case r.Header.Get("Authorization") == "Bearer abc.def":
			_, _ = w.Write(payload)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="sim",scope="repository:yonder/yonder-agent:pull"`)
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	dest := filepath.Join(t.TempDir(), "yonder-agent")
	script, err := installer(AgentSource{URL: srv.URL + "/v2/yonder/yonder-agent/blobs/sha256:" + digest, SHA256: digest}, dest)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := runScript(t, script)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(os.ReadFile(dest)).To(Equal(payload))
}
