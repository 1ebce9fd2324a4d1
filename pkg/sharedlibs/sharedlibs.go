// Package sharedlibs finds the shared objects a dynamically linked program of this build host loads, so
// that it can be copied with them into a tree where the host's libraries are absent: an OCI image
// (pkg/ociimage's iptables layer) or the bare-metal boot image (test/metalboot's diskless host tools).
package sharedlibs

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// Closure maps the names of the shared objects an ELF file loads (its whole closure, the dynamic loader
// included, under its path) to their absolute paths, as ldd resolves them on this host. A library ldd
// cannot find is an error: a copy without it would fail only where it runs.
func Closure(path string) (map[string]string, error) {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("failed to run ldd %s: %w", path, err)
	}
	deps := map[string]string{}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
			deps[fields[0]] = fields[2] // libfoo.so.1 => /lib/…/libfoo.so.1 (0x…)
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			deps[fields[0]] = fields[0] // /lib64/ld-linux-x86-64.so.2 (0x…)
		case len(fields) >= 3 && fields[1] == "=>" && fields[2] == "not":
			return nil, fmt.Errorf("failed to resolve %s for %s: not found on the build host", fields[0], path)
		}
	}
	return deps, nil
}
