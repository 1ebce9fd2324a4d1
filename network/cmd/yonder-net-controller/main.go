// Command yonder-net-controller runs in the workload cluster: it assigns Nodes to Sites, allocates their
// pod CIDRs, elects gateways and publishes the route plan (RoutePlans and PeerSlices) that every
// yonder-net-node daemon applies. Only the elected leader reconciles; webhooks are served by every replica.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/yonder-dev/yonder/network/internal/certs"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/setup"
)

// Leader election and the webhook caBundle (the certificate Secret is a namespaced Role, config/rbac).
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;patch

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "yonder-net-controller: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr, certDir, leaderNS string
		webhookPort, sliceSize, nodeConcurrency   int
		leaderElect, manageCerts                  bool
		certSecret, webhookService, webhookConf   string
		leaseDuration, renewDeadline, retry       time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint (0 disables it).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	flag.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory with the webhook's tls.crt and tls.key.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles.")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "Leader election lease duration.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "Leader election renew deadline.")
	flag.DurationVar(&retry, "leader-elect-retry-period", 2*time.Second, "Leader election retry period.")
	flag.BoolVar(&manageCerts, "manage-webhook-certs", true, "Provision the webhook's certificate in a Secret and set the caBundle (no cert-manager needed).")
	flag.StringVar(&certSecret, "webhook-cert-secret", "yonder-net-webhook-cert", "Secret holding the webhook certificate.")
	flag.StringVar(&webhookService, "webhook-service", "yonder-net-webhook-service", "Service in front of the webhook server.")
	flag.StringVar(&webhookConf, "webhook-configuration", "yonder-net-validating-webhook-configuration", "ValidatingWebhookConfiguration whose caBundle is set.")
	flag.IntVar(&sliceSize, "slice-size", plan.DefaultSliceSize, "Maximum peers per PeerSlice.")
	flag.IntVar(&nodeConcurrency, "node-concurrency", 4, "Concurrent Node reconciles (site labels, pod CIDRs).")
	klog.InitFlags(nil)
	flag.Parse()
	ctrl.SetLogger(klog.Background())

	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load a kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if manageCerts {
		ns := os.Getenv("POD_NAMESPACE")
		if ns == "" {
			return fmt.Errorf("POD_NAMESPACE must be set when --manage-webhook-certs is true")
		}
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("failed to create a client: %w", err)
		}
		if err := certs.Ensure(ctx, direct, certs.Options{
			Namespace: ns, SecretName: certSecret, ServiceName: webhookService, WebhookConfigurationName: webhookConf, CertDir: certDir,
		}); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		WebhookServer:           webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: certDir}),
		LeaderElection:          leaderElect,
		LeaderElectionID:        "yonder-net-controller.network.yonder.dev",
		LeaderElectionNamespace: leaderNS,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retry,
		// A new leader starts from the published state (slices, Node podCIDRs), so handing over fast is safe.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("failed to create the manager: %w", err)
	}
	if err := setup.SetupWebhooks(mgr); err != nil {
		return err
	}
	if _, err := setup.SetupReconcilers(ctx, mgr, setup.Options{SliceSize: sliceSize, NodeConcurrency: nodeConcurrency}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("failed to add the readiness check: %w", err)
	}
	klog.Background().Info("Starting yonder-net-controller")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("failed to run the manager: %w", err)
	}
	return nil
}
