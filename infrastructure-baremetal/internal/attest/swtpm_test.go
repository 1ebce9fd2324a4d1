package attest_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

const host = "metal/host-0"

// loopback is where the tests' agents connect from: the address their tickets are bound to.
var loopback = netip.MustParseAddr("127.0.0.1")

// issue is what the boot server does for a script fetched from loopback, the host's DHCP lease (a site
// where Yonder's DHCP server leases the addresses): the session is the host's own.
func issue(t testing.TB, e *env) string {
	t.Helper()
	tk, err := e.svc.IssueTicket(host, loopback, true)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// realTPM is a running swtpm, one held connection to it and the keys the agent derives.
type realTPM struct {
	conn transport.TPMCloser
	keys *wire.Keys
}

func startTPM(t *testing.T) *realTPM {
	t.Helper()
	return startTPMWith(t, swtpm.Start)
}

// startTPMWith starts a TPM manufactured by start (swtpm.Start or swtpm.StartWithoutEKCertificate).
func startTPMWith(t *testing.T, start func(context.Context, string) (*swtpm.TPM, error)) *realTPM {
	t.Helper()
	dir, err := os.MkdirTemp("", "yswtpm-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	sw, err := start(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := wire.OpenTPM(sw.Socket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := wire.LoadKeys(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close(); _ = conn.Close(); _ = sw.Stop(); _ = os.RemoveAll(dir) })
	return &realTPM{conn: conn, keys: keys}
}

// swtpmRoots trusts the local CA that swtpm_setup --create-ek-cert signs EK certificates with, as a site
// trusts its TPM vendors' roots.
func swtpmRoots(t *testing.T) (roots, intermediates *x509.CertPool) {
	t.Helper()
	load := func(name string) *x509.CertPool {
		b, err := os.ReadFile(filepath.Join(swtpm.LocalCADir, name))
		if err != nil {
			t.Fatalf("failed to read swtpm-localca certificate (start an swtpm first): %v", err)
		}
		p := x509.NewCertPool()
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		p.AddCert(c)
		return p
	}
	return load("swtpm-localca-rootca-cert.pem"), load("issuercert.pem")
}

type env struct {
	svc     *attest.Service
	store   *attest.MemoryStore
	client  *wire.Client
	metrics *attest.Metrics
	url     string
}

// strangerClient talks to the service from 127.0.0.2, another address than the host's 127.0.0.1: someone
// else on the boot LAN who overheard the host's plain-HTTP traffic.
func (e *env) strangerClient() *wire.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	return &wire.Client{Server: e.url, HTTP: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}}
}

func newEnv(t *testing.T, cfg attest.Config) *env {
	t.Helper()
	store := attest.NewMemoryStore()
	store.SetBootstrapData(host, []byte("#cloud-config\nwrite_files: [join token]\n"))
	metrics := attest.NewMetrics(prometheus.NewRegistry())
	svc := attest.New(cfg, store, testr.New(t), metrics)
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &env{svc: svc, store: store, client: &wire.Client{Server: srv.URL, HTTP: srv.Client()}, metrics: metrics, url: srv.URL}
}

// userData is the bootstrap data of released instructions.
func userData(g Gomega, plain []byte) string {
	in, err := wire.DecodeInstructions(plain)
	g.Expect(err).NotTo(HaveOccurred())
	return string(in.UserData)
}

func refusal(err error) string {
	var re *wire.RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func extendPCR(t *testing.T, tpm transport.TPM, pcr int) {
	t.Helper()
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: make([]byte, 32)}}},
	}.Execute(tpm)
	if err != nil {
		t.Fatalf("failed to extend PCR %d: %v", pcr, err)
	}
}

// The instructions to write an image carry a report token; the report with it is recorded once, and no
// other report (a guessed token, another host's, a replay) is.
func TestReportOfReleasedInstructions(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
	e.store.SetInstructions(host, wire.Instructions{Action: wire.ActionWriteImage, UserData: []byte("#cloud-config\n"),
		Image: &metal3v1.Image{URL: "http://images.example/node.raw", Checksum: "0a", ChecksumType: metal3v1.SHA256}})

	report := wire.Report{Host: host, Token: "before-any-release", Action: wire.ActionWriteImage, Success: true, Device: "/dev/vda", Bytes: 512}
	g.Expect(refusal(e.client.Report(ctx, report))).To(Equal(wire.ReasonUnknownReportToken), "no token was released yet")

	plain, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(plain)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionWriteImage))
	g.Expect(in.Image.URL).To(Equal("http://images.example/node.raw"))
	g.Expect(in.Host).To(Equal(host))
	g.Expect(in.ReportToken).NotTo(BeEmpty())

	guessed := report
	guessed.Token = "guessed"
	g.Expect(refusal(e.strangerClient().Report(ctx, guessed))).To(Equal(wire.ReasonUnknownReportToken))
	malformed := report
	malformed.Token, malformed.Action = in.ReportToken, "format-everything"
	g.Expect(refusal(e.client.Report(ctx, malformed))).To(Equal(wire.ReasonMalformedRequest))
	g.Expect(e.store.Reports(host)).To(BeEmpty(), "refused reports are not recorded")

	report.Token = in.ReportToken
	g.Expect(e.client.Report(ctx, report)).To(Succeed())
	g.Expect(e.store.Reports(host)).To(ConsistOf(HaveField("Device", "/dev/vda")))
	g.Expect(e.store.Reports(host)[0].Token).To(BeEmpty(), "the token is not kept")
	g.Expect(refusal(e.client.Report(ctx, report))).To(Equal(wire.ReasonUnknownReportToken), "a token reports once")
	g.Expect(e.store.Results(host)).NotTo(ContainElement(HaveField("Reason", wire.ReasonUnknownReportToken)), "a stranger's report never lands on the host's condition")
}

// The diskless method's run-node instructions carry a report token as write-image's do; the ramdisk's
// report that the Node joined (or failed to) is recorded with it.
func TestReportOfRunNode(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
	e.store.SetInstructions(host, wire.Instructions{Action: wire.ActionRunNode, UserData: []byte("#cloud-config\n"),
		MetaData: []byte(`{"providerid":"yonder-metal://ns/h"}`)})

	plain, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(plain)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionRunNode))
	g.Expect(in.ReportToken).NotTo(BeEmpty())

	report := wire.Report{Host: host, Token: in.ReportToken, Action: wire.ActionRunNode, Success: false, Message: "the kubelet did not register the Node"}
	g.Expect(e.client.Report(ctx, report)).To(Succeed())
	g.Expect(e.store.Reports(host)).To(ConsistOf(And(HaveField("Action", wire.ActionRunNode), HaveField("Message", "the kubelet did not register the Node"))))
}

func TestAttestationWithSwtpm(t *testing.T) {
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{PCRs: []int{0, 1, 2, 3, 4, 5, 6, 7, 14}, EKRoots: roots, EKIntermediates: intermediates})

	t.Run("first boot enrols the TPM and releases the data exactly once", func(t *testing.T) { firstBootEnrols(ctx, t, e, tpmA) })

	t.Run("a later boot of the same TPM attests against the enrolment", func(t *testing.T) {
		g := NewWithT(t)
		data, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(userData(g, data)).To(ContainSubstring("join token"))
		g.Expect(testutil.ToFloat64(e.metrics.Results.WithLabelValues(attest.ReasonAttested))).To(Equal(1.0))
	})

	t.Run("replayed nonce", func(t *testing.T) { replayedNonceRefused(ctx, t, e, tpmA) })

	t.Run("different TPM", func(t *testing.T) {
		g := NewWithT(t)
		tpmB := startTPM(t)
		_, err := e.client.Attest(ctx, issue(t, e), tpmB.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKMismatch))
		g.Expect(e.store.LastReason(host)).To(Equal(wire.ReasonEKMismatch))
		g.Expect(e.store.Results(host)[len(e.store.Results(host))-1].Fatal).To(BeTrue(), "a different TPM is a real attestation failure")

		// An AK from another TPM cannot answer a challenge bound to the enrolled EK either.
		ch, err := e.client.Start(ctx, issue(t, e), tpmA.keys)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = tpmB.keys.Activate(ch.CredentialBlob, ch.EncryptedSecret)
		g.Expect(err).To(HaveOccurred())
	})

	t.Run("changed PCR", func(t *testing.T) {
		g := NewWithT(t)
		extendPCR(t, tpmA.conn, 7) // e.g. Secure Boot state changed
		_, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonPCRMismatch))
		g.Expect(e.store.Results(host)[len(e.store.Results(host))-1].Message).To(ContainSubstring("[7]"))
	})

	t.Run("EK certificate from an untrusted CA", func(t *testing.T) {
		g := NewWithT(t)
		other := newEnv(t, attest.Config{EKRoots: x509.NewCertPool()})
		_, err := other.client.Attest(ctx, issue(t, other), tpmA.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKCertificateUntrusted))
	})
}

// firstBootEnrols attests a TPM that is not enrolled yet: it is enrolled, the data is released once, the ticket is spent.
func firstBootEnrols(ctx context.Context, t *testing.T, e *env, tpmA *realTPM) {
	t.Helper()
	g := NewWithT(t)
	ticket := issue(t, e)
	ch, err := e.client.Start(ctx, ticket, tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	ans, err := wire.Answer(tpmA.keys, ch)
	g.Expect(err).NotTo(HaveOccurred())
	token, err := e.client.Verify(ctx, ans)
	g.Expect(err).NotTo(HaveOccurred())
	enr, err := e.store.Enrolment(ctx, host)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enr).NotTo(BeNil())
	g.Expect(enr.EKPublic).To(Equal(tpm2.Marshal(tpmA.keys.EK.Public)))
	g.Expect(enr.EKCertificate).To(Equal(tpmA.keys.EKCertificate))
	g.Expect(enr.PCRs).To(HaveLen(9))

	envl, err := e.client.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(err).NotTo(HaveOccurred())
	data, err := tpmA.keys.Open(envl)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
	g.Expect(string(envl.Ciphertext)).NotTo(ContainSubstring("join token"))

	_, err = e.client.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(refusal(err)).To(Equal(wire.ReasonAlreadyReleased), "second fetch of the data")
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(410))

	_, err = e.client.Start(ctx, ticket, tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonUnknownTicket), "the boot ticket is single-use")
	reasons := []string{}
	for _, r := range e.store.Results(host) {
		reasons = append(reasons, r.Reason)
	}
	g.Expect(reasons).To(Equal([]string{attest.ReasonEnrolled, attest.ReasonReleased, wire.ReasonAlreadyReleased}))
}

// replayedNonceRefused replays a recorded quote in a new session and an answer twice: both are refused.
func replayedNonceRefused(ctx context.Context, t *testing.T, e *env, tpmA *realTPM) {
	t.Helper()
	g := NewWithT(t)
	ticket := issue(t, e)
	ch1, err := e.client.Start(ctx, ticket, tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	old, err := wire.Answer(tpmA.keys, ch1)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.client.Verify(ctx, old)
	g.Expect(err).NotTo(HaveOccurred())

	// An attacker who recorded that exchange replays its quote in a new session (with a new ticket).
	ch2, err := e.client.Start(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	fresh, err := wire.Answer(tpmA.keys, ch2)
	g.Expect(err).NotTo(HaveOccurred())
	replay := *old
	replay.Session, replay.Secret = ch2.Session, fresh.Secret
	_, err = e.client.Verify(ctx, &replay)
	g.Expect(refusal(err)).To(Equal(wire.ReasonNonceReplayed))
	g.Expect(e.store.LastReason(host)).To(Equal(wire.ReasonNonceReplayed))

	// The same answer submitted twice: the session is gone after its first answer.
	_, err = e.client.Verify(ctx, old)
	g.Expect(refusal(err)).To(Equal(wire.ReasonUnknownSession))
}

// TestOneTicketOpensOneSession: two TPMs start sessions with the same ticket before the host is enrolled
// (a stranger who learnt a ticket, racing the host): the second is refused, and the first still enrols.
func TestOneTicketOpensOneSession(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA, tpmB := startTPM(t), startTPM(t)
	e := newEnv(t, attest.Config{InsecureAcceptAnyEK: true})
	ticket := issue(t, e)
	chA, err := e.client.Start(ctx, ticket, tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.client.Start(ctx, ticket, tpmB.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonUnknownTicket))
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(403))
	ansA, err := wire.Answer(tpmA.keys, chA)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.client.Verify(ctx, ansA)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonEnrolledUnverifiedEK), "without roots the EK was taken on trust, and the host says so")
}

// TestTicketsBoundToTheFetchingAddress: a ticket issued to another address (a script fetched by the host)
// opens no session for whoever else presents it; a refetch leaves earlier tickets valid; a flood of
// fetches from one address is refused without using up the budget of another; nothing of it is recorded
// on the host.
func TestTicketsBoundToTheFetchingAddress(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, MaxTicketsPerHost: 3})
	elsewhere, err := e.svc.IssueTicket(host, netip.MustParseAddr("10.250.0.100"), false)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.client.Start(ctx, elsewhere, tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonTicketBoundElsewhere))
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(403))
	g.Expect(e.store.Results(host)).To(BeEmpty(), "a stranger's request is not the host's failure")

	// A stranger naming the host's MAC from its own address (where scripts are not bound to a lease) spends
	// its own budget, not the host's.
	for range 2 {
		_, err = e.svc.IssueTicket(host, netip.MustParseAddr("10.250.0.100"), false)
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = e.svc.IssueTicket(host, netip.MustParseAddr("10.250.0.100"), false)
	g.Expect(err).To(MatchError(attest.ErrTooManyTickets), "three tickets within the TTL to one address is the limit")

	first := issue(t, e)
	_ = issue(t, e) // the host fetched its script again
	_ = issue(t, e)
	_, err = e.svc.IssueTicket(host, loopback, true)
	g.Expect(err).To(MatchError(attest.ErrTooManyTickets), "three tickets within the TTL to one address is the limit")
	data, err := e.client.Attest(ctx, first, tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred(), "the refetch did not invalidate the first ticket")
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
}

// TestOverheardSessionAndTokenAreUselessElsewhere: boot traffic is plain HTTP, so a stranger on the LAN
// can read the host's session id and release token. Presented from another address, each is refused
// (named, 403), spends nothing and is not recorded on the host: a junk answer to the host's session does
// not end it as a failed attestation (which powers the host off), and the overheard token fetches
// nothing; the host then finishes its own attestation with them.
func TestOverheardSessionAndTokenAreUselessElsewhere(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
	stranger := e.strangerClient()

	ch, err := e.client.Start(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	ans, err := wire.Answer(tpmA.keys, ch)
	g.Expect(err).NotTo(HaveOccurred())
	junk := *ans
	junk.Quote = []byte("not a quote")
	_, err = stranger.Verify(ctx, &junk)
	g.Expect(refusal(err)).To(Equal(wire.ReasonTicketBoundElsewhere))
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(403))
	_, err = stranger.Verify(ctx, ans)
	g.Expect(refusal(err)).To(Equal(wire.ReasonTicketBoundElsewhere), "even the right answer, replayed from elsewhere")
	g.Expect(e.store.Results(host)).To(BeEmpty(), "a stranger's request is not the host's failure")

	token, err := e.client.Verify(ctx, ans)
	g.Expect(err).NotTo(HaveOccurred(), "the host's session survived the stranger's answers")
	_, err = stranger.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(refusal(err)).To(Equal(wire.ReasonTicketBoundElsewhere))
	envl, err := e.client.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(err).NotTo(HaveOccurred(), "the overheard token was not spent by the stranger's fetch")
	data, err := tpmA.keys.Open(envl)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
	g.Expect(e.store.Results(host)).To(HaveEach(HaveField("Fatal", false)))
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonReleased))
}

// TestFatalRefusalCountsOnlyFromTheHostsLease: where scripts are not bound to a lease (proxyDHCP: the
// site's own DHCP server leases the addresses), a stranger fetches the host's script from its own address
// (127.0.0.2) and attests with another TPM. It is refused exactly as the host would be (403 EKMismatch),
// but the refusal is recorded as unattributed, with the stranger's address, not as a fatal failure: it
// is no evidence against the host, which then attests with its enrolled TPM. The same TPM presented in a
// session from the host's own lease (Yonder's DHCP leases it) is fatal, as before.
func TestFatalRefusalCountsOnlyFromTheHostsLease(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA, tpmB := startTPM(t), startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
	_, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonReleased), "the host's TPM is enrolled")

	stranger := netip.MustParseAddr("127.0.0.2")
	theirs, err := e.svc.IssueTicket(host, stranger, false)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.strangerClient().Attest(ctx, theirs, tpmB.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKMismatch))
	var strangers *wire.RefusedError
	g.Expect(errors.As(err, &strangers)).To(BeTrue())
	results := e.store.Results(host)
	g.Expect(results[len(results)-1]).To(And(HaveField("Reason", wire.ReasonEKMismatch), HaveField("Fatal", false),
		HaveField("Unattributed", true), HaveField("Address", stranger)), "a stranger's session is no evidence against the host")

	// The host itself, from its address (not a lease either: proxyDHCP), attests with its own TPM.
	mine, err := e.svc.IssueTicket(host, loopback, false)
	g.Expect(err).NotTo(HaveOccurred())
	data, err := e.client.Attest(ctx, mine, tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonReleased))

	// From the host's lease the other TPM is a real failure, answered the same way.
	_, err = e.client.Attest(ctx, issue(t, e), tpmB.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKMismatch))
	var hosts *wire.RefusedError
	g.Expect(errors.As(err, &hosts)).To(BeTrue())
	g.Expect(hosts.StatusCode).To(Equal(strangers.StatusCode), "the client cannot tell which of the two it was")
	results = e.store.Results(host)
	g.Expect(results[len(results)-1]).To(And(HaveField("Reason", wire.ReasonEKMismatch), HaveField("Fatal", true),
		HaveField("Unattributed", false), HaveField("Address", loopback)))
}

// TestAttestationRefusedWithoutEKRoots: a boot server configured with neither vendor roots nor
// InsecureAcceptAnyEK refuses every attestation (named, non-fatal: the host did nothing wrong).
func TestAttestationRefusedWithoutEKRoots(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	e := newEnv(t, attest.Config{})
	_, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(refusal(err)).To(Equal(wire.ReasonEKRootsNotConfigured))
	g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(503))
	g.Expect(e.store.Results(host)).To(ConsistOf(HaveField("Fatal", false)))
	enr, err := e.store.Enrolment(ctx, host)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enr).To(BeNil())
}
