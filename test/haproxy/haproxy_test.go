package haproxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/haproxy"
)

// The load balancer sends requests only to the backend whose /healthz answers 200: one healthy API
// server stand-in, one that fails its health check, one where nothing listens.
func TestRoutesOnlyToHealthyBackends(t *testing.T) {
	g := NewWithT(t)
	healthy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "healthy "+r.URL.Path)
	}))
	defer healthy.Close()
	sick := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "etcd unreachable", http.StatusInternalServerError)
	}))
	defer sick.Close()
	gone := httptest.NewTLSServer(http.NotFoundHandler())
	goneAddr := gone.Listener.Addr().String()
	gone.Close()

	lb, err := haproxy.Start(context.Background(), haproxy.Options{Backends: []string{
		strings.TrimPrefix(sick.URL, "https://"), goneAddr, strings.TrimPrefix(healthy.URL, "https://"),
	}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(lb.Stop()).To(Succeed()) }()

	// The load balancer passes TLS through: the client verifies the backends' certificate (httptest's,
	// valid for 127.0.0.1, where the load balancer listens).
	c := healthy.Client()
	c.Timeout = 5 * time.Second
	c.Transport.(*http.Transport).DisableKeepAlives = true
	// Once the checks have run, every request reaches the healthy backend.
	g.Eventually(func(g Gomega) {
		for range 6 {
			resp, err := c.Get("https://" + lb.Address() + "/version")
			g.Expect(err).NotTo(HaveOccurred())
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			g.Expect(string(b)).To(Equal("healthy /version"))
		}
	}, 30*time.Second, 500*time.Millisecond).Should(Succeed(), lb.Log(20))
}

func TestNeedsABackend(t *testing.T) {
	_, err := haproxy.Start(context.Background(), haproxy.Options{})
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("at least one backend")))
}
