package shellwrite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/shellwrite"
)

// runLines runs what File rendered with sh -e, as the scripts that embed it do, and returns its error.
func runLines(t *testing.T, lines string) ([]byte, error) {
	t.Helper()
	return exec.Command("sh", "-ec", lines).CombinedOutput()
}

// A new file gets its content, mode and owner, and nothing is left beside it; a write that fails at its
// owner (a user the host does not have) fails the script, leaves the file that was there untouched and no
// temporary file beside it.
func TestFileReplacesOrFailsWithoutLeavingATemporaryFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "sub", "token")

	var b strings.Builder
	shellwrite.File(&b, target, "0640", "root:root", []byte("secret-1\n"), false)
	out, err := runLines(t, b.String())
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	got, err := os.ReadFile(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("secret-1\n"))
	st, err := os.Stat(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o640)))

	b.Reset()
	shellwrite.File(&b, target, "0600", "yonder-no-such-user:root", []byte("secret-2\n"), false)
	b.WriteString("echo after-the-failed-write\n")
	out, err = runLines(t, b.String())
	g.Expect(err).To(HaveOccurred(), "an owner the host lacks fails the write: %s", out)
	g.Expect(string(out)).NotTo(ContainSubstring("after-the-failed-write"), "the script stops at the failed write")
	got, err = os.ReadFile(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("secret-1\n"), "the file that was there is untouched")
	entries, err := os.ReadDir(filepath.Dir(target))
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	g.Expect(names).To(ConsistOf("token"), "no temporary file is left beside it")
}
