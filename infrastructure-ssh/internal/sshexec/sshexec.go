// Package sshexec is the provider's only way to reach a host: commands over SSH (x/crypto/ssh), always
// verifying the host key against a pinned key, optionally through a bastion, through sudo when the login
// user is not root. Callers depend on the narrow Executor interface.
package sshexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Executor runs shell commands on one host.
type Executor interface {
	// Run runs cmd with `sh -c` semantics (through sudo when the login user is not root), feeding stdin.
	Run(ctx context.Context, cmd string, stdin io.Reader) (stdout, stderr []byte, err error)
	// Close ends the connection.
	Close() error
}

// Dialer opens Executors.
type Dialer interface {
	Dial(ctx context.Context, t Target) (Executor, error)
}

// Endpoint is one SSH login.
type Endpoint struct {
	// Address and Port of sshd.
	Address string
	Port    int
	// User to log in as.
	User string
	// Signer authenticates the user.
	Signer ssh.Signer
	// HostKey is the pinned host key. Nil is only allowed with RecordHostKey.
	HostKey ssh.PublicKey
	// RecordHostKey, when HostKey is nil, receives the presented key and accepts it (trust on first use).
	RecordHostKey func(ssh.PublicKey)
	// SudoPassword is fed to `sudo -S` when User is not root; empty means `sudo -n` (NOPASSWD).
	SudoPassword []byte
}

// Target is the host, optionally behind a bastion.
type Target struct {
	Endpoint
	Bastion *Endpoint
}

// HostKeyMismatchError says the host presented another key than the pinned one.
type HostKeyMismatchError struct {
	Address   string
	Presented string
	Expected  string
}

func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("host key mismatch at %s: presented %s, pinned %s", e.Address, e.Presented, e.Expected)
}

// ErrNoHostKey is returned when no host key is pinned and recording is not allowed.
var ErrNoHostKey = errors.New("no host key pinned")

// AuthError says the host refused the credentials.
type AuthError struct{ Err error }

func (e *AuthError) Error() string { return "authentication refused: " + e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// UnreachableError says no SSH connection could be opened (TCP or handshake failure).
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return "unreachable: " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// ExitError is a command that ran and exited non-zero.
type ExitError struct {
	Status int
	Stderr string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("exit status %d: %s", e.Status, e.Stderr)
}

// SSHDialer is the real Dialer.
type SSHDialer struct {
	// Timeout bounds TCP connect and handshake (default 10s).
	Timeout time.Duration
}

// Dial connects to t (through its bastion, if any) and verifies every host key on the way.
func (d SSHDialer) Dial(ctx context.Context, t Target) (Executor, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	var closers []io.Closer
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		nd := net.Dialer{Timeout: timeout}
		return nd.DialContext(ctx, "tcp", addr)
	}
	if t.Bastion != nil {
		bc, err := connect(ctx, dial, *t.Bastion, timeout)
		if err != nil {
			return nil, fmt.Errorf("failed to connect to bastion %s: %w", t.Bastion.Address, err)
		}
		closers = append(closers, bc)
		dial = func(_ context.Context, addr string) (net.Conn, error) { return bc.Dial("tcp", addr) }
	}
	c, err := connect(ctx, dial, t.Endpoint, timeout)
	if err != nil {
		for _, cl := range closers {
			_ = cl.Close()
		}
		return nil, err
	}
	return &client{c: c, user: t.User, sudoPassword: t.SudoPassword, closers: closers}, nil
}

func connect(ctx context.Context, dial func(context.Context, string) (net.Conn, error), e Endpoint, timeout time.Duration) (*ssh.Client, error) {
	cb, err := hostKeyCallback(e)
	if err != nil {
		return nil, err
	}
	if e.Signer == nil {
		return nil, errors.New("no private key")
	}
	addr := net.JoinHostPort(e.Address, strconv.Itoa(e.Port))
	conn, err := dial(ctx, addr)
	if err != nil {
		return nil, &UnreachableError{Err: err}
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	cfg := &ssh.ClientConfig{User: e.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(e.Signer)}, HostKeyCallback: cb, Timeout: timeout}
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		_ = conn.Close()
		var mm *HostKeyMismatchError
		switch {
		case errors.As(err, &mm):
			return nil, mm
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, &AuthError{Err: err}
		default:
			return nil, &UnreachableError{Err: err}
		}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

func hostKeyCallback(e Endpoint) (ssh.HostKeyCallback, error) {
	if e.HostKey == nil {
		if e.RecordHostKey == nil {
			return nil, ErrNoHostKey
		}
		return func(_ string, _ net.Addr, key ssh.PublicKey) error {
			e.RecordHostKey(key)
			return nil
		}, nil
	}
	want := e.HostKey.Marshal()
	return func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		if !bytes.Equal(key.Marshal(), want) {
			return &HostKeyMismatchError{Address: hostname, Presented: ssh.FingerprintSHA256(key), Expected: ssh.FingerprintSHA256(e.HostKey)}
		}
		return nil
	}, nil
}

type client struct {
	c            *ssh.Client
	user         string
	sudoPassword []byte
	closers      []io.Closer
}

// Run implements Executor.
func (c *client) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, []byte, error) {
	s, err := c.c.NewSession()
	if err != nil {
		return nil, nil, &UnreachableError{Err: err}
	}
	defer func() { _ = s.Close() }()
	full, in := WrapSudo(c.user, c.sudoPassword, cmd, stdin)
	var o, e bytes.Buffer
	s.Stdout, s.Stderr = &limitedBuffer{b: &o, max: 1 << 20}, &limitedBuffer{b: &e, max: 64 << 10}
	if in != nil {
		s.Stdin = in
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(full) }()
	select {
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		_ = s.Close()
		return o.Bytes(), e.Bytes(), ctx.Err()
	case err := <-done:
		if err != nil {
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				return o.Bytes(), e.Bytes(), &ExitError{Status: ee.ExitStatus(), Stderr: tail(e.String(), 512)}
			}
			return o.Bytes(), e.Bytes(), &UnreachableError{Err: err}
		}
		return o.Bytes(), e.Bytes(), nil
	}
}

// Close implements Executor.
func (c *client) Close() error {
	err := c.c.Close()
	for _, cl := range c.closers {
		_ = cl.Close()
	}
	return err
}

// WrapSudo returns the command line and stdin that run cmd as root: unchanged for root, else through
// `sudo -n` or, with a password, `sudo -S` reading the password as the first line of stdin.
func WrapSudo(user string, password []byte, cmd string, stdin io.Reader) (string, io.Reader) {
	if user == "root" {
		return cmd, stdin
	}
	if len(password) == 0 {
		return "sudo -n -- sh -c " + Quote(cmd), stdin
	}
	pw := append(append([]byte{}, password...), '\n')
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	return "sudo -S -p '' -- sh -c " + Quote(cmd), io.MultiReader(bytes.NewReader(pw), stdin)
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// limitedBuffer keeps at most max bytes and silently drops the rest, so a chatty command cannot
// exhaust the controller's memory.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		if len(p) > room {
			l.b.Write(p[:room])
		} else {
			l.b.Write(p)
		}
	}
	return len(p), nil
}

// ParseHostKey parses an authorized_keys-format public key.
func ParseHostKey(s string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(s)))
	if err != nil {
		return nil, fmt.Errorf("failed to parse host key: %w", err)
	}
	return k, nil
}

// FormatHostKey formats a public key in authorized_keys format, without a trailing newline.
func FormatHostKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}
