package stack

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/yonder-dev/yonder/test/metricsaccess"
	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Scrape jobs of the stack's Prometheus (Options.Prometheus).
const (
	// ProvidersJob scrapes Yonder's managers, each target labelled provider=<clusterctl provider label>,
	// as docs/README.md's yonder-providers job does.
	ProvidersJob = "yonder-providers"
	// CAPIJob scrapes CAPI's own manager (its --diagnostics-address, authenticated the same way).
	CAPIJob = "cluster-api"
	// MetricsNamespace holds the ServiceAccount Prometheus scrapes as ("scraper", bound to the shipped
	// metrics-reader ClusterRole) in the management cluster.
	MetricsNamespace = "yonder-metrics"
)

// scrapeTokenSeconds is how long the scraper's token is valid: longer than a lab is kept up (the
// TokenRequest default of an hour would turn every target down in a lab left running).
const scrapeTokenSeconds = 30 * 24 * 3600

// startPrometheus starts the real Prometheus (Options.Prometheus) and points it at every manager.
func (s *Stack) startPrometheus(ctx context.Context) error {
	if !s.opts.Prometheus {
		return nil
	}
	// Every provider ships the same metrics-reader rule (get on the non-resource URL /metrics), and CAPI's
	// diagnostics endpoint asks the API server for the same permission: one binding lets the scraper read them all.
	token, err := NewScraperToken(ctx, s.Management.Config, filepath.Join(testbins.RepoRoot(), "bootstrap", "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		return err
	}
	s.scrapeToken = token
	if s.Prometheus, err = prometheus.Start(ctx, prometheus.Options{Dir: filepath.Join(s.Dir, "prometheus")}); err != nil {
		return err
	}
	if err := s.scrapeManagers(ctx); err != nil {
		return err
	}
	s.opts.Log("Prometheus at %s scraping %d managers", s.Prometheus.URL, len(s.Managers()))
	return nil
}

// scrapeManagers (re)writes the scrape jobs of the managers running now: at start and after
// ReloadManagers, which gives every manager new ports.
func (s *Stack) scrapeManagers(ctx context.Context) error {
	if s.Prometheus == nil {
		return nil
	}
	yonder, capi := map[string]map[string]string{}, map[string]map[string]string{}
	for _, n := range s.Managers() {
		m := s.Manager(n)
		if n == "cluster-api" {
			capi[m.MetricsAddr] = map[string]string{"provider": n}
			continue
		}
		yonder[m.MetricsAddr] = map[string]string{"provider": n}
	}
	for _, j := range []prometheus.Job{{Name: ProvidersJob, Targets: yonder}, {Name: CAPIJob, Targets: capi}} {
		j.Scheme, j.BearerToken = "https", s.scrapeToken
		// The managers serve the self-signed certificate controller-runtime generates at start (no cert
		// dir is given for metrics, as in the shipped Deployments): no CA names it. docs/README.md's job
		// says the same.
		j.InsecureSkipVerify = true
		if err := s.Prometheus.SetJob(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// NewScraperToken creates, in the cluster at cfg, the namespace MetricsNamespace with the ServiceAccount
// "scraper" bound to the ClusterRole in rolePath (a shipped config/rbac/metrics_reader_role.yaml, through
// test/metricsaccess) and returns a token of it that outlives a lab left running.
func NewScraperToken(ctx context.Context, cfg *rest.Config, rolePath string) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: MetricsNamespace}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("failed to create namespace %s: %w", MetricsNamespace, err)
	}
	if _, err := metricsaccess.NewTokens(ctx, cs, MetricsNamespace, rolePath); err != nil {
		return "", fmt.Errorf("failed to create the scraper's identity: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(MetricsNamespace).CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(scrapeTokenSeconds))}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to create the scraper's token: %w", err)
	}
	return tr.Status.Token, nil
}

// ScrapeToken is the bearer token Prometheus scrapes the managers with (the ServiceAccount
// yonder-metrics/scraper, bound to the shipped metrics-reader ClusterRole); "" without Options.Prometheus.
// A test scans for it where no secret may appear, and the lab reuses the identity for other jobs.
func (s *Stack) ScrapeToken() string { return s.scrapeToken }
