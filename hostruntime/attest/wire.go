// Package attest is the host side of Yonder's TPM 2.0 attestation (`yonder-agent attest`) and the wire
// protocol it speaks with the bare-metal boot server:
//
//  1. POST /attestation/v1/start  {ticket, EK public (+ certificate), AK public, the agent's fresh nonce}
//     ← session, MakeCredential challenge bound to the AK's name and the EK, a fresh nonce, the PCRs to quote
//  2. the TPM proves AK and EK live together (ActivateCredential) and quotes the PCRs with the nonce
//     POST /attestation/v1/verify {session, activated secret, quote, signature, PCR values} ← release token
//  3. GET /bootstrap/v1/<release token> (once) ← the bootstrap data, AES-GCM encrypted under a key that is
//     itself a credential for this AK on this EK: only this TPM can open it. The provider signs the
//     envelope together with the agent's nonce from step 1 and an expiry, so a recorded envelope (an
//     earlier boot's, another session's) replayed by a rogue server is refused.
//
// A server that is busy with one source address answers 429 with Retry-After; the agent waits and
// retries (Client.RetryBudget) instead of failing the boot.
//
// The protocol types live here, in the agent's package, so that the server (infrastructure-baremetal)
// and the agent decode the same JSON.
package attest

import (
	"encoding/binary"
	"time"
)

// API paths.
const (
	PathStart     = "/attestation/v1/start"
	PathVerify    = "/attestation/v1/verify"
	PathBootstrap = "/bootstrap/v1/"
)

// StartRequest opens an attestation session.
type StartRequest struct {
	// Ticket is the one-time boot ticket from the kernel command line (yonder.ticket=).
	Ticket string `json:"ticket"`
	// EKPublic is the endorsement key's TPMT_PUBLIC.
	EKPublic []byte `json:"ekPublic"`
	// EKCertificate is the DER EK certificate from the TPM's NV index, when the TPM has one.
	EKCertificate []byte `json:"ekCertificate,omitempty"`
	// AKPublic is the attestation key's TPMT_PUBLIC.
	AKPublic []byte `json:"akPublic"`
	// AgentNonce is fresh randomness the agent chose for this boot (AgentNonceSize bytes). The server
	// signs the released envelope together with it: the AK is re-derived identically on every boot, so
	// without it an envelope recorded from an earlier boot would open and verify again.
	AgentNonce []byte `json:"agentNonce"`
}

// AgentNonceSize is the length of StartRequest.AgentNonce.
const AgentNonceSize = 32

// StartResponse is the server's challenge.
type StartResponse struct {
	Session string `json:"session"`
	// CredentialBlob and EncryptedSecret are a MakeCredential challenge (TPM2B_ID_OBJECT and
	// TPM2B_ENCRYPTED_SECRET contents) for the AK's name, encrypted to the EK.
	CredentialBlob  []byte `json:"credentialBlob"`
	EncryptedSecret []byte `json:"encryptedSecret"`
	// Nonce must be the quote's qualifying data.
	Nonce []byte `json:"nonce"`
	// PCRs are the SHA-256 PCR indexes to quote.
	PCRs []int `json:"pcrs"`
	// AgentNonce is the nonce this agent sent (filled in by Client.Start, never by the server): the
	// envelope released for this session must carry it (Client.Fetch).
	AgentNonce []byte `json:"-"`
}

// VerifyRequest answers the challenge.
type VerifyRequest struct {
	Session string `json:"session"`
	// Secret is what ActivateCredential returned.
	Secret []byte `json:"secret"`
	// Quote is the TPMS_ATTEST the TPM produced, Signature its TPMT_SIGNATURE.
	Quote     []byte `json:"quote"`
	Signature []byte `json:"signature"`
	// PCRValues are the SHA-256 values of the quoted PCRs, by index.
	PCRValues map[int][]byte `json:"pcrValues"`
}

// VerifyResponse carries the single-use token for the bootstrap data.
type VerifyResponse struct {
	ReleaseToken string `json:"releaseToken"`
}

// Envelope is the bootstrap data, encrypted for one TPM.
type Envelope struct {
	// CredentialBlob and EncryptedSecret carry the AES-256 key as a credential for the AK on the EK.
	CredentialBlob  []byte `json:"credentialBlob"`
	EncryptedSecret []byte `json:"encryptedSecret"`
	// Nonce and Ciphertext are AES-256-GCM with EnvelopeAAD as additional data.
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
	// Signature is the provider's Ed25519 signature of SignedBytes, when the server has a signing key: the
	// encryption proves only that this TPM can read the data (anyone can encrypt to an EK), the signature
	// that the provider sent it. An agent with the provider's public key (built into its boot image)
	// refuses an envelope without a valid one.
	Signature []byte `json:"signature,omitempty"`
	// AgentNonce is the StartRequest.AgentNonce of the session the envelope was released to, and Expires
	// (whole seconds) when it stops being accepted; both are signed, so the agent refuses an envelope
	// meant for another session (ErrEnvelopeForAnotherSession) or a stale one (ErrEnvelopeExpired).
	AgentNonce []byte    `json:"agentNonce"`
	Expires    time.Time `json:"expires"`
}

// SignedBytes is what Signature signs: a domain separator, every other field length-prefixed, and the
// expiry in Unix seconds.
func (e *Envelope) SignedBytes() []byte {
	b := []byte("yonder-bootstrap-signature-v2\x00")
	for _, f := range [][]byte{e.CredentialBlob, e.EncryptedSecret, e.Nonce, e.Ciphertext, e.AgentNonce} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f))) //nolint:gosec // fields are at most 16 MiB (the agent's read limit)
		b = append(b, f...)
	}
	return binary.BigEndian.AppendUint64(b, uint64(e.Expires.Unix())) //nolint:gosec // a two's-complement encoding is as good as any
}

// EnvelopeAAD is the GCM additional data of an Envelope.
const EnvelopeAAD = "yonder-bootstrap-v1"

// Refusal is the body of every error response; Reason is one of the Reason* constants.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reasons the server gives for refusing; each names the check that failed. They are also the reasons of
// the host's attestation condition.
const (
	ReasonMalformedRequest           = "MalformedRequest"
	ReasonUnknownTicket              = "UnknownTicket"
	ReasonEKMismatch                 = "EKMismatch"
	ReasonEKCertificateMismatch      = "EKCertificateMismatch"
	ReasonEKCertificateUntrusted     = "EKCertificateUntrusted"
	ReasonEKCertificateMissing       = "EKCertificateMissing"
	ReasonAKInvalid                  = "AKInvalid"
	ReasonUnknownSession             = "UnknownSession"
	ReasonNonceReplayed              = "NonceReplayed"
	ReasonNonceMismatch              = "NonceMismatch"
	ReasonCredentialActivationFailed = "CredentialActivationFailed" //nolint:gosec // a reason name, not a credential
	ReasonQuoteInvalid               = "QuoteInvalid"
	ReasonQuoteSignatureInvalid      = "QuoteSignatureInvalid"
	ReasonPCRDigestMismatch          = "PCRDigestMismatch"
	ReasonPCRMismatch                = "PCRMismatch"
	ReasonUnknownReleaseToken        = "UnknownReleaseToken"
	ReasonAlreadyReleased            = "BootstrapDataAlreadyReleased"
	ReasonNoBootstrapData            = "NoBootstrapData"
	// ReasonTicketBoundElsewhere: the ticket was issued to another source address than the request's.
	ReasonTicketBoundElsewhere = "TicketBoundToAnotherAddress"
	// ReasonEnrolmentClosed: the host has no pinned TPM, no registered EK fingerprint and no open window.
	ReasonEnrolmentClosed = "EnrolmentClosed"
	// ReasonEKRootsNotConfigured: the server has no TPM vendor roots and was not told to accept any EK.
	ReasonEKRootsNotConfigured = "EKRootsNotConfigured"
	// ReasonRateLimited: the request's source address sent more than its share (HTTP 429, Retry-After);
	// nothing was processed, the agent waits and sends it again.
	ReasonRateLimited = "RateLimited"
)

// ReasonEnvelopeNotSigned is the agent's own refusal of bootstrap data that its provider did not sign
// (ErrEnvelopeNotSigned): what a rogue boot server on the LAN gets.
const ReasonEnvelopeNotSigned = "EnvelopeNotSignedByProvider"

// ReasonEnvelopeForAnotherSession is the agent's refusal of a provider-signed envelope that was released
// to another session (ErrEnvelopeForAnotherSession): a recording replayed by a rogue server.
const ReasonEnvelopeForAnotherSession = "EnvelopeForAnotherSession"

// ReasonEnvelopeExpired is the agent's refusal of a provider-signed envelope past its expiry
// (ErrEnvelopeExpired).
const ReasonEnvelopeExpired = "EnvelopeExpired"
