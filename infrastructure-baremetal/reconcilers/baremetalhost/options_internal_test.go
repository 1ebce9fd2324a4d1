package baremetalhost

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
