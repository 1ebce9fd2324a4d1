package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
	"github.com/yonder-dev/yonder/pkg/atomicfile"
)

// writer writes files under a root, only when their content differs, and remembers what changed.
type writer struct {
	root    string
	changed []string
	err     error
}

func (w *writer) file(path, content string, mode os.FileMode) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	if atomicfile.Same(p, []byte(content), mode) {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	if w.err = atomicfile.Write(p, []byte(content), mode); w.err == nil {
		w.changed = append(w.changed, path)
	}
}

func (w *writer) copyVerified(src, path string, mode os.FileMode) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	want, err := artifacts.FileSHA256(src)
	if err != nil {
		w.err = err
		return
	}
	if got, err := artifacts.FileSHA256(p); err == nil && got == want {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	in, err := os.Open(src) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		w.err = err
		return
	}
	defer func() { _ = in.Close() }()
	out, err := atomicfile.Create(p)
	if err != nil {
		w.err = err
		return
	}
	defer out.Abort()
	if _, err := io.Copy(out, in); err != nil {
		w.err = fmt.Errorf("failed to copy %s to %s: %w", src, p, err)
		return
	}
	if w.err = out.Commit(mode); w.err == nil {
		w.changed = append(w.changed, path)
	}
}

func (w *writer) untarOnce(src, dir string) {
	if w.err != nil {
		return
	}
	digest, err := artifacts.FileSHA256(src)
	if err != nil {
		w.err = err
		return
	}
	stamp := filepath.Join(w.root, dir, ".yonder-"+short(digest))
	if fileExists(stamp) {
		return
	}
	d := filepath.Join(w.root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	if out, err := exec.Command("tar", "-xzf", src, "-C", d).CombinedOutput(); err != nil {
		w.err = fmt.Errorf("failed to unpack %s into %s: %s: %w", src, dir, tail(out), err)
		return
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil { //nolint:gosec // marker
		w.err = err
		return
	}
	w.changed = append(w.changed, dir)
}

func (w *writer) symlink(target, path string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	if cur, err := os.Readlink(p); err == nil && cur == target {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		w.err = err
		return
	}
	w.changed = append(w.changed, path)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func readFile(p string) []byte { b, _ := os.ReadFile(p); return b } //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, " | ")
}
