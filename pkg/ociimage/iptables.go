package ociimage

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/yonder-dev/yonder/pkg/sharedlibs"
)

// xtablesDir holds iptables' match and target extensions (libxt_tcp.so, libxt_TCPMSS.so …), loaded at run
// time by name, so ldd of the binary does not see them.
const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// iptablesTools are the names the multi-call binaries answer to, pointing at the nf_tables backend: the
// default of Debian 11+, Ubuntu 21.04+, RHEL/Rocky 8+ and of kube-proxy's own image on such hosts. The
// legacy backend is there under its -legacy names for an operator who must match a legacy host.
var iptablesTools = map[string]string{
	"iptables": "xtables-nft-multi", "iptables-save": "xtables-nft-multi", "iptables-restore": "xtables-nft-multi",
	"ip6tables": "xtables-nft-multi", "ip6tables-save": "xtables-nft-multi", "ip6tables-restore": "xtables-nft-multi",
	"iptables-nft": "xtables-nft-multi", "ip6tables-nft": "xtables-nft-multi",
	"iptables-legacy": "xtables-legacy-multi", "iptables-legacy-save": "xtables-legacy-multi",
	"iptables-legacy-restore": "xtables-legacy-multi", "ip6tables-legacy": "xtables-legacy-multi",
}

// IptablesFiles returns the image files that make `iptables` work: Debian's xtables multi-call binaries from
// the build host (package iptables), their extensions, the shared libraries all of them load (their ldd
// closure, with the dynamic loader) and the symlinks of the merged /usr layout they are reached through.
// Copying the host's files keeps the build offline; the digest then depends on the host's iptables and
// libc packages, which is why the archive's digest is stable on one build host, not across distributions.
func IptablesFiles() ([]File, error) {
	c := hostCopier{files: map[string]File{}}
	var elfs []string
	for _, b := range []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi"} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("failed to find %s (install Debian's iptables package on the build host): %w", b, err)
		}
		elfs = append(elfs, b)
	}
	exts, err := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return nil, fmt.Errorf("failed to find iptables extensions in %s (install Debian's iptables package)", xtablesDir)
	}
	elfs = append(elfs, exts...)
	libs := map[string]bool{}
	// resolved maps each shared object name ldd resolved to its path. ldd prints a whole closure, so an
	// ELF file whose every DT_NEEDED name is resolved already adds nothing; the ~120 extensions mostly need
	// only libc and libxtables, and asking ldd about each took 10 s of every image build.
	resolved := map[string]string{}
	for _, e := range elfs {
		if err := c.add(e); err != nil {
			return nil, err
		}
		needed, err := neededLibraries(e)
		if err != nil {
			return nil, err
		}
		if len(resolved) > 0 && allResolved(needed, resolved) {
			continue
		}
		deps, err := sharedlibs.Closure(e)
		if err != nil {
			return nil, err
		}
		for name, d := range deps {
			resolved[name] = d
			libs[d] = true
		}
	}
	sortedLibs := make([]string, 0, len(libs))
	for l := range libs {
		sortedLibs = append(sortedLibs, l)
	}
	sort.Strings(sortedLibs)
	for _, l := range sortedLibs {
		if err := c.add(l); err != nil {
			return nil, err
		}
	}
	// -p tcp/udp resolve through /etc/protocols when it exists (iptables has a built-in table otherwise).
	if _, err := os.Stat("/etc/protocols"); err == nil {
		if err := c.add("/etc/protocols"); err != nil {
			return nil, err
		}
	}
	for name, target := range iptablesTools {
		c.files["usr/sbin/"+name] = File{Path: "usr/sbin/" + name, Symlink: target}
	}
	// iptables -w takes /run/xtables.lock (the DaemonSet mounts the host's there); /tmp for the libraries.
	c.files["run"] = File{Path: "run", Dir: true}
	c.files["tmp"] = File{Path: "tmp", Dir: true, Mode: 0o1777}
	out := make([]File, 0, len(c.files))
	for _, f := range c.files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// neededLibraries lists the shared object names an ELF file names in its dynamic section (DT_NEEDED).
func neededLibraries(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read ELF file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("failed to read the libraries %s needs: %w", path, err)
	}
	return needed, nil
}

// allResolved says whether ldd resolved every name already.
func allResolved(names []string, resolved map[string]string) bool {
	for _, n := range names {
		if _, ok := resolved[n]; !ok {
			return false
		}
	}
	return true
}

// hostCopier copies host paths into image files, reproducing every symlink met on the way (/lib → usr/lib,
// /lib64/ld-linux-x86-64.so.2 → /lib/x86_64-linux-gnu/…) so the paths baked into binaries resolve the same
// way inside the image.
type hostCopier struct {
	files map[string]File
}

// add copies the host path p (absolute) and the directories and symlinks leading to it.
func (c *hostCopier) add(p string) error {
	return c.addDepth(p, 0)
}

func (c *hostCopier) addDepth(p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("failed to copy %s: too many levels of symbolic links", p)
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		rel := strings.TrimPrefix(next, "/")
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("failed to copy %s: %w", p, err)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("failed to read symlink %s: %w", next, err)
			}
			c.files[rel] = File{Path: rel, Symlink: target}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			// Continue from where the link points, with what is left of p.
			return c.addDepth(filepath.Join(append([]string{target}, parts[i+1:]...)...), depth+1)
		case fi.IsDir():
			if _, ok := c.files[rel]; !ok {
				c.files[rel] = File{Path: rel, Dir: true, Mode: int64(fi.Mode().Perm())}
			}
		case fi.Mode().IsRegular():
			if i != len(parts)-1 {
				return fmt.Errorf("failed to copy %s: %s is not a directory", p, next)
			}
			data, err := os.ReadFile(next) //nolint:gosec // a host file chosen by IptablesFiles
			if err != nil {
				return fmt.Errorf("failed to read %s: %w", next, err)
			}
			c.files[rel] = File{Path: rel, Content: data, Mode: int64(fi.Mode().Perm())}
		default:
			return fmt.Errorf("failed to copy %s: %s is neither a file, a directory nor a symlink", p, next)
		}
		cur = next
	}
	return nil
}
