// Package token manages bootstrap tokens in a workload cluster: the standard bootstrap-token Secret in
// kube-system (bootstrap.kubernetes.io/token), authentication usage only, with an expiration.
//
// A token value is a credential. Nothing here logs it or returns it inside an error.
package token

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// Namespace holds bootstrap token Secrets.
	Namespace = metav1.NamespaceSystem
	// ExtraGroup is added to the token's identity (besides system:bootstrappers), so an operator can tell
	// Yonder's tokens apart in audit logs and RBAC.
	ExtraGroup = "system:bootstrappers:yonder:worker"
	// ManagedByLabel marks token Secrets Yonder created.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "yonder-bootstrap"
	// OwnerAnnotation names the YonderConfig ("namespace/name") a token was created for.
	OwnerAnnotation = "bootstrap.yonder.dev/yonderconfig"
)

// Token is a created bootstrap token. Value is the credential; do not log it.
type Token struct {
	ID      string
	value   string
	Expires time.Time
}

// Value returns "<id>.<secret>".
func (t Token) Value() string { return t.value }

// SecretName is the name of the token's Secret.
func SecretName(id string) string { return bootstraputil.BootstrapTokenSecretName(id) }

// Create makes a new token for owner valid for ttl.
func Create(ctx context.Context, c client.Client, owner string, ttl time.Duration, now time.Time) (Token, error) {
	value, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, fmt.Errorf("failed to generate bootstrap token: %w", err)
	}
	id, secretPart, err := split(value)
	if err != nil {
		return Token{}, err
	}
	exp := now.Add(ttl).UTC().Truncate(time.Second)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        SecretName(id),
			Namespace:   Namespace,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{OwnerAnnotation: owner},
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           secretPart,
			bootstrapapi.BootstrapTokenExpirationKey:       exp.Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      ExtraGroup,
			bootstrapapi.BootstrapTokenDescriptionKey:      "Yonder bootstrap token for YonderConfig " + owner,
		},
	}
	if err := c.Create(ctx, s); err != nil {
		return Token{}, fmt.Errorf("failed to create bootstrap token Secret %s/%s: %w", Namespace, s.Name, err)
	}
	return Token{ID: id, value: value, Expires: exp}, nil
}

// Expiration reads a token's expiration. found is false when the token Secret does not exist.
func Expiration(ctx context.Context, c client.Reader, id string) (exp time.Time, found bool, err error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: SecretName(id)}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, false, nil
		}
		return time.Time{}, false, fmt.Errorf("failed to get bootstrap token Secret %s/%s: %w", Namespace, SecretName(id), err)
	}
	raw := string(s.Data[bootstrapapi.BootstrapTokenExpirationKey])
	if raw == "" {
		return time.Time{}, true, nil
	}
	exp, err = time.Parse(time.RFC3339, raw)
	if err != nil {
		return time.Time{}, true, fmt.Errorf("bootstrap token Secret %s/%s has an invalid expiration: %w", Namespace, SecretName(id), err)
	}
	return exp, true, nil
}

// Extend sets a token's expiration to now+ttl.
func Extend(ctx context.Context, c client.Client, id string, ttl time.Duration, now time.Time) (time.Time, error) {
	exp := now.Add(ttl).UTC().Truncate(time.Second)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: SecretName(id)}}
	p := []byte(fmt.Sprintf(`{"stringData":{%q:%q}}`, bootstrapapi.BootstrapTokenExpirationKey, exp.Format(time.RFC3339)))
	if err := c.Patch(ctx, s, client.RawPatch("application/merge-patch+json", p)); err != nil {
		return time.Time{}, fmt.Errorf("failed to extend bootstrap token Secret %s/%s: %w", Namespace, s.Name, err)
	}
	return exp, nil
}

// Delete removes a token; a missing token is not an error.
func Delete(ctx context.Context, c client.Client, id string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: SecretName(id)}}
	if err := c.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete bootstrap token Secret %s/%s: %w", Namespace, s.Name, err)
	}
	return nil
}

func split(value string) (id, secret string, err error) {
	if !bootstraputil.IsValidBootstrapToken(value) {
		return "", "", fmt.Errorf("generated bootstrap token has an invalid format")
	}
	return value[:6], value[7:], nil
}
