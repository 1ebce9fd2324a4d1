package sshmachine

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
)

// CredentialsTTL is how long a credentials Secret read from the API server is reused for further SSH
// connections. Credentials Secrets are not in the manager's cache (they carry no cluster name); the host
// controller labels them (infrav1.CredentialsLabel) and the machine controller watches those
// (Adapter.CredentialsCache), so the memo serves a Secret only until its label arrives. Every host of a
// pool usually shares one: without reuse each connection (the bootstrap's start, each check of it, a
// cleanup) read the same Secret again. A rotated key is picked up after the TTL at the
// latest, and at once where the host refuses the remembered key (connect reads the Secret again).
const CredentialsTTL = 10 * time.Second

// credentialsMemo remembers the credentials Secrets read for connections, for CredentialsTTL. It is
// only a memo of what the API server said a moment ago: nothing is decided on it that a restarted
// controller, which starts without it, would decide differently.
type credentialsMemo struct {
	mu      sync.Mutex
	secrets map[client.ObjectKey]memoSecret
	// now is the clock (tests replace it).
	now func() time.Time
}

type memoSecret struct {
	s    *corev1.Secret
	read time.Time
}

func (c *credentialsMemo) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// get returns the Secret at k if it was read less than CredentialsTTL ago.
func (c *credentialsMemo) get(k client.ObjectKey) (*corev1.Secret, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.secrets[k]
	if !ok || c.clock().Sub(e.read) >= CredentialsTTL {
		return nil, false
	}
	return e.s, true
}

// put remembers s, read now, and drops expired entries (deleted Secrets leave nothing behind).
func (c *credentialsMemo) put(s *corev1.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	if c.secrets == nil {
		c.secrets = map[client.ObjectKey]memoSecret{}
	}
	for k, e := range c.secrets {
		if now.Sub(e.read) >= CredentialsTTL {
			delete(c.secrets, k)
		}
	}
	c.secrets[client.ObjectKeyFromObject(s)] = memoSecret{s: s.DeepCopy(), read: now}
}

// forget drops everything remembered, so the next connection reads its Secrets again.
func (c *credentialsMemo) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.secrets)
}

// reader reads Secrets from watched (when not nil: the Secrets labelled infrav1.CredentialsLabel), else
// through the memo, and everything else through r; *hit is set when watched or the memo answered.
func (c *credentialsMemo) reader(watched, r client.Reader, hit *bool) client.Reader {
	return memoReader{Reader: r, watched: watched, memo: c, hit: hit}
}

type memoReader struct {
	client.Reader
	watched client.Reader
	memo    *credentialsMemo
	hit     *bool
}

func (r memoReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return r.Reader.Get(ctx, key, obj, opts...) //nolint:wrapcheck // a reader's error, wrapped by its caller
	}
	if r.watched != nil && r.watched.Get(ctx, key, s) == nil {
		// A labelled Secret, as the watch last delivered it.
		*r.hit = true
		return nil
	}
	if m, ok := r.memo.get(key); ok {
		m.DeepCopyInto(s)
		*r.hit = true
		return nil
	}
	if err := r.Reader.Get(ctx, key, s, opts...); err != nil {
		return err //nolint:wrapcheck // a reader's error, wrapped by its caller
	}
	r.memo.put(s)
	return nil
}

// dial connects to host, reading its credentials from the watched Secrets (CredentialsCache) or through
// the memo. Credentials the host refuses, or that no longer parse, may be a rotation the watch or the
// memo has not delivered yet: when either supplied them, the connection is tried once more with the
// Secrets read from the API server, so a rotated key never shows as a failed connection.
func (a *Adapter) dial(ctx context.Context, host *infrav1.YonderSSHHost) (sshexec.Executor, error) {
	e, remembered, err := a.dialOnce(ctx, host, a.CredentialsCache)
	var auth *sshexec.AuthError
	var cred *hostconn.CredentialsError
	if err != nil && remembered && (errors.As(err, &auth) || errors.As(err, &cred)) {
		a.credentials.forget()
		e, _, err = a.dialOnce(ctx, host, nil)
	}
	return e, err
}

func (a *Adapter) dialOnce(ctx context.Context, host *infrav1.YonderSSHHost, watched client.Reader) (sshexec.Executor, bool, error) {
	memoized := false
	t, err := hostconn.Target(ctx, a.credentials.reader(watched, a.Client, &memoized), host, nil)
	if err != nil {
		return nil, memoized, err //nolint:wrapcheck // hostconn's errors are mapped by hostconn.Reason
	}
	e, err := a.Dialer.Dial(ctx, t)
	return e, memoized, err //nolint:wrapcheck // the dialer's errors are mapped by hostconn.Reason
}
