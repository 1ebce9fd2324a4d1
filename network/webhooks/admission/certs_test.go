package admission_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/network/internal/certs"
)

// The controller provisions its own webhook certificate (no cert-manager before the pod network exists):
// a Secret, files for the server and the caBundle; a second replica (or restart) reuses all of it.
func TestWebhookCertificatesAreProvisionedOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "certs")
	none := admissionv1.SideEffectClassNone
	vwc := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-test-"},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name: "x.network.yonder.dev", SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns.Name, Name: "webhook", Path: ptr.To("/x")}},
			// Matches nothing, so it never intercepts the suite's requests.
			Rules: []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule: admissionv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}}}},
		}},
	}
	g.Expect(env.Create(ctx, vwc)).To(Succeed())
	t.Cleanup(func() { _ = env.Delete(context.Background(), vwc) })
	dir := t.TempDir()
	opts := certs.Options{Namespace: ns.Name, SecretName: "webhook-cert", ServiceName: "webhook", WebhookConfigurationName: vwc.Name, CertDir: dir}
	direct, err := client.New(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(certs.Ensure(ctx, direct, opts)).To(Succeed())
	secret := &corev1.Secret{}
	g.Expect(direct.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "webhook-cert"}, secret)).To(Succeed())
	g.Expect(direct.Get(ctx, client.ObjectKeyFromObject(vwc), vwc)).To(Succeed())
	g.Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]))
	crt, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crt).To(Equal(secret.Data["tls.crt"]))

	// The serving certificate verifies against the CA for the Service's DNS name.
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(secret.Data["ca.crt"])).To(BeTrue())
	block, _ := pem.Decode(crt)
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook." + ns.Name + ".svc"})
	g.Expect(err).NotTo(HaveOccurred())

	// A second replica: nothing is rewritten.
	secretRV, vwcRV := secret.ResourceVersion, vwc.ResourceVersion
	g.Expect(certs.Ensure(ctx, direct, certs.Options{Namespace: ns.Name, SecretName: "webhook-cert", ServiceName: "webhook", WebhookConfigurationName: vwc.Name, CertDir: t.TempDir()})).To(Succeed())
	g.Expect(direct.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
	g.Expect(direct.Get(ctx, client.ObjectKeyFromObject(vwc), vwc)).To(Succeed())
	g.Expect(secret.ResourceVersion).To(Equal(secretRV))
	g.Expect(vwc.ResourceVersion).To(Equal(vwcRV))
}
