package certmanager_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/certmanager"
	"github.com/yonder-dev/yonder/test/internal/proc"
)

// TestWebhookChecksCertManagersObjects runs cert-manager's real webhook beside its controller and cainjector
// and checks what it does on a user's cluster: it creates its CA Secret, the cainjector copies that CA into
// the chart's webhook configurations, the apiserver then refuses cert-manager objects that cert-manager's
// own validation refuses although their CRD schemas accept them, and it stamps each CertificateRequest
// with the identity of its creator (the mutating webhook).
func TestWebhookChecksCertManagersObjects(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, kubeconfig := startAPIServer(ctx, t)
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: certmanager.Namespace}})).To(Succeed())

	logDir := t.TempDir()
	cm, err := certmanager.Start(ctx, kubeconfig, logDir)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cert-manager's logs:\n%s", cm.Logs(40))
		}
		g.Expect(cm.Stop()).To(Succeed())
	})
	port, err := proc.FreePort("127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	healthz, err := proc.FreePort("127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	// This apiserver has no Service routing (no bridge address the harness could write into an
	// EndpointSlice), so the chart's configurations name the webhook by URL here instead of by its
	// Service; the host name is the one its certificate carries.
	g.Expect(cm.StartWebhook(ctx, kubeconfig, logDir, certmanager.Webhook{Port: port, HealthzPort: healthz,
		DNSNames: []string{"localhost"}})).To(Succeed())
	url := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + net.JoinHostPort("localhost", strconv.Itoa(port)) + path)}
	}
	_, vwc, mwc, err := certmanager.WebhookManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vwc.Webhooks).To(HaveLen(1))
	g.Expect(mwc.Webhooks).To(HaveLen(1))
	vwc.Webhooks[0].ClientConfig = url("/validate")
	mwc.Webhooks[0].ClientConfig = url("/mutate")
	g.Expect(c.Create(ctx, vwc)).To(Succeed())
	g.Expect(c.Create(ctx, mwc)).To(Succeed())

	// The webhook created its CA (marked for direct injection) and the cainjector put it into both
	// configurations: nothing else has a caBundle the apiserver could trust the webhook with.
	g.Expect(cm.WaitForCertificates(ctx, c, 2*time.Minute)).To(Succeed())
	ca := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: certmanager.Namespace, Name: certmanager.WebhookCASecret}, ca)).To(Succeed())
	g.Expect(ca.Data["ca.crt"]).NotTo(BeEmpty())
	g.Expect(ca.Annotations).To(HaveKeyWithValue("cert-manager.io/allow-direct-injection", "true"))
	for _, o := range []client.Object{vwc, mwc} {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
	}
	g.Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(ca.Data["ca.crt"]))
	g.Expect(mwc.Webhooks[0].ClientConfig.CABundle).To(Equal(ca.Data["ca.crt"]))
	// The apiserver picks up a new caBundle on its own time.
	g.Expect(cm.WaitForWebhook(ctx, c, time.Minute)).To(Succeed())

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-webhook-"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })

	// An Issuer of no type: its CRD schema has no required field, cert-manager's validation does.
	empty := certManagerObject(certmanager.IssuerGVK, ns.Name, "no-type", map[string]any{})
	g.Expect(c.Create(ctx, empty)).To(MatchError(And(ContainSubstring(`admission webhook "webhook.cert-manager.io" denied the request`),
		ContainSubstring("at least one issuer must be configured"))))

	issuer := certManagerObject(certmanager.IssuerGVK, ns.Name, "self", map[string]any{"selfSigned": map[string]any{}})
	g.Expect(c.Create(ctx, issuer)).To(Succeed())

	// An RSA key of 1024 bits: an integer the schema accepts, a size cert-manager refuses.
	weak := certManagerObject(certmanager.CertificateGVK, ns.Name, "weak", map[string]any{
		"secretName": "weak-tls", "dnsNames": []any{"weak.example"},
		"issuerRef":  map[string]any{"kind": "Issuer", "name": "self"},
		"privateKey": map[string]any{"algorithm": "RSA", "size": int64(1024)},
	})
	g.Expect(c.Create(ctx, weak)).To(MatchError(ContainSubstring("must be between 2048 and 8192 for rsa keyAlgorithm")))

	good := certManagerObject(certmanager.CertificateGVK, ns.Name, "good", map[string]any{
		"secretName": "good-tls", "dnsNames": []any{"good.example"},
		"issuerRef": map[string]any{"kind": "Issuer", "name": "self"},
	})
	g.Expect(c.Create(ctx, good)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(certmanager.CertificateGVK)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(good), got)).To(Succeed())
		g.Expect(certmanager.IsReady(got)).To(BeTrue(), certmanager.ConditionMessage(got, "Ready"))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())

	// The controller's CertificateRequest carries its creator's identity: the apiserver's user of the
	// controller's kubeconfig (startAPIServer's "cert-manager"), which only the mutating webhook writes.
	crs := requestsOf(ctx, g, c, client.ObjectKeyFromObject(good))
	g.Expect(crs).NotTo(BeEmpty())
	for _, cr := range crs {
		user, _, _ := unstructured.NestedString(cr.Object, "spec", "username")
		g.Expect(user).To(Equal("cert-manager"), "CertificateRequest %s", cr.GetName())
	}
}

// certManagerObject returns a cert-manager object of kind gvk with the given spec.
func certManagerObject(gvk schema.GroupVersionKind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	o.SetGroupVersionKind(gvk)
	o.SetNamespace(namespace)
	o.SetName(name)
	return o
}
