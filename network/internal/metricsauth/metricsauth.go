// Package metricsauth serves the network components' Prometheus metrics the way the providers' managers
// serve theirs: over HTTPS, and only to callers the API server authenticates (TokenReview) and authorizes
// (SubjectAccessReview: get on the non-resource URL /metrics, which the yonder-net-metrics-reader
// ClusterRole grants), with the managers' options (manager.SecureMetricsOptions: a self-signed certificate
// generated at start; Prometheus scrapes with insecure_skip_verify and a bearer token, docs/network-dataplane.md).
// yonder-net-node runs with the host's network, so its metrics port is reachable from
// the whole underlay: without this, anyone there could read its peers, endpoints and traffic counters.
package metricsauth

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/yonder-dev/yonder/pkg/manager"
)

// Serve serves controller-runtime's registry, with collectors added to it, on addr until ctx ends. The
// API server at cfg reviews every caller's token.
func Serve(ctx context.Context, addr string, cfg *rest.Config, collectors ...prometheus.Collector) error {
	for _, c := range collectors {
		if err := ctrlmetrics.Registry.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return fmt.Errorf("failed to register metrics: %w", err)
		}
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("failed to build the HTTP client for token reviews: %w", err)
	}
	srv, err := metricsserver.NewServer(manager.SecureMetricsOptions(addr), cfg, httpClient)
	if err != nil {
		return fmt.Errorf("failed to create the metrics server: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("failed to serve metrics on %s: %w", addr, err)
	}
	return nil
}
