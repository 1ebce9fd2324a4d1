package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/testbins"
)

// kubectl finds the plugin on the PATH and runs it as `kubectl yonder`.
func TestKubectlRunsThePlugin(t *testing.T) {
	g := NewWithT(t)
	kubectl, err := testbins.Path("kubectl")
	g.Expect(err).NotTo(HaveOccurred())
	dir := filepath.Dir(pluginBinary(t))
	cmd := exec.Command(kubectl, "yonder", "--help")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	g.Expect(cmd.Run()).To(Succeed(), stdout.String())
	g.Expect(stdout.String()).To(ContainSubstring("kubectl yonder [command]"))
	for _, group := range []string{"host", "machine", "site", "describe", "version", "completion", "lab"} {
		g.Expect(stdout.String()).To(MatchRegexp(`(?m)^\s+`+group+`\s`), "lists %s", group)
	}
}

// The released plugin (`make release`: -tags release -trimpath) carries no test harness and works from a
// directory that is not a checkout: no test/ package in its build, no lab command, its commands run.
func TestReleasedPluginHasNoTestCode(t *testing.T) {
	g := NewWithT(t)
	deps, err := exec.Command("go", "list", "-deps", "-tags", "release", ".").Output()
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range strings.Fields(string(deps)) {
		g.Expect(p).NotTo(HavePrefix("github.com/yonder-dev/yonder/test/"), "the released plugin imports %s", p)
	}
	bin := gobuild.ForTest(t, "./cmd/kubectl-yonder", gobuild.Options{TrimPath: true, Tags: []string{"release"}})
	empty := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = empty
		cmd.Env = []string{"HOME=" + empty, "PATH=/usr/bin:/bin"}
		o, err := cmd.CombinedOutput()
		return string(o), err
	}
	help, err := run("--help")
	g.Expect(err).NotTo(HaveOccurred(), help)
	for _, group := range []string{"host", "machine", "site", "describe"} {
		g.Expect(help).To(MatchRegexp(`(?m)^\s+`+group+`\s`), "lists %s", group)
	}
	g.Expect(help).NotTo(MatchRegexp(`(?m)^\s+lab\s`))
	// Without a cluster it says so (about the kubeconfig), not about a missing checkout.
	msg, err := run("host", "list", "--kubeconfig", filepath.Join(empty, "none.kubeconfig"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(msg).To(ContainSubstring("none.kubeconfig"))
	g.Expect(msg).NotTo(ContainSubstring("test-bins"))
}
