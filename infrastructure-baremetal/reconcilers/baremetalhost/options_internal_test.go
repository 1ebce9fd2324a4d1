package baremetalhost

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// The boot services fail closed on both halves of their trust: without EK roots (tested in the envtest
// suite) and without a key to sign released bootstrap data, unless the operator says, by flag, that they
// accept the risk.
func TestBootServicesNeedASigningKeyOrTheInsecureFlag(t *testing.T) {
	key := filepath.Join(t.TempDir(), "boot-signing-key.pem")
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string
		signed  bool
	}{
		{name: "neither key nor flag", o: Options{InsecureAcceptAnyEK: true},
			wantErr: "--boot-interface needs --boot-signing-key (an Ed25519 key whose public half is in the boot image) or, knowingly, --insecure-unsigned-boot-data"},
		{name: "key", o: Options{InsecureAcceptAnyEK: true, BootSigningKey: key}, signed: true},
		{name: "key and flag: the key wins", o: Options{InsecureAcceptAnyEK: true, BootSigningKey: key, InsecureUnsignedBootData: true}, signed: true},
		{name: "flag", o: Options{InsecureAcceptAnyEK: true, InsecureUnsignedBootData: true}},
		{name: "unreadable key", o: Options{InsecureAcceptAnyEK: true, BootSigningKey: key + ".missing", InsecureUnsignedBootData: true},
			wantErr: "--boot-signing-key: failed to read the signing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := tc.o.attestation()
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.SigningKey != nil).To(Equal(tc.signed))
		})
	}
}

// Hosts say what their boot services check: EK certificates against vendor roots, and the signature on
// the data they release; a manager without boot services says nothing of either.
func TestHostsShowWhetherTheirBootServicesVerifyAndSign(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		netboot              bool
		anyEK, unsigned      bool
		wantEK, wantSigned   metav1.ConditionStatus
		wantEKReason, reason string
	}{
		{name: "no boot services", wantEK: "", wantSigned: ""},
		{name: "verified and signed", netboot: true, wantEK: metav1.ConditionTrue, wantEKReason: BareMetalHostEKRootsConfiguredReason,
			wantSigned: metav1.ConditionTrue, reason: BareMetalHostSigningKeyConfiguredReason},
		{name: "any EK, unsigned", netboot: true, anyEK: true, unsigned: true, wantEK: metav1.ConditionFalse, wantEKReason: BareMetalHostInsecureAcceptAnyEKReason,
			wantSigned: metav1.ConditionFalse, reason: BareMetalHostInsecureUnsignedBootDataReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &Reconciler{InsecureAcceptAnyEK: tc.anyEK, UnsignedBootData: tc.unsigned}
			if tc.netboot {
				r.NetBoot = inventory.NewStatic()
			}
			h := &metal3v1.BareMetalHost{}
			// A host that had both conditions from an earlier manager loses them when boot services are off.
			(&Reconciler{NetBoot: inventory.NewStatic()}).setEKTrust(h)
			r.setEKTrust(h)
			for cond, want := range map[string][2]string{
				BareMetalHostEKTrustCondition:        {string(tc.wantEK), tc.wantEKReason},
				BareMetalHostBootDataSignedCondition: {string(tc.wantSigned), tc.reason},
			} {
				c := meta.FindStatusCondition(h.Status.Conditions, cond)
				if want[0] == "" {
					g.Expect(c).To(BeNil(), cond)
					continue
				}
				g.Expect(c).NotTo(BeNil(), cond)
				g.Expect(string(c.Status)).To(Equal(want[0]), cond)
				g.Expect(c.Reason).To(Equal(want[1]), cond)
			}
		})
	}
}

// parseFlags parses args with the options' flags as the manager does (parse, then Validate).
func parseFlags(args ...string) (*Options, error) {
	fs := pflag.NewFlagSet("yonder-metal-manager", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &Options{}
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.Validate()
}

// Issue 17: the attestation rate limit and envelope lifetime are flags whose defaults are the service's
// own, and a setting that means nothing (no rate, a burst below the rate, an envelope that expires before
// a host can open it or lives for days) stops the manager at parse time with the flag's name.
func TestAttestationFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(Gomega, *Options)
	}{
		{name: "defaults are the service's", check: func(g Gomega, o *Options) {
			g.Expect(o.AttestationRateLimit).To(Equal(float64(attest.DefaultRateLimit)))
			g.Expect(o.AttestationRateBurst).To(Equal(attest.DefaultRateBurst))
			g.Expect(o.AttestationRateSources).To(Equal(attest.DefaultRateMaxSources))
			g.Expect(o.AttestationEnvelopeTTL).To(Equal(10 * time.Minute))
			g.Expect(o.EKRootsConfigMap).To(BeEmpty())
		}},
		{name: "set", args: []string{"--attestation-rate-limit=0.5", "--attestation-rate-burst=3", "--attestation-rate-sources=100",
			"--attestation-envelope-ttl=2m", "--ek-roots-configmap=yonder-system/ek-roots"}, check: func(g Gomega, o *Options) {
			g.Expect(o.AttestationRateLimit).To(Equal(0.5))
			g.Expect(o.AttestationRateBurst).To(Equal(3))
			g.Expect(o.AttestationRateSources).To(Equal(100))
			g.Expect(o.AttestationEnvelopeTTL).To(Equal(2 * time.Minute))
			g.Expect(o.EKRootsConfigMap).To(Equal("yonder-system/ek-roots"))
		}},
		{name: "bounds are allowed", args: []string{"--attestation-envelope-ttl=24h", "--attestation-rate-burst=1", "--attestation-rate-limit=1"}},
		{name: "zero rate", args: []string{"--attestation-rate-limit=0"},
			wantErr: `invalid argument "0" for "--attestation-rate-limit" flag: 0 must be a number above 0`},
		{name: "negative rate", args: []string{"--attestation-rate-limit=-1"}, wantErr: "-1 must be a number above 0"},
		{name: "rate not a number", args: []string{"--attestation-rate-limit=fast"}, wantErr: `"fast" is not a number`},
		{name: "infinite rate", args: []string{"--attestation-rate-limit=+Inf"}, wantErr: "must be a number above 0"},
		{name: "zero burst", args: []string{"--attestation-rate-burst=0"}, wantErr: `"--attestation-rate-burst" flag: 0 is outside 1-1048576`},
		{name: "burst below rate", args: []string{"--attestation-rate-limit=50", "--attestation-rate-burst=30"},
			wantErr: "--attestation-rate-burst=30 is below --attestation-rate-limit=50"},
		{name: "no sources", args: []string{"--attestation-rate-sources=0"}, wantErr: `"--attestation-rate-sources" flag: 0 is outside 1-1048576`},
		{name: "too many sources", args: []string{"--attestation-rate-sources=2000000"}, wantErr: "2000000 is outside 1-1048576"},
		{name: "envelope TTL too short", args: []string{"--attestation-envelope-ttl=30s"}, wantErr: `"--attestation-envelope-ttl" flag: 30s is outside 1m0s-24h0m0s`},
		{name: "envelope TTL too long", args: []string{"--attestation-envelope-ttl=48h"}, wantErr: "48h0m0s is outside 1m0s-24h0m0s"},
		{name: "envelope TTL not a duration", args: []string{"--attestation-envelope-ttl=10"}, wantErr: `"10" is not a duration`},
		{name: "ConfigMap without namespace", args: []string{"--ek-roots-configmap=ek-roots"}, wantErr: `"ek-roots" is not <namespace>/<name>`},
		{name: "ConfigMap with a bad name", args: []string{"--ek-roots-configmap=yonder-system/EK_roots"}, wantErr: `name "EK_roots"`},
		{name: "ConfigMap with a bad namespace", args: []string{"--ek-roots-configmap=a.b/ek-roots"}, wantErr: `namespace "a.b"`},
		{name: "ConfigMap path", args: []string{"--ek-roots-configmap=a/b/c"}, wantErr: `"a/b/c" is not <namespace>/<name>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := parseFlags(tc.args...)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.check != nil {
				tc.check(g, o)
			}
		})
	}
}

// The flags reach the attestation service's configuration; a ConfigMap alone satisfies the boot
// services' need for EK roots (its roots may arrive later), nothing at all still does not.
func TestAttestationConfigFromFlags(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags("--attestation-rate-limit=2", "--attestation-rate-burst=4", "--attestation-rate-sources=64",
		"--attestation-envelope-ttl=3m", "--ek-roots-configmap=yonder-system/ek-roots", "--insecure-unsigned-boot-data")
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := o.attestation()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.RateLimit).To(Equal(attest.RateLimit{Rate: 2, Burst: 4, MaxSources: 64}))
	g.Expect(cfg.EnvelopeTTL).To(Equal(3 * time.Minute))
	g.Expect(cfg.EKTrust).NotTo(BeNil())
	g.Expect(cfg.EKTrust.RootCount()).To(BeZero(), "nothing loaded before the ConfigMap is read")
	g.Expect(cfg.InsecureAcceptAnyEK).To(BeFalse())

	o, err = parseFlags("--insecure-unsigned-boot-data")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = o.attestation()
	g.Expect(err).To(MatchError(ContainSubstring("--boot-interface needs --ek-roots or --ek-roots-configmap")))
}

// Issue 17: with an EK roots ConfigMap, hosts say whether a root is loaded: before the ConfigMap was read
// or while it holds none, EKCertificatesVerified is False (the host cannot attest) and names the
// ConfigMap; --insecure-accept-any-ek still wins, as it decides what is accepted.
func TestHostsShowWhetherEKRootsAreLoaded(t *testing.T) {
	key := types.NamespacedName{Namespace: "yonder-system", Name: "ek-roots"}
	root := attest.EKCerts{Roots: []*x509.Certificate{{Raw: []byte("root")}}}
	for _, tc := range []struct {
		name         string
		anyEK        bool
		set          *attest.EKCerts
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantMessages []string
	}{
		{name: "not read yet", wantStatus: metav1.ConditionFalse, wantReason: BareMetalHostEKRootsNotLoadedReason,
			wantMessages: []string{"ConfigMap yonder-system/ek-roots was not read yet", "this host cannot attest", EKFingerprintAnnotation}},
		{name: "loaded", set: &root, wantStatus: metav1.ConditionTrue, wantReason: BareMetalHostEKRootsConfiguredReason,
			wantMessages: []string{"(1 loaded)"}},
		{name: "insecure wins", anyEK: true, wantStatus: metav1.ConditionFalse, wantReason: BareMetalHostInsecureAcceptAnyEKReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			w := &EKRootsWatch{ConfigMap: key, Trust: attest.NewEKTrust()}
			if tc.set != nil {
				w.Trust.Set(w.source(), *tc.set)
				w.setState(true, "")
			}
			r := &Reconciler{NetBoot: inventory.NewStatic(), EKRoots: w, InsecureAcceptAnyEK: tc.anyEK}
			h := &metal3v1.BareMetalHost{}
			r.setEKTrust(h)
			c := meta.FindStatusCondition(h.Status.Conditions, BareMetalHostEKTrustCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			for _, m := range tc.wantMessages {
				g.Expect(c.Message).To(ContainSubstring(m))
			}
		})
	}
}

// The DHCP server's gateway and DNS servers are flags: unset (clusterctl's empty arguments) they give
// none, set they parse to IPv4 addresses, and anything else stops the manager at parse time with the
// flag's name.
func TestBootDHCPFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		wantErr    string
		wantRouter string
		wantDNS    []netip.Addr
	}{
		{name: "unset", args: nil},
		{name: "empty, as clusterctl passes unset variables", args: []string{"--boot-router", "", "--boot-dns", ""}},
		{name: "set", args: []string{"--boot-router=10.0.0.1", "--boot-dns=10.0.0.53,10.0.1.53"}, wantRouter: "10.0.0.1",
			wantDNS: []netip.Addr{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("10.0.1.53")}},
		{name: "router not an address", args: []string{"--boot-router=gateway.example"}, wantErr: `--boot-router "gateway.example" is not an IPv4 address`},
		{name: "router IPv6", args: []string{"--boot-router=fd00::1"}, wantErr: `--boot-router "fd00::1" is not an IPv4 address`},
		{name: "DNS not an address", args: []string{"--boot-dns=10.0.0.53,dns"}, wantErr: `--boot-dns: "dns" is not an IPv4 address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := parseFlags(tc.args...)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			router, dns, err := o.dhcpOptions()
			g.Expect(err).NotTo(HaveOccurred())
			if tc.wantRouter == "" {
				g.Expect(router.IsValid()).To(BeFalse(), "no gateway unless one is set")
			} else {
				g.Expect(router).To(Equal(netip.MustParseAddr(tc.wantRouter)))
			}
			g.Expect(dns).To(Equal(tc.wantDNS))
		})
	}
}
