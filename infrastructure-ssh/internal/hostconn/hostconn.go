// Package hostconn turns a YonderSSHHost and its credential Secrets into an sshexec.Target, and maps
// connection errors to the condition reasons an operator can act on.
package hostconn

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
)

// Secret keys of a credentials Secret.
const (
	PrivateKeyKey   = "ssh-privatekey"
	SudoPasswordKey = "sudo-password"
)

// CredentialsError says the credentials Secret is missing or unusable.
type CredentialsError struct{ Err error }

func (e *CredentialsError) Error() string { return e.Err.Error() }
func (e *CredentialsError) Unwrap() error { return e.Err }

// Target builds the connection target of h. When h has no host key yet and record is non-nil (the host
// controller's trust-on-first-use probe), the presented key is passed to record and accepted.
func Target(ctx context.Context, c client.Reader, h *infrav1.YonderSSHHost, record func(ssh.PublicKey)) (sshexec.Target, error) {
	ep, err := endpoint(ctx, c, h.Namespace, h.Spec.SSHEndpoint, record)
	if err != nil {
		return sshexec.Target{}, err
	}
	t := sshexec.Target{Endpoint: ep}
	if h.Spec.Bastion != nil {
		b, err := endpoint(ctx, c, h.Namespace, *h.Spec.Bastion, nil)
		if err != nil {
			return sshexec.Target{}, fmt.Errorf("bastion: %w", err)
		}
		t.Bastion = &b
	}
	return t, nil
}

func endpoint(ctx context.Context, c client.Reader, ns string, e infrav1.SSHEndpoint, record func(ssh.PublicKey)) (sshexec.Endpoint, error) {
	out := sshexec.Endpoint{Address: e.Address, Port: int(e.Port), User: e.User}
	if out.Port == 0 {
		out.Port = 22
	}
	if out.User == "" {
		out.User = "root"
	}
	if e.HostKey != "" {
		k, err := sshexec.ParseHostKey(e.HostKey)
		if err != nil {
			return out, &CredentialsError{Err: err}
		}
		out.HostKey = k
	} else if e.HostKeyPolicy == infrav1.HostKeyPolicyTrustOnFirstUse && record != nil {
		out.RecordHostKey = record
	} else {
		return out, sshexec.ErrNoHostKey
	}
	if e.CredentialsSecretRef.Namespace != "" && e.CredentialsSecretRef.Namespace != ns {
		return out, &CredentialsError{Err: fmt.Errorf("credentials Secret %s/%s is not in namespace %s", e.CredentialsSecretRef.Namespace, e.CredentialsSecretRef.Name, ns)}
	}
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ns, Name: e.CredentialsSecretRef.Name}
	if err := c.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return out, &CredentialsError{Err: fmt.Errorf("credentials Secret %s not found", klog.KRef(ns, key.Name))}
		}
		return out, fmt.Errorf("failed to get credentials Secret %s: %w", klog.KRef(ns, key.Name), err)
	}
	signer, err := ssh.ParsePrivateKey(s.Data[PrivateKeyKey])
	if err != nil {
		// The parse error never contains key material.
		return out, &CredentialsError{Err: fmt.Errorf("credentials Secret %s has no usable %s: %w", klog.KRef(ns, key.Name), PrivateKeyKey, err)}
	}
	out.Signer = signer
	out.SudoPassword = s.Data[SudoPasswordKey]
	return out, nil
}

// Reason maps a connection or command error to a condition reason and an actionable message.
func Reason(err error, h *infrav1.YonderSSHHost) (string, string) {
	var mm *sshexec.HostKeyMismatchError
	var auth *sshexec.AuthError
	var unr *sshexec.UnreachableError
	var cred *CredentialsError
	name := klog.KObj(h).String()
	switch {
	case errors.As(err, &mm):
		return infrav1.HostKeyMismatchReason, fmt.Sprintf("YonderSSHHost %s presented host key %s but %s is pinned: if the host was legitimately reinstalled, pin the new key in spec.hostKey (a claimed host: delete its Machine first, the key cannot change while claimed); otherwise treat it as compromised", name, mm.Presented, mm.Expected)
	case errors.Is(err, sshexec.ErrNoHostKey):
		return infrav1.HostKeyUnknownReason, fmt.Sprintf("YonderSSHHost %s has no spec.hostKey: set it, or set hostKeyPolicy TrustOnFirstUse", name)
	case errors.As(err, &cred):
		return infrav1.CredentialsInvalidReason, fmt.Sprintf("YonderSSHHost %s: %v", name, cred.Err)
	case errors.As(err, &auth):
		return infrav1.SSHAuthFailedReason, fmt.Sprintf("YonderSSHHost %s refused the key in Secret %s for user %s: authorize it on the host or fix the Secret", name, h.Spec.CredentialsSecretRef.Name, h.Spec.User)
	case errors.As(err, &unr):
		return infrav1.SSHUnreachableReason, fmt.Sprintf("Cannot reach YonderSSHHost %s at %s:%d over SSH (%v): check the host, the network and spec.address/port", name, h.Spec.Address, h.Spec.Port, unr.Err)
	default:
		return infrav1.SSHUnreachableReason, fmt.Sprintf("SSH to YonderSSHHost %s failed: %v", name, err)
	}
}
