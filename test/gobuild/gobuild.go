// Package gobuild builds this repository's binaries for tests, the stack, the lab and hack/images the
// same way everywhere: one `go build` per call, run from the repository root, so the packages several
// binaries share compile once, and the Go build cache makes compiling again take a moment.
//
// Linking is not in Go's build cache: a `go build -o` into a new directory links every binary again
// (seconds per manager, a minute for a stack's set on a loaded 2-core machine, paid by every stack of a
// make test run). So the binaries are linked into a directory kept under the cache root per build shape
// (options and packages), where `go build` finds them up to date by their build ID and skips the link,
// and copied from there to where the caller wants them.
package gobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/yonder-dev/yonder/test/cachedir"
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
// out: a file for one package, a directory ending in "/" for several (each binary named after its
// package's directory, as go build names them).
func Build(ctx context.Context, out string, o Options, pkgs ...string) error {
	if len(pkgs) == 0 {
		return fmt.Errorf("failed to build: no package named")
	}
	if len(pkgs) > 1 && !strings.HasSuffix(out, "/") {
		return fmt.Errorf("failed to build %s: several packages need a directory (ending in /) to build into, not %s", strings.Join(pkgs, " "), out)
	}
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
	env := os.Environ()
	if o.Static {
		env = append(env, "CGO_ENABLED=0")
	}
	linked, unlock, err := linkDir(ctx, args, o.Static, pkgs)
	if err != nil {
		return err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "go", append(append(args, "-o", linked+"/"), pkgs...)...)
	cmd.Dir = testbins.RepoRoot()
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to build %s: %s: %w", strings.Join(pkgs, " "), b, err)
	}
	for _, pkg := range pkgs {
		dst := out
		if strings.HasSuffix(out, "/") {
			dst = filepath.Join(out, binaryName(pkg))
		}
		// A copy, not a link: the next go build may write the linked binary in place.
		if err := cachedir.Place(filepath.Join(linked, binaryName(pkg)), dst, false); err != nil {
			return fmt.Errorf("failed to build %s: %w", pkg, err)
		}
	}
	return nil
}

// linkDir returns the kept directory this build shape links into, locked until the returned release
// (two lanes of make test build the same binaries at times; one go build writes a directory at a time).
func linkDir(ctx context.Context, args []string, static bool, pkgs []string) (string, func(), error) {
	root, err := cachedir.Root()
	if err != nil {
		return "", nil, err
	}
	shape := sha256.Sum256([]byte(fmt.Sprintf("%q static=%t %q", args, static, pkgs)))
	dir := filepath.Join(root, "gobuild", hex.EncodeToString(shape[:8]))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", nil, fmt.Errorf("failed to create the link directory: %w", err)
	}
	unlock, err := cachedir.Lock(ctx, dir+".lock")
	if err != nil {
		return "", nil, err
	}
	return dir, unlock, nil
}

// binaryName is the name go build gives the binary of pkg: the last element of its path (a major
// version suffix such as /v2 is not one of ours).
func binaryName(pkg string) string {
	return path.Base(filepath.ToSlash(pkg))
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
