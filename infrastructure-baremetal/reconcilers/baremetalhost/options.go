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
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/liveiso"
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
	// ProvisionTimeout, ImageWriteTimeout, MaxProvisionAttempts, RetryInterval: see Reconciler.
	ProvisionTimeout  time.Duration
	ImageWriteTimeout time.Duration
	// SoftPowerOffTimeout: see Reconciler.
	SoftPowerOffTimeout  time.Duration
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
	// BootRouter and BootDNS are the default gateway and DNS servers the DHCP server gives the hosts it
	// leases addresses to (empty: none). A host that keeps its lease after it boots its disk, as cloud
	// images do, needs a default route: without one it reaches only the boot network's subnet, and a
	// kubelet without --node-ip finds no address to report.
	BootRouter string
	BootDNS    []string
	// LiveISOCacheDir holds the live ISOs (format live-iso) the boot server downloaded and verified.
	LiveISOCacheDir string
	// BootKernel, BootInitrd, BootCmdline: what a provisioning host boots (artifact names or URLs).
	BootKernel, BootInitrd, BootCmdline string
	// EKRoots and EKIntermediates are PEM files of the TPM vendors' EK certificate roots and intermediate
	// CAs; InsecureAcceptAnyEK accepts any EK instead (required when EKRoots is empty). AttestationPCRs
	// are the SHA-256 PCRs quoted and compared with the values recorded at enrolment.
	EKRoots, EKIntermediates []string
	InsecureAcceptAnyEK      bool
	AttestationPCRs          []int
	// EKRootsConfigMap is <namespace>/<name> of a ConfigMap of EK vendor roots and intermediates (see
	// EKRootsFromConfigMap), watched and applied without a restart, in addition to EKRoots.
	EKRootsConfigMap string
	// AttestationRateLimit, AttestationRateBurst and AttestationRateSources are attest.RateLimit's Rate,
	// Burst and MaxSources: the attestation API's token bucket per source address.
	AttestationRateLimit   float64
	AttestationRateBurst   int
	AttestationRateSources int
	// AttestationEnvelopeTTL is attest.Config.EnvelopeTTL: how long a released envelope is accepted.
	AttestationEnvelopeTTL time.Duration
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
	fs.DurationVar(&o.ImageWriteTimeout, "image-write-timeout", time.Hour, "Time from the released instructions to the ramdisk's report that the image is written (or the disks cleaned) before the attempt counts as failed")
	fs.DurationVar(&o.SoftPowerOffTimeout, "soft-power-off-timeout", 3*time.Minute, "How long a soft power-off (Metal3's reboot annotations, mode soft) waits for the OS to shut down before the host is forced off")
	fs.IntVar(&o.MaxProvisionAttempts, "provision-attempts", 3, "PXE boots per image before the host stays in error")
	fs.DurationVar(&o.RetryInterval, "bmc-retry-interval", time.Minute, "First retry delay after a BMC error or failed boot (doubles per boot attempt)")
	fs.StringVar(&o.BootInterface, "boot-interface", "", "Interface of the boot network (enables DHCP/TFTP/HTTP/attestation)")
	fs.StringVar(&o.BootServerIP, "boot-server-ip", "", "This manager's IPv4 address on the boot network")
	fs.IntVar(&o.BootHTTPPort, "boot-http-port", 8080, "Boot HTTP port (iPXE scripts, artifacts, attestation)")
	fs.IntVar(&o.BootTFTPPort, "boot-tftp-port", 69, "TFTP port")
	fs.BoolVar(&o.BootProxyDHCP, "boot-proxy-dhcp", false, "Answer PXE clients only (proxyDHCP); another DHCP server leases addresses")
	fs.StringVar(&o.BootRouter, "boot-router", "", "IPv4 default gateway the DHCP server gives hosts on the boot network (empty: none, hosts reach only the boot network's subnet)")
	fs.StringSliceVar(&o.BootDNS, "boot-dns", nil, "IPv4 DNS servers the DHCP server gives hosts on the boot network (comma-separated; empty: none)")
	fs.StringVar(&o.BootArtifactsDir, "boot-artifacts-dir", "/var/lib/yonder/boot", "Directory of the kernels and initramfs images served to hosts")
	fs.StringVar(&o.LiveISOCacheDir, "live-iso-cache-dir", "/var/cache/yonder/live-iso", "Directory where the boot server keeps the live ISOs (spec.image format live-iso) it downloaded and verified, and serves to the hosts that SAN-boot them (needs room for every ISO in use)")
	fs.StringVar(&o.BootKernel, "boot-kernel", "vmlinuz", "Kernel a provisioning host boots (artifact name or URL)")
	fs.StringVar(&o.BootInitrd, "boot-initrd", "yonder-initrd.img", "Initramfs with yonder-agent a provisioning host boots")
	fs.StringVar(&o.BootCmdline, "boot-cmdline", "console=ttyS0", "Kernel command line of the provisioning boot (the server adds its URL and the ticket)")
	fs.StringSliceVar(&o.EKRoots, "ek-roots", nil, "PEM files of the TPM vendor root CAs that must sign every host's EK certificate (required with --boot-interface unless --insecure-accept-any-ek)")
	fs.StringSliceVar(&o.EKIntermediates, "ek-intermediates", nil, "PEM files of intermediate CAs offered when verifying EK certificates")
	fs.BoolVar(&o.InsecureAcceptAnyEK, "insecure-accept-any-ek", false, "INSECURE: accept TPMs without verifying their EK certificate (a software TPM can enrol in an open window); hosts show EKCertificatesVerified=False")
	fs.StringVar(&o.BootSigningKey, "boot-signing-key", "", "PEM PKCS#8 Ed25519 private key that signs released bootstrap data (the boot image's agent holds the public key and refuses anything else; required with --boot-interface unless --insecure-unsigned-boot-data)")
	fs.BoolVar(&o.InsecureUnsignedBootData, "insecure-unsigned-boot-data", false, "INSECURE: release bootstrap data unsigned (a boot image without the provider's public key then runs whatever a rogue server on the boot LAN sends it); hosts show BootDataSigned=False")
	fs.IntSliceVar(&o.AttestationPCRs, "attestation-pcrs", []int{0, 1, 2, 3, 4, 5, 6, 7}, "SHA-256 PCRs a host quotes; they must equal the values recorded when its TPM was enrolled")
	fs.Var(&configMapRefValue{p: &o.EKRootsConfigMap}, "ek-roots-configmap", "<namespace>/<name> of a ConfigMap of TPM vendor root CAs (keys *.pem, *.crt; keys starting with \"intermediate\" hold intermediate CAs), watched and applied without a restart, in addition to --ek-roots")
	o.AttestationRateLimit = attest.DefaultRateLimit
	fs.Var(&positiveFloatValue{p: &o.AttestationRateLimit}, "attestation-rate-limit", "Sustained attestation API requests per second of one source address (token bucket; over it the answer is 429 with Retry-After)")
	o.AttestationRateBurst = attest.DefaultRateBurst
	fs.Var(&intRangeValue{p: &o.AttestationRateBurst, min: 1, max: 1 << 20}, "attestation-rate-burst", "Attestation API requests one source address may send at once before the rate applies (one attestation is three requests); at least --attestation-rate-limit")
	o.AttestationRateSources = attest.DefaultRateMaxSources
	fs.Var(&intRangeValue{p: &o.AttestationRateSources, min: 1, max: maxRateSources}, "attestation-rate-sources", "Source addresses the attestation rate limit tracks at once (about 128 bytes each); beyond it the least recently seen is forgotten")
	o.AttestationEnvelopeTTL = defaultEnvelopeTTL
	fs.Var(&durationRangeValue{p: &o.AttestationEnvelopeTTL, min: minEnvelopeTTL, max: maxEnvelopeTTL}, "attestation-envelope-ttl", "How long the agent accepts released bootstrap data (1m-24h): hosts whose clock is further off than this refuse genuine data, a longer one lets a recorded envelope be replayed longer")
}

// Bounds of the attestation flags.
const (
	defaultEnvelopeTTL = 10 * time.Minute
	minEnvelopeTTL     = time.Minute
	maxEnvelopeTTL     = 24 * time.Hour
	maxRateSources     = 1 << 20 // about 128 MiB of buckets
)

// Validate checks what the flags' own parsing cannot: combinations. main.go calls it right after parsing,
// so a bad command line stops the manager before it connects anywhere.
func (o *Options) Validate() error {
	if float64(o.AttestationRateBurst) < o.AttestationRateLimit {
		return fmt.Errorf("--attestation-rate-burst=%d is below --attestation-rate-limit=%g: a source could never send one second's worth of requests at once",
			o.AttestationRateBurst, o.AttestationRateLimit)
	}
	if o.EKRootsConfigMap != "" {
		if _, err := ParseConfigMapRef(o.EKRootsConfigMap); err != nil {
			return fmt.Errorf("--ek-roots-configmap: %w", err)
		}
	}
	if _, _, err := o.dhcpOptions(); err != nil {
		return err
	}
	return nil
}

// dhcpOptions parses --boot-router and --boot-dns. Empty values mean none: clusterctl turns an unset
// variable into an empty argument.
func (o *Options) dhcpOptions() (router netip.Addr, dns []netip.Addr, err error) {
	if o.BootRouter != "" {
		if router, err = netip.ParseAddr(o.BootRouter); err != nil || !router.Is4() {
			return netip.Addr{}, nil, fmt.Errorf("--boot-router %q is not an IPv4 address", o.BootRouter)
		}
	}
	for _, s := range o.BootDNS {
		if s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return netip.Addr{}, nil, fmt.Errorf("--boot-dns: %q is not an IPv4 address", s)
		}
		dns = append(dns, a)
	}
	return router, dns, nil
}

// attestation is the attestation policy of the options: the EK roots read from their files into an
// EKTrust, which the ConfigMap watch (when configured) adds its certificates to.
func (o Options) attestation() (attest.Config, error) {
	if err := o.Validate(); err != nil {
		return attest.Config{}, err
	}
	cfg := attest.Config{PCRs: o.AttestationPCRs, InsecureAcceptAnyEK: o.InsecureAcceptAnyEK, EKTrust: attest.NewEKTrust(),
		EnvelopeTTL: o.AttestationEnvelopeTTL,
		RateLimit:   attest.RateLimit{Rate: o.AttestationRateLimit, Burst: o.AttestationRateBurst, MaxSources: o.AttestationRateSources}}
	if len(o.EKRoots) == 0 && o.EKRootsConfigMap == "" && !o.InsecureAcceptAnyEK {
		return cfg, errNoEKRoots
	}
	var files attest.EKCerts
	var err error
	if len(o.EKRoots) > 0 {
		if files.Roots, err = attest.LoadCertificates(o.EKRoots...); err != nil {
			return cfg, fmt.Errorf("--ek-roots: %w", err)
		}
	}
	if len(o.EKIntermediates) > 0 {
		if files.Intermediates, err = attest.LoadCertificates(o.EKIntermediates...); err != nil {
			return cfg, fmt.Errorf("--ek-intermediates: %w", err)
		}
	}
	cfg.EKTrust.Set("--ek-roots", files)
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
		ProvisionTimeout: o.ProvisionTimeout, ImageWriteTimeout: o.ImageWriteTimeout, SoftPowerOffTimeout: o.SoftPowerOffTimeout, MaxProvisionAttempts: o.MaxProvisionAttempts, RetryInterval: o.RetryInterval,
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
		r.InsecureAcceptAnyEK = att.InsecureAcceptAnyEK
		r.UnsignedBootData = att.SigningKey == nil
		if o.EKRootsConfigMap != "" {
			key, _ := ParseConfigMapRef(o.EKRootsConfigMap) // checked by attestation()
			if r.EKRoots, err = WatchEKRoots(mgr, key, att.EKTrust, controller.Options{}); err != nil {
				return err
			}
		}
		isos, err := liveiso.New(o.LiveISOCacheDir, nil, ctrl.Log.WithName("liveiso"))
		if err != nil {
			return fmt.Errorf("--live-iso-cache-dir: %w", err)
		}
		r.LiveISOs = isos
		router, dns, err := o.dhcpOptions()
		if err != nil {
			return err
		}
		cfg := netboot.Config{Interface: o.BootInterface, ServerIP: ip, HTTPPort: o.BootHTTPPort, TFTPPort: o.BootTFTPPort,
			ArtifactsDir: o.BootArtifactsDir, DHCP: dhcp.Config{ProxyDHCP: o.BootProxyDHCP, Router: router, DNS: dns}, Attestation: att, LiveISOs: isos.Handler()}
		store := AttestStore{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorderFor("yonder-metal-manager")} //nolint:staticcheck // core/v1 Events, as the host controller records them.
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
