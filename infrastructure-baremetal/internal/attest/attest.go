// Package attest is the server side of TPM 2.0 attestation for bare-metal hosts. A host that network-booted
// with a one-time ticket proves which TPM it has (the EK, pinned at enrolment, with its certificate chain
// when configured), that its attestation key lives in that TPM (MakeCredential/ActivateCredential), and
// what it booted (a quote over the configured PCRs with a fresh server nonce). Only then is its bootstrap
// data released — once, encrypted so that only that TPM can open it. Every refusal names the failed check.
package attest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-tpm/tpm2"
	"github.com/prometheus/client_golang/prometheus"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
)

// Enrolment is what is pinned for a host on first attestation (stored on the host object by the controller).
type Enrolment struct {
	// EKPublic is the EK's TPMT_PUBLIC.
	EKPublic []byte
	// EKCertificate is the EK certificate (DER) when the TPM had one.
	EKCertificate []byte
	// PCRs are the golden SHA-256 PCR values recorded at enrolment, by index.
	PCRs map[int][]byte
}

// Result is the outcome of one attestation step, for the host's condition.
type Result struct {
	// Success is true for a passed attestation or a release.
	Success bool
	// Reason is a wire.Reason* constant, or "Attested" / "Enrolled" / "BootstrapDataReleased".
	Reason  string
	Message string
	// Fatal marks a refusal that is evidence against the host: its reason is one of Fatal's (the TPM is
	// not the enrolled one, its EK does not chain to a vendor root, or its quote or PCRs are wrong) and the
	// session came from the host itself, i.e. from the address the site's DHCP server — Yonder's own —
	// leases to the host's boot MAC (IssueTicket's leased). Other refusals (a malformed request, a closed
	// enrolment window) say nothing about the host and must not stop it.
	Fatal bool
	// Unattributed marks a refusal with one of Fatal's reasons in a session that is not proven to be the
	// host's (leased was false: proxyDHCP, or a host without a reservation, where anyone on the boot LAN
	// can fetch the host's script from its own address and attest with any TPM). It is no evidence
	// against the host: the host may still attest in the same attempt. Address is the session's address.
	Unattributed bool
	// Address is, on a release, the address the attested host fetched its data from: what its boot NIC
	// leased, which the host's inventory records as that NIC's IP (as Metal3's inspection does); on a
	// refusal, the address the refused request came from.
	Address netip.Addr
}

// fatalReasons are the refusals that are real attestation failures when the host itself was refused
// (Result.Fatal).
var fatalReasons = map[string]bool{
	wire.ReasonEKMismatch: true, wire.ReasonEKCertificateMismatch: true, wire.ReasonEKCertificateUntrusted: true,
	wire.ReasonEKCertificateMissing: true, wire.ReasonAKInvalid: true, wire.ReasonNonceReplayed: true,
	wire.ReasonNonceMismatch: true, wire.ReasonCredentialActivationFailed: true, wire.ReasonQuoteInvalid: true,
	wire.ReasonQuoteSignatureInvalid: true, wire.ReasonPCRDigestMismatch: true, wire.ReasonPCRMismatch: true,
}

// Fatal reports whether a refusal reason is a real attestation failure when the refused session is the
// host's own (see Result.Fatal and Result.Unattributed).
func Fatal(reason string) bool { return fatalReasons[reason] }

// Success reasons.
const (
	ReasonAttested = "Attested"
	ReasonEnrolled = "Enrolled"
	ReasonReleased = "BootstrapDataReleased"
	// ReasonAttestedUnverifiedEK and ReasonEnrolledUnverifiedEK are ReasonAttested and ReasonEnrolled for
	// a TPM whose EK certificate chain was not verified (Config.InsecureAcceptAnyEK): the TPM may be
	// software, which the host's Attested condition says.
	ReasonAttestedUnverifiedEK = "AttestedWithUnverifiedEK"
	ReasonEnrolledUnverifiedEK = "EnrolledWithUnverifiedEK"
)

// Store is the narrow view of the host objects attestation needs (issue 7 implements it on BareMetalHost).
type Store interface {
	// Enrolment returns the host's pinned TPM, nil when the host is not enrolled yet.
	Enrolment(ctx context.Context, host string) (*Enrolment, error)
	// Enrol pins a TPM for a host that has none. A *RefusedError (EnrolmentClosed, EKMismatch) is a
	// refusal of the host's policy and is answered as such.
	Enrol(ctx context.Context, host string, e Enrolment) error
	// Instructions returns what to release to the host: encoded wire.Instructions (what the host is to
	// do, with its bootstrap data). An *RefusedError is answered as such; any other error as
	// NoBootstrapData.
	Instructions(ctx context.Context, host string) ([]byte, error)
	// Record reports an outcome (a condition on the host).
	Record(ctx context.Context, host string, r Result)
	// Report records the provisioning ramdisk's outcome of its instructions, once: a token that is not the
	// one released to r.Host (or was used already) is an *RefusedError with wire.ReasonUnknownReportToken.
	Report(ctx context.Context, r wire.Report) error
}

// EKRegistry is implemented by a Store on which an operator can register a host's EK out of band (the
// BareMetalHost's EK fingerprint annotation). A registered EK is trusted by its hash: a TPM that presents
// exactly that EK and no EK certificate is accepted even where vendor roots are configured, because the
// operator vouched for that key; any other EK without a certificate stays refused.
type EKRegistry interface {
	// RegisteredEK returns the EKFingerprint registered for host, "" when none is.
	RegisteredEK(ctx context.Context, host string) (string, error)
}

// Config is the attestation policy.
type Config struct {
	// PCRs to quote (SHA-256 bank). Default 0-7: firmware, option ROMs, boot loader, Secure Boot state.
	PCRs []int
	// EKRoots, when set, must sign the EK certificate; hosts without one are refused.
	EKRoots *x509.CertPool
	// EKIntermediates are offered when verifying EK certificates.
	EKIntermediates *x509.CertPool
	// EKTrust, when set, replaces EKRoots and EKIntermediates: its pools are read at every attestation,
	// so roots loaded while the service runs (a ConfigMap) apply to the next host. While it holds no
	// root, attestation is refused as EKRootsNotConfigured, as without EKRoots.
	EKTrust *EKTrust
	// InsecureAcceptAnyEK accepts EKs whose certificate chain is not verified: every EK when EKRoots is
	// nil, and with EKRoots an EK that has no certificate at all (some platforms ship TPMs without one; a
	// certificate that is present must still chain). Such a host's attestation succeeds with reason
	// EnrolledWithUnverifiedEK / AttestedWithUnverifiedEK instead of Enrolled / Attested. Without it, an
	// EK without a certificate is refused (EKCertificateMissing) and, without EKRoots, every attestation
	// (EKRootsNotConfigured): a software TPM could otherwise enrol in an open window and receive the
	// host's data.
	InsecureAcceptAnyEK bool
	// TicketTTL bounds how long a boot ticket is valid (default 30m); SessionTTL a challenge (default 2m).
	TicketTTL  time.Duration
	SessionTTL time.Duration
	// SigningKey signs every released envelope (wire.Envelope.Signature), bound to the agent's nonce of
	// the session and an expiry; the boot image's agent holds the public half and refuses data without
	// it. Nil: envelopes are unsigned.
	SigningKey ed25519.PrivateKey
	// EnvelopeTTL is how long a released envelope is accepted by the agent (default 10m, from the
	// release): the agent fetches and opens it at once, so only a host clock further off than that
	// refuses a genuine envelope.
	EnvelopeTTL time.Duration
	// MaxTicketsPerHost is how many scripts (tickets) one host is issued within TicketTTL for one fetching
	// address (default 10): a refetch gets a new ticket and leaves the earlier ones valid, a flood of
	// fetches is refused. The budget is per address, so a stranger who names the host's MAC (where scripts
	// are not bound to a lease: proxyDHCP) spends its own budget, not the host's.
	MaxTicketsPerHost int
	// RateLimit bounds the requests of one source address to the attestation API (Handler); over it the
	// answer is 429 with Retry-After and nothing is processed or recorded on a host.
	RateLimit RateLimit
	// Now is the clock (tests).
	Now func() time.Time
}

// Metrics are the attestation Prometheus metrics.
type Metrics struct {
	Results *prometheus.CounterVec
}

// NewMetrics registers the attestation metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Results: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_metal_attestation_results_total",
		Help: "Attestation steps by reason (Attested, Enrolled, BootstrapDataReleased or the refusal reason).",
	}, []string{"reason"})}
	if reg != nil {
		reg.MustRegister(m.Results)
	}
	return m
}

// RefusedError is a refusal with its wire reason and the HTTP status to answer with.
type RefusedError struct {
	Status  int
	Reason  string
	Message string
}

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

func refuse(status int, reason, format string, args ...any) *RefusedError {
	return &RefusedError{Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

type ticket struct {
	host    string
	from    netip.Addr
	leased  bool // from is the host's DHCP lease (IssueTicket)
	expires time.Time
}

type session struct {
	host         string
	from         netip.Addr // the address that opened it with the host's ticket
	leased       bool       // from is the host's DHCP lease: a fatal refusal is evidence against the host
	agentNonce   []byte     // the agent's StartRequest.AgentNonce: the released envelope is bound to it
	nonce        []byte
	secret       []byte
	ekPub        tpm2.TPMTPublic
	ekCert       []byte
	ekVerified   bool // the EK certificate chained to a configured root, or the EK is registered (EKRegistry)
	ekRegistered bool // accepted by its registered fingerprint, without an EK certificate
	akPub        tpm2.TPMTPublic
	akName       []byte
	expires      time.Time
}

type release struct {
	host         string
	from         netip.Addr // the address that answered the session
	agentNonce   []byte
	ekVerified   bool
	ekRegistered bool
	ekPub        tpm2.TPMTPublic
	akName       []byte
	expires      time.Time
}

// Service issues tickets and runs attestation sessions. Its state is in memory: a restarted manager
// issues new tickets (hosts that were mid-boot simply PXE-boot again).
type Service struct {
	cfg     Config
	store   Store
	log     logr.Logger
	metrics *Metrics
	limiter *limiter

	mu         sync.Mutex
	tickets    map[string]ticket        // sha256(ticket) → host
	issued     map[issuedTo][]time.Time // host and address → expiry of each ticket issued within TicketTTL (rate limit)
	sessions   map[string]*session      // session id → session
	usedNonces map[string]time.Time     // hex nonce → expiry of the memory
	releases   map[string]*release      // sha256(token) → release
	released   map[string]*release      // sha256(token) of consumed tokens
}

// New returns a Service.
func New(cfg Config, store Store, log logr.Logger, metrics *Metrics) *Service {
	if len(cfg.PCRs) == 0 {
		cfg.PCRs = []int{0, 1, 2, 3, 4, 5, 6, 7}
	}
	cfg.PCRs = slices.Clone(cfg.PCRs)
	sort.Ints(cfg.PCRs)
	if cfg.TicketTTL == 0 {
		cfg.TicketTTL = 30 * time.Minute
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 2 * time.Minute
	}
	if cfg.EnvelopeTTL == 0 {
		cfg.EnvelopeTTL = 10 * time.Minute
	}
	if cfg.MaxTicketsPerHost == 0 {
		cfg.MaxTicketsPerHost = 10
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Service{cfg: cfg, store: store, log: log, metrics: metrics, limiter: newLimiter(cfg.RateLimit, cfg.Now),
		tickets: map[string]ticket{}, issued: map[issuedTo][]time.Time{}, sessions: map[string]*session{},
		usedNonces: map[string]time.Time{}, releases: map[string]*release{}, released: map[string]*release{}}
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// issuedTo keys the ticket budget: one host, fetched from one address.
type issuedTo struct {
	host string
	from netip.Addr
}

// ErrTooManyTickets refuses a ticket to a host that was issued MaxTicketsPerHost within TicketTTL to the
// same address.
var ErrTooManyTickets = errors.New("too many boot tickets issued for this host to this address")

// IssueTicket returns a new one-time boot ticket for host, bound to from: only a request from that
// address can open a session with it. Earlier tickets stay valid (a host that fetches its script twice,
// or a stranger who names its MAC, invalidates nothing). Only its hash is kept, and it is never logged.
//
// leased says that from is the address the site's DHCP server — Yonder's own — leases to the host's boot
// MAC, and that the script was served only there (bootserver.Config.BindToReservation with a
// reservation): only a session opened with such a ticket is the host's own, so only its fatal refusals
// are evidence against the host (Result.Fatal). Elsewhere (proxyDHCP, a host without a reservation)
// anyone on the boot LAN can fetch the host's script from its own address and attest with any TPM; its
// refusals are recorded as Result.Unattributed and never stop the host.
func (s *Service) IssueTicket(host string, from netip.Addr, leased bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gc()
	to := issuedTo{host: host, from: from.Unmap()}
	if len(s.issued[to]) >= s.cfg.MaxTicketsPerHost {
		return "", fmt.Errorf("%w (%d within %s): wait for the earlier ones to expire", ErrTooManyTickets, s.cfg.MaxTicketsPerHost, s.cfg.TicketTTL)
	}
	t := randomToken(32)
	exp := s.cfg.Now().Add(s.cfg.TicketTTL)
	s.tickets[hashKey(t)] = ticket{host: host, from: from.Unmap(), leased: leased, expires: exp}
	s.issued[to] = append(s.issued[to], exp)
	return t, nil
}

// gc forgets expired state; callers hold mu.
func (s *Service) gc() {
	now := s.cfg.Now()
	for k, t := range s.tickets {
		if now.After(t.expires) {
			delete(s.tickets, k)
		}
	}
	for h, exps := range s.issued {
		exps = slices.DeleteFunc(exps, func(e time.Time) bool { return now.After(e) })
		if len(exps) == 0 {
			delete(s.issued, h)
		} else {
			s.issued[h] = exps
		}
	}
	for k, v := range s.sessions {
		if now.After(v.expires) {
			delete(s.sessions, k)
		}
	}
	for k, exp := range s.usedNonces {
		if now.After(exp) {
			delete(s.usedNonces, k)
		}
	}
	for k, r := range s.releases {
		if now.After(r.expires) {
			delete(s.releases, k)
		}
	}
	for k, r := range s.released {
		if now.After(r.expires) {
			delete(s.released, k)
		}
	}
}

// origin is whom a refusal is recorded against: the host its ticket, session or release names (none
// before one is checked: nothing is recorded on a host), the address the request came from, and whether
// that address is the host's DHCP lease (IssueTicket's leased).
type origin struct {
	host   string
	from   netip.Addr
	leased bool
}

// fail counts and logs a refusal and records it on the host o names. A refusal with a fatal reason is
// fatal only in a session from the host's lease; in any other it is recorded as Unattributed with the
// session's address. The answer to the client is the same either way.
func (s *Service) fail(ctx context.Context, o origin, err *RefusedError) *RefusedError {
	s.metrics.Results.WithLabelValues(err.Reason).Inc()
	r := Result{Reason: err.Reason, Message: err.Message, Address: o.from}
	if Fatal(err.Reason) {
		r.Fatal, r.Unattributed = o.leased, !o.leased
	}
	if o.host != "" {
		s.store.Record(ctx, o.host, r)
	}
	remote := ""
	if o.from.IsValid() {
		remote = o.from.String()
	}
	s.log.Info("Refusing attestation", "host", o.host, "reason", err.Reason, "message", err.Message, "remote", remote, "fatal", r.Fatal)
	return err
}

// Start checks the ticket (issued to the request's source address from) and the TPM's identity and
// returns a credential challenge and a nonce. The session it opens spends the ticket.
func (s *Service) Start(ctx context.Context, req *wire.StartRequest, from netip.Addr) (*wire.StartResponse, error) {
	s.mu.Lock()
	s.gc()
	tk, ok := s.tickets[hashKey(req.Ticket)]
	s.mu.Unlock()
	if !ok || req.Ticket == "" {
		return nil, s.fail(ctx, origin{from: from.Unmap()}, refuse(403, wire.ReasonUnknownTicket, "the boot ticket is unknown, used or expired: PXE-boot the host again"))
	}
	if tk.from != from.Unmap() {
		// Someone else than the host that fetched the script: nothing is recorded on the host.
		return nil, s.fail(ctx, origin{from: from.Unmap()}, refuse(403, wire.ReasonTicketBoundElsewhere, "the boot ticket was issued to another address"))
	}
	host := tk.host
	o := origin{host: host, from: from.Unmap(), leased: tk.leased}
	if len(req.AgentNonce) != wire.AgentNonceSize {
		// Without it the released data would not be bound to this boot: replayable to the host later.
		return nil, s.fail(ctx, o, refuse(400, wire.ReasonMalformedRequest, "agentNonce must be %d bytes", wire.AgentNonceSize))
	}
	ekPub, err := tpm2.Unmarshal[tpm2.TPMTPublic](req.EKPublic)
	if err != nil {
		return nil, s.fail(ctx, o, refuse(400, wire.ReasonMalformedRequest, "EK public area does not decode: %v", err))
	}
	akPub, err := tpm2.Unmarshal[tpm2.TPMTPublic](req.AKPublic)
	if err != nil {
		return nil, s.fail(ctx, o, refuse(400, wire.ReasonMalformedRequest, "AK public area does not decode: %v", err))
	}
	trust, rerr := s.checkEK(ctx, host, ekPub, req.EKCertificate)
	if rerr != nil {
		return nil, s.fail(ctx, o, rerr)
	}
	if rerr := checkAK(akPub); rerr != nil {
		return nil, s.fail(ctx, o, rerr)
	}
	akName, err := tpm2.ObjectName(akPub)
	if err != nil {
		return nil, s.fail(ctx, o, refuse(400, wire.ReasonAKInvalid, "AK name: %v", err))
	}
	encKey, err := tpm2.ImportEncapsulationKey(ekPub)
	if err != nil {
		return nil, s.fail(ctx, o, refuse(400, wire.ReasonMalformedRequest, "EK is not an encryption key: %v", err))
	}
	secret := make([]byte, 32)
	nonce := make([]byte, 32)
	_, _ = rand.Read(secret)
	_, _ = rand.Read(nonce)
	blob, encSecret, err := tpm2.CreateCredential(rand.Reader, encKey, akName.Buffer, secret)
	if err != nil {
		return nil, fmt.Errorf("failed to create credential challenge for host %s: %w", host, err)
	}
	id := randomToken(16)
	s.mu.Lock()
	if _, ok := s.tickets[hashKey(req.Ticket)]; !ok {
		s.mu.Unlock() // a concurrent Start spent it: one ticket, one session
		return nil, s.fail(ctx, origin{}, refuse(403, wire.ReasonUnknownTicket, "the boot ticket was used by another session: PXE-boot the host again"))
	}
	delete(s.tickets, hashKey(req.Ticket))
	s.sessions[id] = &session{host: host, from: from.Unmap(), leased: tk.leased, agentNonce: slices.Clone(req.AgentNonce), nonce: nonce, secret: secret, ekPub: *ekPub,
		ekCert: req.EKCertificate, ekVerified: trust != ekUnverified, ekRegistered: trust == ekRegistered, akPub: *akPub, akName: akName.Buffer, expires: s.cfg.Now().Add(s.cfg.SessionTTL)}
	s.mu.Unlock()
	s.log.V(4).Info("Starting attestation session", "host", host)
	return &wire.StartResponse{Session: id, CredentialBlob: blob, EncryptedSecret: encSecret, Nonce: nonce, PCRs: s.cfg.PCRs}, nil
}

// ekTrust is how a presented EK was accepted.
type ekTrust int

const (
	// ekUnverified: taken on trust (Config.InsecureAcceptAnyEK).
	ekUnverified ekTrust = iota
	// ekCertified: its certificate chains to a configured root.
	ekCertified
	// ekRegistered: no certificate, but the operator registered exactly this EK for the host (EKRegistry).
	ekRegistered
)

// errEKRootsNotConfigured refuses every EK that would need a vendor root while none is loaded: not
// evidence against the host (the manager's configuration is missing), so it is retried, not fatal.
func errEKRootsNotConfigured() *RefusedError {
	return refuse(503, wire.ReasonEKRootsNotConfigured, "the boot server has no TPM vendor roots to verify EK certificates: "+
		"configure them (--ek-roots, or certificates in --ek-roots-configmap), register the host's EK out of band, or start it with --insecure-accept-any-ek")
}

// ekPools are the roots (nil: none) and intermediates EK certificates are verified with now.
func (s *Service) ekPools() (roots, intermediates *x509.CertPool) {
	if s.cfg.EKTrust != nil {
		return s.cfg.EKTrust.Pools()
	}
	return s.cfg.EKRoots, s.cfg.EKIntermediates
}

// checkEK checks the presented EK against the host's pinned one and its certificate against the vendor
// roots. An EK without a certificate passes when the operator registered it for the host (the pin is the
// trust) or under InsecureAcceptAnyEK. A certificate that is present must chain, registered EK or not:
// the policy stays "every certificate a TPM presents is verified", a certificate for another key or from
// an unknown CA is evidence an operator must see (a swapped or refurbished TPM, a missing vendor root),
// and the fix (add the vendor's root or intermediate) is the operator's one step.
func (s *Service) checkEK(ctx context.Context, host string, ekPub *tpm2.TPMTPublic, certDER []byte) (ekTrust, *RefusedError) {
	key, err := tpm2.Pub(*ekPub)
	if err != nil {
		return ekUnverified, refuse(400, wire.ReasonMalformedRequest, "EK public key: %v", err)
	}
	enr, err := s.store.Enrolment(ctx, host)
	if err != nil {
		return ekUnverified, refuse(503, "StoreUnavailable", "failed to read enrolment: %v", err)
	}
	if enr != nil {
		pinned, err := tpm2.Unmarshal[tpm2.TPMTPublic](enr.EKPublic)
		if err != nil {
			return ekUnverified, refuse(500, wire.ReasonEKMismatch, "pinned EK does not decode: %v", err)
		}
		pk, err := tpm2.Pub(*pinned)
		if err != nil || !equalKeys(pk, key) {
			return ekUnverified, refuse(403, wire.ReasonEKMismatch, "the host presented a different TPM than the one enrolled: "+
				"if the TPM or mainboard was replaced, clear the host's enrolment to re-enrol")
		}
	}
	roots, intermediates := s.ekPools()
	if len(certDER) == 0 {
		return s.checkEKWithoutCertificate(ctx, host, ekPub, roots != nil)
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return ekUnverified, refuse(403, wire.ReasonEKCertificateMismatch, "EK certificate does not parse: %v", err)
	}
	if !equalKeys(cert.PublicKey, key) {
		return ekUnverified, refuse(403, wire.ReasonEKCertificateMismatch, "the EK certificate is for another key")
	}
	if roots == nil {
		if s.cfg.InsecureAcceptAnyEK {
			return ekUnverified, nil
		}
		return ekUnverified, errEKRootsNotConfigured()
	}
	// TPM EK certificates carry a critical subjectAltName of directory names (TPM manufacturer, model,
	// version) that crypto/x509 does not interpret; it is informational for chain building.
	cert.UnhandledCriticalExtensions = slices.DeleteFunc(cert.UnhandledCriticalExtensions, func(oid asn1.ObjectIdentifier) bool {
		return oid.Equal(asn1.ObjectIdentifier{2, 5, 29, 17})
	})
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: s.cfg.Now()}); err != nil {
		return ekUnverified, refuse(403, wire.ReasonEKCertificateUntrusted, "the EK certificate does not chain to a configured TPM vendor root: %v", err)
	}
	return ekCertified, nil
}

// checkEKWithoutCertificate decides on an EK that came without a certificate: registered for the host,
// taken on trust (InsecureAcceptAnyEK), or refused.
func (s *Service) checkEKWithoutCertificate(ctx context.Context, host string, ekPub *tpm2.TPMTPublic, haveRoots bool) (ekTrust, *RefusedError) {
	registry, ok := s.store.(EKRegistry)
	if ok {
		want, err := registry.RegisteredEK(ctx, host)
		if err != nil {
			return ekUnverified, refuse(503, "StoreUnavailable", "failed to read the registered EK: %v", err)
		}
		if want != "" {
			got, err := EKFingerprint(tpm2.Marshal(*ekPub))
			if err != nil {
				return ekUnverified, refuse(400, wire.ReasonMalformedRequest, "%v", err)
			}
			if !strings.EqualFold(strings.TrimSpace(want), got) {
				return ekUnverified, refuse(403, wire.ReasonEKMismatch, "the TPM presented no EK certificate and its EK (sha256 %s) is not the one "+
					"registered for the host (%s)", got, want)
			}
			return ekRegistered, nil
		}
	}
	switch {
	case s.cfg.InsecureAcceptAnyEK:
		return ekUnverified, nil
	case !haveRoots:
		return ekUnverified, errEKRootsNotConfigured()
	}
	// Nothing proves that a TPM holds this key: a software "TPM" presents exactly this.
	return ekUnverified, refuse(403, wire.ReasonEKCertificateMissing, "the TPM presented no EK certificate, so its EK cannot be "+
		"verified against the configured vendor roots and could be a software key. Register its EK out of band on the host "+
		"(its EK fingerprint) if you vouch for this TPM; otherwise only a manager started with --insecure-accept-any-ek accepts it")
}

// EKFingerprint is the hex SHA-256 of an EK's public key in PKIX (SubjectPublicKeyInfo) DER form, given its
// TPMT_PUBLIC: what `openssl x509 -in ek.pem -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum`
// prints for the TPM's EK certificate. Operators register it on a host out of band.
func EKFingerprint(ekPublic []byte) (string, error) {
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](ekPublic)
	if err != nil {
		return "", fmt.Errorf("failed to decode EK public area: %w", err)
	}
	key, err := tpm2.Pub(*p)
	if err != nil {
		return "", fmt.Errorf("failed to read EK public key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return "", fmt.Errorf("failed to encode EK public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// samePinnedEK compares a pinned EK public area with a session's EK by key.
func samePinnedEK(pinned []byte, ek *tpm2.TPMTPublic) bool {
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](pinned)
	if err != nil {
		return false
	}
	a, errA := tpm2.Pub(*p)
	b, errB := tpm2.Pub(*ek)
	return errA == nil && errB == nil && equalKeys(a, b)
}

func equalKeys(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}

// checkAK accepts only a restricted signing key that cannot leave its TPM.
func checkAK(p *tpm2.TPMTPublic) *RefusedError {
	a := p.ObjectAttributes
	if p.Type != tpm2.TPMAlgRSA || p.NameAlg != tpm2.TPMAlgSHA256 || !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin ||
		!a.Restricted || !a.SignEncrypt || a.Decrypt {
		return refuse(403, wire.ReasonAKInvalid, "the AK must be a restricted, fixedTPM RSA signing key with a SHA-256 name")
	}
	return nil
}

// errBoundElsewhere refuses a session id or release token presented from another address than the one
// that opened the session: boot traffic is plain HTTP, so anyone on the boot LAN may overhear them. The
// refusal spends nothing and is not recorded on the host — a stranger's junk answer must neither use up
// the host's session nor count as the host failing attestation (which would power it off).
func errBoundElsewhere(what string) *RefusedError {
	return refuse(403, wire.ReasonTicketBoundElsewhere, "the %s belongs to another address: only the host that opened the session may use it", what)
}

// Verify checks the activated credential and the quote (from the address that opened the session); on
// success the host is attested (and enrolled on first contact) and gets a single-use release token.
func (s *Service) Verify(ctx context.Context, req *wire.VerifyRequest, from netip.Addr) (*wire.VerifyResponse, error) {
	s.mu.Lock()
	s.gc()
	sess, ok := s.sessions[req.Session]
	if ok && sess.from != from.Unmap() {
		s.mu.Unlock()
		return nil, s.fail(ctx, origin{from: from.Unmap()}, errBoundElsewhere("attestation session"))
	}
	delete(s.sessions, req.Session) // one answer per session, right or wrong
	if ok {
		s.usedNonces[hex.EncodeToString(sess.nonce)] = s.cfg.Now().Add(s.cfg.TicketTTL)
	}
	s.mu.Unlock()
	if !ok {
		return nil, s.fail(ctx, origin{}, refuse(403, wire.ReasonUnknownSession, "the attestation session is unknown, answered or expired: start again"))
	}
	host := sess.host
	o := origin{host: host, from: sess.from, leased: sess.leased}
	attest, err := tpm2.Unmarshal[tpm2.TPMSAttest](req.Quote)
	if err != nil || attest.Magic != tpm2.TPMGeneratedValue || attest.Type != tpm2.TPMSTAttestQuote {
		return nil, s.fail(ctx, o, refuse(403, wire.ReasonQuoteInvalid, "the quote is not a TPM-generated quote"))
	}
	if !bytes.Equal(attest.ExtraData.Buffer, sess.nonce) {
		s.mu.Lock()
		_, replayed := s.usedNonces[hex.EncodeToString(attest.ExtraData.Buffer)]
		s.mu.Unlock()
		if replayed {
			return nil, s.fail(ctx, o, refuse(403, wire.ReasonNonceReplayed, "the quote carries the nonce of an earlier session"))
		}
		return nil, s.fail(ctx, o, refuse(403, wire.ReasonNonceMismatch, "the quote does not carry this session's nonce"))
	}
	if subtle.ConstantTimeCompare(req.Secret, sess.secret) != 1 {
		return nil, s.fail(ctx, o, refuse(403, wire.ReasonCredentialActivationFailed,
			"the TPM could not activate the credential: the AK is not in the TPM that owns the EK"))
	}
	if rerr := verifySignature(&sess.akPub, req.Quote, req.Signature); rerr != nil {
		return nil, s.fail(ctx, o, rerr)
	}
	values, rerr := s.checkPCRDigest(attest, req.PCRValues)
	if rerr != nil {
		return nil, s.fail(ctx, o, rerr)
	}
	enr, err := s.store.Enrolment(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("failed to read enrolment of host %s: %w", host, err)
	}
	reason, enrolled := ReasonAttested, ReasonEnrolled
	if !sess.ekVerified {
		reason, enrolled = ReasonAttestedUnverifiedEK, ReasonEnrolledUnverifiedEK
	}
	if enr == nil {
		e := Enrolment{EKPublic: tpm2.Marshal(sess.ekPub), EKCertificate: sess.ekCert, PCRs: values}
		if err := s.store.Enrol(ctx, host, e); err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				return nil, s.fail(ctx, o, re)
			}
			return nil, fmt.Errorf("failed to enrol host %s: %w", host, err)
		}
		reason = enrolled
	} else if !samePinnedEK(enr.EKPublic, &sess.ekPub) {
		// Another TPM enrolled the host while this session was open (two first boots racing on one ticket).
		return nil, s.fail(ctx, o, refuse(403, wire.ReasonEKMismatch, "the host was enrolled with a different TPM during this session"))
	} else if changed := changedPCRs(enr.PCRs, values, s.cfg.PCRs); len(changed) > 0 {
		return nil, s.fail(ctx, o, refuse(403, wire.ReasonPCRMismatch,
			"PCRs %v differ from the values recorded at enrolment: the firmware, boot loader or their configuration changed", changed))
	}
	token := randomToken(32)
	s.mu.Lock()
	s.releases[hashKey(token)] = &release{host: host, from: sess.from, agentNonce: sess.agentNonce, ekVerified: sess.ekVerified,
		ekRegistered: sess.ekRegistered, ekPub: sess.ekPub, akName: sess.akName, expires: s.cfg.Now().Add(s.cfg.SessionTTL)}
	s.mu.Unlock()
	s.metrics.Results.WithLabelValues(reason).Inc()
	msg := ekMessage("TPM attestation passed", sess.ekVerified, sess.ekRegistered)
	s.store.Record(ctx, host, Result{Success: true, Reason: reason, Message: msg})
	s.log.Info("Attested host", "host", host, "reason", reason)
	return &wire.VerifyResponse{ReleaseToken: token}, nil
}

// ekMessage is what, on the host's Attested condition, says how its TPM's EK was trusted.
func ekMessage(what string, verified, registered bool) string {
	switch {
	case registered:
		return what + " (EK registered out of band on the host; the TPM has no EK certificate)"
	case verified:
		return what
	}
	return unverifiedEKMessage(what)
}

// unverifiedEKMessage says, on the host's Attested condition, that its TPM was taken on trust.
func unverifiedEKMessage(what string) string {
	return what + ", but its EK certificate was not verified (--insecure-accept-any-ek): it may be a software TPM. " +
		"Configure the vendor's root in --ek-roots, or register the EK out of band, to verify it"
}

func verifySignature(akPub *tpm2.TPMTPublic, quote, sigBytes []byte) *RefusedError {
	sig, err := tpm2.Unmarshal[tpm2.TPMTSignature](sigBytes)
	if err != nil {
		return refuse(403, wire.ReasonQuoteSignatureInvalid, "the signature does not decode")
	}
	rsaSig, err := sig.Signature.RSASSA()
	if err != nil || rsaSig.Hash != tpm2.TPMAlgSHA256 {
		return refuse(403, wire.ReasonQuoteSignatureInvalid, "the signature is not RSASSA-SHA256")
	}
	key, err := tpm2.Pub(*akPub)
	if err != nil {
		return refuse(403, wire.ReasonAKInvalid, "AK public key: %v", err)
	}
	rk, ok := key.(*rsa.PublicKey)
	if !ok {
		return refuse(403, wire.ReasonAKInvalid, "the AK is not an RSA key")
	}
	digest := sha256.Sum256(quote)
	if err := rsa.VerifyPKCS1v15(rk, crypto.SHA256, digest[:], rsaSig.Sig.Buffer); err != nil {
		return refuse(403, wire.ReasonQuoteSignatureInvalid, "the quote is not signed by the AK")
	}
	return nil
}

// checkPCRDigest checks that the quote covers exactly the configured PCRs and that the reported values
// hash to the quoted digest; it returns the (now trustworthy) values.
func (s *Service) checkPCRDigest(attest *tpm2.TPMSAttest, reported map[int][]byte) (map[int][]byte, *RefusedError) {
	q, err := attest.Attested.Quote()
	if err != nil {
		return nil, refuse(403, wire.ReasonQuoteInvalid, "the attestation is not a quote")
	}
	want := wire.PCRSelection(s.cfg.PCRs)
	if len(q.PCRSelect.PCRSelections) != 1 || q.PCRSelect.PCRSelections[0].Hash != tpm2.TPMAlgSHA256 ||
		!bytes.Equal(q.PCRSelect.PCRSelections[0].PCRSelect, want.PCRSelections[0].PCRSelect) {
		return nil, refuse(403, wire.ReasonPCRDigestMismatch, "the quote does not cover the SHA-256 PCRs %v", s.cfg.PCRs)
	}
	h := sha256.New()
	values := make(map[int][]byte, len(s.cfg.PCRs))
	for _, p := range s.cfg.PCRs { // the TPM hashes selected PCRs in ascending order
		v, ok := reported[p]
		if !ok || len(v) != sha256.Size {
			return nil, refuse(403, wire.ReasonPCRDigestMismatch, "PCR %d is missing from the reported values", p)
		}
		h.Write(v)
		values[p] = v
	}
	if !bytes.Equal(h.Sum(nil), q.PCRDigest.Buffer) {
		return nil, refuse(403, wire.ReasonPCRDigestMismatch, "the reported PCR values do not match the quoted digest")
	}
	return values, nil
}

func changedPCRs(golden, got map[int][]byte, pcrs []int) []int {
	var changed []int
	for _, p := range pcrs {
		if !bytes.Equal(golden[p], got[p]) {
			changed = append(changed, p)
		}
	}
	return changed
}

// Release returns the host's bootstrap data for a release token (presented from the address that
// attested), exactly once, encrypted to the TPM that attested: the AES key is a credential for that AK on
// that EK.
func (s *Service) Release(ctx context.Context, token string, from netip.Addr) (*wire.Envelope, error) {
	k := hashKey(token)
	s.mu.Lock()
	s.gc()
	rel, ok := s.releases[k]
	if ok && rel.from != from.Unmap() {
		s.mu.Unlock()
		return nil, s.fail(ctx, origin{from: from.Unmap()}, errBoundElsewhere("release token"))
	}
	used, wasUsed := s.released[k]
	if ok {
		delete(s.releases, k)
		s.released[k] = &release{host: rel.host, expires: s.cfg.Now().Add(s.cfg.TicketTTL)}
	}
	s.mu.Unlock()
	if wasUsed {
		// Recorded on the host: a second fetch means the token leaked or the agent misbehaves.
		return nil, s.fail(ctx, origin{host: used.host, from: from.Unmap()}, refuse(410, wire.ReasonAlreadyReleased, "the bootstrap data for this token was already delivered"))
	}
	if !ok {
		return nil, s.fail(ctx, origin{}, refuse(404, wire.ReasonUnknownReleaseToken, "the release token is unknown or expired"))
	}
	data, err := s.store.Instructions(ctx, rel.host)
	if err != nil || len(data) == 0 {
		msg := "no bootstrap data is available for the host yet"
		if err != nil {
			s.log.Info("No instructions to release", "host", rel.host, "error", err.Error())
		}
		return nil, s.fail(ctx, origin{host: rel.host, from: from.Unmap()}, refuse(409, wire.ReasonNoBootstrapData, "%s", msg))
	}
	env, err := seal(&rel.ekPub, rel.akName, data)
	if err != nil {
		return nil, fmt.Errorf("failed to encrypt bootstrap data for host %s: %w", rel.host, err)
	}
	// Bound to this session's agent nonce and short-lived: the AK is the same on every boot of the host,
	// so without them a recorded envelope would open and verify again when a rogue server replays it.
	env.AgentNonce, env.Expires = rel.agentNonce, s.cfg.Now().Add(s.cfg.EnvelopeTTL).UTC().Truncate(time.Second)
	if s.cfg.SigningKey != nil {
		env.Signature = ed25519.Sign(s.cfg.SigningKey, env.SignedBytes())
	}
	s.metrics.Results.WithLabelValues(ReasonReleased).Inc()
	msg := ekMessage("bootstrap data delivered to the attested TPM", rel.ekVerified, rel.ekRegistered)
	s.store.Record(ctx, rel.host, Result{Success: true, Reason: ReasonReleased, Message: msg, Address: from.Unmap()})
	s.log.Info("Released bootstrap data", "host", rel.host)
	return env, nil
}

// NewReportToken draws a report token (wire.Instructions.ReportToken): 256 random bits, base64url.
func NewReportToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Report hands the provisioning ramdisk's report to the store, which accepts it once, with the token that
// was released to that host. The source address is not checked: the token travelled only inside the
// envelope that the host's TPM opened, and a host may lease a new address while it writes its disk.
func (s *Service) Report(ctx context.Context, r *wire.Report) (*wire.ReportResponse, error) {
	if r.Host == "" || r.Token == "" || (r.Action != wire.ActionWriteImage && r.Action != wire.ActionClean && r.Action != wire.ActionRunNode) {
		return nil, s.fail(ctx, origin{}, refuse(400, wire.ReasonMalformedRequest, "a report names its host, token and action (%s, %s or %s)",
			wire.ActionWriteImage, wire.ActionClean, wire.ActionRunNode))
	}
	if len(r.Message) > 4096 {
		r.Message = r.Message[:4096]
	}
	if err := s.store.Report(ctx, *r); err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			// Not recorded on the host: a stranger's guess must not change its condition.
			return nil, s.fail(ctx, origin{}, re)
		}
		return nil, fmt.Errorf("failed to record the report of %s: %w", r.Host, err)
	}
	s.log.Info("Recorded provisioning report", "host", r.Host, "action", r.Action, "success", r.Success)
	return &wire.ReportResponse{Recorded: true}, nil
}

func seal(ekPub *tpm2.TPMTPublic, akName, data []byte) (*wire.Envelope, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	encKey, err := tpm2.ImportEncapsulationKey(ekPub)
	if err != nil {
		return nil, err
	}
	blob, encSecret, err := tpm2.CreateCredential(rand.Reader, encKey, akName, key)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	_, _ = rand.Read(nonce)
	return &wire.Envelope{CredentialBlob: blob, EncryptedSecret: encSecret, Nonce: nonce,
		Ciphertext: gcm.Seal(nil, nonce, data, []byte(wire.EnvelopeAAD))}, nil
}

// MemoryStore is an in-memory Store and EKRegistry (tests, and a manager without host objects). Safe for
// concurrent use.
type MemoryStore struct {
	mu           sync.Mutex
	enrolments   map[string]Enrolment
	registered   map[string]string
	instructions map[string]wire.Instructions
	reportTokens map[string]string
	reports      map[string][]wire.Report
	results      map[string][]Result
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{enrolments: map[string]Enrolment{}, registered: map[string]string{}, instructions: map[string]wire.Instructions{},
		reportTokens: map[string]string{}, reports: map[string][]wire.Report{}, results: map[string][]Result{}}
}

var _ EKRegistry = (*MemoryStore)(nil)

// RegisterEK registers host's EK out of band by its EKFingerprint.
func (m *MemoryStore) RegisterEK(host, fingerprint string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.registered[host] = fingerprint
}

// RegisteredEK implements EKRegistry.
func (m *MemoryStore) RegisteredEK(_ context.Context, host string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered[host], nil
}

// Enrolment implements Store.
func (m *MemoryStore) Enrolment(_ context.Context, host string) (*Enrolment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.enrolments[host]
	if !ok {
		return nil, nil
	}
	return &e, nil
}

// Enrol implements Store.
func (m *MemoryStore) Enrol(_ context.Context, host string, e Enrolment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.enrolments[host]; ok {
		return errors.New("failed to enrol: host is already enrolled")
	}
	if want, ok := m.registered[host]; ok {
		// As AttestStore.Enrol: a registered EK is the only one the host may pin.
		if got, err := EKFingerprint(e.EKPublic); err != nil || !strings.EqualFold(got, want) {
			return refuse(403, wire.ReasonEKMismatch, "the TPM's EK is not the one registered for the host")
		}
	}
	m.enrolments[host] = e
	return nil
}

// SetBootstrapData sets the bootstrap data released to host, to be run live (wire.ActionLive).
func (m *MemoryStore) SetBootstrapData(host string, data []byte) {
	if len(data) == 0 {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.instructions, host)
		return
	}
	m.SetInstructions(host, wire.Instructions{Action: wire.ActionLive, UserData: data})
}

// SetInstructions sets what is released to host. Version and Host are filled in; an action that reports
// gets a fresh report token, which Report accepts once.
func (m *MemoryStore) SetInstructions(host string, in wire.Instructions) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in.Version, in.Host = wire.InstructionsVersion, host
	if in.Action != wire.ActionLive && in.ReportToken == "" {
		in.ReportToken = NewReportToken()
	}
	m.instructions[host] = in
}

// Instructions implements Store.
func (m *MemoryStore) Instructions(_ context.Context, host string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.instructions[host]
	if !ok {
		return nil, nil
	}
	if in.ReportToken != "" {
		m.reportTokens[host] = in.ReportToken
	}
	return json.Marshal(in)
}

// Report implements Store.
func (m *MemoryStore) Report(_ context.Context, r wire.Report) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	want, ok := m.reportTokens[r.Host]
	if !ok || subtle.ConstantTimeCompare([]byte(want), []byte(r.Token)) != 1 {
		return refuse(403, wire.ReasonUnknownReportToken, "no report is expected from this host with this token")
	}
	delete(m.reportTokens, r.Host)
	r.Token = ""
	m.reports[r.Host] = append(m.reports[r.Host], r)
	return nil
}

// Reports returns the reports host sent (tokens removed).
func (m *MemoryStore) Reports(host string) []wire.Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reports[host])
}

// Record implements Store.
func (m *MemoryStore) Record(_ context.Context, host string, r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.results[host] = append(m.results[host], r)
}

// Results returns what was recorded for host.
func (m *MemoryStore) Results(host string) []Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.results[host])
}

// LastReason is the reason of the last recorded result of host ("" when none).
func (m *MemoryStore) LastReason(host string) string {
	r := m.Results(host)
	if len(r) == 0 {
		return ""
	}
	return r[len(r)-1].Reason
}
