package certmanager_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/yonder-dev/yonder/test/certmanager"
	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// providers are the providers whose components `make release-manifests` builds (the Makefile's PROVIDERS).
var providers = []string{"bootstrap", "controlplane", "infrastructure-ssh", "infrastructure-baremetal"}

// appliedKinds are the parts of a provider's components that cert-manager's wiring involves: the objects it
// reads or writes, and what they live in. Deployments and RBAC are left out: no pod runs on envtest.
var appliedKinds = []string{"Namespace", "CustomResourceDefinition", "Service", "Issuer", "Certificate",
	"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}

// TestOurComponentsGetTheirCertificatesFromCertManager installs the cert-manager resources of every
// provider's real components (kustomize's output, what `make release-manifests` ships) into an apiserver
// that runs the real cert-manager, and checks what a user's cluster depends on: each Certificate is issued by
// the Issuer it names, for the Service the apiserver calls, and the webhook configurations carry that CA.
func TestOurComponentsGetTheirCertificatesFromCertManager(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, kubeconfig := startAPIServer(ctx, t)

	// Render first: cert-manager's clock starts when it does, as in the stack after clusterctl init.
	components := map[string][]*unstructured.Unstructured{}
	for _, p := range providers {
		objs, err := render(ctx, p)
		g.Expect(err).NotTo(HaveOccurred())
		components[p] = objs
	}

	start := time.Now()
	cm, err := certmanager.Start(ctx, kubeconfig, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cert-manager's logs:\n%s", cm.Logs(40))
		}
		g.Expect(cm.Stop()).To(Succeed())
	})

	for _, p := range providers {
		g.Expect(apply(ctx, c, components[p])).To(Succeed(), "apply %s's components", p)
	}
	g.Expect(waitForFirstReady(ctx, c, cm)).To(Succeed())
	t.Logf("first Certificate Ready %s after certmanager.Start", time.Since(start).Round(10*time.Millisecond))
	g.Expect(cm.WaitForCertificates(ctx, c, 2*time.Minute)).To(Succeed())
	t.Logf("every Certificate Ready and every caBundle injected %s after certmanager.Start", time.Since(start).Round(10*time.Millisecond))

	for _, p := range providers {
		t.Run(p, func(t *testing.T) { checkProvider(ctx, t, c, components[p]) })
	}

	// The stand-in this package replaces signed every Certificate it found; cert-manager must not issue one
	// whose Issuer does not exist.
	t.Run("missing issuer", func(t *testing.T) { checkMissingIssuer(ctx, t, c) })
}

// checkProvider checks one provider's Certificates and webhook configurations against what cert-manager did.
func checkProvider(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	services := webhookServices(objs)
	var certs int
	for _, o := range objs {
		if o.GetKind() != "Certificate" {
			continue
		}
		certs++
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		cert := &unstructured.Unstructured{}
		cert.SetGroupVersionKind(certmanager.CertificateGVK)
		g.Expect(c.Get(ctx, key, cert)).To(Succeed())
		g.Expect(certmanager.IsReady(cert)).To(BeTrue(), "Certificate %s Ready", key)
		issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
		issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		g.Expect(issuerKind).To(Equal("Issuer"), "our components use a namespaced Issuer: %s", key)

		// Issued through ITS issuerRef: the Issuer it names is Ready, the CertificateRequest that cert-manager
		// made for it names that Issuer and was signed, and the Secret records that Issuer.
		issuer := &unstructured.Unstructured{}
		issuer.SetGroupVersionKind(certmanager.CertificateGVK.GroupVersion().WithKind("Issuer"))
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: issuerName}, issuer)).To(Succeed())
		g.Expect(certmanager.IsReady(issuer)).To(BeTrue(), "Issuer %s/%s Ready", key.Namespace, issuerName)
		crs := requestsOf(ctx, g, c, key)
		g.Expect(crs).NotTo(BeEmpty(), "CertificateRequests of %s", key)
		for _, cr := range crs {
			n, _, _ := unstructured.NestedString(cr.Object, "spec", "issuerRef", "name")
			g.Expect(n).To(Equal(issuerName), "CertificateRequest %s names the Certificate's Issuer", cr.GetName())
			g.Expect(certmanager.IsReady(&cr)).To(BeTrue(), "CertificateRequest %s Ready", cr.GetName())
		}
		sec := &corev1.Secret{}
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: secretName}, sec)).To(Succeed())
		g.Expect(sec.Annotations).To(HaveKeyWithValue("cert-manager.io/issuer-name", issuerName))
		g.Expect(sec.Annotations).To(HaveKeyWithValue("cert-manager.io/issuer-kind", issuerKind))
		for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
			g.Expect(sec.Data).To(HaveKeyWithValue(k, Not(BeEmpty())), "Secret %s/%s", key.Namespace, secretName)
		}
		_, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
		g.Expect(err).NotTo(HaveOccurred(), "tls.key is the key of tls.crt")
		leaf := parseCert(g, sec.Data["tls.crt"])

		// The CA is what this Issuer's type makes it: a SelfSigned Issuer signs the certificate with its own key.
		if _, selfSigned, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned"); selfSigned {
			g.Expect(sec.Data["ca.crt"]).To(Equal(sec.Data["tls.crt"]), "a SelfSigned Issuer's ca.crt is the certificate itself")
			// CheckSignatureFrom would insist on a CA parent; a self-signed serving certificate is not one.
			g.Expect(leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature)).To(Succeed(), "the certificate is signed by its own key")
			g.Expect(leaf.RawIssuer).To(Equal(leaf.RawSubject), "a self-signed certificate is its own issuer")
		} else {
			t.Fatalf("Issuer %s/%s is neither SelfSigned nor known to this test: %v", key.Namespace, issuerName, issuer.Object["spec"])
		}

		// The apiserver calls the webhook Services by their DNS names: the certificate must verify for each,
		// from the CA the cainjector hands out.
		roots := x509.NewCertPool()
		g.Expect(roots.AppendCertsFromPEM(sec.Data["ca.crt"])).To(BeTrue())
		g.Expect(services[key]).NotTo(BeEmpty(), "the components' webhook configurations use Certificate %s", key)
		for _, svc := range services[key] {
			for _, dns := range []string{svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace + ".svc.cluster.local"} {
				_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dns, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				g.Expect(err).NotTo(HaveOccurred(), "Certificate %s serves %s", key, dns)
			}
		}

		// Every object of the components that names this Certificate got its CA.
		targets, err := certmanager.InjectionTargets(ctx, c)
		g.Expect(err).NotTo(HaveOccurred())
		var injected int
		for _, tg := range targets {
			if tg.From != key {
				continue
			}
			injected++
			g.Expect(tg.CABundles).NotTo(BeEmpty(), tg.Name)
			for _, b := range tg.CABundles {
				g.Expect(b).To(Equal(sec.Data["ca.crt"]), "caBundle of %s is Certificate %s's CA", tg.Name, key)
			}
		}
		g.Expect(injected).To(BeNumerically(">", 0), "objects annotated with Certificate %s", key)
	}
	g.Expect(certs).To(BeNumerically(">", 0), "the components have a Certificate")
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			// A webhook configuration without the annotation would keep an empty caBundle: the apiserver could
			// not call the webhook on a user's cluster.
			g.Expect(o.GetAnnotations()).To(HaveKey(certmanager.InjectCAAnnotation), "%s %s", o.GetKind(), o.GetName())
		}
	}
}

// checkMissingIssuer: a Certificate whose Issuer does not exist is picked up (cert-manager requests it) but
// never signed.
func checkMissingIssuer(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	g := NewWithT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-missing-issuer-"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(certmanager.CertificateGVK)
	cert.SetNamespace(ns.Name)
	cert.SetName("orphan")
	g.Expect(unstructured.SetNestedField(cert.Object, map[string]any{
		"secretName": "orphan-tls",
		"dnsNames":   []any{"orphan." + ns.Name + ".svc"},
		"issuerRef":  map[string]any{"kind": "Issuer", "name": "no-such-issuer"},
	}, "spec")).To(Succeed())
	g.Expect(c.Create(ctx, cert)).To(Succeed())
	key := client.ObjectKeyFromObject(cert)

	// cert-manager has seen it: it asked for a certificate from the named Issuer and says the Certificate is
	// not Ready. Without this the check below would also pass with no controller running at all.
	g.Eventually(func(g Gomega) {
		crs := requestsOf(ctx, g, c, key)
		g.Expect(crs).NotTo(BeEmpty())
		n, _, _ := unstructured.NestedString(crs[0].Object, "spec", "issuerRef", "name")
		g.Expect(n).To(Equal("no-such-issuer"))
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(certmanager.CertificateGVK)
		g.Expect(c.Get(ctx, key, got)).To(Succeed())
		g.Expect(certmanager.ConditionStatus(got, "Ready")).To(Equal("False"))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())

	// The positive Certificates took well under this from creation to Ready.
	g.Consistently(func(g Gomega) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(certmanager.CertificateGVK)
		g.Expect(c.Get(ctx, key, got)).To(Succeed())
		g.Expect(certmanager.IsReady(got)).To(BeFalse(), "a Certificate whose Issuer does not exist became Ready")
		err := c.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: "orphan-tls"}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "its Secret must not exist: %v", err)
		for _, cr := range requestsOf(ctx, g, c, key) {
			g.Expect(certmanager.IsReady(&cr)).To(BeFalse(), "CertificateRequest %s was signed", cr.GetName())
		}
	}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// requestsOf returns the CertificateRequests cert-manager made for Certificate key (it owns them).
func requestsOf(ctx context.Context, g Gomega, c client.Client, key types.NamespacedName) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(certmanager.CertificateRequestGVK.GroupVersion().WithKind("CertificateRequestList"))
	g.Expect(c.List(ctx, list, client.InNamespace(key.Namespace))).To(Succeed())
	var out []unstructured.Unstructured
	for _, cr := range list.Items {
		for _, o := range cr.GetOwnerReferences() {
			if o.Kind == "Certificate" && o.Name == key.Name {
				out = append(out, cr)
			}
		}
	}
	return out
}

// webhookServices maps each Certificate (by the inject-ca-from annotation) to the Services the annotated
// webhook configurations call.
func webhookServices(objs []*unstructured.Unstructured) map[types.NamespacedName][]types.NamespacedName {
	out := map[types.NamespacedName][]types.NamespacedName{}
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" && o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		ns, name, _ := strings.Cut(o.GetAnnotations()[certmanager.InjectCAAnnotation], "/")
		key := types.NamespacedName{Namespace: ns, Name: name}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			svc, _, _ := unstructured.NestedStringMap(h.(map[string]any), "clientConfig", "service")
			if svc["name"] != "" {
				out[key] = append(out[key], types.NamespacedName{Namespace: svc["namespace"], Name: svc["name"]})
			}
		}
	}
	return out
}

// waitForFirstReady returns once any Certificate is Ready (the start-up time measured above).
func waitForFirstReady(ctx context.Context, c client.Client, cm *certmanager.CertManager) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(certmanager.CertificateGVK.GroupVersion().WithKind("CertificateList"))
		if err := c.List(ctx, list); err != nil {
			return err
		}
		for i := range list.Items {
			if certmanager.IsReady(&list.Items[i]) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no Certificate became Ready: %w\n%s\n%s", ctx.Err(), describe(c), cm.Logs(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startAPIServer starts a kube-apiserver and etcd (hack/test-bins.sh's) with cert-manager's CRDs, and returns
// a client and an admin kubeconfig file for cert-manager.
func startAPIServer(ctx context.Context, t *testing.T) (client.Client, string) {
	t.Helper()
	g := NewWithT(t)
	binDir, err := testbins.Dir()
	g.Expect(err).NotTo(HaveOccurred())
	crdDir, err := certmanager.CRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(admissionregistrationv1.AddToScheme(scheme)).To(Succeed())
	te := &crenvtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	// Network namespaces have no default route to guess an address from (as test/envtest).
	te.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	cfg, err := te.Start()
	g.Expect(err).NotTo(HaveOccurred(), "start kube-apiserver and etcd from %s", binDir)
	t.Cleanup(func() { g.Expect(te.Stop()).To(Succeed()) })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	user, err := te.AddUser(crenvtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(path, kc, 0o600)).To(Succeed())
	return c, path
}

// render builds a provider's components with kustomize, as `make release-manifests` does, and keeps the
// appliedKinds.
func render(ctx context.Context, provider string) ([]*unstructured.Unstructured, error) {
	out, err := proc.Run(ctx, "go", "-C", testbins.RepoRoot(), "tool", "-modfile=hack/tools/go.mod", "kustomize", "build", provider+"/config/default")
	if err != nil {
		return nil, fmt.Errorf("failed to render %s's components: %w", provider, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("failed to decode %s's components: %w", provider, err)
		}
		for _, k := range appliedKinds {
			if o.GetKind() == k {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

// apply creates objs in appliedKinds order (namespaces and CRDs before what lives in or uses them).
func apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, k := range appliedKinds {
		for _, o := range objs {
			if o.GetKind() != k {
				continue
			}
			if err := c.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("failed to create %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	return nil
}

func parseCert(g Gomega, data []byte) *x509.Certificate {
	block, _ := pem.Decode(data)
	g.Expect(block).NotTo(BeNil(), "tls.crt is PEM")
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}

// describe lists the conditions of every Issuer, Certificate and CertificateRequest, for a failure message.
func describe(c client.Client) string {
	var b strings.Builder
	for _, kind := range []string{"Issuer", "Certificate", "CertificateRequest"} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(certmanager.CertificateGVK.GroupVersion().WithKind(kind + "List"))
		if err := c.List(context.Background(), list); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", kind, err)
			continue
		}
		for i := range list.Items {
			conds, _, _ := unstructured.NestedSlice(list.Items[i].Object, "status", "conditions")
			fmt.Fprintf(&b, "%s %s/%s: %v\n", kind, list.Items[i].GetNamespace(), list.Items[i].GetName(), conds)
		}
	}
	return b.String()
}
