package main

import (
	"crypto/ed25519"
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
	var tpmPath, cmdlinePath, server, ticket, output, instructionsPath, serverKey, servedServerKey string
	var insecureUnsigned bool
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
			key, err := providerKey(cmd, serverKey, servedServerKey, insecureUnsigned)
			if err != nil {
				return err
			}
			client.ServerKey = key
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
			plain, err := client.Attest(cmd.Context(), ticket, keys)
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
			in, err := attest.DecodeInstructions(plain)
			if err != nil {
				return err
			}
			// The instructions (with the report token) go where `yonder-agent provision` reads them; the
			// user data alone where the live boot's consumers read it.
			if err := writeFileAtomic(instructionsPath, plain, 0o600); err != nil {
				return err
			}
			if err := writeFileAtomic(output, in.UserData, 0o600); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "attested; action %s; bootstrap data written to %s (%d bytes), instructions to %s\n", in.Action, output, len(in.UserData), instructionsPath)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&tpmPath, "tpm", "/dev/tpmrm0", "TPM character device, or the unix socket of a software TPM")
	f.StringVar(&cmdlinePath, "cmdline", "/proc/cmdline", "kernel command line with yonder.server= and yonder.ticket=")
	f.StringVar(&server, "server", "", "boot server URL (default: yonder.server= from the command line)")
	f.StringVar(&ticket, "ticket", "", "one-time boot ticket (default: yonder.ticket= from the command line)")
	f.StringVar(&output, "output", "/run/yonder/bootstrap-data", "where to write the released bootstrap data (mode 0600)")
	f.StringVar(&instructionsPath, "instructions", "/run/yonder/instructions.json", "where to write the released instructions, for `yonder-agent provision` (mode 0600)")
	f.StringVar(&serverKey, "server-key", "/etc/yonder/boot-server.pub", "the provider's Ed25519 public key (PEM) built into the boot image: data it did not sign is refused")
	f.StringVar(&servedServerKey, "served-server-key", "/etc/yonder/boot-server.served.pub", "the provider's key as the boot server serves it beside a generic boot image (a second initrd), used when the image has none built in")
	f.BoolVar(&insecureUnsigned, "insecure-unsigned", false, "INSECURE: with neither key, accept unsigned data (a rogue server on the boot LAN could then make this host run its own); without this flag the host refuses to run")
	return cmd
}

// providerKey is the key released data must be signed with: the one built into the boot image, else the one
// the boot server served with it. With neither, the host refuses to run unless insecure is set: an image
// must never quietly accept whatever a server on the boot LAN sends.
func providerKey(cmd *cobra.Command, builtIn, served string, insecure bool) (ed25519.PublicKey, error) {
	for _, path := range []string{builtIn, served} {
		pemKey, err := os.ReadFile(path) //nolint:gosec // the boot image's key files
		switch {
		case err == nil:
			k, err := attest.ParseServerKey(pemKey)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if path == served {
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "verifying with the provider key the boot server served beside the image (%s)\n", served)
			}
			return k, nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("failed to read the provider key: %w", err)
		case path == builtIn && cmd.Flags().Changed("server-key"):
			return nil, fmt.Errorf("failed to read the provider key: %w", err)
		}
	}
	if !insecure {
		return nil, fmt.Errorf("no provider key: neither %s (built into the boot image) nor %s (served by the boot server when the manager has --boot-signing-key) exists; refusing to run unsigned instructions (--insecure-unsigned accepts them)", builtIn, served)
	}
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: no provider key (%s, %s): the instructions' origin is not verified (--insecure-unsigned)\n", builtIn, served)
	return nil, nil
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
