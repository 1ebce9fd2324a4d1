package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	"github.com/yonder-dev/yonder/bootstrap/setup"
)

const controllerName = "yonder-bootstrap-manager"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr, watchNamespace, watchFilter, certDir, agentURL, agentSHA string
		webhookPort, concurrency                                                         int
		leaderElect                                                                      bool
		syncPeriod                                                                       time.Duration
	)
	fs := pflag.CommandLine
	fs.StringVar(&metricsAddr, "metrics-bind-addr", ":8443", "Address of the metrics endpoint (\"0\" disables it)")
	fs.StringVar(&probeAddr, "health-addr", ":9440", "Address of the health and readiness probes")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles")
	fs.StringVar(&watchNamespace, "namespace", "", "Only watch this namespace (default: all)")
	fs.StringVar(&watchFilter, "watch-filter", "", "Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>")
	fs.IntVar(&webhookPort, "webhook-port", 9443, "Webhook server port")
	fs.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Webhook serving certificate directory")
	fs.IntVar(&concurrency, "yonderconfig-concurrency", 10, "YonderConfigs reconciled in parallel")
	fs.DurationVar(&syncPeriod, "sync-period", 10*time.Minute, "Resync period of the caches")
	fs.StringVar(&agentURL, "agent-url", "", "Default yonder-agent download URL for YonderConfigs without spec.agent")
	fs.StringVar(&agentSHA, "agent-sha256", "", "sha256 of the default yonder-agent")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	pflag.Parse()
	ctrl.SetLogger(klog.Background())
	if (agentURL == "") != (agentSHA == "") {
		return fmt.Errorf("--agent-url and --agent-sha256 must be set together")
	}

	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsAddr != "0"},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "yonder-bootstrap-manager-leader-election",
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
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:     mgr.GetClient(),
		Cache:            clustercache.CacheOptions{},
		Client:           clustercache.ClientOptions{UserAgent: controllerName, QPS: 20, Burst: 30},
		WatchFilterValue: watchFilter,
	}, controller.Options{MaxConcurrentReconciles: concurrency})
	if err != nil {
		return fmt.Errorf("failed to create the ClusterCache: %w", err)
	}
	if err := setup.Reconcilers(ctx, mgr, cc, setup.Options{
		WatchFilterValue: watchFilter, DefaultAgent: setup.DefaultAgent(agentURL, agentSHA), Concurrency: concurrency,
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
