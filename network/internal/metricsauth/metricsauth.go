// Package metricsauth serves the network components' Prometheus metrics the way the providers' managers
// serve theirs: over HTTPS, and only to callers the API server authenticates (TokenReview) and authorizes
// (SubjectAccessReview: get on the non-resource URL /metrics, which the yonder-net-metrics-reader
// ClusterRole grants). yonder-net-node runs with the host's network, so its metrics port is reachable from
// the whole underlay: without this, anyone there could read its peers, endpoints and traffic counters.
package metricsauth

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options are the metrics server options of a component whose metrics listen on addr ("0" disables them).
// Without a certificate directory the server generates a self-signed certificate at start, as the
// providers' managers do; Prometheus scrapes it with `insecure_skip_verify` and a bearer token
// (docs/network-dataplane.md shows the scrape job).
func Options(addr string) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
	}
}

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
	srv, err := metricsserver.NewServer(Options(addr), cfg, httpClient)
	if err != nil {
		return fmt.Errorf("failed to create the metrics server: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("failed to serve metrics on %s: %w", addr, err)
	}
	return nil
}
