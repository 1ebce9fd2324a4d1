package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/hostruntime/internal/nodeimage"

	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
)

func (r *run) rootfs(ctx context.Context) (string, error) {
	if r.image != nil {
		return r.rootfsFromImage(ctx)
	}
	archive, digest := r.files["rootfs"], ""
	if r.cfg.Rootfs.Archive != nil {
		digest = r.cfg.Rootfs.Archive.SHA256
	} else {
		var err error
		if archive, digest, err = r.debootstrapArchive(ctx); err != nil {
			return "", err
		}
	}
	dir := r.o.rootfsDir()
	if done, err := r.rootfsCurrent(digest); done || err != nil {
		return digest, err
	}
	r.log.Info("Extracting rootfs", "dir", dir, "sha256", short(digest))
	if err := rootfs.Extract(ctx, archive, dir); err != nil {
		return "", withHint(err, "check the rootfs archive; it must be a tar(.gz|.zst) of a Linux tree with systemd")
	}
	return digest, nil
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

// rootfsCurrent reports whether the machine's tree already is the one with this digest; it refuses to
// replace the tree of a running machine.
func (r *run) rootfsCurrent(digest string) (bool, error) {
	dir := r.o.rootfsDir()
	if prev := r.st.Phases[PhaseRootfs]; prev != nil && prev.Inputs == digest && rootfs.Init(dir) != "" {
		return true, nil
	}
	if pid := r.nspawnConfig().Running(); pid != 0 {
		return false, withHint(fmt.Errorf("the rootfs changed (now %s) but machine %s is running from the old one", short(digest), r.o.MachineName),
			"run `yonder-agent reset` (or upgrade) to replace a running node's rootfs")
	}
	return false, os.MkdirAll(r.o.machinesDir(), 0o700)
}

// rootfsFromImage unpacks the verified node image and checks that its kubelet is the configured version.
func (r *run) rootfsFromImage(ctx context.Context) (string, error) {
	h, err := r.image.Digest()
	if err != nil {
		return "", err
	}
	digest, dir := h.String(), r.o.rootfsDir()
	if done, err := r.rootfsCurrent(digest); done || err != nil {
		return digest, err
	}
	r.log.Info("Unpacking the node image", "dir", dir, "image", r.cfg.Rootfs.Image)
	if err := nodeimage.Unpack(ctx, r.image, dir, func(d string) bool { return rootfs.Init(d) != "" }); err != nil {
		return "", withHint(err, "check the node image: it must hold a Linux tree with systemd, containerd and the kubelet")
	}
	got, err := nodeimage.KubeletVersion(ctx, dir)
	if err != nil {
		return "", withHint(err, "use a node image built for this architecture (make images)")
	}
	if got != r.cfg.KubernetesVersion {
		return "", withHint(fmt.Errorf("node image %s carries kubelet %s, the AgentConfig asks for %s", r.cfg.Rootfs.Image, got, r.cfg.KubernetesVersion),
			"use the node image of the Machine's Kubernetes version (<repository>/yonder-node:"+r.cfg.KubernetesVersion+")")
	}
	return digest, nil
}
