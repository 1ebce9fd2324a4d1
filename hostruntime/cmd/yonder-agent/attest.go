package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/hostruntime/attest"
)

// newAttestCommand is the bare-metal boot step: prove this host's TPM to the boot server (the server and
// one-time ticket come from the kernel command line the per-host iPXE script set) and receive the
// bootstrap data, which only that TPM can decrypt and the server releases once.
func newAttestCommand() *cobra.Command {
	var tpmPath, cmdlinePath, server, ticket, output, serverKey string
	cmd := &cobra.Command{
		Use:   "attest",
		Short: "Attest this host's TPM to the boot server and write the bootstrap data it releases",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if server == "" || ticket == "" {
				raw, err := os.ReadFile(cmdlinePath) //nolint:gosec // the operator names the command line file
				if err != nil {
					return fmt.Errorf("failed to read the kernel command line %s: %w", cmdlinePath, err)
				}
				s, t := attest.ParseCmdline(string(raw))
				if server == "" {
					server = s
				}
				if ticket == "" {
					ticket = t
				}
			}
			if server == "" || ticket == "" {
				return fmt.Errorf("no boot server or ticket: %s has no yonder.server= / yonder.ticket= (was this host booted by its Yonder iPXE script?); pass --server and --ticket to override", cmdlinePath)
			}
			client := &attest.Client{Server: server}
			switch pemKey, err := os.ReadFile(serverKey); { //nolint:gosec // the boot image's key file
			case err == nil:
				if client.ServerKey, err = attest.ParseServerKey(pemKey); err != nil {
					return fmt.Errorf("%s: %w", serverKey, err)
				}
			case errors.Is(err, os.ErrNotExist) && !cmd.Flags().Changed("server-key"):
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %s is absent: the bootstrap data's origin is not verified (build the provider's public key into the boot image)\n", serverKey)
			default:
				return fmt.Errorf("failed to read the provider key: %w", err)
			}
			tpm, err := attest.OpenTPM(tpmPath)
			if err != nil {
				return err
			}
			defer func() { _ = tpm.Close() }()
			keys, err := attest.LoadKeys(tpm)
			if err != nil {
				return fmt.Errorf("failed to load the TPM's endorsement and attestation keys: %w", err)
			}
			defer func() { _ = keys.Close() }()
			data, err := client.Attest(cmd.Context(), ticket, keys)
			if err != nil {
				var refused *attest.RefusedError
				if errors.As(err, &refused) {
					return fmt.Errorf("the boot server refused this host (%s): %w; the host's condition on the management cluster says which check failed", refused.Reason, err)
				}
				if errors.Is(err, attest.ErrEnvelopeNotSigned) {
					return fmt.Errorf("refusing the bootstrap data from %s: %w", server, err)
				}
				return fmt.Errorf("attestation with %s failed: %w", server, err)
			}
			if err := writeFileAtomic(output, data, 0o600); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "attested; bootstrap data written to %s (%d bytes)\n", output, len(data))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&tpmPath, "tpm", "/dev/tpmrm0", "TPM character device, or the unix socket of a software TPM")
	f.StringVar(&cmdlinePath, "cmdline", "/proc/cmdline", "kernel command line with yonder.server= and yonder.ticket=")
	f.StringVar(&server, "server", "", "boot server URL (default: yonder.server= from the command line)")
	f.StringVar(&ticket, "ticket", "", "one-time boot ticket (default: yonder.ticket= from the command line)")
	f.StringVar(&output, "output", "/run/yonder/bootstrap-data", "where to write the released bootstrap data (mode 0600)")
	f.StringVar(&serverKey, "server-key", "/etc/yonder/boot-server.pub", "the provider's Ed25519 public key (PEM), built into the boot image: data it did not sign is refused (absent default file: not verified, with a warning)")
	return cmd
}

// writeFileAtomic writes through a temporary file in the same directory and renames it, so a crash never
// leaves half of the bootstrap data behind.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".bootstrap-data-*")
	if err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}
