package attest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

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
}

// ErrEnvelopeNotSigned refuses bootstrap data without the provider's signature.
var ErrEnvelopeNotSigned = errors.New(ReasonEnvelopeNotSigned + ": the bootstrap data is not signed by the provider's key: " +
	"another server answered on the boot network, or the manager's signing key does not match the boot image's")

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
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("failed to encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Server, "/")+path, body)
	if err != nil {
		return fmt.Errorf("failed to build %s request: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	rsp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("failed to call %s: %w", path, err)
	}
	defer func() { _ = rsp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(rsp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("failed to read %s response: %w", path, err)
	}
	if rsp.StatusCode != http.StatusOK {
		e := &RefusedError{StatusCode: rsp.StatusCode}
		if json.Unmarshal(data, &e.Refusal) != nil || e.Reason == "" {
			e.Reason, e.Message = "HTTP"+fmt.Sprint(rsp.StatusCode), strings.TrimSpace(string(data))
		}
		return e
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("failed to decode %s response: %w", path, err)
	}
	return nil
}

// Start opens a session for the loaded keys.
func (c *Client) Start(ctx context.Context, ticket string, k *Keys) (*StartResponse, error) {
	req := StartRequest{Ticket: ticket, EKPublic: tpm2.Marshal(k.EK.Public), EKCertificate: k.EKCertificate,
		AKPublic: tpm2.Marshal(k.AK.Public)}
	var rsp StartResponse
	if err := c.do(ctx, http.MethodPost, PathStart, req, &rsp); err != nil {
		return nil, err
	}
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

// Fetch downloads the envelope for a release token (the server answers once).
func (c *Client) Fetch(ctx context.Context, token string) (*Envelope, error) {
	var env Envelope
	if err := c.do(ctx, http.MethodGet, PathBootstrap+token, nil, &env); err != nil {
		return nil, err
	}
	if c.ServerKey != nil && !ed25519.Verify(c.ServerKey, env.SignedBytes(), env.Signature) {
		return nil, ErrEnvelopeNotSigned
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
	env, err := c.Fetch(ctx, token)
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
