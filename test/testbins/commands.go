package testbins

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The external commands Yonder's tests and scripts run come from exactly three places, and this file is where
// a test asks which: a Debian package in hack/test-bins.sh's DEB_PACKAGES (or one every Debian has: Essential
// or Priority required), a binary that hack/test-bins.sh builds, or the Go toolchain the README requires.
// TestEveryCommandIsAccountedFor (commands_test.go) finds the commands the code runs and checks each here, so a
// command that a newcomer's machine lacks fails that test by name instead of a boot or a pipeline ten minutes
// later.

var (
	listsOnce sync.Once
	debs      map[string]bool
	built     map[string]bool
	listsErr  error
)

func scriptList(flag string) (map[string]bool, error) {
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "test-bins.sh"), flag).Output()
	if err != nil {
		return nil, fmt.Errorf("failed to run hack/test-bins.sh %s: %w", flag, err)
	}
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		m[l] = true
	}
	return m, nil
}

func lists() (map[string]bool, map[string]bool, error) {
	listsOnce.Do(func() {
		if debs, listsErr = scriptList("--list-packages"); listsErr == nil {
			built, listsErr = scriptList("--list-built")
		}
	})
	return debs, built, listsErr
}

// DebPackages returns hack/test-bins.sh's DEB_PACKAGES.
func DebPackages() (map[string]bool, error) {
	d, _, err := lists()
	return d, err
}

// lookPathDirs are searched after PATH: the sbin directories hold most of what the tests run as root, and a
// test process's PATH does not always name them.
var lookPathDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// LookPath finds an external command the way the tests run it, or fails with an error that names the
// command and the Debian package (from DEB_PACKAGES) or build step that provides it.
func LookPath(name string) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("%s is missing: run `hack/test-bins.sh` (it installs every package in DEB_PACKAGES): %w", name, err)
		}
		return name, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range lookPathDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	_, b, _ := lists()
	if b[name] {
		return Path(name)
	}
	return "", fmt.Errorf("command %s is not installed: run `hack/test-bins.sh --packages` (DEB_PACKAGES in hack/test-bins.sh must name the Debian package that provides it)", name)
}

// prerequisites are what a newcomer has before the README's commands can run at all (README, Requirements):
// the Go toolchain, GNU make for `make lab`/`make test`, git for the clone. hack/test-bins.sh checks Go.
var prerequisites = map[string]bool{"go": true, "gofmt": true, "make": true, "git": true}

// CommandSource says where one command comes from: "built" (hack/test-bins.sh builds it), "prerequisite" (Go,
// make, git: the README's Requirements), "deb:<package>" for a package in DEB_PACKAGES, "base:<package>" for an Essential or required
// package every Debian machine has. It errors for a command that comes from none of them.
func CommandSource(name string) (string, error) {
	d, b, err := lists()
	if err != nil {
		return "", err
	}
	switch {
	case prerequisites[name]:
		return "prerequisite", nil
	case b[name]:
		return "built", nil
	}
	p, err := LookPath(name)
	if err != nil {
		return "", err
	}
	pkg, err := owningPackage(p)
	if err != nil {
		return "", fmt.Errorf("command %s (%s) belongs to no Debian package: it must come from a package in DEB_PACKAGES (hack/test-bins.sh) or be built there: %w", name, p, err)
	}
	if d[pkg] {
		return "deb:" + pkg, nil
	}
	if base, err := basePackage(pkg); err != nil {
		return "", err
	} else if base {
		return "base:" + pkg, nil
	}
	return "", fmt.Errorf("command %s comes from the Debian package %s, which is not in DEB_PACKAGES: add %s to DEB_PACKAGES in hack/test-bins.sh (a fresh machine does not have it)", name, pkg, pkg)
}

// owningPackage asks dpkg which package ships path. With merged /usr, dpkg may know the file under /bin
// while PATH finds it under /usr/bin (or the reverse), and alternatives hide it behind /etc/alternatives: try
// the path, its /usr twin and what its symlinks resolve to.
func owningPackage(path string) (string, error) {
	candidates := []string{path}
	if strings.HasPrefix(path, "/usr/") {
		candidates = append(candidates, strings.TrimPrefix(path, "/usr"))
	} else {
		candidates = append(candidates, "/usr"+path)
	}
	if r, err := filepath.EvalSymlinks(path); err == nil && r != path {
		candidates = append(candidates, r)
		if strings.HasPrefix(r, "/usr/") {
			candidates = append(candidates, strings.TrimPrefix(r, "/usr"))
		}
	}
	var lastErr error
	for _, c := range candidates {
		out, err := exec.Command("dpkg-query", "-S", c).Output()
		if err != nil {
			lastErr = err
			continue
		}
		// "pkg[:arch][, pkg2]: /path", after "diversion by pkg from/to: …" lines for diverted files (/bin/sh)
		for _, line := range bytes.Split(out, []byte("\n")) {
			l := string(line)
			if l == "" || strings.HasPrefix(l, "diversion by ") {
				continue
			}
			first := strings.TrimSpace(strings.Split(strings.SplitN(l, ": ", 2)[0], ",")[0])
			return strings.Split(first, ":")[0], nil
		}
		lastErr = fmt.Errorf("dpkg-query -S %s named no package", c)
	}
	return "", lastErr
}

// basePackage reports whether a package is on every Debian system: Essential, or Priority required.
func basePackage(pkg string) (bool, error) {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Essential} ${Priority}", pkg).Output()
	if err != nil {
		return false, fmt.Errorf("failed to ask dpkg about package %s: %w", pkg, err)
	}
	f := strings.Fields(string(out))
	return len(f) == 2 && (f[0] == "yes" || f[1] == "required"), nil
}
