package prometheus_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	client "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/yonder-dev/yonder/test/prometheus"
)

// tokenProtected serves reg's metrics over TLS only to a caller with the bearer token, as Yonder's metrics
// servers do (401 without a token, 403 with another one).
func tokenProtected(t *testing.T, reg *client.Registry, token string) *httptest.Server {
	t.Helper()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "":
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case "Bearer " + token:
			metrics.ServeHTTP(w, r)
		default:
			http.Error(w, "Forbidden", http.StatusForbidden)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The real Prometheus scrapes an HTTPS endpoint with a bearer token from its file and a CA it verifies the
// serving certificate with; PromQL sees the values and the target labels; a wrong token leaves the target
// down with the server's answer as its error until SetJob replaces the token; no token reaches the
// configuration file or Prometheus's log; Stop removes everything.
func TestScrapesAnAuthenticatedHTTPSEndpoint(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := prometheus.Start(ctx, prometheus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = p.Stop()
		}
	})
	_, err = p.WaitFor(ctx, `up{job="prometheus"}`, prometheus.All(prometheus.Equals(1)))
	g.Expect(err).NotTo(HaveOccurred(), "Prometheus scrapes itself")

	const token = "s3cret-reader-token"
	reg := client.NewRegistry()
	hosts := client.NewGaugeVec(client.GaugeOpts{Name: "yonder_test_hosts", Help: "Set by the test."}, []string{"state"})
	reg.MustRegister(hosts)
	hosts.WithLabelValues("claimed").Set(3)
	srv := tokenProtected(t, reg, token)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)).To(Succeed())
	target := strings.TrimPrefix(srv.URL, "https://")
	job := prometheus.Job{Name: "app", Targets: map[string]map[string]string{target: {"provider": "test"}},
		BearerToken: "wrong-token", CAFile: caFile}

	g.Expect(p.SetJob(ctx, job)).To(Succeed())
	_, err = p.WaitFor(ctx, `up{job="app"}`, prometheus.All(prometheus.Equals(0)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		ts, err := p.Targets(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var app []prometheus.Target
		for _, tg := range ts {
			if tg.Job == "app" {
				app = append(app, tg)
			}
		}
		g.Expect(app).To(HaveLen(1))
		g.Expect(app[0].Health).To(Equal("down"))
		g.Expect(app[0].LastError).To(ContainSubstring("403"))
	}, 30*time.Second, time.Second).Should(Succeed())

	job.BearerToken = token
	g.Expect(p.SetJob(ctx, job)).To(Succeed())
	_, err = p.WaitFor(ctx, `up{job="app",provider="test"}`, prometheus.All(prometheus.Equals(1)))
	g.Expect(err).NotTo(HaveOccurred())
	v, err := p.WaitFor(ctx, `yonder_test_hosts{job="app"}`, prometheus.All(prometheus.Equals(3)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(HaveLen(1))
	g.Expect(v[0].Labels).To(HaveKeyWithValue("state", "claimed"))
	g.Expect(v[0].Labels).To(HaveKeyWithValue("provider", "test"))
	g.Expect(v[0].Labels).To(HaveKeyWithValue("instance", target))

	hosts.WithLabelValues("claimed").Set(0)
	_, err = p.WaitFor(ctx, `yonder_test_hosts{job="app",state="claimed"}`, prometheus.All(prometheus.Equals(0)))
	g.Expect(err).NotTo(HaveOccurred(), "a new value is seen at the next scrape")

	series, err := p.Series(ctx, `{__name__=~"yonder_.*"}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(series).To(ContainElement(HaveKeyWithValue("__name__", "yonder_test_hosts")))

	cfg, err := os.ReadFile(filepath.Join(p.Dir, "prometheus.yml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg)).To(ContainSubstring("credentials_file:"))
	g.Expect(string(cfg)).NotTo(ContainSubstring(token), "the token is in its own file, not the configuration")
	g.Expect(p.Log(1000)).NotTo(ContainSubstring(token))

	_, err = p.Query(ctx, `sum(`)
	g.Expect(err).To(MatchError(ContainSubstring("bad_data")), "a PromQL error is the API's")

	g.Expect(p.Stop()).To(Succeed())
	stopped = true
	_, err = os.Stat(p.Dir)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "Stop removes the directory Start created")
}
