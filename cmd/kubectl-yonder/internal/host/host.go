// Package host implements `kubectl yonder host add|list`: registering existing Linux hosts as
// YonderSSHHosts (with a pinned SSH host key and a credentials Secret) and listing them with their claims.
package host

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// PrivateKeyKey is the credentials Secret key holding the login's private key (what the SSH provider reads).
const PrivateKeyKey = "ssh-privatekey"

// NewCommand returns `host` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Register and list the SSH hosts (YonderSSHHost) Machines can claim",
	}
	cmd.AddCommand(newAddCommand(o), newListCommand(o))
	return cmd
}

// AddOptions are the flags of `host add`.
type AddOptions struct {
	Name    string
	Address string
	Port    int
	User    string
	KeyFile string
	// SSHAgent logs in with the keys of the ssh-agent at SSH_AUTH_SOCK and authorizes the provider's own
	// key (KeyFile's, else the one already in the credentials Secret, else a new ed25519 key) on the host.
	SSHAgent bool
	// AuthorizedKeysFile is where that key is added on the host (and the bastion), relative to the login's
	// home unless absolute: sshd's AuthorizedKeysFile.
	AuthorizedKeysFile string
	HostKey            string
	Bastion            string
	BastionKey         string
	Labels             []string
	FailureDomain      string
	Timeout            time.Duration
}

func newAddCommand(o *cli.Options) *cobra.Command {
	a := &AddOptions{}
	cmd := &cobra.Command{
		Use:   "add NAME --address ADDRESS",
		Short: "Connect to a host once, pin its SSH host key, and create its credentials Secret and YonderSSHHost",
		Long: `Connects to the host over SSH once with the given private key, shows the host key it presented and pins
it in the YonderSSHHost (hostKeyPolicy Pinned). With --host-key the presented key must be exactly that key.
When a YonderSSHHost of that name already exists with a different pinned key, nothing is changed and the
command fails: a changed host key is either a re-installed host or someone in the middle.

The private key is stored in the Secret <NAME>-ssh (key ssh-privatekey) in the same namespace.

With --ssh-agent the login uses the keys of your ssh-agent (SSH_AUTH_SOCK), which never leave it: the
provider gets a key of its own instead (--key when given, else the one the Secret already holds, else a
new ed25519 key), which host add appends to --authorized-keys-file on the host (and the bastion) and then
proves by logging in with it alone.`,
		Example: `  kubectl yonder host add edge-1 --address 192.0.2.10 --key ~/.ssh/id_ed25519 --labels site=edge-a
  kubectl yonder host add edge-3 --address 192.0.2.13 --ssh-agent       # log in with ssh-agent's keys
  kubectl yonder host add edge-2 --address 10.0.0.12 --bastion root@192.0.2.10 --failure-domain edge-b`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.Name = args[0]
			if a.SSHAgent && !cmd.Flags().Changed("key") {
				a.KeyFile = "" // the provider's key comes from the Secret or is generated
			}
			return Add(cmd.Context(), o, a)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&a.Address, "address", "", "IP address or DNS name of the host (required)")
	fs.IntVar(&a.Port, "port", 22, "sshd port")
	fs.StringVar(&a.User, "ssh-user", "root", "login user (commands run through sudo when not root)")
	fs.StringVar(&a.KeyFile, "key", defaultKey(), "private key file (unencrypted OpenSSH or PEM)")
	fs.BoolVar(&a.SSHAgent, "ssh-agent", false, "log in with the ssh-agent's keys (SSH_AUTH_SOCK) and authorize a key of the provider's own on the host")
	fs.StringVar(&a.AuthorizedKeysFile, "authorized-keys-file", ".ssh/authorized_keys", "with --ssh-agent: the host's authorized_keys file the provider's key is added to (relative to the login's home)")
	fs.StringVar(&a.HostKey, "host-key", "", "expected host key (\"ssh-ed25519 AAAA…\"); the presented key must match")
	fs.StringVar(&a.Bastion, "bastion", "", "jump host as [user@]address[:port], reached with the same key")
	fs.StringVar(&a.BastionKey, "bastion-host-key", "", "expected host key of the bastion (default: pin what it presents)")
	fs.StringSliceVar(&a.Labels, "labels", nil, "labels of the host as key=value[,key=value] (hostSelector matches them)")
	fs.StringVar(&a.FailureDomain, "failure-domain", "", "failure domain (site, rack, zone) of the host")
	fs.DurationVar(&a.Timeout, "timeout", 15*time.Second, "how long to wait for the SSH connection")
	_ = cmd.MarkFlagRequired("address")
	return cmd
}

func defaultKey() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".ssh", "id_ed25519")
}

// endpoint is one SSH hop.
type endpoint struct {
	user, address string
	port          int
}

func (e endpoint) hostPort() string { return net.JoinHostPort(e.address, strconv.Itoa(e.port)) }

func parseBastion(s, defaultUser string) (endpoint, error) {
	e := endpoint{user: defaultUser, port: 22}
	if at := strings.LastIndex(s, "@"); at >= 0 {
		e.user, s = s[:at], s[at+1:]
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return e, fmt.Errorf("invalid --bastion port %q", p)
		}
		e.address, e.port = h, port
	} else {
		e.address = s
	}
	if e.address == "" || e.user == "" {
		return e, fmt.Errorf("invalid --bastion %q: want [user@]address[:port]", s)
	}
	return e, nil
}

// validate rejects bad input before anything is contacted.
func (a *AddOptions) validate() (map[string]string, error) {
	var errs []string
	if msgs := validation.IsDNS1123Subdomain(a.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("NAME %q: %s", a.Name, strings.Join(msgs, "; ")))
	} else if len(a.Name)+len("-ssh") > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, fmt.Sprintf("NAME %q is too long for its Secret name %s-ssh", a.Name, a.Name))
	}
	if a.Address == "" || len(a.Address) > 253 {
		errs = append(errs, "--address is required (at most 253 characters)")
	}
	if a.Port < 1 || a.Port > 65535 {
		errs = append(errs, fmt.Sprintf("--port %d is outside 1…65535", a.Port))
	}
	if a.User == "" || len(a.User) > 64 {
		errs = append(errs, "--ssh-user must have 1…64 characters")
	}
	if a.KeyFile == "" && !a.SSHAgent {
		errs = append(errs, "--key is required")
	}
	if a.SSHAgent && os.Getenv("SSH_AUTH_SOCK") == "" {
		errs = append(errs, "--ssh-agent needs SSH_AUTH_SOCK (start ssh-agent and ssh-add your key)")
	}
	if a.SSHAgent && (a.AuthorizedKeysFile == "" || strings.ContainsAny(a.AuthorizedKeysFile, "\n'")) {
		errs = append(errs, fmt.Sprintf("--authorized-keys-file %q: want a path without quotes or newlines", a.AuthorizedKeysFile))
	}
	if a.HostKey != "" {
		if _, err := parseKey(a.HostKey); err != nil {
			errs = append(errs, fmt.Sprintf("--host-key: %v", err))
		}
	}
	if a.BastionKey != "" {
		if _, err := parseKey(a.BastionKey); err != nil {
			errs = append(errs, fmt.Sprintf("--bastion-host-key: %v", err))
		}
		if a.Bastion == "" {
			errs = append(errs, "--bastion-host-key needs --bastion")
		}
	}
	if a.Bastion != "" {
		if _, err := parseBastion(a.Bastion, a.User); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(a.FailureDomain) > 256 {
		errs = append(errs, "--failure-domain has more than 256 characters")
	}
	labels := map[string]string{}
	for _, l := range a.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			errs = append(errs, fmt.Sprintf("label %q: want key=value", l))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("label value %q: %s", v, strings.Join(msgs, "; ")))
		}
		labels[k] = v
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return labels, nil
}

func parseKey(s string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(s)))
	if err != nil {
		return nil, fmt.Errorf("not an authorized_keys-format public key: %w", err)
	}
	return k, nil
}

// FormatKey renders a public key as the YonderSSHHost stores it (authorized_keys format, no comment).
func FormatKey(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }

// pinning accepts the key a host presents when it equals want (or any key when want is nil), and records it.
func pinning(want ssh.PublicKey, got *ssh.PublicKey) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, k ssh.PublicKey) error {
		*got = k
		if want != nil && (want.Type() != k.Type() || string(want.Marshal()) != string(k.Marshal())) {
			return &KeyMismatchError{Want: want, Got: k}
		}
		return nil
	}
}

// KeyMismatchError is returned when a host presents another key than the pinned or expected one.
type KeyMismatchError struct {
	Want, Got ssh.PublicKey
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("host key mismatch: expected %s, host presented %s", ssh.FingerprintSHA256(e.Want), ssh.FingerprintSHA256(e.Got))
}

// probe connects to the target (through the bastion when set), authenticates and returns the keys presented.
// With install set, the key it names is authorized on the bastion and the target before they return.
func probe(ctx context.Context, auth ssh.AuthMethod, target endpoint, wantTarget ssh.PublicKey, bastion *endpoint, wantBastion ssh.PublicKey, timeout time.Duration, install *keyInstall) (targetKey, bastionKey ssh.PublicKey, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := net.Dialer{}
	hop := func(conn net.Conn, e endpoint, want ssh.PublicKey, got *ssh.PublicKey) (*ssh.Client, error) {
		cfg := &ssh.ClientConfig{User: e.user, Auth: []ssh.AuthMethod{auth}, HostKeyCallback: pinning(want, got), Timeout: timeout}
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		c, chans, reqs, err := ssh.NewClientConn(conn, e.hostPort(), cfg)
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		_ = conn.SetDeadline(time.Time{})
		return ssh.NewClient(c, chans, reqs), nil
	}
	var conn net.Conn
	if bastion != nil {
		bc, err := d.DialContext(ctx, "tcp", bastion.hostPort())
		if err != nil {
			return nil, nil, fmt.Errorf("failed to reach bastion %s: %w", bastion.hostPort(), err)
		}
		bcl, err := hop(bc, *bastion, wantBastion, &bastionKey)
		if err != nil {
			return nil, bastionKey, fmt.Errorf("failed to log in to bastion %s: %w", bastion.hostPort(), err)
		}
		defer func() { _ = bcl.Close() }()
		if err := install.on(bcl, *bastion); err != nil {
			return nil, bastionKey, err
		}
		if conn, err = bcl.DialContext(ctx, "tcp", target.hostPort()); err != nil {
			return nil, bastionKey, fmt.Errorf("failed to reach %s through bastion %s: %w", target.hostPort(), bastion.hostPort(), err)
		}
	} else if conn, err = d.DialContext(ctx, "tcp", target.hostPort()); err != nil {
		return nil, nil, fmt.Errorf("failed to reach %s: %w", target.hostPort(), err)
	}
	cl, err := hop(conn, target, wantTarget, &targetKey)
	if err != nil {
		return targetKey, bastionKey, fmt.Errorf("failed to log in to %s as %s: %w", target.hostPort(), target.user, err)
	}
	defer func() { _ = cl.Close() }()
	// A session proves the login works beyond authentication (a forced command or nologin shell would fail here).
	s, err := cl.NewSession()
	if err != nil {
		return targetKey, bastionKey, fmt.Errorf("failed to open a session on %s: %w", target.hostPort(), err)
	}
	defer func() { _ = s.Close() }()
	if out, err := s.CombinedOutput("true"); err != nil {
		return targetKey, bastionKey, fmt.Errorf("failed to run a command on %s: %w (%s)", target.hostPort(), err, strings.TrimSpace(string(out)))
	}
	return targetKey, bastionKey, install.on(cl, target)
}

// keyInstall is a public key to authorize on each hop (--ssh-agent).
type keyInstall struct {
	// file is sshd's authorized_keys file, relative to the login's home unless absolute.
	file string
	// line is the key in authorized_keys format.
	line []byte
}

// on appends the key to the hop's authorized_keys file unless it is there already (re-running host add
// adds nothing); the key comes on stdin, so no key material is in the command line.
func (k *keyInstall) on(cl *ssh.Client, e endpoint) error {
	if k == nil {
		return nil
	}
	s, err := cl.NewSession()
	if err != nil {
		return fmt.Errorf("failed to open a session on %s: %w", e.hostPort(), err)
	}
	defer func() { _ = s.Close() }()
	s.Stdin = bytes.NewReader(k.line)
	script := `f='` + k.file + `'; case "$f" in /*) ;; *) f="$HOME/$f" ;; esac; umask 077; ` +
		`mkdir -p "$(dirname "$f")" && touch "$f" && read -r k && { grep -qxF "$k" "$f" || printf '%s\n' "$k" >> "$f"; }`
	if out, err := s.CombinedOutput(script); err != nil {
		return fmt.Errorf("failed to authorize the provider's key in %s on %s: %w (%s)", k.file, e.hostPort(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SecretName is the credentials Secret of host name.
func SecretName(name string) string { return name + "-ssh" }

// Add registers one host.
func Add(ctx context.Context, o *cli.Options, a *AddOptions) error {
	labels, err := a.validate()
	if err != nil {
		return err
	}
	var keyPEM []byte
	var signer ssh.Signer
	if a.KeyFile != "" {
		if keyPEM, signer, err = a.readKey(); err != nil {
			return err
		}
	}
	ns, err := o.Ns()
	if err != nil {
		return err
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	if signer == nil {
		if keyPEM, signer, err = providerKey(ctx, c, ns, a.Name); err != nil {
			return err
		}
	}
	login, install := ssh.PublicKeys(signer), (*keyInstall)(nil)
	if a.SSHAgent {
		ag, closeAgent, err := dialAgent()
		if err != nil {
			return err
		}
		defer closeAgent()
		login = ssh.PublicKeysCallback(ag.Signers)
		install = &keyInstall{file: a.AuthorizedKeysFile, line: ssh.MarshalAuthorizedKey(signer.PublicKey())}
	}
	existing, err := getHost(ctx, c, ns, a.Name)
	if err != nil {
		return err
	}
	target, bastion, wantTarget, wantBastion, err := a.endpoints(ns, existing)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.ErrOut, "Connecting to %s as %s%s…\n", target.hostPort(), target.user, viaText(bastion))
	tk, bk, err := probe(ctx, login, target, wantTarget, bastion, wantBastion, a.Timeout, install)
	if err != nil {
		var mm *KeyMismatchError
		if errors.As(err, &mm) {
			return fmt.Errorf("refusing to register %s: %w; nothing was changed (if the host was re-installed, delete YonderSSHHost %s/%s and add it again)", a.Name, err, ns, a.Name)
		}
		return err
	}
	if install != nil {
		// The provider will log in with its key alone: prove that works, against the keys just pinned.
		_, _ = fmt.Fprintf(o.ErrOut, "Authorized the provider's key %s in %s; logging in with it…\n", ssh.FingerprintSHA256(signer.PublicKey()), a.AuthorizedKeysFile)
		if _, _, err := probe(ctx, ssh.PublicKeys(signer), target, tk, bastion, bk, a.Timeout, nil); err != nil {
			return fmt.Errorf("the provider's key does not log in to %s after it was authorized (does sshd read --authorized-keys-file %s?): %w", a.Name, a.AuthorizedKeysFile, err)
		}
	}
	if bk != nil {
		_, _ = fmt.Fprintf(o.ErrOut, "Bastion %s host key: %s (%s)\n", bastion.hostPort(), FormatKey(bk), ssh.FingerprintSHA256(bk))
	}
	_, _ = fmt.Fprintf(o.ErrOut, "Host key of %s: %s\n  fingerprint %s\n", target.hostPort(), FormatKey(tk), ssh.FingerprintSHA256(tk))
	secret, err := saveCredentials(ctx, c, ns, a.Name, keyPEM)
	if err != nil {
		return err
	}
	spec := a.hostSpec(secret, tk, bastion, bk)
	if existing == nil {
		h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.Name, Labels: labels}, Spec: spec}
		if err := c.Create(ctx, h); err != nil {
			return fmt.Errorf("failed to create YonderSSHHost %s/%s: %w", ns, a.Name, err)
		}
		_, _ = fmt.Fprintf(o.Out, "yondersshhost.infrastructure.cluster.x-k8s.io/%s created (host key %s pinned)\n", a.Name, ssh.FingerprintSHA256(tk))
		return nil
	}
	if err := updateHost(ctx, c, existing, spec, labels); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "yondersshhost.infrastructure.cluster.x-k8s.io/%s configured (host key %s unchanged)\n", a.Name, ssh.FingerprintSHA256(tk))
	return nil
}

// readKey reads and parses --key.
func (a *AddOptions) readKey() ([]byte, ssh.Signer, error) {
	keyPEM, err := os.ReadFile(a.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read --key %s: %w", a.KeyFile, err)
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse --key %s (it must be unencrypted): %w", a.KeyFile, err)
	}
	return keyPEM, signer, nil
}

// providerKey is the key the provider logs in with when the login itself uses ssh-agent: the one the
// host's credentials Secret already holds (re-running host add keeps it), else a new ed25519 key.
func providerKey(ctx context.Context, c client.Client, ns, host string) ([]byte, ssh.Signer, error) {
	sec := &corev1.Secret{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretName(host)}, sec); {
	case err == nil:
		if signer, err := ssh.ParsePrivateKey(sec.Data[PrivateKeyKey]); err == nil {
			return sec.Data[PrivateKeyKey], signer, nil
		}
	case !apierrors.IsNotFound(err):
		return nil, nil, fmt.Errorf("failed to get Secret %s/%s: %w", ns, SecretName(host), err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate a key for host %s: %w", host, err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "yonder-ssh "+ns+"/"+host)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode the key of host %s: %w", host, err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to use the key of host %s: %w", host, err)
	}
	return pem.EncodeToMemory(block), signer, nil
}

// dialAgent connects to the ssh-agent at SSH_AUTH_SOCK.
func dialAgent() (agent.ExtendedAgent, func(), error) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	conn, err := net.Dial("unix", sock) //nolint:gosec // the operator's own agent socket (SSH_AUTH_SOCK)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to reach ssh-agent at SSH_AUTH_SOCK=%s: %w", sock, err)
	}
	ag := agent.NewClient(conn)
	keys, err := ag.List()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("failed to list the keys of ssh-agent at %s: %w", sock, err)
	}
	if len(keys) == 0 {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("ssh-agent at %s holds no keys (ssh-add your key)", sock)
	}
	return ag, func() { _ = conn.Close() }, nil
}

// getHost returns the YonderSSHHost ns/name, nil when there is none.
func getHost(ctx context.Context, c client.Client, ns, name string) (*infrav1.YonderSSHHost, error) {
	existing := &infrav1.YonderSSHHost{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, existing); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get YonderSSHHost %s/%s: %w", ns, name, err)
	}
	return existing, nil
}

// endpoints returns the host and bastion to probe and the keys each must present: the flags' keys, and an
// existing host's pinned keys (the probe must see exactly them).
func (a *AddOptions) endpoints(ns string, existing *infrav1.YonderSSHHost) (endpoint, *endpoint, ssh.PublicKey, ssh.PublicKey, error) {
	var wantTarget, wantBastion ssh.PublicKey
	if a.HostKey != "" {
		wantTarget, _ = parseKey(a.HostKey)
	}
	if a.BastionKey != "" {
		wantBastion, _ = parseKey(a.BastionKey)
	}
	target := endpoint{user: a.User, address: a.Address, port: a.Port}
	if existing != nil && existing.Spec.HostKey != "" {
		pinned, err := parseKey(existing.Spec.HostKey)
		if err != nil {
			return target, nil, nil, nil, fmt.Errorf("YonderSSHHost %s/%s has an unparsable spec.hostKey: %w", ns, a.Name, err)
		}
		if wantTarget != nil && string(wantTarget.Marshal()) != string(pinned.Marshal()) {
			return target, nil, nil, nil, fmt.Errorf("YonderSSHHost %s/%s already pins %s, not --host-key %s: delete the host first if it was re-installed", ns, a.Name, ssh.FingerprintSHA256(pinned), ssh.FingerprintSHA256(wantTarget))
		}
		wantTarget = pinned
	}
	var bastion *endpoint
	if a.Bastion != "" {
		b, _ := parseBastion(a.Bastion, a.User)
		bastion = &b
		if existing != nil && existing.Spec.Bastion != nil && existing.Spec.Bastion.HostKey != "" && wantBastion == nil {
			wantBastion, _ = parseKey(existing.Spec.Bastion.HostKey)
		}
	}
	return target, bastion, wantTarget, wantBastion, nil
}

// saveCredentials creates or updates the host's credentials Secret with keyPEM and returns its name.
func saveCredentials(ctx context.Context, c client.Client, ns, host string, keyPEM []byte) (string, error) {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SecretName(host), Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-yonder"}},
		Type:       corev1.SecretTypeSSHAuth,
		Data:       map[string][]byte{PrivateKeyKey: keyPEM},
	}
	if err := c.Create(ctx, sec); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("failed to create Secret %s/%s: %w", ns, sec.Name, err)
		}
		old := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sec), old); err != nil {
			return "", fmt.Errorf("failed to get Secret %s/%s: %w", ns, sec.Name, err)
		}
		old.Data = sec.Data
		if err := c.Update(ctx, old); err != nil {
			return "", fmt.Errorf("failed to update Secret %s/%s: %w", ns, sec.Name, err)
		}
	}
	return sec.Name, nil
}

// hostSpec is the host's spec with the probed keys pinned.
func (a *AddOptions) hostSpec(secret string, tk ssh.PublicKey, bastion *endpoint, bk ssh.PublicKey) infrav1.YonderSSHHostSpec {
	spec := infrav1.YonderSSHHostSpec{
		SSHEndpoint: infrav1.SSHEndpoint{
			Address: a.Address, Port: int32(a.Port), User: a.User, //nolint:gosec // validated to 1…65535
			CredentialsSecretRef: infrav1.SecretReference{Name: secret},
			HostKey:              FormatKey(tk), HostKeyPolicy: infrav1.HostKeyPolicyPinned,
		},
		FailureDomain: a.FailureDomain,
	}
	if bastion != nil {
		spec.Bastion = &infrav1.SSHEndpoint{
			Address: bastion.address, Port: int32(bastion.port), User: bastion.user, //nolint:gosec // validated to 1…65535
			CredentialsSecretRef: infrav1.SecretReference{Name: secret},
			HostKey:              FormatKey(bk), HostKeyPolicy: infrav1.HostKeyPolicyPinned,
		}
	}
	return spec
}

// updateHost re-adds an existing host: the endpoint and labels change, the claim never does.
func updateHost(ctx context.Context, c client.Client, existing *infrav1.YonderSSHHost, spec infrav1.YonderSSHHostSpec, labels map[string]string) error {
	spec.ConsumerRef = existing.Spec.ConsumerRef
	spec.Cleanup = existing.Spec.Cleanup
	if spec.FailureDomain == "" {
		spec.FailureDomain = existing.Spec.FailureDomain
	}
	existing.Spec = spec
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for k, v := range labels {
		existing.Labels[k] = v
	}
	if err := c.Update(ctx, existing); err != nil {
		return fmt.Errorf("failed to update YonderSSHHost %s/%s: %w", existing.Namespace, existing.Name, err)
	}
	return nil
}

func viaText(b *endpoint) string {
	if b == nil {
		return ""
	}
	return " via " + b.user + "@" + b.hostPort()
}

func newListCommand(o *cli.Options) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "get"},
		Short:   "List YonderSSHHosts with their claim state",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return List(cmd.Context(), o, all)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list hosts of every namespace")
	o.AddOutputFlag(cmd.Flags())
	return cmd
}

// List prints the hosts of the namespace (or all).
func List(ctx context.Context, o *cli.Options, all bool) error {
	if err := o.ValidateOutput(); err != nil {
		return err
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	var opts []client.ListOption
	if !all {
		ns, err := o.Ns()
		if err != nil {
			return err
		}
		opts = append(opts, client.InNamespace(ns))
	}
	hosts := &infrav1.YonderSSHHostList{}
	if err := c.List(ctx, hosts, opts...); err != nil {
		return fmt.Errorf("failed to list YonderSSHHosts: %w", err)
	}
	sort.Slice(hosts.Items, func(i, j int) bool {
		a, b := hosts.Items[i], hosts.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	objs := make([]client.Object, len(hosts.Items))
	for i := range hosts.Items {
		objs[i] = &hosts.Items[i]
	}
	if done, err := o.PrintObjects(objs...); done {
		return err
	}
	if len(hosts.Items) == 0 {
		_, _ = fmt.Fprintln(o.ErrOut, "No YonderSSHHosts found.")
		return nil
	}
	header := []string{"NAME", "ADDRESS", "PHASE", "CLAIMED BY", "CLUSTER", "FAILURE DOMAIN", "AGE"}
	if all {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if o.Output == cli.OutputWide {
		header = append(header, "USER", "PORT", "BASTION", "HOST KEY", "OS", "GPUS", "AGENT")
	}
	rows := make([][]string, 0, len(hosts.Items))
	for _, h := range hosts.Items {
		rows = append(rows, Row(o, &h, all))
	}
	return o.Table(header, rows)
}

// ClaimState is how `host list` shows a host's phase: the status phase, or what spec says when the
// controller has not reported yet.
func ClaimState(h *infrav1.YonderSSHHost) string {
	if p := h.Status.Phase; p != "" {
		return string(p)
	}
	if h.Spec.ConsumerRef != nil {
		return string(infrav1.HostPhaseClaimed)
	}
	return "Unknown"
}

// Row is one host's table row.
func Row(o *cli.Options, h *infrav1.YonderSSHHost, withNamespace bool) []string {
	claimedBy, cluster := "", ""
	if r := h.Spec.ConsumerRef; r != nil {
		claimedBy, cluster = r.Kind+"/"+r.Name, r.ClusterName
	}
	addr := h.Spec.Address
	if h.Spec.Port != 0 && h.Spec.Port != 22 {
		addr = net.JoinHostPort(addr, strconv.Itoa(int(h.Spec.Port)))
	}
	r := []string{h.Name, addr, ClaimState(h), cli.Dash(claimedBy), cli.Dash(cluster), cli.Dash(h.Spec.FailureDomain), o.Age(h.CreationTimestamp.Time)}
	if withNamespace {
		r = append([]string{h.Namespace}, r...)
	}
	if o.Output == cli.OutputWide {
		bastion, fp, osName, gpus, agent := "", "", "", "", ""
		if b := h.Spec.Bastion; b != nil {
			bastion = b.User + "@" + b.Address
		}
		if k, err := parseKey(h.Spec.HostKey); err == nil {
			fp = ssh.FingerprintSHA256(k)
		}
		if f := h.Status.Facts; f != nil {
			osName, gpus, agent = f.OS, GPUSummary(f.GPUs), strconv.FormatBool(f.Agent)
		}
		r = append(r, cli.Dash(h.Spec.User), strconv.Itoa(int(h.Spec.Port)), cli.Dash(bastion), cli.Dash(fp), cli.Dash(osName), cli.Dash(gpus), cli.Dash(agent))
	}
	return r
}

// GPUSummary shows a host's GPUs by name with their counts, in the order the probe found them
// ("2x NVIDIA H200, 1x Intel GPU 0x3e92"); "" for none.
func GPUSummary(names []string) string {
	var order []string
	count := map[string]int{}
	for _, n := range names {
		if count[n] == 0 {
			order = append(order, n)
		}
		count[n]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[n], n)
	}
	return strings.Join(parts, ", ")
}
