package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// A failed build step's reason is in the error itself: the command's last stderr lines, not only lines that
// scrolled past (the lab once failed with "failed to build the binaries (): exit status 1" and nothing else).
func TestRunShowingTailPutsTheLastLinesIntoTheError(t *testing.T) {
	g := NewWithT(t)
	var out strings.Builder
	err := runShowingTail(context.Background(), &out, "bash", "-c", `for i in $(seq 1 40); do echo "line $i" >&2; done; exit 3`)
	g.Expect(err).To(MatchError(ContainSubstring("exit status 3")))
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("line %d\n    line 40", 39)))
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("line %d", 40-tailLines+1)))
	g.Expect(err.Error()).NotTo(ContainSubstring(fmt.Sprintf("line %d\n", 40-tailLines)))
	g.Expect(out.String()).To(ContainSubstring("    line 1\n"), "every line is passed through as it comes")
	g.Expect(runShowingTail(context.Background(), &out, "bash", "-c", "echo fine >&2")).To(Succeed())
}

// lab up checks what hack/test-bins.sh cannot install before it builds anything, and says what to do.
func TestTestBinsStopsAtThePreflightWithItsReason(t *testing.T) {
	g := NewWithT(t)
	bin := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(bin, "id"), []byte("#!/bin/sh\necho 1000\n"), 0o755)).To(Succeed())
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("YONDER_CACHE_DIR", t.TempDir())
	var out strings.Builder
	err := testBins(context.Background(), &out)
	g.Expect(err).To(MatchError(ContainSubstring("failed to prepare the binaries (hack/test-bins.sh --preflight)")))
	g.Expect(err).To(MatchError(ContainSubstring("ERROR: run as root")))
}
