// Package images resolves where a node's software comes from: the node image of a Kubernetes version in
// an image repository (<repository>/yonder-node:<version>, resolved to the digest the bootstrap data then
// pins), the registry's CA and credentials (from Secrets the operator names), and the URL of yonder-agent's
// blob in the same repository (<registry>/v2/<path>/yonder-agent/blobs/sha256:<sha256>), so hosts reach
// everything through one registry or mirror and nothing has to be hosted by hand.
package images

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/yonder-dev/yonder/pkg/ociimage"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// Names of the images in a repository.
const (
	NodeImageName  = "yonder-node"
	AgentImageName = "yonder-agent"
	// CAKey is the key of the CA Secret.
	CAKey = "ca.crt"
)

// UserError is a problem the operator fixes in the spec, a Secret or the registry.
type UserError struct{ Message string }

func (e *UserError) Error() string { return e.Message }

// Registry reads the registry settings of spec for repository: host, CA and credentials from the
// Secrets in namespace, mirrored upstreams.
func Registry(ctx context.Context, c client.Reader, namespace, repository string, spec bootstrapv1.Images) (*agentv1.Registry, error) {
	repo, err := name.NewRepository(repository)
	if err != nil {
		return nil, &UserError{fmt.Sprintf("Image repository %q is not valid: %v", repository, err)}
	}
	reg := &agentv1.Registry{Host: repo.RegistryStr(), MirrorOf: spec.MirrorOf}
	if spec.CASecretName != "" {
		data, err := secretKey(ctx, c, namespace, spec.CASecretName, CAKey)
		if err != nil {
			return nil, err
		}
		reg.CACertificate = string(data)
	}
	if spec.PullSecretName != "" {
		data, err := secretKey(ctx, c, namespace, spec.PullSecretName, corev1.DockerConfigJsonKey)
		if err != nil {
			return nil, err
		}
		if reg.Username, reg.Password, err = credentials(data, reg.Host); err != nil {
			return nil, &UserError{fmt.Sprintf("Secret %s/%s: %v", namespace, spec.PullSecretName, err)}
		}
	}
	return reg, nil
}

func secretKey(ctx context.Context, c client.Reader, namespace, name, key string) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &UserError{fmt.Sprintf("Secret %s/%s does not exist (spec.images)", namespace, name)}
		}
		return nil, err
	}
	v, ok := sec.Data[key]
	if !ok || len(v) == 0 {
		return nil, &UserError{fmt.Sprintf("Secret %s/%s has no key %q (spec.images)", namespace, name, key)}
	}
	return v, nil
}

// credentials finds host's entry in a .dockerconfigjson.
func credentials(dockerConfig []byte, host string) (string, string, error) {
	var cfg struct {
		Auths map[string]struct {
			Username string `json:"username"`
			Password string `json:"password"`
			Auth     string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(dockerConfig, &cfg); err != nil {
		return "", "", fmt.Errorf("its %s does not parse: %v", corev1.DockerConfigJsonKey, err)
	}
	for k, a := range cfg.Auths {
		k = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://"), "/")
		if k != host {
			continue
		}
		if a.Username != "" {
			return a.Username, a.Password, nil
		}
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return "", "", fmt.Errorf("the auth of %s is not base64", host)
		}
		u, p, ok := strings.Cut(string(raw), ":")
		if !ok {
			return "", "", fmt.Errorf("the auth of %s is not user:password", host)
		}
		return u, p, nil
	}
	return "", "", fmt.Errorf("it has no credentials for registry %s", host)
}

// NodeImage resolves <repository>/yonder-node:<version> to a digest-pinned reference.
func NodeImage(ctx context.Context, repository, version string, reg *agentv1.Registry) (string, error) {
	ref := repository + "/" + NodeImageName + ":" + version
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", &UserError{fmt.Sprintf("Node image %s is not a valid reference: %v", ref, err)}
	}
	t, err := ociimage.Transport([]byte(reg.CACertificate))
	if err != nil {
		return "", &UserError{err.Error()}
	}
	auth := authn.Anonymous
	if reg.Username != "" {
		auth = &authn.Basic{Username: reg.Username, Password: reg.Password}
	}
	desc, err := remote.Head(tag, remote.WithContext(ctx), remote.WithTransport(t), remote.WithAuth(auth))
	if err != nil {
		return "", &UserError{explain(ref, err)}
	}
	return repository + "/" + NodeImageName + "@" + desc.Digest.String(), nil
}

func explain(ref string, err error) string {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Sprintf("Node image %s is not in the registry: push it (make push) or mirror it there, or use a Kubernetes version it has", ref)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Sprintf("The registry refused node image %s (%d): set spec.images.pullSecretName to a Secret with credentials for it", ref, te.StatusCode)
		}
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return fmt.Sprintf("The registry's certificate for %s is not trusted: set spec.images.caSecretName to a Secret with its CA in %s", ref, CAKey)
	}
	return fmt.Sprintf("Cannot resolve node image %s: %v", ref, err)
}

// AgentURL is the URL of yonder-agent's blob (its sha256) in repository.
func AgentURL(repository, sha256 string) (string, error) {
	repo, err := name.NewRepository(repository + "/" + AgentImageName)
	if err != nil {
		return "", &UserError{fmt.Sprintf("Image repository %q is not valid: %v", repository, err)}
	}
	return "https://" + repo.RegistryStr() + "/v2/" + repo.RepositoryStr() + "/blobs/sha256:" + sha256, nil
}
