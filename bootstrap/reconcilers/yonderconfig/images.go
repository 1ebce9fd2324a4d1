package yonderconfig

import (
	"context"
	"errors"
	"strings"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/internal/images"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// repository is where the YonderConfig's images come from: spec.images.repository, else the manager's.
func (r *Reconciler) repository(cfg *bootstrapv1.YonderConfig) string {
	if cfg.Spec.Images.Repository != "" {
		return cfg.Spec.Images.Repository
	}
	return r.ImageRepository
}

// registry reads the repository's registry settings (nil without a repository).
func (r *Reconciler) registry(ctx context.Context, cfg *bootstrapv1.YonderConfig) (*agentv1.Registry, error) {
	repo := r.repository(cfg)
	if repo == "" {
		return nil, nil
	}
	reg, err := images.Registry(ctx, r.Client, cfg.Namespace, repo, cfg.Spec.Images)
	return reg, asConfigError(err, bootstrapv1.YonderConfigInvalidConfigurationReason)
}

// nodeSoftware sets the node's root filesystem: spec.rootfs when set, else the node image of version in
// the repository, resolved to its digest now (a tag can move; the data pins what it was when rendered).
// The registry settings go along where the image is in that registry.
func (r *Reconciler) nodeSoftware(ctx context.Context, cfg *bootstrapv1.YonderConfig, reg *agentv1.Registry, c *agentv1.AgentConfig) error {
	spec := cfg.Spec.Rootfs
	switch {
	case spec.Image != "":
		c.Rootfs.Image = spec.Image
	case spec.Archive != nil:
		a := spec.Archive
		c.Rootfs.Archive = &agentv1.Artifact{Name: "rootfs", URL: a.URL, Path: a.Path, SHA256: a.SHA256}
	case reg != nil:
		ref, err := images.NodeImage(ctx, r.repository(cfg), c.KubernetesVersion, reg)
		if err != nil {
			return asConfigError(err, bootstrapv1.YonderConfigNodeImageUnavailableReason)
		}
		c.Rootfs.Image = ref
	}
	if reg != nil && (c.Rootfs.Image == "" || strings.HasPrefix(c.Rootfs.Image, reg.Host+"/")) {
		c.Registry = reg
	}
	return nil
}

// agentSource is where the host gets yonder-agent: spec.agent, else the manager's --agent-url, else its
// blob (--agent-sha256) in the image repository, with the registry's CA and credentials.
func (r *Reconciler) agentSource(cfg *bootstrapv1.YonderConfig, reg *agentv1.Registry) (cloudinit.AgentSource, error) {
	spec := cfg.Spec.Agent
	if spec.URL != "" || spec.Path != "" {
		return cloudinit.AgentSource{URL: spec.URL, Path: spec.Path, SHA256: spec.SHA256}, nil
	}
	agent := r.DefaultAgent
	if agent.URL == "" && agent.Path == "" && agent.SHA256 != "" && reg != nil {
		url, err := images.AgentURL(r.repository(cfg), agent.SHA256)
		if err != nil {
			return agent, asConfigError(err, bootstrapv1.YonderConfigInvalidConfigurationReason)
		}
		agent.URL, agent.CACertificate, agent.Username, agent.Password = url, reg.CACertificate, reg.Username, reg.Password
	}
	if (agent.URL == "" && agent.Path == "") || agent.SHA256 == "" {
		return agent, &configError{bootstrapv1.YonderConfigAgentSourceMissingReason, "No yonder-agent source: set spec.images.repository (or the manager's --image-repository) " +
			"with the manager's --agent-sha256, or spec.agent.url (or path) and spec.agent.sha256"}
	}
	return agent, nil
}

// asConfigError turns an images.UserError into a condition the operator acts on.
func asConfigError(err error, reason string) error {
	var ue *images.UserError
	if errors.As(err, &ue) {
		return &configError{reason, ue.Message}
	}
	return err
}
