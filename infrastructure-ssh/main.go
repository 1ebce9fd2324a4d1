// Command yonder-ssh-manager is the root of Yonder's SSH infrastructure provider (clusterctl name
// infrastructure-yonder-ssh): a persistent inventory of existing Linux hosts (YonderSSHHost) that
// YonderSSHMachines claim, bootstrap over SSH with pinned host keys, and release back to the pool when
// their Machine goes away. Layout: STYLE.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
)

func main() {
	var (
		metricsAddr, probeAddr, watchFilter, watchNamespace, certDir string
		leaderElect                                                  bool
		webhookPort, machineConc, hostConc, clusterConc              int
		cleanupRetries                                               int
		syncPeriod, probeInterval, pollInterval, retryInterval       time.Duration
	)
	klog.InitFlags(nil)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-addr", ":9440", "Address of the health and readiness probes.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles at a time.")
	flag.StringVar(&watchFilter, "watch-filter", "", "Reconcile only objects labelled cluster.x-k8s.io/watch-filter=<value>.")
	flag.StringVar(&watchNamespace, "namespace", "", "Watch only this namespace (default: all).")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Webhook server port.")
	flag.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Webhook serving certificate directory.")
	flag.IntVar(&machineConc, "yondersshmachine-concurrency", 10, "Concurrent YonderSSHMachine reconciles.")
	flag.IntVar(&hostConc, "yondersshhost-concurrency", 10, "Concurrent YonderSSHHost reconciles.")
	flag.IntVar(&clusterConc, "yondersshcluster-concurrency", 2, "Concurrent YonderSSHCluster reconciles.")
	flag.IntVar(&cleanupRetries, "cleanup-retries", 5, "Cleanup attempts on delete before an operator must act.")
	flag.DurationVar(&syncPeriod, "sync-period", 10*time.Minute, "Resync period of the caches.")
	flag.DurationVar(&probeInterval, "host-probe-interval", 5*time.Minute, "How often hosts are probed over SSH.")
	flag.DurationVar(&pollInterval, "bootstrap-poll-interval", 10*time.Second, "How often a running bootstrap is checked.")
	flag.DurationVar(&retryInterval, "ssh-retry-interval", 15*time.Second, "First wait after an SSH failure (doubles per attempt, up to 5m).")
	flag.Parse()
	ctrl.SetLogger(klog.Background())
	log := ctrl.Log.WithName("setup")

	if err := run(metricsAddr, probeAddr, watchFilter, watchNamespace, certDir, leaderElect, webhookPort, syncPeriod,
		setup.Options{WatchFilterValue: watchFilter, MachineConcurrency: machineConc, HostConcurrency: hostConc, ClusterConcurrency: clusterConc,
			ProbeInterval: probeInterval, PollInterval: pollInterval, RetryInterval: retryInterval, CleanupRetries: int32(cleanupRetries)}); err != nil { //nolint:gosec // small flag value
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

func run(metricsAddr, probeAddr, watchFilter, watchNamespace, certDir string, leaderElect bool, webhookPort int, syncPeriod time.Duration, o setup.Options) error {
	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	cacheOpts := cache.Options{SyncPeriod: &syncPeriod}
	if watchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{watchNamespace: {}}
	}
	leaderID := "yonder-ssh-manager-leader-election"
	if watchFilter != "" {
		leaderID += "-" + watchFilter
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       leaderID,
		Cache:                  cacheOpts,
		Client:                 setup.ClientOptions(),
		WebhookServer:          webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: certDir}),
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("failed to add readiness check: %w", err)
	}
	if err := setup.SetupWebhooks(mgr); err != nil {
		return err
	}
	if err := setup.SetupReconcilers(ctx, mgr, o); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
