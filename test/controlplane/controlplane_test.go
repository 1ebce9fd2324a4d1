package controlplane_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/labnet"
)

// A workload control plane on a lab bridge behaves as a joining node needs: hosts on the lab network
// reach it, a bootstrap token authenticates as system:bootstrappers, and kube-controller-manager signs
// an approved kubelet client CSR with the cluster CA.
func TestWorkloadControlPlaneServesJoiningNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	cp, err := controlplane.Start(ctx, controlplane.Options{BindAddress: n.Gateway, WithControllerManager: true, WithScheduler: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	g.Expect(cp.Endpoint).To(HavePrefix("https://" + n.Gateway.String() + ":"))

	admin, err := kubernetes.NewForConfig(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())
	v, err := admin.Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(HavePrefix("v1."), "CAPI rejects an apiserver that reports v0.0.0")

	// A host on the lab network reaches the apiserver and verifies its certificate against the CA.
	hs := hosts.StartForTest(t, n, "cp", 1)
	caFile := hs[0].Dir + "/ca.crt"
	_, err = proc.Run(ctx, "sh", "-c", "cat > "+caFile+" <<'EOF'\n"+string(cp.CACertPEM)+"EOF")
	g.Expect(err).NotTo(HaveOccurred())
	out, _, err := hs[0].Run(ctx, "curl -sS --cacert "+caFile+" "+cp.Endpoint+"/version")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(v.GitVersion))

	// Bootstrap token authentication.
	_, err = admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": "abcdef", "token-secret": "0123456789abcdef",
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tokenCfg := rest.AnonymousClientConfig(cp.Config)
	tokenCfg.BearerToken = "abcdef.0123456789abcdef"
	bootstrapper, err := kubernetes.NewForConfig(tokenCfg)
	g.Expect(err).NotTo(HaveOccurred())
	// The apiserver's token authenticator reads bootstrap-token Secrets through an informer, so a token
	// authenticates only once the informer has seen it: a joining kubelet retries the same way.
	var review *authenticationv1.SelfSubjectReview
	g.Eventually(func() error {
		review, err = bootstrapper.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:bootstrap:abcdef"))
	g.Expect(review.Status.UserInfo.Groups).To(ContainElement("system:bootstrappers"))

	// kube-controller-manager signs an approved kubelet client CSR with the cluster CA.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:test-node", Organization: []string{"system:nodes"}},
	}, key)
	g.Expect(err).NotTo(HaveOccurred())
	csr, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-client"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by test",
	})
	_, err = admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() []byte {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return got.Status.Certificate
	}, 30*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())
	got, _ := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
	block, _ := pem.Decode(got.Status.Certificate)
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cert.Verify(x509.VerifyOptions{Roots: cp.CACertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
}

// Asking for a port that is taken fails at once with a message that says what to do.
func TestStartFailsClearlyWhenThePortIsInUse(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	first, err := controlplane.Start(ctx, controlplane.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = first.Stop() })
	_, err = controlplane.Start(ctx, controlplane.Options{Port: first.Port})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("already in use"))
	g.Expect(strings.Contains(err.Error(), "ss -ltnp")).To(BeTrue())
}

// A missing binary is reported with the command that builds it.
func TestStartFailsClearlyWhenABinaryIsMissing(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("YONDER_TEST_BINS", t.TempDir())
	_, err := controlplane.Start(context.Background(), controlplane.Options{})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("make test-bins"))
}
