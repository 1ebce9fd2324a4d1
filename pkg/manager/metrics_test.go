package manager_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/metricsaccess"
	"github.com/yonder-dev/yonder/test/testbins"
)

// A manager built by manager.New serves metrics over HTTPS to authenticated and authorized clients only,
// checked by a real API server: no token is refused with 401, a service account without the right with
// 403, and one bound to a provider's metrics-reader ClusterRole (the manifest in config/rbac) gets the
// metrics.
func TestMetricsNeedAuthenticationAndAuthorization(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "metrics"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	cs, err := kubernetes.NewForConfig(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	scheme, err := manager.Scheme(clientgoscheme.AddToScheme)
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := manager.New(cp.Config, scheme, manager.Options{Name: "yonder-metrics-test", MetricsBindAddr: addr, HealthAddr: "0",
		WebhookPort: 0, SyncPeriod: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("manager stopped: %v", err)
		}
	})

	// The reader role as the providers ship it.
	tokens, err := metricsaccess.NewTokens(ctx, cs, "default", filepath.Join(testbins.RepoRoot(), "bootstrap/config/rbac/metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	reader, nobody := tokens.Reader, tokens.Nobody
	scrape := func(tok string) (int, string, error) { return metricsaccess.Scrape(ctx, addr, tok) }
	// RBAC changes reach the authorizer within moments; wait for the authorized scrape first.
	g.Eventually(func(g Gomega) {
		code, body, err := scrape(reader)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("# TYPE go_goroutines gauge"))
	}, 60*time.Second).Should(Succeed())
	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		// controller-runtime's filter (as in CAPI) answers a token the TokenReview rejects with its
		// "Authentication failed" 500: refused all the same.
		{"invalid token", "not-a-token", http.StatusInternalServerError},
		{"not authorized", nobody, http.StatusForbidden},
	} {
		code, body, err := scrape(tc.token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(tc.code), fmt.Sprintf("%s: %s", tc.name, body))
		g.Expect(body).NotTo(ContainSubstring("go_goroutines"), tc.name)
	}
}
