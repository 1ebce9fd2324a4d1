package attest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-tpm/tpm2"
)

// RefusedError is the server's refusal, with the reason it named.
type RefusedError struct {
	StatusCode int
	Refusal
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("attestation refused (%d %s): %s", e.StatusCode, e.Reason, e.Message)
}

// Client talks to the boot server's attestation API.
type Client struct {
	// Server is the boot server's base URL (yonder.server= on the kernel command line).
	Server string
	// HTTP is the client to use (default http.DefaultClient); production uses HTTPS with the site CA.
	HTTP *http.Client
	// ServerKey is the provider's Ed25519 public key (from the boot image, never from the network): when set,
	// bootstrap data whose envelope it did not sign is refused (ErrEnvelopeNotSigned) before it is opened.
	ServerKey ed25519.PublicKey
	// RetryBudget is how long one request waits in total on a server that answers 429 (rate limited)
	// before it gives up with that refusal (default DefaultRetryBudget). A rack booting at once may
	// briefly exceed the server's limits: waiting is right, failing would leave the host to the
	// provisioning timeout. Each wait is the answer's Retry-After (at most MaxRetryAfter).
	RetryBudget time.Duration
	// Now is the clock that envelope expiries are checked against (default time.Now; tests).
	Now func() time.Time
}

// DefaultRetryBudget is Client.RetryBudget's default: the three requests of an attestation wait at most
// 9 minutes together, inside the provider's default provisioning timeout (15 min).
const DefaultRetryBudget = 3 * time.Minute

// MaxRetryAfter caps one wait on a 429, whatever the server's Retry-After says.
const MaxRetryAfter = time.Minute

// ErrEnvelopeNotSigned refuses bootstrap data without the provider's signature.
var ErrEnvelopeNotSigned = errors.New(ReasonEnvelopeNotSigned + ": the bootstrap data is not signed by the provider's key: " +
	"another server answered on the boot network, or the manager's signing key does not match the boot image's")

// ErrEnvelopeForAnotherSession refuses bootstrap data that the provider released to another session
// than this agent's (its signed AgentNonce is not the one this agent sent).
var ErrEnvelopeForAnotherSession = errors.New(ReasonEnvelopeForAnotherSession + ": the bootstrap data was released to another attestation session " +
	"(an earlier boot's or another host's, replayed): another server answered on the boot network")

// ErrEnvelopeExpired refuses bootstrap data past its signed expiry.
var ErrEnvelopeExpired = errors.New(ReasonEnvelopeExpired + ": the bootstrap data is past its expiry: it was recorded and replayed, " +
	"or this host's clock is off (check the RTC)")

// ParseServerKey reads a PEM "PUBLIC KEY" (PKIX) Ed25519 key, as `openssl pkey -pubout` writes it.
func ParseServerKey(data []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("failed to parse the provider key: no PEM PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the provider key: %w", err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("failed to parse the provider key: %T is not an Ed25519 key", k)
	}
	return ek, nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("failed to encode %s request: %w", path, err)
		}
		body = b
	}
	var waited time.Duration
	for {
		data, retryAfter, err := c.send(ctx, method, path, body)
		if err == nil {
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("failed to decode %s response: %w", path, err)
			}
			return nil
		}
		var re *RefusedError
		if !errors.As(err, &re) || re.StatusCode != http.StatusTooManyRequests {
			return err
		}
		budget := c.RetryBudget
		if budget == 0 {
			budget = DefaultRetryBudget
		}
		if waited+retryAfter > budget {
			return fmt.Errorf("failed to call %s: rate limited for longer than %s: %w", path, budget, err)
		}
		// The server processed nothing (the limit is checked first): the same request is safe to repeat.
		waited += retryAfter
		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to call %s: %w (while rate limited: %w)", path, ctx.Err(), err)
		case <-time.After(retryAfter):
		}
	}
}

// send makes one request; a non-200 answer is a *RefusedError, with the wait its Retry-After asks for.
func (c *Client) send(ctx context.Context, method, path string, body []byte) ([]byte, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Server, "/")+path, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to build %s request: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	rsp, err := hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to call %s: %w", path, err)
	}
	defer func() { _ = rsp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(rsp.Body, 16<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read %s response: %w", path, err)
	}
	if rsp.StatusCode != http.StatusOK {
		e := &RefusedError{StatusCode: rsp.StatusCode}
		if json.Unmarshal(data, &e.Refusal) != nil || e.Reason == "" {
			e.Reason, e.Message = "HTTP"+fmt.Sprint(rsp.StatusCode), strings.TrimSpace(string(data))
		}
		return nil, retryAfter(rsp.Header.Get("Retry-After")), e
	}
	return data, 0, nil
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), 1 s when absent or unreadable, and at
// least 100 ms and at most MaxRetryAfter: a server cannot park the agent, nor make it spin.
func retryAfter(v string) time.Duration {
	d := time.Second
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(min(s, 3600)) * time.Second // no overflow from a huge value
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 100*time.Millisecond), MaxRetryAfter)
}

// Start opens a session for the loaded keys, with a fresh agent nonce (returned in the response's
// AgentNonce, for Fetch).
func (c *Client) Start(ctx context.Context, ticket string, k *Keys) (*StartResponse, error) {
	nonce := make([]byte, AgentNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("failed to draw the agent nonce: %w", err)
	}
	req := StartRequest{Ticket: ticket, EKPublic: tpm2.Marshal(k.EK.Public), EKCertificate: k.EKCertificate,
		AKPublic: tpm2.Marshal(k.AK.Public), AgentNonce: nonce}
	var rsp StartResponse
	if err := c.do(ctx, http.MethodPost, PathStart, req, &rsp); err != nil {
		return nil, err
	}
	rsp.AgentNonce = nonce
	return &rsp, nil
}

// Answer activates the challenge's credential and quotes the requested PCRs with its nonce.
func Answer(k *Keys, ch *StartResponse) (*VerifyRequest, error) {
	secret, err := k.Activate(ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		return nil, err
	}
	quote, sig, values, err := k.Quote(ch.Nonce, ch.PCRs)
	if err != nil {
		return nil, err
	}
	return &VerifyRequest{Session: ch.Session, Secret: secret, Quote: quote, Signature: sig, PCRValues: values}, nil
}

// Verify submits an answer and returns the release token.
func (c *Client) Verify(ctx context.Context, req *VerifyRequest) (string, error) {
	var rsp VerifyResponse
	if err := c.do(ctx, http.MethodPost, PathVerify, req, &rsp); err != nil {
		return "", err
	}
	return rsp.ReleaseToken, nil
}

// Fetch downloads the envelope for a release token (the server answers once) of the session this agent
// opened with agentNonce (StartResponse.AgentNonce). It checks the provider's signature (with ServerKey),
// then that the envelope is this session's and not expired.
func (c *Client) Fetch(ctx context.Context, token string, agentNonce []byte) (*Envelope, error) {
	var env Envelope
	if err := c.do(ctx, http.MethodGet, PathBootstrap+token, nil, &env); err != nil {
		return nil, err
	}
	if c.ServerKey != nil && !ed25519.Verify(c.ServerKey, env.SignedBytes(), env.Signature) {
		return nil, ErrEnvelopeNotSigned
	}
	if len(agentNonce) == 0 || subtle.ConstantTimeCompare(env.AgentNonce, agentNonce) != 1 {
		return nil, ErrEnvelopeForAnotherSession
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	if !now().Before(env.Expires) {
		return nil, fmt.Errorf("%w (expired %s)", ErrEnvelopeExpired, env.Expires.UTC().Format(time.RFC3339))
	}
	return &env, nil
}

// Open decrypts an envelope with the TPM.
func (k *Keys) Open(env *Envelope) ([]byte, error) {
	key, err := k.Activate(env.CredentialBlob, env.EncryptedSecret)
	if err != nil {
		return nil, fmt.Errorf("failed to unwrap the bootstrap data key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("failed to open bootstrap data: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("failed to open bootstrap data: %w", err)
	}
	plain, err := gcm.Open(nil, env.Nonce, env.Ciphertext, []byte(EnvelopeAAD))
	if err != nil {
		return nil, fmt.Errorf("failed to decrypt bootstrap data: %w", err)
	}
	return plain, nil
}

// Attest runs the whole exchange with a loaded TPM and returns the bootstrap data.
func (c *Client) Attest(ctx context.Context, ticket string, k *Keys) ([]byte, error) {
	ch, err := c.Start(ctx, ticket, k)
	if err != nil {
		return nil, err
	}
	ans, err := Answer(k, ch)
	if err != nil {
		return nil, err
	}
	token, err := c.Verify(ctx, ans)
	if err != nil {
		return nil, err
	}
	env, err := c.Fetch(ctx, token, ch.AgentNonce)
	if err != nil {
		return nil, err
	}
	return k.Open(env)
}

// ParseCmdline returns yonder.server= and yonder.ticket= from a kernel command line (/proc/cmdline).
func ParseCmdline(cmdline string) (server, ticket string) {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "yonder.server="); ok {
			server = v
		}
		if v, ok := strings.CutPrefix(f, "yonder.ticket="); ok {
			ticket = v
		}
	}
	return server, ticket
}
