package gobuild_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/gobuild"
)

// A binary is linked once into the kept link directory: building it again into another place copies the
// linked file (go build found it up to date by its build ID and did not write it), and each copy runs.
func TestARepeatedBuildIsNotLinkedAgain(t *testing.T) {
	g := NewWithT(t)
	cache := t.TempDir()
	t.Setenv("YONDER_CACHE_DIR", cache)
	ctx := context.Background()
	first := filepath.Join(t.TempDir(), "testtimes")
	g.Expect(gobuild.Build(ctx, first, gobuild.Options{Static: true}, "./hack/testtimes")).To(Succeed())
	linked, err := filepath.Glob(filepath.Join(cache, "gobuild", "*", "testtimes"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(linked).To(HaveLen(1), "one link directory for one build shape")
	// A mark after the ELF data (the build ID Go compares is in a note up front): a build that links
	// again writes the file anew, without it.
	const mark = "linked-once"
	f, err := os.OpenFile(linked[0], os.O_APPEND|os.O_WRONLY, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString(mark)
	g.Expect(errors.Join(err, f.Close())).To(Succeed())

	second := t.TempDir() + "/"
	g.Expect(gobuild.Build(ctx, second, gobuild.Options{Static: true}, "./hack/testtimes")).To(Succeed())
	copied, err := os.ReadFile(filepath.Join(second, "testtimes"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.HasSuffix(string(copied), mark)).To(BeTrue(), "the second build copied the linked binary without linking it again")

	for _, bin := range []string{first, filepath.Join(second, "testtimes")} {
		// testtimes reads go test -json on stdin; empty input is a clean exit.
		out, err := exec.Command(bin).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s: %s", bin, out)
	}

	// Another shape (not static) links into its own directory.
	g.Expect(gobuild.Build(ctx, filepath.Join(t.TempDir(), "testtimes"), gobuild.Options{}, "./hack/testtimes")).To(Succeed())
	linked, err = filepath.Glob(filepath.Join(cache, "gobuild", "*", "testtimes"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(linked).To(HaveLen(2))
}

func TestSeveralPackagesNeedADirectory(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("YONDER_CACHE_DIR", t.TempDir())
	err := gobuild.Build(context.Background(), filepath.Join(t.TempDir(), "one-file"), gobuild.Options{}, "./hack/testtimes", "./hack/benchreport")
	g.Expect(err).To(MatchError(ContainSubstring("several packages need a directory")))
}
