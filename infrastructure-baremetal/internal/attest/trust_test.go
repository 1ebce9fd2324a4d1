package attest_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

// rogueServer stands between the agent and the real boot server, as a rogue DHCP+HTTP server on the boot
// LAN that answered first: it relays start and verify (so the host really attests, with a fresh
// session) but answers the bootstrap request with an envelope it recorded earlier. With rebind it first
// rewrites the recording's agent nonce to the one the agent just sent.
type rogueServer struct {
	mu         sync.Mutex
	recorded   *wire.Envelope
	rebind     bool
	agentNonce []byte
}

func (r *rogueServer) start(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	relay := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.URL.Path == wire.PathStart:
			body, _ := io.ReadAll(req.Body)
			var sr wire.StartRequest
			_ = json.Unmarshal(body, &sr)
			r.mu.Lock()
			r.agentNonce = sr.AgentNonce
			r.mu.Unlock()
			req.Body = io.NopCloser(bytes.NewReader(body))
			relay.ServeHTTP(w, req)
		case strings.HasPrefix(req.URL.Path, wire.PathBootstrap):
			r.mu.Lock()
			env := *r.recorded
			if r.rebind {
				env.AgentNonce = r.agentNonce
			}
			r.mu.Unlock()
			_ = json.NewEncoder(w).Encode(&env)
		default:
			relay.ServeHTTP(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Issue 17: a provider-signed envelope is bound to the agent's nonce of one session and expires. A rogue
// server that recorded the host's data from an earlier boot (plain HTTP) and replays it while the host
// boots again is refused by the agent — although the recording is genuine, signed by the provider and
// still opens with this TPM (its AK is the same on every boot). Rebinding the recording to the agent's
// new nonce breaks the signature; a stale envelope is refused; the host's own fresh envelope is accepted.
func TestReplayedEnvelopeIsRefusedByTheAgent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, SigningKey: key})
	e.client.ServerKey = pub

	// An earlier boot, overheard: the agent accepts its own fresh envelope.
	ch, err := e.client.Start(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ch.AgentNonce).To(HaveLen(wire.AgentNonceSize))
	ans, err := wire.Answer(tpmA.keys, ch)
	g.Expect(err).NotTo(HaveOccurred())
	token, err := e.client.Verify(ctx, ans)
	g.Expect(err).NotTo(HaveOccurred())
	released := time.Now()
	recorded, err := e.client.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(err).NotTo(HaveOccurred(), "the host's own envelope")
	g.Expect(recorded.AgentNonce).To(Equal(ch.AgentNonce))
	g.Expect(recorded.Expires).To(BeTemporally("~", released.Add(10*time.Minute), 2*time.Second), "the default EnvelopeTTL")
	data, err := tpmA.keys.Open(recorded)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))

	// The next boot of the same host, with a rogue server answering first.
	rogue := &rogueServer{recorded: recorded}
	srv := rogue.start(t, e.url)
	agent := &wire.Client{Server: srv.URL, HTTP: srv.Client(), ServerKey: pub}
	_, err = agent.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).To(MatchError(wire.ErrEnvelopeForAnotherSession))
	g.Expect(err.Error()).To(HavePrefix(wire.ReasonEnvelopeForAnotherSession + ": "))
	_, err = tpmA.keys.Open(recorded)
	g.Expect(err).NotTo(HaveOccurred(), "without the binding the recording would have run on the host")

	rogue.rebind = true
	_, err = agent.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).To(MatchError(wire.ErrEnvelopeNotSigned), "the nonce is under the provider's signature")

	// A fresh envelope of this session, fetched after its expiry by the host's clock.
	late := &wire.Client{Server: e.url, HTTP: e.client.HTTP, ServerKey: pub, Now: func() time.Time { return time.Now().Add(11 * time.Minute) }}
	ch, err = late.Start(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	ans, err = wire.Answer(tpmA.keys, ch)
	g.Expect(err).NotTo(HaveOccurred())
	token, err = late.Verify(ctx, ans)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = late.Fetch(ctx, token, ch.AgentNonce)
	g.Expect(err).To(MatchError(wire.ErrEnvelopeExpired))

	data, err = e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred(), "the real server, straight: a fresh envelope is accepted")
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
}

// A start request without the agent's nonce is refused (named, not fatal): its data could not be bound
// to the boot.
func TestStartWithoutAgentNonceIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
	req := &wire.StartRequest{Ticket: issue(t, e), EKPublic: tpm2.Marshal(tpmA.keys.EK.Public), AKPublic: tpm2.Marshal(tpmA.keys.AK.Public),
		EKCertificate: tpmA.keys.EKCertificate}
	_, err := e.svc.Start(ctx, req, loopback)
	g.Expect(refusal(err)).To(Equal("MalformedRequest: agentNonce must be 32 bytes"))
	g.Expect(e.store.Results(host)).To(ConsistOf(And(HaveField("Reason", wire.ReasonMalformedRequest), HaveField("Fatal", false))))
}

// fromAddress is a client whose connections come from the loopback address ip (127.0.0.0/8 is all local).
func fromAddress(server, ip string) *wire.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &wire.Client{Server: server, HTTP: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}}
}

// Issue 17: the attestation API is rate limited per source address. A flood of start requests from
// 127.0.0.2 is answered 429 with Retry-After once its burst is spent — nothing of it reaches a host —
// while the real host on 127.0.0.1 completes its attestation meanwhile.
func TestFloodFromOneAddressDoesNotStopAnother(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, RateLimit: attest.RateLimit{Rate: 1, Burst: 5}})
	flooder := fromAddress(e.url, "127.0.0.2").HTTP

	var codes sync.Map // status code → count
	var retryAfter atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		body, _ := json.Marshal(wire.StartRequest{Ticket: "junk", EKPublic: []byte{0, 1}, AKPublic: []byte{0, 1}, AgentNonce: make([]byte, 32)})
		for {
			select {
			case <-stop:
				return
			default:
			}
			rsp, err := flooder.Post(e.url+wire.PathStart, "application/json", bytes.NewReader(body))
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, rsp.Body)
			_ = rsp.Body.Close()
			n, _ := codes.LoadOrStore(rsp.StatusCode, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if rsp.StatusCode == http.StatusTooManyRequests {
				retryAfter.Store(rsp.Header.Get("Retry-After"))
			}
		}
	})
	g.Eventually(func() int64 {
		n, ok := codes.Load(http.StatusTooManyRequests)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}).WithTimeout(10 * time.Second).Should(BeNumerically(">", 100))

	data, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	close(stop)
	wg.Wait()
	g.Expect(err).NotTo(HaveOccurred(), "the host on 127.0.0.1 attests during the flood")
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
	refused, _ := codes.Load(http.StatusForbidden)
	limited, _ := codes.Load(http.StatusTooManyRequests)
	t.Logf("flood from 127.0.0.2: %d requests reached the service (403), %d were limited (429)", refused.(*atomic.Int64).Load(), limited.(*atomic.Int64).Load())
	// The burst, then about one a second, reach the service (an unknown ticket, 403); the rest are 429.
	g.Expect(refused.(*atomic.Int64).Load()).To(BeNumerically("<=", 5+15))
	g.Expect(limited.(*atomic.Int64).Load()).To(BeNumerically(">", 100))
	g.Expect(retryAfter.Load()).To(Equal("1"))
	g.Expect(testutil.ToFloat64(e.metrics.Results.WithLabelValues(wire.ReasonRateLimited))).To(BeNumerically("==", limited.(*atomic.Int64).Load()))
	g.Expect(e.store.Results(host)).To(HaveEach(HaveField("Success", true)), "nothing of the flood is recorded on the host")
}

// Issue 17: the agent waits out a 429 and sends the same request again. With a burst of one and a rate
// of one every two seconds, each of the host's three requests after the first is limited once; the
// attestation completes, and the server saw no failure of the host.
func TestAgentRetriesWhenRateLimited(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tpmA := startTPM(t)
	roots, intermediates := swtpmRoots(t)
	e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, RateLimit: attest.RateLimit{Rate: 0.5, Burst: 1}})
	began := time.Now()
	data, err := e.client.Attest(ctx, issue(t, e), tpmA.keys)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(userData(g, data)).To(ContainSubstring("join token"))
	g.Expect(testutil.ToFloat64(e.metrics.Results.WithLabelValues(wire.ReasonRateLimited))).To(BeNumerically(">=", 2))
	g.Expect(time.Since(began)).To(BeNumerically(">=", 3*time.Second), "it waited Retry-After (2 s) at least twice")
	g.Expect(e.store.LastReason(host)).To(Equal(attest.ReasonReleased))
	g.Expect(e.store.Results(host)).To(HaveEach(HaveField("Success", true)))

	// An agent whose budget is smaller than the Retry-After (2 s) gives up with the named refusal. At most
	// one start in two seconds passes, so one of two in a row is limited.
	impatient := &wire.Client{Server: e.url, HTTP: e.client.HTTP, RetryBudget: time.Second}
	var limited error
	for range 2 {
		if _, err := impatient.Start(ctx, issue(t, e), tpmA.keys); err != nil {
			limited = err
			break
		}
	}
	var re *wire.RefusedError
	g.Expect(errors.As(limited, &re)).To(BeTrue(), "got %v", limited)
	g.Expect(re.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(re.Reason).To(Equal(wire.ReasonRateLimited))
	g.Expect(limited).To(MatchError(ContainSubstring("rate limited for longer than 1s")))
}

// Issue 17: with vendor roots configured, a TPM without an EK certificate (swtpm manufactured without
// --create-ek-cert: nothing proves a TPM holds the key) is refused as EKCertificateMissing and not
// enrolled. With the explicit insecure flag it is accepted, and the host's outcome says the EK was not
// verified (EnrolledWithUnverifiedEK, and the release message); a TPM with a chaining certificate on the
// same server is still Enrolled as verified.
func TestEKWithoutCertificate(t *testing.T) {
	ctx := context.Background()
	bare := startTPMWith(t, swtpm.StartWithoutEKCertificate)
	roots, intermediates := swtpmRoots(t)

	t.Run("refused with roots", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(bare.keys.EKCertificate).To(BeEmpty(), "swtpm without --create-ek-cert has no EK certificate")
		e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates})
		_, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(refusal(err)).To(Equal(wire.ReasonEKCertificateMissing))
		g.Expect(err.(*wire.RefusedError).StatusCode).To(Equal(http.StatusForbidden))
		g.Expect(err.(*wire.RefusedError).Message).To(ContainSubstring("--insecure-accept-any-ek"))
		enr, err := e.store.Enrolment(ctx, host)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(enr).To(BeNil(), "not enrolled")
		g.Expect(e.store.Results(host)).To(ConsistOf(And(HaveField("Reason", wire.ReasonEKCertificateMissing), HaveField("Fatal", true))))
	})

	t.Run("accepted and visible with the insecure flag", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, InsecureAcceptAnyEK: true})
		data, err := e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(userData(g, data)).To(ContainSubstring("join token"))
		enr, err := e.store.Enrolment(ctx, host)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(enr).NotTo(BeNil())
		g.Expect(enr.EKCertificate).To(BeEmpty())
		results := e.store.Results(host)
		g.Expect(results).To(HaveLen(2))
		g.Expect(results[0].Reason).To(Equal(attest.ReasonEnrolledUnverifiedEK))
		g.Expect(results[0].Message).To(ContainSubstring("EK certificate was not verified (--insecure-accept-any-ek)"))
		g.Expect(results[1].Reason).To(Equal(attest.ReasonReleased))
		g.Expect(results[1].Message).To(ContainSubstring("EK certificate was not verified"))
		_, err = e.client.Attest(ctx, issue(t, e), bare.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(e.store.Results(host)[2].Reason).To(Equal(attest.ReasonAttestedUnverifiedEK), "every later boot says it too")

		certified := startTPM(t)
		other := newEnv(t, attest.Config{EKRoots: roots, EKIntermediates: intermediates, InsecureAcceptAnyEK: true})
		_, err = other.client.Attest(ctx, issue(t, other), certified.keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(other.store.Results(host)[0].Reason).To(Equal(attest.ReasonEnrolled), "a chaining certificate is still verified")
		g.Expect(other.store.Results(host)[1].Message).To(Equal("bootstrap data delivered to the attested TPM"))
	})
}
