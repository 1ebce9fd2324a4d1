package attest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	. "github.com/onsi/gomega"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

// selfSignedCA is a CA that signed no TPM's EK: a vendor root the site trusts for other hosts.
func selfSignedCA(t *testing.T, name string) (*x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// swtpmCerts are swtpm-localca's root and intermediate (the site's TPM vendor), as certificates.
func swtpmCerts(t *testing.T) attest.EKCerts {
	t.Helper()
	roots, err := attest.LoadCertificates(filepath.Join(swtpm.LocalCADir, "swtpm-localca-rootca-cert.pem"))
	if err != nil {
		t.Fatalf("failed to read swtpm-localca's root (start an swtpm first): %v", err)
	}
	intermediates, err := attest.LoadCertificates(filepath.Join(swtpm.LocalCADir, "issuercert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return attest.EKCerts{Roots: roots, Intermediates: intermediates}
}

func fingerprint(t *testing.T, tpm *realTPM) string {
	t.Helper()
	fp, err := attest.EKFingerprint(tpm2.Marshal(tpm.keys.EK.Public))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// Issue 17: bundles are read strictly. AppendCertsFromPEM would skip a truncated certificate and load
// the rest, leaving a vendor's root silently out; a private key pasted by mistake is refused without
// being quoted.
func TestParseCertificates(t *testing.T) {
	_, ca := selfSignedCA(t, "vendor root")
	_, other := selfSignedCA(t, "other vendor root")
	lines := strings.Split(strings.TrimSpace(string(ca)), "\n")
	truncated := strings.Join(lines[:len(lines)-2], "\n") + "\n" + lines[len(lines)-1] + "\n" // a base64 line lost
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("secret-key-material")})
	for _, tc := range []struct {
		name    string
		data    string
		want    int
		wantErr string
	}{
		{name: "one", data: string(ca), want: 1},
		{name: "bundle with openssl's text around the blocks", data: "subject=CN=vendor root\n" + string(ca) + "\n# next\n" + string(other), want: 2},
		{name: "empty", data: "", wantErr: "it holds no PEM certificate"},
		{name: "not PEM", data: "hello", wantErr: "it holds no PEM certificate"},
		{name: "private key", data: string(ca) + string(key), wantErr: `PEM block 2 is a "PRIVATE KEY" block, not a CERTIFICATE`},
		{name: "truncated block between good ones", data: string(ca) + truncated + string(other), wantErr: "PEM block 2 is not a valid certificate"},
		{name: "no END line", data: string(ca) + "-----BEGIN CERTIFICATE-----\nMIIB\n", wantErr: "it has 2 PEM BEGIN lines but only 1 certificates decode"},
		{name: "garbage DER", data: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})), wantErr: "PEM block 1 is not a valid certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			certs, err := attest.ParseCertificates([]byte(tc.data))
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				g.Expect(err.Error()).NotTo(ContainSubstring("secret"), "the input is never quoted")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(certs).To(HaveLen(tc.want))
		})
	}
}

// Issue 17: the roots of a running service are replaced through its EKTrust (what the ConfigMap watch
// does): before any root is loaded a host is refused as EKRootsNotConfigured (503, not evidence against
// it), after the vendor's root arrives the same service attests it, and a replacement set without that
// root refuses it again — no restart in between. Sources add up: a root from the files stays trusted
// whatever the ConfigMap holds.
func TestEKTrustReloadsWhileTheServiceRuns(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	vendor := swtpmCerts(t)
	unrelated, _ := selfSignedCA(t, "unrelated vendor")
	trust := attest.NewEKTrust()
	e := newEnv(t, attest.Config{EKTrust: trust})

	_, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKRootsNotConfigured))
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(err.(*wire.RefusedError).Message).To(ContainSubstring("--ek-roots-configmap"))
	g.Expect(e.store.Results(host)).To(ConsistOf(HaveField("Fatal", false)), "a missing root is the manager's, not the host's, failure")

	trust.Set("configmap", vendor)
	g.Expect(trust.RootCount()).To(Equal(1))
	_, err = e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred(), "the root loaded at run time is used")
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonReleased))

	trust.Set("configmap", attest.EKCerts{Roots: []*x509.Certificate{unrelated}})
	_, err = e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKCertificateUntrusted), "the vendor's root was removed")

	trust.Set("--ek-roots", vendor)
	g.Expect(trust.Sources()).To(Equal([]string{"--ek-roots", "configmap"}))
	_, err = e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred(), "the union of the sources")

	trust.Set("--ek-roots", attest.EKCerts{})
	trust.Set("configmap", attest.EKCerts{})
	g.Expect(trust.Sources()).To(BeEmpty())
	_, err = e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKRootsNotConfigured))
}

// Issue 17: an EK the operator registered out of band (its fingerprint on the host) is trusted by its
// hash. A TPM that presents exactly that EK without a certificate is accepted although vendor roots are
// configured, and even before any is loaded; its outcome says how it was trusted. Another TPM without a
// certificate is refused (EKMismatch on a registered host, EKCertificateMissing on an unregistered one).
// A registered EK whose certificate does not chain is still refused: every certificate a TPM presents
// must chain, so a missing vendor root or a swapped certificate is seen, not papered over by the pin.
func TestRegisteredEKWithoutCertificate(t *testing.T) {
	ctx := context.Background()
	bare := startTPMWith(t, swtpm.StartWithoutEKCertificate)
	vendor := swtpmCerts(t)
	withRoots := func() attest.Config {
		trust := attest.NewEKTrust()
		trust.Set("--ek-roots", vendor)
		return attest.Config{EKTrust: trust}
	}

	t.Run("accepted by its fingerprint with roots configured", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, withRoots())
		e.store.RegisterEK(host, strings.ToUpper(fingerprint(t, bare)))
		data, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(userData(g, data)).To(ContainSubstring("join token"))
		results := e.store.Results(host)
		g.Expect(results).To(HaveLen(2))
		g.Expect(results[0].Reason).To(Equal(attest.ReasonEnrolled), "the operator vouched for the EK: not an unverified one")
		g.Expect(results[0].Message).To(ContainSubstring("EK registered out of band"))
		g.Expect(results[1].Message).To(ContainSubstring("EK registered out of band"))
		_, err = e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.store.Results(host)[2].Reason).To(Equal(attest.ReasonAttested), "every later boot")
	})

	t.Run("accepted before any root is loaded", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, attest.Config{EKTrust: attest.NewEKTrust()})
		e.store.RegisterEK(host, fingerprint(t, bare))
		_, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("another TPM without certificate on a registered host", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, withRoots())
		other := startTPMWith(t, swtpm.StartWithoutEKCertificate)
		e.store.RegisterEK(host, fingerprint(t, other))
		_, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKMismatch))
		g.Expect(err.(*wire.RefusedError).Message).To(ContainSubstring(fingerprint(t, bare)))
		g.Expect(e.store.Results(host)).To(ConsistOf(HaveField("Fatal", true)))
	})

	t.Run("unregistered TPM without certificate", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, withRoots())
		_, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKCertificateMissing))
		g.Expect(err.(*wire.RefusedError).Message).To(ContainSubstring("Register its EK out of band"))
	})

	t.Run("registered EK whose certificate does not chain", func(t *testing.T) {
		g := NewWithT(t)
		certified := startTPM(t)
		g.Expect(certified.keys.EKCertificate).NotTo(BeEmpty())
		unrelated, _ := selfSignedCA(t, "unrelated vendor")
		trust := attest.NewEKTrust()
		trust.Set("--ek-roots", attest.EKCerts{Roots: []*x509.Certificate{unrelated}})
		e := newEnv(t, attest.Config{EKTrust: trust})
		e.store.RegisterEK(host, fingerprint(t, certified))
		_, err := e.client.Attest(ctx, issue(t, e), certified.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKCertificateUntrusted))
		enr, err := e.store.Enrolment(ctx, host)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(enr).To(BeNil())
	})
}
