package manualjoin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

func validRequest() Request {
	return Request{
		Cluster: "ns/edge",
		Config:  agentv1.AgentConfig{NodeName: "edge-1", KubernetesVersion: "v1.36.3", GPU: agentv1.GPU{Mode: agentv1.GPUModeNone}},
		Agent:   AgentSource{URL: "https://example.org/yonder-agent", SHA256: strings.Repeat("a", 64)},
		TTL:     15 * time.Minute,
	}
}

func TestValidateRejectsBadInputBeforeATokenExists(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Request)
		want   string
	}{
		"ttl":        {func(r *Request) { r.TTL = time.Second }, "1m…24h"},
		"no agent":   {func(r *Request) { r.Agent.URL = "" }, "exactly one of URL and Path"},
		"bad sha":    {func(r *Request) { r.Agent.SHA256 = "x" }, "sha256"},
		"bad node":   {func(r *Request) { r.Config.NodeName = "Edge_1" }, "nodeName"},
		"bad label":  {func(r *Request) { r.Config.Labels = map[string]string{"a": "b c"} }, "labels"},
		"bad server": {func(r *Request) { r.Config.APIServer.Endpoint = "ftp://x" }, "apiServer"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r := validRequest()
			tc.mutate(&r)
			g.Expect(r.Validate()).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	g := NewWithT(t)
	r := validRequest()
	g.Expect(r.Validate()).To(Succeed(), "an empty apiServer is filled in later")
}

// The script writes exactly the files of the cloud-config (content, mode) and runs its commands in order;
// the one-liner unpacks to the same script. Run under sh with the paths moved into a temporary root.
func TestScriptAndOneLinerRunTheCloudConfig(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	cc := []byte("#cloud-config\n" + `write_files:
- path: ` + root + `/etc/yonder/agent-config.yaml
  permissions: "0600"
  encoding: b64
  content: aGVsbG8K
- path: ` + root + `/usr/local/lib/yonder/it's.sh
  permissions: "0700"
  content: "echo ran >> ` + root + `/log\n"
runcmd:
- [/bin/sh, "` + root + `/usr/local/lib/yonder/it's.sh"]
- [/bin/sh, -c, "echo second >> ` + root + `/log"]
`)
	_, err := cloudinit.Parse(cc)
	g.Expect(err).NotTo(HaveOccurred())
	script, err := Script(cc)
	g.Expect(err).NotTo(HaveOccurred())
	// Ownership needs root; the test may run as anyone, so chown is neutralised for the check.
	shim := filepath.Join(root, "bin")
	g.Expect(os.MkdirAll(shim, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(shim, "chown"), []byte("#!/bin/sh\nexit 0\n"), 0o755)).To(Succeed())
	line, err := OneLiner(script)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).NotTo(ContainSubstring("\n"))
	cmd := exec.Command("sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+shim+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	cfg, err := os.ReadFile(filepath.Join(root, "etc/yonder/agent-config.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg)).To(Equal("hello\n"))
	st, err := os.Stat(filepath.Join(root, "etc/yonder/agent-config.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	log, err := os.ReadFile(filepath.Join(root, "log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(log)).To(Equal("ran\nsecond\n"))
}

// Data outside the subset the bootstrap provider renders is refused with an error that names what is
// wrong: the key, the field, the file.
func TestScriptRejectsDataOutsideTheSubset(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"other key":        {"#cloud-config\nbootcmd: [reboot]\n", `unknown field "bootcmd"`},
		"not cloud-config": {"not cloud-config", "bootstrap data does not start with #cloud-config"},
		"runcmd strings":   {"#cloud-config\nruncmd: [reboot]\n", "Config.runcmd of type []string"},
		"file field":       {"#cloud-config\nwrite_files:\n- path: /a\n  append: true\n", `unknown field "append"`},
		"bad base64":       {"#cloud-config\nwrite_files:\n- path: /etc/a\n  encoding: b64\n  content: '%%'\n", "failed to decode /etc/a: illegal base64 data"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Script([]byte(tc.data))
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}
