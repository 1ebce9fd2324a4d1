package stack

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/yonder-dev/yonder/test/testpki"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// injectCAAnnotation is cert-manager's cainjector annotation: <namespace>/<Certificate name>.
const injectCAAnnotation = "cert-manager.io/inject-ca-from"

// certAuthority is the stack's stand-in for cert-manager's self-signed issuers: one CA per stack.
type certAuthority struct {
	ca      *testpki.CA
	certPEM []byte
}

func newCertAuthority() (*certAuthority, error) {
	ca, err := testpki.NewCA("yonder-stack-webhook-ca", 7*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("failed to create the webhook CA: %w", err)
	}
	return &certAuthority{ca: ca, certPEM: ca.CertPEM}, nil
}

// issue returns a serving certificate and key (PEM) for dnsNames.
func (ca *certAuthority) issue(dnsNames []string) (certPEM, keyPEM []byte, err error) {
	return ca.ca.Issue(testpki.Leaf{CommonName: dnsNames[0], DNSNames: dnsNames, Server: true, Validity: 7 * 24 * time.Hour})
}

var certificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// IssueCertificates does for the installed components what cert-manager's controller and cainjector do:
// each cert-manager Certificate gets its Secret (tls.crt, tls.key, ca.crt) signed by the stack's CA, and
// each webhook configuration or CRD annotated with cert-manager.io/inject-ca-from gets the CA as caBundle.
// Idempotent: existing Secrets are kept. Call it again after installing more components.
func (s *Stack) IssueCertificates(ctx context.Context) error {
	certs := &unstructured.UnstructuredList{}
	certs.SetGroupVersionKind(certificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := s.Client.List(ctx, certs); err != nil {
		return fmt.Errorf("failed to list cert-manager Certificates: %w", err)
	}
	for _, c := range certs.Items {
		secretName, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		dnsNames, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
		if secretName == "" || len(dnsNames) == 0 {
			return fmt.Errorf("failed to issue Certificate %s/%s: it has no secretName or dnsNames", c.GetNamespace(), c.GetName())
		}
		crt, key, err := s.ca.issue(dnsNames)
		if err != nil {
			return err
		}
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: c.GetNamespace()},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": s.ca.certPEM},
		}
		if err := s.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to write Secret %s/%s of Certificate %s: %w", sec.Namespace, sec.Name, c.GetName(), err)
		}
	}
	return s.injectCA(ctx)
}

// injectCA sets caBundle wherever cert-manager's cainjector would.
func (s *Stack) injectCA(ctx context.Context) error {
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := s.Client.List(ctx, vwcs); err != nil {
		return fmt.Errorf("failed to list validating webhook configurations: %w", err)
	}
	for i := range vwcs.Items {
		w := &vwcs.Items[i]
		if w.Annotations[injectCAAnnotation] == "" {
			continue
		}
		p := client.MergeFrom(w.DeepCopy())
		for j := range w.Webhooks {
			w.Webhooks[j].ClientConfig.CABundle = s.ca.certPEM
		}
		if err := s.Client.Patch(ctx, w, p); err != nil {
			return fmt.Errorf("failed to inject the CA into %s: %w", w.Name, err)
		}
	}
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := s.Client.List(ctx, mwcs); err != nil {
		return fmt.Errorf("failed to list mutating webhook configurations: %w", err)
	}
	for i := range mwcs.Items {
		w := &mwcs.Items[i]
		if w.Annotations[injectCAAnnotation] == "" {
			continue
		}
		p := client.MergeFrom(w.DeepCopy())
		for j := range w.Webhooks {
			w.Webhooks[j].ClientConfig.CABundle = s.ca.certPEM
		}
		if err := s.Client.Patch(ctx, w, p); err != nil {
			return fmt.Errorf("failed to inject the CA into %s: %w", w.Name, err)
		}
	}
	crds := &unstructured.UnstructuredList{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
	if err := s.Client.List(ctx, crds); err != nil {
		return fmt.Errorf("failed to list CRDs: %w", err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		if crd.GetAnnotations()[injectCAAnnotation] == "" || !strings.Contains(fmt.Sprint(crd.Object["spec"]), "Webhook") {
			continue
		}
		if _, ok, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig"); !ok {
			continue
		}
		p := client.MergeFrom(crd.DeepCopy())
		// unstructured carries []byte as base64 text, as JSON does.
		if err := unstructured.SetNestedField(crd.Object, base64.StdEncoding.EncodeToString(s.ca.certPEM), "spec", "conversion", "webhook", "clientConfig", "caBundle"); err != nil {
			return err
		}
		if err := s.Client.Patch(ctx, crd, p); err != nil {
			return fmt.Errorf("failed to inject the CA into CRD %s: %w", crd.GetName(), err)
		}
	}
	return nil
}
