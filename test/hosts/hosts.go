// Package hosts starts real Linux "hosts" for tests and the lab: each is a network namespace on a lab
// network (package labnet) with its own hostname (a UTS namespace) and a real OpenSSH sshd that has a
// fresh host key and authorizes a fresh client key. Tests talk to them exactly as Yonder talks to a
// remote machine: over SSH, verifying the pinned host key.
//
// Hosts share the machine's filesystem unless Options.PrivateDirs names directories that each host gets
// its own empty tmpfs of (in a private mount namespace): then files one host's bootstrap writes there
// (sentinels, run records, configs) are invisible to the others, as on separate machines.
package hosts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/labnet"
)

// Host is one running host.
type Host struct {
	// Name is the host's hostname and the suffix of its namespace name.
	Name string
	// Namespace and NamespacePath identify its network namespace.
	Namespace     string
	NamespacePath string
	// Address and Port are where its sshd listens.
	Address netip.Addr
	Port    int
	// User is the login user (root: namespaces share the machine's users).
	User string
	// HostKey is sshd's public host key: the key a client must pin.
	HostKey ssh.PublicKey
	// ClientKeyPEM is the OpenSSH private key that sshd authorizes, as stored in a credentials Secret.
	ClientKeyPEM []byte
	// ClientSigner is ClientKeyPEM parsed.
	ClientSigner ssh.Signer
	// Dir holds the host's sshd config, keys and logs.
	Dir string
	// Root is the host's own filesystem tree as this machine sees it (full-OS hosts); empty for the netns
	// hosts, which share the machine's.
	Root string

	sshd *proc.Process
	// poweroff stops a full-OS host's machine (nil for netns hosts).
	poweroff func() error
	// machineID names a full-OS host's machine, its cgroup subtree and its sysctl holder.
	machineID string
}

// HomeDir is a private directory that keeps this machine's root dotfiles out of a host.
const HomeDir = "/root"

// Options tunes the hosts Start creates.
type Options struct {
	// ClientKeyPEM, when set, is authorized instead of a fresh key (several hosts sharing one credential).
	ClientKeyPEM []byte
	// PrivateDirs get an empty tmpfs of their own on each host (created on the machine if missing).
	PrivateDirs []string
	// ReadyTimeout bounds the wait for sshd to accept connections (default 30s).
	ReadyTimeout time.Duration
}

// Start creates count hosts named <prefix>-<i> on network n. Hosts are removed when n is closed.
func Start(ctx context.Context, n *labnet.Network, prefix string, count int, opts Options) ([]*Host, error) {
	if _, err := proc.LookPath("sshd"); err != nil {
		return nil, fmt.Errorf("OpenSSH sshd is missing: run `hack/test-bins.sh --packages` (installs openssh-server): %w", err)
	}
	hosts := make([]*Host, 0, count)
	for i := 0; i < count; i++ {
		h, err := startOne(ctx, n, fmt.Sprintf("%s-%d", prefix, i), opts)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	// Wait for all sshds together: they start in parallel, so count hosts cost about one startup.
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	for _, h := range hosts {
		if err := h.sshd.WaitFor(ctx, timeout, h.acceptsSSH); err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	return hosts, nil
}

func startOne(ctx context.Context, n *labnet.Network, name string, opts Options) (*Host, error) {
	att, err := n.Attach(ctx, name)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "yonder-host-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("failed to create host directory: %w", err)
	}
	n.OnClose(func() error { return os.RemoveAll(dir) })
	h := &Host{Name: name, Namespace: att.Namespace, NamespacePath: att.NamespacePath, Address: att.Address, Port: 22, User: "root", Dir: dir}

	hostKeyPEM, hostSigner, err := newKey("host " + name)
	if err != nil {
		return nil, err
	}
	h.HostKey = hostSigner.PublicKey()
	h.ClientKeyPEM = opts.ClientKeyPEM
	if h.ClientKeyPEM == nil {
		if h.ClientKeyPEM, _, err = newKey("client of " + name); err != nil {
			return nil, err
		}
	}
	if h.ClientSigner, err = ssh.ParsePrivateKey(h.ClientKeyPEM); err != nil {
		return nil, fmt.Errorf("failed to parse client key for host %s: %w", name, err)
	}
	files := map[string][]byte{
		"ssh_host_ed25519_key": hostKeyPEM,
		"authorized_keys":      ssh.MarshalAuthorizedKey(h.ClientSigner.PublicKey()),
		"sshd_config":          []byte(sshdConfig(h)),
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			return nil, fmt.Errorf("failed to write %s for host %s: %w", f, name, err)
		}
	}
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { //nolint:gosec // sshd requires its privsep dir root-owned and world-readable
		return nil, fmt.Errorf("failed to create /run/sshd: %w", err)
	}
	sshd, _ := proc.LookPath("sshd")
	for _, d := range opts.PrivateDirs {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // a mount point, not data
			return nil, fmt.Errorf("failed to create mount point %s: %w", d, err)
		}
	}
	// nsenter --net (not `ip netns exec`, which remounts /sys and later confuses systemd-nspawn's cgroup
	// detection) + a private UTS namespace so the host has its own hostname, + a private mount namespace
	// when the host has private directories.
	unshare := []string{"unshare", "--uts"}
	if len(opts.PrivateDirs) > 0 {
		unshare = append(unshare, "--mount", "--propagation", "private")
	}
	kernel, err := kernelDirMounts(dir, opts.PrivateDirs)
	if err != nil {
		return nil, err
	}
	// $0 = hostname, $1 = sshd, $2 = its config, $3 = the number of KernelDirs pairs (directory, where it is
	// kept) that follow, then the private directories. Each kept directory is bound back over the tmpfs.
	script := `hostname "$0" && sshd="$1" && cfg="$2" && n="$3" && shift 3 && kernel="" && while [ "$n" -gt 0 ]; do mount --bind "$1" "$2" || exit 1; kernel="$kernel $1=$2"; shift 2; n=$((n-1)); done && for d in "$@"; do mount -t tmpfs -o mode=0755 tmpfs "$d" || exit 1; done && for p in $kernel; do mkdir -p "${p%%=*}" && mount --bind "${p#*=}" "${p%%=*}" || exit 1; done && mkdir -p /run/sshd && exec "$sshd" -D -e -f "$cfg"`
	args := append([]string{"--net=" + att.NamespacePath}, unshare...)
	args = append(args, "--", "sh", "-c", script, name, sshd, filepath.Join(dir, "sshd_config"), strconv.Itoa(len(kernel)/2))
	args = append(args, kernel...)
	args = append(args, opts.PrivateDirs...)
	h.sshd, err = proc.Start("sshd", dir, nil, "nsenter", args...)
	if err != nil {
		return nil, err
	}
	n.OnClose(func() error { return h.sshd.Stop(5 * time.Second) })
	return h, nil
}

// KernelDirs hold state about the machine's one kernel, which every host shares even where a private
// directory would hide the machine's copy: the agents' sysctl registry (sysctls are global to the kernel,
// so the agents of all hosts on this machine, and any agent outside them, must see each other's records —
// else one restores the host's values under another's running kubelet).
var KernelDirs = []string{agentv1.SysctlRegistryDir}

// kernelDirMounts returns, for each of KernelDirs below one of private, the directory and where the host
// keeps it (below its dir) while the private tmpfs mounts go on: pairs, flattened.
func kernelDirMounts(dir string, private []string) ([]string, error) {
	var pairs []string
	for i, d := range KernelDirs {
		hidden := false
		for _, p := range private {
			hidden = hidden || d == p || strings.HasPrefix(d, strings.TrimSuffix(p, "/")+"/")
		}
		if !hidden {
			continue
		}
		kept := filepath.Join(dir, fmt.Sprintf("kernel-%d", i))
		for _, m := range []string{d, kept} {
			if err := os.MkdirAll(m, 0o700); err != nil {
				return nil, fmt.Errorf("failed to create %s: %w", m, err)
			}
		}
		pairs = append(pairs, d, kept)
	}
	return pairs, nil
}

func sshdConfig(h *Host) string {
	return fmt.Sprintf(`# sshd for Yonder test host %[1]s
Port %[2]d
ListenAddress %[3]s
HostKey %[4]s/ssh_host_ed25519_key
AuthorizedKeysFile %[4]s/authorized_keys
PidFile %[4]s/sshd.pid
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
LogLevel VERBOSE
# Hosts share this machine's users and home directories. sshd runs commands through the login shell, and
# bash sources ~/.bashrc for ssh commands only at shell level 1: SHLVL=1 makes it level 2, so the
# machine's own root ~/.bashrc (which can block, e.g. on a stale pyenv rehash lock) stays out of the
# hosts' sessions, as on a fresh host.
SetEnv SHLVL=1
# Tests open many sessions at once (controllers with several workers, restart loops).
MaxStartups 100
MaxSessions 100
`, h.Name, h.Port, h.Address, h.Dir)
}

func newKey(comment string) ([]byte, ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate ed25519 key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode ed25519 key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), signer, nil
}

// NewClientKey returns a fresh ed25519 client key as OpenSSH PEM (what a credentials Secret holds) and
// as a signer.
func NewClientKey() ([]byte, ssh.Signer, error) { return newKey("yonder test client") }

// Stop stops the host's sshd: the host becomes unreachable, and its private directories are gone. A full-OS
// host is powered off.
func (h *Host) Stop() error {
	if h.poweroff != nil {
		return h.poweroff()
	}
	return h.sshd.Stop(5 * time.Second)
}

// Output runs a command over SSH and returns its stdout and stderr interleaved.
func (h *Host) Output(ctx context.Context, command string) (string, error) {
	c, err := h.Dial(ctx)
	if err != nil {
		return "", fmt.Errorf("failed to connect to host %s: %w", h.Name, err)
	}
	defer func() { _ = c.Close() }()
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("failed to open session on host %s: %w", h.Name, err)
	}
	defer func() { _ = s.Close() }()
	out, err := s.CombinedOutput(command)
	return string(out), err
}

// Endpoint returns address:port of the host's sshd.
func (h *Host) Endpoint() string { return net.JoinHostPort(h.Address.String(), strconv.Itoa(h.Port)) }

func (h *Host) acceptsSSH(ctx context.Context) error {
	c, err := h.Dial(ctx)
	if err != nil {
		return err
	}
	return c.Close()
}

// ClientConfig returns an SSH client config that authenticates with the host's client key and accepts
// only the host's own host key.
func (h *Host) ClientConfig() *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:            h.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(h.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(h.HostKey),
		Timeout:         5 * time.Second,
	}
}

// Dial opens an SSH connection with host-key verification.
func (h *Host) Dial(ctx context.Context) (*ssh.Client, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", h.Endpoint())
	if err != nil {
		return nil, err
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, h.Endpoint(), h.ClientConfig())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// Run runs a shell command on the host over SSH and returns its stdout and stderr.
func (h *Host) Run(ctx context.Context, command string) (stdout, stderr []byte, err error) {
	c, err := h.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to connect to host %s: %w", h.Name, err)
	}
	defer func() { _ = c.Close() }()
	s, err := c.NewSession()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open session on host %s: %w", h.Name, err)
	}
	defer func() { _ = s.Close() }()
	var o, e bytes.Buffer
	s.Stdout, s.Stderr = &o, &e
	if err := s.Run(command); err != nil {
		return o.Bytes(), e.Bytes(), fmt.Errorf("command on host %s failed: %w", h.Name, err)
	}
	return o.Bytes(), e.Bytes(), nil
}
