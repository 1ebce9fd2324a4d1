package attest_test

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"os"
	"testing"

	"github.com/google/go-tpm/tpm2"
	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
)

// startTPM starts a real swtpm in a unique short directory (unix socket paths are limited to 108 bytes).
func startTPM(t *testing.T) *swtpm.TPM {
	t.Helper()
	dir, err := os.MkdirTemp("", "yswtpm-")
	if err != nil {
		t.Fatal(err)
	}
	tpm, err := swtpm.Start(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tpm.Stop(); _ = os.RemoveAll(dir) })
	return tpm
}

func TestKeysCertificateAndQuoteOnSwtpm(t *testing.T) {
	g := NewWithT(t)
	sw := startTPM(t)
	tpm, err := attest.OpenTPM(sw.Socket)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = tpm.Close() }()

	keys, err := attest.LoadKeys(tpm)
	g.Expect(err).NotTo(HaveOccurred())

	// swtpm_setup --create-ek-cert wrote a certificate for exactly the EK the TCG template derives.
	g.Expect(keys.EKCertificate).NotTo(BeEmpty())
	cert, err := x509.ParseCertificate(keys.EKCertificate)
	g.Expect(err).NotTo(HaveOccurred())
	ekPub, err := tpm2.Pub(keys.EK.Public)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.PublicKey.(*rsa.PublicKey).Equal(ekPub)).To(BeTrue())

	// Deterministic: a second load derives the same keys (the AK name is what the server pins a session to).
	// (swtpm has three object slots and no resource manager: flush before loading again.)
	akName := keys.AK.Name.Buffer
	g.Expect(keys.Close()).To(Succeed())
	keys, err = attest.LoadKeys(tpm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys.AK.Name.Buffer).To(Equal(akName))

	defer func() { _ = keys.Close() }()
	quote, sig, values, err := keys.Quote([]byte("nonce-0123456789"), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(quote).NotTo(BeEmpty())
	g.Expect(sig).NotTo(BeEmpty())
	g.Expect(values).To(HaveLen(11))
	g.Expect(values[0]).To(HaveLen(32))
}

func TestParseCmdline(t *testing.T) {
	g := NewWithT(t)
	s, tk := attest.ParseCmdline("console=ttyS0 yonder.server=http://10.0.0.1:8080 yonder.ticket=abc quiet")
	g.Expect(s).To(Equal("http://10.0.0.1:8080"))
	g.Expect(tk).To(Equal("abc"))
}
