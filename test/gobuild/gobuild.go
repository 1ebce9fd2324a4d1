// Package gobuild builds this repository's binaries for tests, the stack and the lab the same way
// everywhere: one `go build` per call, run from the repository root, so the packages several binaries
// share compile once, and the Go build cache makes a repeated build take a moment.
package gobuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/yonder-dev/yonder/test/testbins"
)

// Options tune a build.
type Options struct {
	// Static builds without cgo (CGO_ENABLED=0): a binary that runs in an initramfs or a node image.
	Static bool
	// Strip leaves paths and symbols out (-trimpath, -ldflags "-s -w"): smaller binaries.
	Strip bool
	// TrimPath leaves only the paths out (-trimpath), as `make release` builds.
	TrimPath bool
	// Tags are build tags (-tags), e.g. "release" for the plugin as released.
	Tags []string
}

// Build builds pkgs (import paths, or ./paths relative to the repository root) in one `go build` into
// out: a file for one package, a directory ending in "/" for several.
func Build(ctx context.Context, out string, o Options, pkgs ...string) error {
	args := []string{"build"}
	if o.Strip || o.TrimPath {
		args = append(args, "-trimpath")
	}
	if o.Strip {
		args = append(args, "-ldflags", "-s -w")
	}
	if len(o.Tags) > 0 {
		args = append(args, "-tags", strings.Join(o.Tags, ","))
	}
	args = append(append(args, "-o", out), pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = testbins.RepoRoot()
	cmd.Env = os.Environ()
	if o.Static {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to build %s: %s: %w", strings.Join(pkgs, " "), b, err)
	}
	return nil
}

// ForTest builds package pkg into a directory of the test and returns the binary's path; it fails the
// test when the build fails.
func ForTest(t testing.TB, pkg string, o Options) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if err := Build(context.Background(), out, o, pkg); err != nil {
		t.Fatal(err)
	}
	return out
}
