package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
	"github.com/yonder-dev/yonder/hostruntime/internal/nodeimage"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
)

// rootfsSource is where the machine's tree comes from: its digest (the phase's input) and how to unpack
// it into a directory, atomically.
type rootfsSource struct {
	digest string
	what   string
	unpack func(ctx context.Context, dir string) error
	check  func(ctx context.Context, dir string) error
}

// rootfs gives the machine its root: the verified tree, unpacked once into the cache
// (<state-dir>/cache/rootfs/trees/<digest>), and the machine's own overlay on it (package rootfs says
// why). A warm host, whose cache a `reset --keep-cache` kept, only mounts. Where the host cannot mount an
// overlay, the tree is unpacked into the machine's directory itself.
func (r *run) rootfs(ctx context.Context) (string, error) {
	src, err := r.rootfsSource(ctx)
	if err != nil {
		return "", err
	}
	m := r.o.machineRoot()
	if prev := r.st.Phases[PhaseRootfs]; prev == nil || prev.Inputs != src.digest {
		if pid := r.nspawnConfig().Running(); pid != 0 {
			return "", withHint(fmt.Errorf("the rootfs changed (now %s) but machine %s is running from the old one", short(src.digest), r.o.MachineName),
				"run `yonder-agent reset` (or upgrade) to replace a running node's rootfs")
		}
		// Another tree's changes must not land on this one.
		if err := m.Discard(); err != nil {
			return "", err
		}
	} else if rootfs.Init(m.Dir) != "" {
		return src.digest, nil // mounted, or a copy (or a tree an earlier agent extracted in place)
	}
	if err := os.MkdirAll(r.o.machinesDir(), 0o700); err != nil {
		return "", err
	}
	if err := rootfs.OverlaySupported(r.o.machinesDir()); err != nil {
		if !errors.Is(err, rootfs.ErrOverlayUnsupported) {
			return "", err
		}
		r.log.Info("Unpacking the rootfs into the machine: this host cannot mount an overlay root", "reason", err.Error(), "dir", m.Dir)
		return src.digest, src.materialize(ctx, m.Dir)
	}
	tree := r.o.rootfsTreeDir(src.digest)
	if rootfs.Init(tree) == "" {
		r.log.Info("Unpacking the rootfs into the cache (once per digest)", "source", src.what, "tree", tree)
		if err := os.MkdirAll(filepath.Dir(tree), 0o700); err != nil {
			return "", err
		}
		if err := src.materialize(ctx, tree); err != nil {
			return "", err
		}
	} else if src.check != nil {
		if err := src.check(ctx, tree); err != nil {
			return "", err
		}
	}
	if err := m.Mount(tree); err != nil {
		return "", err
	}
	r.pruneRootfsTrees(tree)
	return src.digest, nil
}

// materialize unpacks the source into dir and checks the result.
func (s rootfsSource) materialize(ctx context.Context, dir string) error {
	if err := s.unpack(ctx, dir); err != nil {
		return err
	}
	if s.check != nil {
		return s.check(ctx, dir)
	}
	return nil
}

// pruneRootfsTrees removes the cached trees of other digests that no machine's overlay uses any more
// (what upgrades left behind), so the cache holds the current tree and the other slot's at most.
func (r *run) pruneRootfsTrees(current string) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	inUse := rootfs.OverlayLowerDirs(string(info), r.o.machinesDir())
	entries, _ := os.ReadDir(filepath.Dir(current))
	for _, e := range entries {
		p := filepath.Join(filepath.Dir(current), e.Name())
		if p == current || slices.Contains(inUse, p) || strings.HasSuffix(p, ".partial") {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			r.log.Info("Could not remove an unused rootfs tree", "tree", p, "err", err.Error())
			continue
		}
		r.log.Info("Removed an unused rootfs tree", "tree", p)
	}
}

func (r *run) rootfsSource(ctx context.Context) (rootfsSource, error) {
	if r.image != nil {
		return r.imageSource()
	}
	archive, digest := r.files["rootfs"], ""
	if r.cfg.Rootfs.Archive != nil {
		digest = r.cfg.Rootfs.Archive.SHA256
	} else {
		var err error
		if archive, digest, err = r.debootstrapArchive(ctx); err != nil {
			return rootfsSource{}, err
		}
	}
	return rootfsSource{digest: digest, what: archive, unpack: func(ctx context.Context, dir string) error {
		if err := rootfs.Extract(ctx, archive, dir); err != nil {
			return withHint(err, "check the rootfs archive; it must be a tar(.gz|.zst) of a Linux tree with systemd")
		}
		return nil
	}}, nil
}

// debootstrapArchive builds (once) the default rootfs archive and returns it with its digest.
func (r *run) debootstrapArchive(ctx context.Context) (string, string, error) {
	archive := filepath.Join(r.o.cacheDir(), "rootfs", rootfs.DefaultSuite+"-debootstrap.tar.zst")
	r.log.Info("Building the default rootfs with debootstrap (once; minutes)", "archive", archive)
	if err := os.MkdirAll(filepath.Dir(archive), 0o700); err != nil {
		return "", "", err
	}
	if err := rootfs.Debootstrap(ctx, archive, rootfs.DefaultSuite, rootfs.DefaultPackages, "", r.o.Log); err != nil {
		return "", "", withHint(err, "set rootfs.image or rootfs.archive in the AgentConfig on hosts without a reachable Debian mirror")
	}
	d, err := artifacts.FileSHA256(archive)
	return archive, d, err
}

// imageSource unpacks the verified node image and checks that its kubelet is the configured version.
func (r *run) imageSource() (rootfsSource, error) {
	h, err := r.image.Digest()
	if err != nil {
		return rootfsSource{}, err
	}
	return rootfsSource{digest: h.String(), what: r.cfg.Rootfs.Image,
		unpack: func(ctx context.Context, dir string) error {
			if err := nodeimage.Unpack(ctx, r.image, dir, func(d string) bool { return rootfs.Init(d) != "" }); err != nil {
				return withHint(err, "check the node image: it must hold a Linux tree with systemd, containerd and the kubelet")
			}
			return nil
		},
		check: func(ctx context.Context, dir string) error {
			got, err := nodeimage.KubeletVersion(ctx, dir)
			if err != nil {
				return withHint(err, "use a node image built for this architecture (make images)")
			}
			if got != r.cfg.KubernetesVersion {
				return withHint(fmt.Errorf("node image %s carries kubelet %s, the AgentConfig asks for %s", r.cfg.Rootfs.Image, got, r.cfg.KubernetesVersion),
					"use the node image of the Machine's Kubernetes version (<repository>/yonder-node:"+r.cfg.KubernetesVersion+")")
			}
			return nil
		}}, nil
}
