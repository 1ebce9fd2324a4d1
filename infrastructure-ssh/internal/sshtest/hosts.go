// Package sshtest starts real OpenSSH hosts for the SSH provider's tests. Each host is a network
// namespace on a lab network (test/labnet) with its own hostname AND its own mount namespace, in which
// /run, /var/lib/yonder-ssh, /etc/kubernetes and /usr/local/sbin are private tmpfs: bootstrap sentinels,
// run records and written files of one host are invisible to the others, as on separate machines.
// (test/hosts shares the machine's filesystem between hosts, which is fine for its uses but not for
// checking per-host bootstrap state.)
package sshtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/yonder-dev/yonder/test/labnet"
)

// PrivateDirs are the directories each host gets its own empty copy of.
// /root is private too: the machine's own root dotfiles (a .bashrc running pyenv, say) would otherwise run
// in every SSH session of every host and contend on their locks.
var PrivateDirs = []string{"/run", "/var/lib/yonder-ssh", "/etc/kubernetes", "/usr/local/sbin", "/root"}

// Host is one running host.
type Host struct {
	Name          string
	Address       string
	Port          int
	HostKey       ssh.PublicKey
	ClientSigner  ssh.Signer
	NamespacePath string
	dir           string
	cmd           *exec.Cmd
	done          chan struct{}
}

// NewClientKey returns a fresh ed25519 private key (OpenSSH PEM) and its signer.
func NewClientKey() ([]byte, ssh.Signer, error) { return newKey("yonder test client") }

func newKey(comment string) ([]byte, ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create signer: %w", err)
	}
	return pem.EncodeToMemory(block), s, nil
}

// Start starts count hosts named <prefix>-<i> on n, all authorizing client. They stop when n closes.
func Start(ctx context.Context, n *labnet.Network, prefix string, count int, client ssh.Signer) ([]*Host, error) {
	for _, d := range PrivateDirs {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // mount points
			return nil, fmt.Errorf("failed to create mount point %s: %w", d, err)
		}
	}
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/sshd"); e != nil {
			return nil, fmt.Errorf("OpenSSH sshd is missing: run `hack/test-bins.sh --packages`: %w", err)
		}
		sshd = "/usr/sbin/sshd"
	}
	var hs []*Host
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		att, err := n.Attach(ctx, name)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "yonder-sshtest-"+name+"-")
		if err != nil {
			return nil, fmt.Errorf("failed to create host directory: %w", err)
		}
		n.OnClose(func() error { return os.RemoveAll(dir) })
		hostPEM, hostSigner, err := newKey("host " + name)
		if err != nil {
			return nil, err
		}
		h := &Host{Name: name, Address: att.Address.String(), Port: 22, HostKey: hostSigner.PublicKey(), ClientSigner: client, NamespacePath: att.NamespacePath, dir: dir}
		files := map[string][]byte{
			"ssh_host_ed25519_key": hostPEM,
			"authorized_keys":      ssh.MarshalAuthorizedKey(client.PublicKey()),
			"sshd_config": []byte(fmt.Sprintf("Port 22\nListenAddress %s\nHostKey %s/ssh_host_ed25519_key\nAuthorizedKeysFile %s/authorized_keys\nPidFile none\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\nMaxStartups 100\nMaxSessions 100\n",
				h.Address, dir, dir)),
		}
		for f, data := range files {
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				return nil, fmt.Errorf("failed to write %s: %w", f, err)
			}
		}
		if err := h.startSSHD(sshd); err != nil {
			return nil, err
		}
		n.OnClose(func() error { h.Stop(); return nil })
		hs = append(hs, h)
	}
	for _, h := range hs {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			c, err := h.Dial(ctx)
			if err != nil {
				return false, nil
			}
			_ = c.Close()
			return true, nil
		}); err != nil {
			return nil, fmt.Errorf("sshd of host %s did not accept connections (log %s): %w", h.Name, filepath.Join(h.dir, "sshd.log"), err)
		}
	}
	return hs, nil
}

func (h *Host) startSSHD(sshd string) error {
	script := `set -e; hostname "$0"; for d in ` + fmt.Sprint(joinQuoted(PrivateDirs)) + `; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done; mkdir -p /run/sshd; exec "$1" -D -e -f "$2"`
	log, err := os.OpenFile(filepath.Join(h.dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("failed to open sshd log: %w", err)
	}
	cmd := exec.Command("nsenter", "--net="+h.NamespacePath, "unshare", "--uts", "--mount", "--propagation", "private", "--",
		"sh", "-c", script, h.Name, sshd, filepath.Join(h.dir, "sshd_config"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("failed to start sshd of host %s: %w", h.Name, err)
	}
	h.cmd, h.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(h.done) }()
	return nil
}

func joinQuoted(ds []string) string {
	s := ""
	for _, d := range ds {
		s += " '" + d + "'"
	}
	return s
}

// Stop stops the host's sshd (the host becomes unreachable; its private directories are gone).
func (h *Host) Stop() {
	if h.cmd == nil {
		return
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	<-h.done
	h.cmd = nil
}

// Endpoint is address:port.
func (h *Host) Endpoint() string { return net.JoinHostPort(h.Address, strconv.Itoa(h.Port)) }

// Dial connects with the pinned host key.
func (h *Host) Dial(ctx context.Context) (*ssh.Client, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", h.Endpoint())
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(h.ClientSigner)}, HostKeyCallback: ssh.FixedHostKey(h.HostKey), Timeout: 5 * time.Second}
	c, chans, reqs, err := ssh.NewClientConn(conn, h.Endpoint(), cfg)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// Run runs a command on the host and returns its combined output.
func (h *Host) Run(ctx context.Context, cmd string) (string, error) {
	c, err := h.Dial(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer func() { _ = s.Close() }()
	out, err := s.CombinedOutput(cmd)
	return string(out), err
}
