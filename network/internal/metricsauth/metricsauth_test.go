package metricsauth_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/yonder-dev/yonder/network/internal/metricsauth"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/metricsaccess"
	"github.com/yonder-dev/yonder/test/testbins"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{WithoutCAPIControllers: true}, func(e *envtest.Environment) { env = e }))
}

// The network add-on's metrics port answers only callers the API server authenticates and authorizes: no
// token is 401, a valid token without the shipped yonder-net-metrics-reader role is 403, with it the
// daemon's collectors are served.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "yonder_metricsauth_test_up", Help: "Set by the test."})
	up.Set(1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	served := make(chan error, 1)
	go func() { served <- metricsauth.Serve(ctx, addr, env.Config, up) }()
	scrape := func(token string) (int, string, error) { return metricsaccess.Scrape(ctx, addr, token) }
	g.Eventually(func() (int, error) { code, _, err := scrape(""); return code, err }, 30*time.Second).Should(Equal(http.StatusUnauthorized))

	ns := env.CreateNamespace(ctx, t, "metricsauth")
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	tokens, err := metricsaccess.NewTokens(ctx, cs, ns.Name, filepath.Join(testbins.RepoRoot(), "network/config/rbac/metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		code, body, err := scrape(tokens.Reader)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("yonder_metricsauth_test_up 1"))
	}, 30*time.Second).Should(Succeed())
	code, body, err := scrape(tokens.Nobody)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	g.Expect(body).NotTo(ContainSubstring("yonder_metricsauth_test_up"))

	cancel()
	g.Eventually(served, 30*time.Second).Should(Receive(Not(HaveOccurred())))
}
