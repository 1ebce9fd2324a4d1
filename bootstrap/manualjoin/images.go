package manualjoin

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/yonder-dev/yonder/bootstrap/internal/images"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// Registry is the registry of an image repository as a host sees it: its host, the CA it is trusted with
// (PEM, empty for the system roots) and the upstream registries the node pulls through it.
func Registry(repository string, caPEM []byte, mirrorOf []string) (*agentv1.Registry, error) {
	repo, err := name.NewRepository(repository)
	if err != nil {
		return nil, fmt.Errorf("image repository %q is not valid: %w", repository, err)
	}
	return &agentv1.Registry{Host: repo.RegistryStr(), CACertificate: string(caPEM), MirrorOf: mirrorOf}, nil
}

// NodeImage resolves <repository>/yonder-node:<version> to the digest-pinned reference the join then
// pins, through reg: what the bootstrap provider does for a Machine.
func NodeImage(ctx context.Context, repository, version string, reg *agentv1.Registry) (string, error) {
	return images.NodeImage(ctx, repository, version, reg)
}

// AgentURL is the URL of yonder-agent's blob (its sha256) in repository's registry.
func AgentURL(repository, sha256 string) (string, error) {
	return images.AgentURL(repository, sha256)
}
