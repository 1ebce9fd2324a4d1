package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/yonder-dev/yonder/controlplane/setup"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr, watchNamespace, watchFilter, certDir string
		webhookPort, concurrency                                     int
		leaderElect                                                  bool
		syncPeriod, healthCheck, retry                               time.Duration
	)
	fs := pflag.CommandLine
	fs.StringVar(&metricsAddr, "metrics-bind-addr", ":8443", "Address of the metrics endpoint (\"0\" disables it)")
	fs.StringVar(&probeAddr, "health-addr", ":9440", "Address of the health and readiness probes")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles")
	fs.StringVar(&watchNamespace, "namespace", "", "Only watch this namespace (default: all)")
	fs.StringVar(&watchFilter, "watch-filter", "", "Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>")
	fs.IntVar(&webhookPort, "webhook-port", 9443, "Webhook server port")
	fs.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Webhook serving certificate directory")
	fs.IntVar(&concurrency, "yondercontrolplane-concurrency", 10, "YonderControlPlanes reconciled in parallel")
	fs.DurationVar(&syncPeriod, "sync-period", 10*time.Minute, "Resync period of the caches")
	fs.DurationVar(&healthCheck, "health-check-interval", time.Minute, "How often an attached API server is probed")
	fs.DurationVar(&retry, "retry-interval", 20*time.Second, "How soon a failing kubeconfig is checked again")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	pflag.Parse()
	ctrl.SetLogger(klog.Background())

	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsAddr != "0"},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "yonder-controlplane-manager-leader-election",
		Cache:                  setup.CacheOptions(watchNamespace, syncPeriod),
		Client:                 setup.ClientOptions(),
		WebhookServer:          webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: certDir}),
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setup.Webhooks(mgr); err != nil {
		return err
	}
	if err := setup.Reconcilers(ctx, mgr, setup.Options{
		WatchFilterValue: watchFilter, HealthCheckInterval: healthCheck, RetryInterval: retry, Concurrency: concurrency,
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
