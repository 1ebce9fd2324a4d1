package attest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// EKCertIndexRSA is the TCG NV index of the RSA 2048 EK certificate.
const EKCertIndexRSA = 0x01c00002

// OpenTPM opens a TPM: a character device (/dev/tpmrm0) or the unix socket of a software TPM (swtpm
// socket --server type=unixio). A socket TPM keeps ONE connection for its lifetime: go-tpm's linuxudstpm
// reconnects for every command, which swtpm does not serve reliably.
func OpenTPM(path string) (transport.TPMCloser, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open TPM %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket != 0 {
		conn, err := net.Dial("unix", path)
		if err != nil {
			return nil, fmt.Errorf("failed to connect to TPM socket %s: %w", path, err)
		}
		return &socketTPM{conn: conn}, nil
	}
	t, err := linuxtpm.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open TPM device %s: %w", path, err)
	}
	return t, nil
}

// socketTPM sends raw TPM commands over one stream connection and reads one response per command.
type socketTPM struct {
	mu   sync.Mutex
	conn net.Conn
}

// Send implements transport.TPM.
func (s *socketTPM) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.conn.Write(cmd); err != nil {
		return nil, fmt.Errorf("failed to send TPM command: %w", err)
	}
	hdr := make([]byte, 10) // tag (2), size (4), response code (4)
	if _, err := io.ReadFull(s.conn, hdr); err != nil {
		return nil, fmt.Errorf("failed to read TPM response header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > 1<<20 {
		return nil, fmt.Errorf("failed to read TPM response: invalid size %d", size)
	}
	rsp := make([]byte, size)
	copy(rsp, hdr)
	if _, err := io.ReadFull(s.conn, rsp[10:]); err != nil {
		return nil, fmt.Errorf("failed to read TPM response body: %w", err)
	}
	return rsp, nil
}

// Close implements transport.TPMCloser.
func (s *socketTPM) Close() error { return s.conn.Close() }

// AKTemplate is the attestation key: a restricted RSA-2048 signing key (RSASSA-SHA256) that never leaves
// the TPM. It is a primary key of the endorsement hierarchy, so the same TPM re-creates it on every boot.
var AKTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgRSA,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true, UserWithAuth: true,
		NoDA: true, Restricted: true, SignEncrypt: true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
		Scheme: tpm2.TPMTRSAScheme{
			Scheme:  tpm2.TPMAlgRSASSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: tpm2.TPMAlgSHA256}),
		},
		KeyBits: 2048,
	}),
	Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: make([]byte, 256)}),
}

// Key is a loaded TPM key.
type Key struct {
	Handle tpm2.TPMHandle
	Name   tpm2.TPM2BName
	Public tpm2.TPMTPublic
}

// Keys are the EK and AK of one TPM, loaded.
type Keys struct {
	tpm    transport.TPM
	EK, AK Key
	// EKCertificate is the DER certificate from NV, nil when the TPM has none.
	EKCertificate []byte
}

// LoadKeys creates (deterministically re-derives) the RSA EK and the AK and reads the EK certificate.
func LoadKeys(t transport.TPM) (*Keys, error) {
	ek, err := createPrimary(t, tpm2.RSAEKTemplate)
	if err != nil {
		return nil, fmt.Errorf("failed to create the endorsement key: %w", err)
	}
	ak, err := createPrimary(t, AKTemplate)
	if err != nil {
		_, _ = tpm2.FlushContext{FlushHandle: ek.Handle}.Execute(t)
		return nil, fmt.Errorf("failed to create the attestation key: %w", err)
	}
	k := &Keys{tpm: t, EK: *ek, AK: *ak}
	cert, err := ReadNV(t, EKCertIndexRSA)
	if err == nil {
		k.EKCertificate = trimDER(cert)
	}
	return k, nil
}

func createPrimary(t transport.TPM, tmpl tpm2.TPMTPublic) (*Key, error) {
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(tmpl)}.Execute(t)
	if err != nil {
		return nil, err
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		return nil, err
	}
	return &Key{Handle: rsp.ObjectHandle, Name: rsp.Name, Public: *pub}, nil
}

// Close flushes the keys from the TPM.
func (k *Keys) Close() error {
	var errs []error
	for _, h := range []tpm2.TPMHandle{k.AK.Handle, k.EK.Handle} {
		if _, err := (tpm2.FlushContext{FlushHandle: h}).Execute(k.tpm); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Activate runs ActivateCredential: the TPM releases the secret only when the challenge was made for
// this AK's name and encrypted to this EK.
func (k *Keys) Activate(blob, encSecret []byte) ([]byte, error) {
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.NamedHandle{Handle: k.AK.Handle, Name: k.AK.Name},
		KeyHandle: tpm2.AuthHandle{Handle: k.EK.Handle, Name: k.EK.Name,
			Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, ekPolicy)},
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: blob},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: encSecret},
	}.Execute(k.tpm)
	if err != nil {
		return nil, fmt.Errorf("failed to activate credential: %w", err)
	}
	return rsp.CertInfo.Buffer, nil
}

// ekPolicy satisfies the TCG EK's policy (PolicySecret with the endorsement hierarchy).
func ekPolicy(t transport.TPM, handle tpm2.TPMISHPolicy, nonceTPM tpm2.TPM2BNonce) error {
	_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: handle, NonceTPM: nonceTPM}.Execute(t)
	return err
}

// PCRSelection selects SHA-256 PCRs.
func PCRSelection(pcrs []int) tpm2.TPMLPCRSelection {
	u := make([]uint, 0, len(pcrs))
	for _, p := range pcrs {
		if p >= 0 && p < 24 {
			u = append(u, uint(p))
		}
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{
		Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(u...),
	}}}
}

// Quote signs the selected PCRs with the AK, qualified by nonce, and returns the TPMS_ATTEST bytes, the
// TPMT_SIGNATURE bytes and the PCR values.
func (k *Keys) Quote(nonce []byte, pcrs []int) (quote, sig []byte, values map[int][]byte, err error) {
	rsp, err := tpm2.Quote{
		SignHandle:     tpm2.NamedHandle{Handle: k.AK.Handle, Name: k.AK.Name},
		QualifyingData: tpm2.TPM2BData{Buffer: nonce},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
		PCRSelect:      PCRSelection(pcrs),
	}.Execute(k.tpm)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to quote PCRs: %w", err)
	}
	values, err = ReadPCRs(k.tpm, pcrs)
	if err != nil {
		return nil, nil, nil, err
	}
	return rsp.Quoted.Bytes(), tpm2.Marshal(rsp.Signature), values, nil
}

// ReadPCRs reads SHA-256 PCR values (PCR_Read returns at most 8 per call).
func ReadPCRs(t transport.TPM, pcrs []int) (map[int][]byte, error) {
	sorted := append([]int(nil), pcrs...)
	sort.Ints(sorted)
	values := make(map[int][]byte, len(sorted))
	for i := 0; i < len(sorted); i += 8 {
		chunk := sorted[i:min(i+8, len(sorted))]
		rsp, err := tpm2.PCRRead{PCRSelectionIn: PCRSelection(chunk)}.Execute(t)
		if err != nil {
			return nil, fmt.Errorf("failed to read PCRs %v: %w", chunk, err)
		}
		if len(rsp.PCRValues.Digests) != len(chunk) {
			return nil, fmt.Errorf("failed to read PCRs %v: TPM returned %d values", chunk, len(rsp.PCRValues.Digests))
		}
		for j, p := range chunk {
			values[p] = rsp.PCRValues.Digests[j].Buffer
		}
	}
	return values, nil
}

// ReadNV reads a whole NV index.
func ReadNV(t transport.TPM, index tpm2.TPMHandle) ([]byte, error) {
	pub, err := tpm2.NVReadPublic{NVIndex: index}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("failed to read NV index %#x: %w", uint32(index), err)
	}
	nv, err := pub.NVPublic.Contents()
	if err != nil {
		return nil, fmt.Errorf("failed to decode NV index %#x: %w", uint32(index), err)
	}
	var out bytes.Buffer
	for off := uint16(0); off < nv.DataSize; {
		n := min(nv.DataSize-off, 512)
		rsp, err := tpm2.NVRead{
			AuthHandle: tpm2.NamedHandle{Handle: index, Name: pub.NVName},
			NVIndex:    tpm2.NamedHandle{Handle: index, Name: pub.NVName},
			Size:       n, Offset: off,
		}.Execute(t)
		if err != nil {
			return nil, fmt.Errorf("failed to read NV index %#x at %d: %w", uint32(index), off, err)
		}
		out.Write(rsp.Data.Buffer)
		off += n
	}
	return out.Bytes(), nil
}

// trimDER cuts NV padding after a DER SEQUENCE.
func trimDER(b []byte) []byte {
	if len(b) < 4 || b[0] != 0x30 {
		return b
	}
	switch {
	case b[1] < 0x80:
		return b[:min(len(b), 2+int(b[1]))]
	case b[1] == 0x82:
		return b[:min(len(b), 4+int(binary.BigEndian.Uint16(b[2:4])))]
	}
	return b
}
