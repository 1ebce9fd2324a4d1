// Package certs gives the webhook server its TLS certificate without cert-manager: the network add-on
// runs before the pod network exists, so it cannot depend on an add-on that needs pods to be networked.
// The first replica creates a CA and a serving certificate in a Secret (create-if-absent, so replicas
// agree), every replica writes them to its cert directory, and the CA is patched into the
// ValidatingWebhookConfiguration's caBundle.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options name the objects involved.
type Options struct {
	// Namespace of the Secret and the Service.
	Namespace string
	// SecretName holds ca.crt, tls.crt and tls.key.
	SecretName string
	// ServiceName is the webhook Service (the certificate's DNS names derive from it).
	ServiceName string
	// WebhookConfigurationName is the ValidatingWebhookConfiguration whose caBundle is set.
	WebhookConfigurationName string
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
	// Validity of a new certificate; renewed when less than a third is left.
	Validity time.Duration
}

// Ensure makes sure the Secret holds a valid certificate for the Service, writes it to CertDir and sets
// the caBundle. It uses a direct (uncached) client: it runs before the manager starts.
func Ensure(ctx context.Context, c client.Client, o Options) error {
	if o.Validity == 0 {
		o.Validity = 5 * 365 * 24 * time.Hour
	}
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.SecretName}, s)
	switch {
	case apierrors.IsNotFound(err):
		s, err = create(ctx, c, o)
		if err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("failed to get Secret %s/%s: %w", o.Namespace, o.SecretName, err)
	case !valid(s.Data, o):
		data, err := generate(o)
		if err != nil {
			return err
		}
		s.Data = data
		// Optimistic concurrency: if another replica renewed first, we fail and the restart reads its result.
		if err := c.Update(ctx, s); err != nil {
			return fmt.Errorf("failed to renew webhook certificate in Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
	}
	if err := os.MkdirAll(o.CertDir, 0o700); err != nil {
		return fmt.Errorf("failed to create cert dir %s: %w", o.CertDir, err)
	}
	for _, k := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(o.CertDir, k), s.Data[k], 0o600); err != nil {
			return fmt.Errorf("failed to write %s: %w", k, err)
		}
	}
	if o.WebhookConfigurationName == "" {
		return nil
	}
	wc := &admissionv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: o.WebhookConfigurationName}, wc); err != nil {
		return fmt.Errorf("failed to get ValidatingWebhookConfiguration %s: %w", o.WebhookConfigurationName, err)
	}
	base := wc.DeepCopy()
	changed := false
	for i := range wc.Webhooks {
		if !bytes.Equal(wc.Webhooks[i].ClientConfig.CABundle, s.Data["ca.crt"]) {
			wc.Webhooks[i].ClientConfig.CABundle, changed = s.Data["ca.crt"], true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Patch(ctx, wc, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("failed to set caBundle of ValidatingWebhookConfiguration %s: %w", o.WebhookConfigurationName, err)
	}
	return nil
}

func create(ctx context.Context, c client.Client, o Options) (*corev1.Secret, error) {
	data, err := generate(o)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.SecretName}, Type: corev1.SecretTypeTLS, Data: data}
	if err := c.Create(ctx, s); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("failed to create Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
		// Another replica won the race: use its certificate.
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return nil, fmt.Errorf("failed to get Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
	}
	return s, nil
}

func dnsNames(o Options) []string {
	return []string{o.ServiceName, o.ServiceName + "." + o.Namespace, o.ServiceName + "." + o.Namespace + ".svc", o.ServiceName + "." + o.Namespace + ".svc.cluster.local"}
}

// valid reports whether the Secret's certificate covers the Service and has a third of its life left.
func valid(data map[string][]byte, o Options) bool {
	block, _ := pem.Decode(data["tls.crt"])
	if block == nil || len(data["tls.key"]) == 0 || len(data["ca.crt"]) == 0 {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	if time.Until(cert.NotAfter) < cert.NotAfter.Sub(cert.NotBefore)/3 {
		return false
	}
	return cert.VerifyHostname(dnsNames(o)[2]) == nil
}

func generate(o Options) (map[string][]byte, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate CA key: %w", err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "yonder-net-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(o.Validity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("failed to create CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate serving key: %w", err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1), Subject: pkix.Name{CommonName: dnsNames(o)[2]}, DNSNames: dnsNames(o),
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(o.Validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("failed to create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("failed to encode serving key: %w", err)
	}
	return map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
