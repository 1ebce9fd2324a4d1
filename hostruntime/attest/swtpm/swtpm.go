// Package swtpm starts real software TPMs (swtpm, Debian packages swtpm + swtpm-tools) for tests and the
// lab: each manufactured with swtpm_setup (RSA and ECC EKs with certificates from swtpm-localca) in its
// own state directory, served on a unix socket. It is a real TPM 2.0 implementation, not a fake.
package swtpm

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/yonder-dev/yonder/pkg/deathsig"
)

// LocalCADir is where swtpm-localca keeps the CA that signs the EK certificates swtpm_setup creates.
const LocalCADir = "/var/lib/swtpm-localca"

// TPM is one running swtpm.
type TPM struct {
	// Dir is the state directory; Socket the TPM command socket; Ctrl the control socket (for QEMU).
	Dir, Socket, Ctrl string
	cmd               *exec.Cmd
	done              chan struct{}
}

// Start manufactures a TPM in dir (which must be unique to the caller) and serves it.
func Start(ctx context.Context, dir string) (*TPM, error) { return start(ctx, dir, true) }

// StartWithoutEKCertificate manufactures a TPM like Start but without an EK certificate in its NV (as
// some platforms ship them, and as any software TPM looks that was not set up by a vendor): a verifier
// with vendor roots has nothing to check its EK against.
func StartWithoutEKCertificate(ctx context.Context, dir string) (*TPM, error) {
	return start(ctx, dir, false)
}

func start(ctx context.Context, dir string, ekCert bool) (*TPM, error) {
	for _, tool := range []string{"swtpm", "swtpm_setup"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is missing: run `hack/test-bins.sh --packages` (installs swtpm, swtpm-tools): %w", tool, err)
		}
	}
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create swtpm state dir: %w", err)
	}
	args := []string{"--tpm2", "--tpmstate", state, "--overwrite", "--pcr-banks", "sha256", "--logfile", filepath.Join(dir, "setup.log")}
	if ekCert {
		args = append(args, "--create-ek-cert")
	}
	setup := exec.CommandContext(ctx, "swtpm_setup", args...)
	if out, err := setup.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("failed to manufacture swtpm in %s: %w: %s", dir, err, out)
	}
	t := &TPM{Dir: dir, Socket: filepath.Join(dir, "tpm.sock"), Ctrl: filepath.Join(dir, "ctrl.sock"), done: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "swtpm.log")) //nolint:gosec // the caller's own state directory
	if err != nil {
		return nil, fmt.Errorf("failed to create swtpm log: %w", err)
	}
	t.cmd = exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+state,
		"--server", "type=unixio,path="+t.Socket, "--ctrl", "type=unixio,path="+t.Ctrl,
		"--flags", "startup-clear", "--log", "file="+filepath.Join(dir, "swtpm.log")+",level=1")
	t.cmd.Stdout, t.cmd.Stderr = log, log
	t.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	child, err := deathsig.Start(t.cmd)
	if err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("failed to start swtpm: %w", err)
	}
	go func() { <-child.Done(); _ = log.Close(); close(t.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", t.Socket); err == nil {
			_ = c.Close()
			return t, nil
		}
		select {
		case <-t.done:
			return nil, fmt.Errorf("failed to start swtpm: it exited (see %s)", filepath.Join(dir, "swtpm.log"))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = t.Stop()
			return nil, fmt.Errorf("failed to start swtpm: socket %s not ready", t.Socket)
		}
	}
}

// Pid is swtpm's process id.
func (t *TPM) Pid() int { return t.cmd.Process.Pid }

// Stop ends this swtpm by its pid.
func (t *TPM) Stop() error {
	select {
	case <-t.done:
		return nil
	default:
	}
	_ = syscall.Kill(t.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(t.cmd.Process.Pid, syscall.SIGKILL)
		<-t.done
	}
	return nil
}

// String describes the TPM for logs.
func (t *TPM) String() string { return "swtpm[" + strconv.Itoa(t.cmd.Process.Pid) + "]@" + t.Socket }

// LocalCA returns the PEM files of swtpm-localca's root and issuing CA: what a site configures as its TPM
// vendor roots (--ek-roots, --ek-intermediates) for TPMs that Start manufactures. swtpm_setup creates the
// CA with the first TPM it manufactures, so one throwaway TPM is manufactured when it does not exist yet.
func LocalCA(ctx context.Context) (root, intermediate string, err error) {
	root, intermediate = filepath.Join(LocalCADir, "swtpm-localca-rootca-cert.pem"), filepath.Join(LocalCADir, "issuercert.pem")
	if _, err := os.Stat(intermediate); err == nil {
		return root, intermediate, nil
	}
	dir, err := os.MkdirTemp("", "yswtpm-ca-")
	if err != nil {
		return "", "", fmt.Errorf("failed to create a directory for the first swtpm: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	t, err := Start(ctx, dir)
	if err != nil {
		return "", "", fmt.Errorf("failed to manufacture a first swtpm (it creates swtpm-localca's CA): %w", err)
	}
	_ = t.Stop()
	return root, intermediate, nil
}
