package agent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
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
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, []byte(content)) { //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
		if st, err := os.Stat(p); err == nil && st.Mode().Perm() == mode {
			return
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories inside the machine's tree
		w.err = err
		return
	}
	tmp, err := writeTemp(p, []byte(content))
	if err != nil {
		w.err = fmt.Errorf("failed to write %s: %w", p, err)
		return
	}
	w.install(tmp, path, mode)
}

// writeTemp writes content to a new temporary file beside path and returns its name. os.CreateTemp
// creates it 0600 and exclusively (never a leftover of an earlier run with a wider mode), so content
// that holds a secret (a bootstrap token, a kubeconfig) is never readable under a wider mode than the
// one it is given before being renamed into place.
func writeTemp(path string, content []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".yonder-tmp-*")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// install moves the written temporary file tmp into place as path (under the root) with mode, and
// records the change; a failure removes tmp, so no half-written file stays behind.
func (w *writer) install(tmp, path string, mode os.FileMode) {
	p := filepath.Join(w.root, path)
	// tmp is the temporary file this writer created beside p (writeTemp, or copyVerified's).
	if err := os.Chmod(tmp, mode); err != nil { //nolint:gosec // see above
		_ = os.Remove(tmp) //nolint:gosec // see above
		w.err = err
		return
	}
	if err := os.Rename(tmp, p); err != nil { //nolint:gosec // see above
		_ = os.Remove(tmp) //nolint:gosec // see above
		w.err = err
		return
	}
	w.changed = append(w.changed, path)
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
	tmp := p + ".yonder-tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		w.err = err
		return
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		_ = os.Remove(tmp)
		w.err = err
		return
	}
	if err := out.Close(); err != nil {
		_ = os.Remove(tmp)
		w.err = err
		return
	}
	w.install(tmp, path, mode)
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
