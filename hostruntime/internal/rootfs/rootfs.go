// Package rootfs materialises the node's root filesystem (the nspawn machine's tree) from a verified
// archive (tar, tar.gz or tar.zst) or, when the AgentConfig names none, from debootstrap against the
// host's configured Debian mirror — built once and cached as an archive, so later nodes restore it in
// seconds. Extraction goes to a temporary directory that is renamed into place, so a crash never leaves a
// half-extracted tree that looks complete.
package rootfs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultSuite and DefaultPackages are what the debootstrap fallback builds: a minimal Debian with systemd
// as init, runc and the CNI plugins (the node's own binaries come as artifacts).
const (
	DefaultSuite    = "bookworm"
	DefaultPackages = "systemd,systemd-sysv,dbus,iproute2,ca-certificates,runc,containernetworking-plugins,iptables,kmod"
	DefaultMirror   = "http://deb.debian.org/debian"
)

// Init returns the machine's init binary inside dir, or "" when the tree has none.
func Init(dir string) string {
	for _, p := range []string{"lib/systemd/systemd", "usr/lib/systemd/systemd"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err == nil && st.Mode().IsRegular() {
			return "/" + p
		}
	}
	return ""
}

// Extract unpacks archive into dir (which must not exist yet; it is created atomically by rename).
func Extract(ctx context.Context, archive, dir string) error {
	comp, err := compression(archive)
	if err != nil {
		return err
	}
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("failed to remove an interrupted extraction %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil { //nolint:gosec // a root filesystem's root is 0755
		return err
	}
	args := []string{"-C", tmp, "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", archive}
	switch comp {
	case "zstd":
		if _, err := exec.LookPath("zstd"); err != nil {
			return fmt.Errorf("the rootfs archive is zstd-compressed but zstd is not installed on this host: install zstd or use a .tar.gz: %w", err)
		}
		args = append([]string{"--zstd"}, args...)
	case "gzip":
		args = append([]string{"-z"}, args...)
	}
	if out, err := exec.CommandContext(ctx, "tar", args...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("failed to extract rootfs %s: %s: %w", archive, lastLines(out), err)
	}
	if Init(tmp) == "" {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("rootfs archive %s has no systemd (lib/systemd/systemd): the machine needs systemd as init; build it with systemd and systemd-sysv", archive)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// Debootstrap builds a rootfs archive at archive (tar.zst) with debootstrap, once.
func Debootstrap(ctx context.Context, archive, suite, packages, mirror string, log io.Writer) error {
	if _, err := os.Stat(archive); err == nil {
		return nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("no rootfs archive is configured and debootstrap is not installed: install debootstrap, or set rootfs.archive in the AgentConfig (offline hosts): %w", err)
	}
	if mirror == "" {
		mirror = HostMirror("/etc/apt")
	}
	tree := archive + ".tree"
	_ = os.RemoveAll(tree)
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+packages, suite, tree, mirror)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(tree)
		return fmt.Errorf("debootstrap %s from %s failed (see the log above; check the mirror is reachable): %w", suite, mirror, err)
	}
	defer func() { _ = os.RemoveAll(tree) }()
	tmp := archive + ".partial"
	if err := packZstd(ctx, tree, tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("failed to pack the debootstrap rootfs: %w", err)
	}
	return os.Rename(tmp, archive)
}

// packZstd writes tree as a tar.zst archive: tar piped into zstd by this process, so a failure of either
// one is seen (a shell pipeline reports only zstd's status, and a tar that died would leave a short archive
// that looks complete).
func packZstd(ctx context.Context, tree, out string) error {
	tar := exec.CommandContext(ctx, "tar", "-C", tree, "--numeric-owner", "--xattrs", "-cf", "-", ".")
	zstd := exec.CommandContext(ctx, "zstd", "-q", "-T0", "-3", "-f", "-o", out)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	var tarErr, zstdErr strings.Builder
	tar.Stderr, zstd.Stderr, zstd.Stdin = &tarErr, &zstdErr, pipe
	if err := zstd.Start(); err != nil {
		return fmt.Errorf("failed to start zstd: %w", err)
	}
	if err := tar.Run(); err != nil {
		_ = zstd.Process.Kill()
		_ = zstd.Wait()
		return fmt.Errorf("tar failed: %s: %w", lastLines([]byte(tarErr.String())), err)
	}
	if err := zstd.Wait(); err != nil {
		return fmt.Errorf("zstd failed: %s: %w", lastLines([]byte(zstdErr.String())), err)
	}
	return nil
}

var urisRE = regexp.MustCompile(`(?m)^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(https?://\S+/debian)/?(?:\s|$)`)

// HostMirror returns the Debian mirror the host's apt uses (first match), or DefaultMirror.
func HostMirror(aptDir string) string {
	files, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*.sources"))
	more, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*.list"))
	files = append(append(files, more...), filepath.Join(aptDir, "sources.list"))
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // apt source lists
		if err != nil {
			continue
		}
		if m := urisRE.FindSubmatch(data); m != nil {
			return string(m[1])
		}
	}
	return DefaultMirror
}

func compression(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // the verified rootfs archive
	if err != nil {
		return "", fmt.Errorf("failed to open rootfs archive: %w", err)
	}
	defer func() { _ = f.Close() }()
	magic := make([]byte, 4)
	n, _ := io.ReadFull(bufio.NewReader(f), magic)
	magic = magic[:n]
	switch {
	case len(magic) >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		return "zstd", nil
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return "gzip", nil
	}
	return "", nil
}

func lastLines(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "; ")
}
