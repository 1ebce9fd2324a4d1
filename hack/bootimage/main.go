// Command bootimage writes the bare-metal provisioning boot that yonder-metal-manager serves from
// --boot-artifacts-dir: Debian's kernel (vmlinuz) and Yonder's initramfs (yonder-initrd.img) — busybox, the
// virtio, disk and FAT modules, the static yonder-agent of this tree and, when asked, the provider's public key.
// The initramfs leases an address, attests the host's TPM, and carries out the released instructions (write
// the image and its config drive, clean the disks, or run live): see docs/infrastructure-baremetal.md.
//
// The kernel and busybox come from Debian packages fetched by `hack/test-bins.sh --packages --metal-kernel`
// (what `make boot-image` runs first); the files are named as the manager's defaults expect them.
//
// Usage:
//
//	go run ./hack/bootimage -out out/boot                              # generic (what a release ships)
//	go run ./hack/bootimage -out out/boot -server-key boot-server.pub  # one provider's key built in
//
// A generic image carries no key: yonder-metal-manager with --boot-signing-key serves its public half
// beside the image as a second initrd, and the agent verifies with it; with no key at all the agent
// refuses to run. -server-key builds the public half of the manager's --boot-signing-key
// (`openssl pkey -in boot-signing-key.pem -pubout -out boot-server.pub`) into the image, where it wins over
// a served one: worth it when the image reaches hosts over a channel the boot LAN cannot tamper with.
// -insecure-unsigned builds an image whose agent, finding no key, runs whatever a server on the boot
// network sends (for a manager with --insecure-unsigned-boot-data; a warning on the console).
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/test/metalboot"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hack/bootimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bootimage", flag.ContinueOnError)
	out := fs.String("out", "out/boot", "directory to write vmlinuz and yonder-initrd.img into")
	serverKey := fs.String("server-key", "", "build in the provider's Ed25519 public key (PEM), the public half of yonder-metal-manager's --boot-signing-key (default: none, the agent uses the key the boot server serves)")
	insecure := fs.Bool("insecure-unsigned", false, "INSECURE: an image whose agent runs unsigned instructions when it finds no key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	var opts metalboot.Options
	switch {
	case *serverKey != "" && *insecure:
		return errors.New("-server-key and -insecure-unsigned are alternatives: give one")
	case *serverKey != "":
		pem, err := os.ReadFile(*serverKey)
		if err != nil {
			return fmt.Errorf("failed to read -server-key: %w", err)
		}
		// The agent parses the same file at boot: a wrong key here would only show as a refused host.
		k, err := attest.ParseServerKey(pem)
		if err != nil {
			return fmt.Errorf("-server-key %s: %w", *serverKey, err)
		}
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("-server-key %s is not an Ed25519 public key", *serverKey)
		}
		opts.ServerKey = pem
	case *insecure:
		opts.InsecureUnsigned = true
	}
	if err := os.MkdirAll(*out, 0o755); err != nil { //nolint:gosec // boot artifacts are served over HTTP to any host
		return err
	}
	if err := metalboot.Build(ctx, *out, opts); err != nil {
		return err
	}
	for _, f := range []string{metalboot.Kernel, metalboot.Initrd} {
		fmt.Println(filepath.Join(*out, f))
	}
	return nil
}
