package agent

import (
	"context"
	"path/filepath"

	"github.com/yonder-dev/yonder/hostruntime/internal/nodeimage"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/artifacts"
)

func (r *run) artifacts(ctx context.Context) (string, error) {
	cache := artifacts.Cache{Dir: filepath.Join(r.o.cacheDir(), "artifacts")}
	all := append([]agentv1.Artifact(nil), r.cfg.Artifacts...)
	if r.cfg.Rootfs.Archive != nil {
		a := *r.cfg.Rootfs.Archive
		a.Name = "rootfs"
		all = append(all, a)
	}
	for _, a := range all {
		p, err := cache.Ensure(ctx, a)
		if err != nil {
			return "", withHint(err, "nothing was installed; correct the artifact source or its sha256 and run bootstrap again")
		}
		r.files[a.Name] = p
	}
	if r.cfg.Rootfs.Image == "" {
		return "", nil
	}
	r.log.Info("Fetching the node image", "image", r.cfg.Rootfs.Image)
	img, err := nodeimage.Fetch(ctx, imageSource(r.cfg), filepath.Join(r.o.cacheDir(), "images"))
	if err != nil {
		return "", withHint(err, "nothing was installed; make the node image reachable (registry, mirror, CA, pull secret) and run bootstrap again")
	}
	r.image = img
	return "", nil
}

// imageSource is where the node image comes from, with the registry's CA and credentials.
func imageSource(cfg *agentv1.AgentConfig) nodeimage.Source {
	s := nodeimage.Source{Reference: cfg.Rootfs.Image}
	if cfg.Registry != nil {
		s.CACertificate, s.Username, s.Password = cfg.Registry.CACertificate, cfg.Registry.Username, cfg.Registry.Password
	}
	return s
}
