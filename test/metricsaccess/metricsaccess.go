// Package metricsaccess checks who may read a component's /metrics (the managers', the network add-on's):
// it makes the identities a test scrapes as and scrapes over HTTPS the way Prometheus does.
package metricsaccess

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Tokens are bearer tokens of two ServiceAccounts: Reader is bound to the shipped metrics-reader
// ClusterRole, Nobody to nothing.
type Tokens struct {
	Reader, Nobody string
}

// NewTokens creates, in namespace, the ServiceAccounts "scraper" and "nobody" and binds "scraper" to the
// ClusterRole read from rolePath (a provider's config/rbac/metrics_reader_role.yaml, as shipped), created
// under a name prefixed with namespace so that tests sharing an API server do not collide.
func NewTokens(ctx context.Context, cs kubernetes.Interface, namespace, rolePath string) (Tokens, error) {
	raw, err := os.ReadFile(rolePath) //nolint:gosec // a repository file named by the test.
	if err != nil {
		return Tokens{}, fmt.Errorf("failed to read the reader role: %w", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		return Tokens{}, fmt.Errorf("failed to parse %s: %w", rolePath, err)
	}
	role.Name = namespace + "-" + role.Name
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return Tokens{}, fmt.Errorf("failed to create ClusterRole %s: %w", role.Name, err)
	}
	token := func(sa string) (string, error) {
		if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("failed to create ServiceAccount %s: %w", sa, err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("failed to create a token of %s: %w", sa, err)
		}
		return tr.Status.Token, nil
	}
	var t Tokens
	if t.Reader, err = token("scraper"); err != nil {
		return t, err
	}
	if t.Nobody, err = token("nobody"); err != nil {
		return t, err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "scraper"}}}, metav1.CreateOptions{})
	if err != nil {
		return t, fmt.Errorf("failed to bind %s: %w", role.Name, err)
	}
	return t, nil
}

// Scrape GETs https://addr/metrics with token as bearer ("" for none) and returns the status and body.
// The serving certificate is the component's own self-signed one (as Prometheus is told to accept): what
// is checked is who may read, not TLS.
func Scrape(ctx context.Context, addr, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above.
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
