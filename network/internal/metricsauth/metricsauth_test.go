package metricsauth_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/yonder-dev/yonder/network/internal/metricsauth"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{WithoutCAPIControllers: true}, func(e *envtest.Environment) { env = e }))
}

// The metrics port answers only callers the API server authenticates and authorizes: no token is 401, a
// valid token without the shipped metrics-reader ClusterRole is 403, with it the metrics are served.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "yonder_metricsauth_test_up", Help: "Set by the test."})
	up.Set(1)
	addr := freeAddr(g)
	served := make(chan error, 1)
	go func() { served <- metricsauth.Serve(ctx, addr, env.Config, up) }()

	scrape := func(token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The server's certificate is self-signed (as the managers'): this test checks who may read, not TLS.
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	g.Eventually(func() (int, error) { code, _, err := scrape(""); return code, err }, 30*time.Second).Should(Equal(http.StatusUnauthorized))

	ns := env.CreateNamespace(ctx, t, "metricsauth")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper", Namespace: ns.Name}}
	g.Expect(env.Create(ctx, sa)).To(Succeed())
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token

	code, body, err := scrape(token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), body)

	role := shippedReaderRole(g)
	role.Name = ns.Name + "-" + role.Name
	g.Expect(env.Create(ctx, role)).To(Succeed())
	t.Cleanup(func() { _ = env.Delete(context.Background(), role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns.Name}},
	}
	g.Expect(env.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() { _ = env.Delete(context.Background(), binding) })
	g.Eventually(func(g Gomega) {
		code, body, err := scrape(token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("yonder_metricsauth_test_up 1"))
	}, 30*time.Second).Should(Succeed())

	cancel()
	g.Eventually(served, 30*time.Second).Should(Receive(Not(HaveOccurred())))
}

// shippedReaderRole is the ClusterRole the add-on ships for scrapers (network/config/rbac).
func shippedReaderRole(g Gomega) *rbacv1.ClusterRole {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.UnmarshalStrict(raw, role)).To(Succeed())
	return role
}

func freeAddr(g Gomega) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	return addr
}
