// Package testbins locates the third-party binaries (kube-apiserver, etcd, kubelet, the CAPI manager,
// containerd…) that Yonder's tests run for real. They are built once from the Go module proxy by
// hack/test-bins.sh and cached outside the work tree; this package never builds anything itself, so a
// test fails fast with the command to run instead of silently stalling for twenty minutes.
package testbins

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// EnvVar overrides the directory that holds the binaries (useful when they were built elsewhere).
const EnvVar = "YONDER_TEST_BINS"

var (
	once   sync.Once
	dir    string
	dirErr error
)

// RepoRoot returns the root of the Yonder work tree this package was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Dir returns the directory holding every test binary, or an error that says what to run.
func Dir() (string, error) {
	if d := os.Getenv(EnvVar); d != "" {
		return d, nil
	}
	once.Do(func() {
		script := filepath.Join(RepoRoot(), "hack", "test-bins.sh")
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("bash", script, "--print")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			dirErr = fmt.Errorf("test binaries (kube-apiserver, etcd, kubelet, CAPI manager, containerd) are not built: run `make test-bins` (hack/test-bins.sh) first: %s", strings.TrimSpace(stderr.String()))
			return
		}
		dir = strings.TrimSpace(stdout.String())
	})
	return dir, dirErr
}

// Artifact runs hack/test-bins.sh with flag (--rootfs, --fullos-rootfs), which builds that artifact once and
// caches it outside the work tree, and returns the path the script prints last.
func Artifact(flag string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "test-bins.sh"), flag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/test-bins.sh %s failed: %w: %s", flag, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// Path returns the absolute path of one test binary, checking that it exists and is executable.
func Path(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("test binary %s is missing from %s: run `make test-bins` to rebuild it: %w", name, d, err)
	}
	if st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("test binary %s is not executable: run `make test-bins` to rebuild it", p)
	}
	return p, nil
}
