package cloudconfig

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// The script does what cloud-init does with the subset: every file with its mode and content first, then
// the commands in order; the first failure stops it, and nothing after it runs.
func TestScriptRunsFilesThenCommandsAndStopsAtTheFirstFailure(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	secret, log := filepath.Join(dir, "etc", "secret"), filepath.Join(dir, "log")
	data := "#cloud-config\nwrite_files:\n- path: " + secret + "\n  permissions: '0600'\n  encoding: b64\n  content: c2VjcmV0Cg==\n" +
		"- path: " + filepath.Join(dir, "plain") + "\n  content: plain\n" +
		"runcmd:\n- [/bin/sh, -c, 'cat " + secret + " >> " + log + "']\n- [/bin/sh, -c, 'echo second >> " + log + "; exit 7']\n- [/bin/sh, -c, 'echo third >> " + log + "']\n"
	script, err := Script("a test\nof two lines", []byte(data))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(script)).To(HavePrefix("#!/bin/sh\n# a test\n# of two lines\nset -eu\n"))
	g.Expect(string(script)).NotTo(ContainSubstring("secret\n"), "file contents travel base64-encoded")
	path := filepath.Join(dir, "script.sh")
	g.Expect(os.WriteFile(path, script, 0o700)).To(Succeed())
	err = exec.Command("/bin/sh", path).Run()
	var exit *exec.ExitError
	g.Expect(err).To(BeAssignableToTypeOf(exit))
	g.Expect(os.ReadFile(log)).To(Equal([]byte("secret\nsecond\n")), "the third command never ran")
	st, err := os.Stat(secret)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	st, err = os.Stat(filepath.Join(dir, "plain"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o644)), "cloud-init's default mode")
}

func TestParseRefusesWhatItDoesNotRun(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse([]byte("write_files: []\n"))
	g.Expect(err).To(MatchError(ContainSubstring("does not start with #cloud-config")))
	for _, module := range []string{"users: [{name: capi}]", "bootcmd: [[true]]", "packages: [curl]"} {
		_, err := Parse([]byte("#cloud-config\n" + module + "\n"))
		g.Expect(err).To(MatchError(ContainSubstring("only write_files and runcmd")), module)
	}
	_, err = Script("x", []byte("#cloud-config\nwrite_files:\n- path: /x\n  encoding: b64\n  content: '%%%'\n"))
	g.Expect(err).To(MatchError(ContainSubstring("failed to decode /x")))
}
