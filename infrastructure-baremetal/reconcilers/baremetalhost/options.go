package baremetalhost

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot"
)

// Options are yonder-metal-manager's flags for the host controller and the boot services it feeds.
type Options struct {
	// Concurrency is the number of hosts reconciled at once.
	Concurrency int
	// Namespaces limits the controller to these namespaces (empty: all; the managed label is required).
	Namespaces []string
	// BasicAuth: see Reconciler.BasicAuth.
	BasicAuth bool
	// ProvisionTimeout, MaxProvisionAttempts, RetryInterval: see Reconciler.
	ProvisionTimeout     time.Duration
	MaxProvisionAttempts int
	RetryInterval        time.Duration

	// BootInterface and BootServerIP enable the boot services (DHCP, TFTP, HTTP, attestation) on this
	// interface and address; without them hosts are registered and inspected but not provisioned.
	BootInterface string
	BootServerIP  string
	// BootHTTPPort and BootTFTPPort (defaults 8080, 69); BootProxyDHCP answers PXE clients only, beside
	// another DHCP server; BootArtifactsDir holds the kernel and initramfs.
	BootHTTPPort, BootTFTPPort int
	BootProxyDHCP              bool
	BootArtifactsDir           string
	// BootKernel, BootInitrd, BootCmdline: what a provisioning host boots (artifact names or URLs).
	BootKernel, BootInitrd, BootCmdline string
	// EKRoots and EKIntermediates are PEM files of the TPM vendors' EK certificate roots and intermediate
	// CAs; InsecureAcceptAnyEK accepts any EK instead (required when EKRoots is empty). AttestationPCRs
	// are the SHA-256 PCRs quoted and compared with the values recorded at enrolment.
	EKRoots, EKIntermediates []string
	InsecureAcceptAnyEK      bool
	AttestationPCRs          []int
	// BootSigningKey is a PEM PKCS#8 Ed25519 private key that signs released bootstrap data; its public
	// half goes into the boot image (/etc/yonder/boot-server.pub), whose agent refuses unsigned data.
	// InsecureUnsignedBootData releases data unsigned instead (required when BootSigningKey is empty).
	BootSigningKey           string
	InsecureUnsignedBootData bool
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Concurrency, "baremetalhost-concurrency", 10, "Concurrent BareMetalHost reconciles")
	fs.StringSliceVar(&o.Namespaces, "baremetalhost-namespaces", nil, "Only manage BareMetalHosts in these namespaces (they still need the label "+ManagedLabel+"=true)")
	fs.BoolVar(&o.BasicAuth, "redfish-basic-auth", false, "Send BMC credentials with every Redfish request instead of opening sessions")
	fs.DurationVar(&o.ProvisionTimeout, "provision-timeout", 15*time.Minute, "Time from the PXE power cycle to the released bootstrap data before a boot attempt counts as failed")
	fs.IntVar(&o.MaxProvisionAttempts, "provision-attempts", 3, "PXE boots per image before the host stays in error")
	fs.DurationVar(&o.RetryInterval, "bmc-retry-interval", time.Minute, "First retry delay after a BMC error or failed boot (doubles per boot attempt)")
	fs.StringVar(&o.BootInterface, "boot-interface", "", "Interface of the boot network (enables DHCP/TFTP/HTTP/attestation)")
	fs.StringVar(&o.BootServerIP, "boot-server-ip", "", "This manager's IPv4 address on the boot network")
	fs.IntVar(&o.BootHTTPPort, "boot-http-port", 8080, "Boot HTTP port (iPXE scripts, artifacts, attestation)")
	fs.IntVar(&o.BootTFTPPort, "boot-tftp-port", 69, "TFTP port")
	fs.BoolVar(&o.BootProxyDHCP, "boot-proxy-dhcp", false, "Answer PXE clients only (proxyDHCP); another DHCP server leases addresses")
	fs.StringVar(&o.BootArtifactsDir, "boot-artifacts-dir", "/var/lib/yonder/boot", "Directory of the kernels and initramfs images served to hosts")
	fs.StringVar(&o.BootKernel, "boot-kernel", "vmlinuz", "Kernel a provisioning host boots (artifact name or URL)")
	fs.StringVar(&o.BootInitrd, "boot-initrd", "yonder-initrd.img", "Initramfs with yonder-agent a provisioning host boots")
	fs.StringVar(&o.BootCmdline, "boot-cmdline", "console=ttyS0", "Kernel command line of the provisioning boot (the server adds its URL and the ticket)")
	fs.StringSliceVar(&o.EKRoots, "ek-roots", nil, "PEM files of the TPM vendor root CAs that must sign every host's EK certificate (required with --boot-interface unless --insecure-accept-any-ek)")
	fs.StringSliceVar(&o.EKIntermediates, "ek-intermediates", nil, "PEM files of intermediate CAs offered when verifying EK certificates")
	fs.BoolVar(&o.InsecureAcceptAnyEK, "insecure-accept-any-ek", false, "INSECURE: accept TPMs without verifying their EK certificate (a software TPM can enrol in an open window); hosts show EKCertificatesVerified=False")
	fs.StringVar(&o.BootSigningKey, "boot-signing-key", "", "PEM PKCS#8 Ed25519 private key that signs released bootstrap data (the boot image's agent holds the public key and refuses anything else; required with --boot-interface unless --insecure-unsigned-boot-data)")
	fs.BoolVar(&o.InsecureUnsignedBootData, "insecure-unsigned-boot-data", false, "INSECURE: release bootstrap data unsigned (a boot image without the provider's public key then runs whatever a rogue server on the boot LAN sends it); hosts show BootDataSigned=False")
	fs.IntSliceVar(&o.AttestationPCRs, "attestation-pcrs", []int{0, 1, 2, 3, 4, 5, 6, 7}, "SHA-256 PCRs a host quotes; they must equal the values recorded when its TPM was enrolled")
}

// attestation is the attestation policy of the options: the EK roots read from their files.
func (o Options) attestation() (attest.Config, error) {
	cfg := attest.Config{PCRs: o.AttestationPCRs, InsecureAcceptAnyEK: o.InsecureAcceptAnyEK}
	if len(o.EKRoots) == 0 && !o.InsecureAcceptAnyEK {
		return cfg, errors.New("--boot-interface needs --ek-roots (the TPM vendors' EK root CAs) or, knowingly, --insecure-accept-any-ek")
	}
	var err error
	if len(o.EKRoots) > 0 {
		if cfg.EKRoots, err = attest.LoadCertPool(o.EKRoots...); err != nil {
			return cfg, fmt.Errorf("--ek-roots: %w", err)
		}
	}
	if len(o.EKIntermediates) > 0 {
		if cfg.EKIntermediates, err = attest.LoadCertPool(o.EKIntermediates...); err != nil {
			return cfg, fmt.Errorf("--ek-intermediates: %w", err)
		}
	}
	switch {
	case o.BootSigningKey != "":
		if cfg.SigningKey, err = attest.LoadSigningKey(o.BootSigningKey); err != nil {
			return cfg, fmt.Errorf("--boot-signing-key: %w", err)
		}
	case !o.InsecureUnsignedBootData:
		// Fail closed, as without EK roots: unsigned data proves nothing about who sent it.
		return cfg, errors.New("--boot-interface needs --boot-signing-key (an Ed25519 key whose public half is in the boot image) or, knowingly, --insecure-unsigned-boot-data")
	}
	for _, p := range o.AttestationPCRs {
		if p < 0 || p > 23 {
			return cfg, fmt.Errorf("--attestation-pcrs: %d is not a PCR index (0-23)", p)
		}
	}
	return cfg, nil
}

// SetupWithManager registers the BareMetalHost controller with mgr and, when a boot interface is
// configured, the boot services as a manager runnable sharing the controller's host table. This is the
// one call yonder-metal-manager's main.go makes for BareMetalHosts.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, o Options) error {
	r := &Reconciler{Client: mgr.GetClient(), BasicAuth: o.BasicAuth, Namespaces: o.Namespaces,
		ProvisionTimeout: o.ProvisionTimeout, MaxProvisionAttempts: o.MaxProvisionAttempts, RetryInterval: o.RetryInterval,
		Boot: inventory.BootConfig{Kernel: o.BootKernel, Initrd: o.BootInitrd, Cmdline: o.BootCmdline}}
	if o.BootInterface != "" {
		ip, err := netip.ParseAddr(o.BootServerIP)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("--boot-server-ip %q is not an IPv4 address (required with --boot-interface)", o.BootServerIP)
		}
		att, err := o.attestation()
		if err != nil {
			return err
		}
		inv := inventory.NewStatic()
		r.NetBoot = inv
		// With roots and --insecure-accept-any-ek both set, an EK without a certificate is still accepted:
		// the hosts must say so, not claim verified EKs.
		r.InsecureAcceptAnyEK = att.EKRoots == nil || att.InsecureAcceptAnyEK
		r.UnsignedBootData = att.SigningKey == nil
		cfg := netboot.Config{Interface: o.BootInterface, ServerIP: ip, HTTPPort: o.BootHTTPPort, TFTPPort: o.BootTFTPPort,
			ArtifactsDir: o.BootArtifactsDir, DHCP: dhcp.Config{ProxyDHCP: o.BootProxyDHCP}, Attestation: att}
		store := AttestStore{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			svcs, err := netboot.Start(ctx, cfg, inv, store, metrics.Registry, ctrl.Log.WithName("netboot"))
			if err != nil {
				return fmt.Errorf("failed to start the boot services: %w", err)
			}
			<-ctx.Done()
			return svcs.Stop()
		})); err != nil {
			return fmt.Errorf("failed to add the boot services: %w", err)
		}
	}
	n := o.Concurrency
	if n <= 0 {
		n = 10
	}
	return r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: n})
}
