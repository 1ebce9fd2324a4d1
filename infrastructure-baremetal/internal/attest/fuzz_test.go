package attest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-tpm/tpm2"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

// rsaPublic is a TPMT_PUBLIC for tmpl carrying a fresh RSA key (no TPM needed).
func rsaPublic(t testing.TB, tmpl tpm2.TPMTPublic) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.Bytes()})
	return tpm2.Marshal(tmpl)
}

// FuzzDecodeAttestationRequests feeds arbitrary bodies to the request decoders and, when they decode, to
// Start and Verify with a live session, so the TPM structure parsers (TPMT_PUBLIC, TPMS_ATTEST,
// TPMT_SIGNATURE) see attacker-controlled bytes. Nothing may panic; nothing forged may pass.
func FuzzDecodeAttestationRequests(f *testing.F) {
	ek, ak := rsaPublic(f, tpm2.RSAEKTemplate), rsaPublic(f, wire.AKTemplate)
	start, _ := json.Marshal(wire.StartRequest{Ticket: "t", EKPublic: ek, AKPublic: ak, AgentNonce: make([]byte, wire.AgentNonceSize)})
	verify, _ := json.Marshal(wire.VerifyRequest{Session: "s", Secret: []byte("x"), Quote: []byte{0xff, 0x54, 0x43, 0x47, 0x80, 0x18},
		Signature: []byte{0, 0x14, 0, 0x0b, 0, 1, 0}, PCRValues: map[int][]byte{0: make([]byte, 32)}})
	for _, seed := range [][]byte{start, verify, []byte(`{}`), []byte(`{"ticket":"t","ekPublic":"AAE=","akPublic":"AAE="}`),
		[]byte(`{"session":"s","quote":"/1RDRw==","signature":"AA==","pcrValues":{"99":"AA=="}}`), []byte(`{"unknown":1}`),
		[]byte(`{"ticket":"t"} trailing`), []byte(`[`), bytes.Repeat([]byte(`[`), 10000)} {
		f.Add(seed)
	}
	store := attest.NewMemoryStore()
	svc := attest.New(attest.Config{InsecureAcceptAnyEK: true, MaxTicketsPerHost: 1 << 30}, store, logr.Discard(), nil)
	from := netip.MustParseAddr("192.0.2.10")
	ticket := func() string {
		tk, err := svc.IssueTicket("fuzz/host", from, true)
		if err != nil {
			panic(err)
		}
		return tk
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte) {
		if req, err := attest.DecodeStartRequest(bytes.NewReader(body)); err == nil {
			req.Ticket = ticket()
			_, _ = svc.Start(ctx, req, from)
		}
		if req, err := attest.DecodeVerifyRequest(bytes.NewReader(body)); err == nil {
			ch, err := svc.Start(ctx, &wire.StartRequest{Ticket: ticket(), EKPublic: ek, AKPublic: ak, AgentNonce: make([]byte, wire.AgentNonceSize)}, from)
			if err != nil {
				t.Fatalf("failed to start a session: %v", err)
			}
			req.Session = ch.Session
			if _, err := svc.Verify(ctx, req, from); err == nil {
				t.Fatalf("a forged answer passed verification: %q", body)
			}
		}
	})
}
