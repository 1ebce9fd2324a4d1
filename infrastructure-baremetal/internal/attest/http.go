package attest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
)

// maxRequestBytes bounds an attestation request (EK certificate chains are a few KiB).
const maxRequestBytes = 64 << 10

// Decode strictly decodes one JSON request body of at most maxRequestBytes: unknown fields, trailing
// data and oversize bodies are refused.
func Decode(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxRequestBytes+1))
	if err != nil {
		return fmt.Errorf("failed to read request: %w", err)
	}
	if len(data) > maxRequestBytes {
		return errors.New("failed to decode request: body too large")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("failed to decode request: %w", err)
	}
	if dec.More() {
		return errors.New("failed to decode request: trailing data")
	}
	return nil
}

// DecodeStartRequest decodes and sanity-checks a start request.
func DecodeStartRequest(r io.Reader) (*wire.StartRequest, error) {
	var req wire.StartRequest
	if err := Decode(r, &req); err != nil {
		return nil, err
	}
	if req.Ticket == "" || len(req.EKPublic) == 0 || len(req.AKPublic) == 0 {
		return nil, errors.New("failed to decode request: ticket, ekPublic and akPublic are required")
	}
	return &req, nil
}

// DecodeVerifyRequest decodes and sanity-checks a verify request.
func DecodeVerifyRequest(r io.Reader) (*wire.VerifyRequest, error) {
	var req wire.VerifyRequest
	if err := Decode(r, &req); err != nil {
		return nil, err
	}
	if req.Session == "" || len(req.Quote) == 0 || len(req.Signature) == 0 {
		return nil, errors.New("failed to decode request: session, quote and signature are required")
	}
	if len(req.PCRValues) > 24 {
		return nil, errors.New("failed to decode request: too many PCR values")
	}
	return &req, nil
}

// Handler serves the attestation API, the bootstrap-data endpoint and the provisioning report, each request within its source
// address's rate limit (Config.RateLimit).
func (s *Service) Handler() http.Handler {
	return s.rateLimited(s.api())
}

// rateLimited answers 429 with Retry-After, before anything is decoded, to a source address over its
// limit: the refusal spends no ticket, session or token and is recorded on no host (so it can never
// power a host off), and the agent waits and sends the same request again.
func (s *Service) rateLimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, err := SourceAddr(r)
		if err != nil {
			next.ServeHTTP(w, r) // refused there, as malformed
			return
		}
		if ok, wait := s.limiter.allow(from); !ok {
			s.metrics.Results.WithLabelValues(wire.ReasonRateLimited).Inc()
			s.log.V(4).Info("Refusing attestation request over the rate limit", "from", from.String())
			secs := max(1, int(math.Ceil(wait.Seconds())))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeError(w, refuse(http.StatusTooManyRequests, wire.ReasonRateLimited,
				"too many requests from this address: retry after %d s", secs))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Service) api() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+wire.PathStart, func(w http.ResponseWriter, r *http.Request) {
		req, err := DecodeStartRequest(r.Body)
		if err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "%v", err)))
			return
		}
		from, err := SourceAddr(r)
		if err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "no source address: %v", err)))
			return
		}
		rsp, err := s.Start(r.Context(), req, from)
		respond(w, rsp, err)
	})
	mux.HandleFunc("POST "+wire.PathVerify, func(w http.ResponseWriter, r *http.Request) {
		req, err := DecodeVerifyRequest(r.Body)
		if err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "%v", err)))
			return
		}
		from, err := SourceAddr(r)
		if err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "no source address: %v", err)))
			return
		}
		rsp, err := s.Verify(r.Context(), req, from)
		respond(w, rsp, err)
	})
	mux.HandleFunc("GET "+wire.PathBootstrap+"{token}", func(w http.ResponseWriter, r *http.Request) {
		token := r.PathValue("token")
		if token == "" || strings.ContainsAny(token, "/?") {
			writeError(w, refuse(404, wire.ReasonUnknownReleaseToken, "no token"))
			return
		}
		from, err := SourceAddr(r)
		if err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "no source address: %v", err)))
			return
		}
		env, err := s.Release(r.Context(), token, from)
		if err == nil {
			w.Header().Set("Cache-Control", "no-store")
		}
		respond(w, env, err)
	})
	mux.HandleFunc("POST "+wire.PathReport, func(w http.ResponseWriter, r *http.Request) {
		var req wire.Report
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, s.fail(r.Context(), origin{}, refuse(400, wire.ReasonMalformedRequest, "the report is not JSON: %v", err)))
			return
		}
		rsp, err := s.Report(r.Context(), &req)
		respond(w, rsp, err)
	})
	return mux
}

// LoadCertPool reads PEM certificates (CA bundles) from files into a pool; a file without a certificate
// is an error.
func LoadCertPool(files ...string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the operator names the CA files
		if err != nil {
			return nil, fmt.Errorf("failed to read CA file: %w", err)
		}
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("failed to load CA file %s: it holds no PEM certificate", f)
		}
	}
	return pool, nil
}

// LoadSigningKey reads a PEM "PRIVATE KEY" (PKCS#8) Ed25519 key, as `openssl genpkey -algorithm ed25519`
// writes it.
func LoadSigningKey(file string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(file) //nolint:gosec // the operator names the key file
	if err != nil {
		return nil, fmt.Errorf("failed to read the signing key: %w", err)
	}
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("failed to load the signing key %s: no PEM PRIVATE KEY block", file)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("failed to load the signing key %s: %w", file, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("failed to load the signing key %s: %T is not an Ed25519 key", file, k)
	}
	return ek, nil
}

// SourceAddr is a request's source address (IPv4-mapped addresses unmapped): what boot tickets are bound to.
func SourceAddr(r *http.Request) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("failed to parse remote address %q: %w", r.RemoteAddr, err)
	}
	return ap.Addr().Unmap(), nil
}

func respond(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var re *RefusedError
	if !errors.As(err, &re) {
		re = refuse(500, "InternalError", "the server failed to process the request")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(re.Status)
	_ = json.NewEncoder(w).Encode(wire.Refusal{Reason: re.Reason, Message: re.Message})
}
