// Package sshsim is an SSH SIMULATOR for scale benchmarks only: one process serves many simulated
// hosts, each on its own loopback port with its own ed25519 host key, speaking real SSH
// (x/crypto/ssh server) to the client. An exec request runs the command with the machine's real
// /bin/sh, but the host-state paths the SSH provider uses (/var/lib/yonder-ssh, /run/cluster-api,
// /etc/kubernetes) are rewritten into a per-host directory so hosts do not see each other's state.
// It is not a faithful host: functional tests use real sshd in network namespaces (test/hosts).
// Nothing outside benchmarks may use it.
package sshsim

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// RewrittenPaths are the absolute paths mapped into each simulated host's directory.
var RewrittenPaths = []string{"/var/lib/yonder-ssh", "/run/cluster-api", "/etc/kubernetes", "/run/kubeadm"}

// Host is one simulated host.
type Host struct {
	Name    string
	Address string
	Port    int
	HostKey ssh.PublicKey
	Root    string
	ln      net.Listener
}

// Simulator serves simulated hosts.
type Simulator struct {
	Hosts  []*Host
	client ssh.PublicKey
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	// Execs counts exec requests served.
	Execs int64
}

// Start serves count hosts on 127.0.0.1, authorizing client; state lives under dir.
func Start(count int, client ssh.PublicKey, dir string) (*Simulator, error) {
	s := &Simulator{client: client}
	for i := 0; i < count; i++ {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("failed to listen: %w", err)
		}
		h := &Host{Name: fmt.Sprintf("sim-%d", i), Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, HostKey: signer.PublicKey(), Root: filepath.Join(dir, fmt.Sprintf("sim-%d", i)), ln: ln}
		for _, p := range RewrittenPaths {
			if err := os.MkdirAll(filepath.Join(h.Root, p), 0o755); err != nil { //nolint:gosec // benchmark scratch space
				return nil, err
			}
		}
		cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(k.Marshal(), client.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unauthorized")
		}}
		cfg.AddHostKey(signer)
		s.Hosts = append(s.Hosts, h)
		s.wg.Add(1)
		go s.serve(h, cfg)
	}
	return s, nil
}

// Close stops serving.
func (s *Simulator) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, h := range s.Hosts {
		_ = h.ln.Close()
	}
	s.wg.Wait()
	return nil
}

func (s *Simulator) serve(h *Host, cfg *ssh.ServerConfig) {
	defer s.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		go s.conn(h, c, cfg)
	}
}

func (s *Simulator) conn(h *Host, c net.Conn, cfg *ssh.ServerConfig) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		_ = c.Close()
		return
	}
	defer func() { _ = sc.Close() }()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.session(h, ch, creqs)
	}
}

func (s *Simulator) session(h *Host, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer func() { _ = ch.Close() }()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		s.mu.Lock()
		s.Execs++
		s.mu.Unlock()
		status := h.run(payload.Command, ch)
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status))) //nolint:gosec // exit codes are small
		return
	}
}

func (h *Host) rewrite(s string) string {
	for _, p := range RewrittenPaths {
		s = strings.ReplaceAll(s, p, filepath.Join(h.Root, p))
	}
	return s
}

func (h *Host) run(command string, ch ssh.Channel) int {
	in, err := io.ReadAll(ch)
	if err != nil {
		return 255
	}
	command, stdin := h.rewrite(command), h.rewrite(string(in))
	if len(stdin) != len(in) {
		// remote.Start checks the uploaded script's length before it runs it (`-ne <bytes> ]`); the
		// rewritten script is longer, so the check is told the rewritten length.
		command = strings.ReplaceAll(command, fmt.Sprintf("-ne %d ]", len(in)), fmt.Sprintf("-ne %d ]", len(stdin)))
	}
	cmd := exec.CommandContext(context.Background(), "sh", "-c", command)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	cmd.Env = append(os.Environ(), "SIM_HOSTNAME="+h.Name)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 255
	}
	return 0
}
