// Command yonder-net-controller runs in the workload cluster: it assigns Nodes to Sites, allocates their
// pod CIDRs, elects gateways and publishes the route plan (RoutePlans and PeerSlices) that every
// yonder-net-node daemon applies. Only the elected leader reconciles; webhooks are served by every replica.
// Its shape is every Yonder manager's: flags, manager, then pkg/manager.Run with setup's webhooks and
// reconcilers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	logsv1 "k8s.io/component-base/logs/api/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/yonder-dev/yonder/network/internal/certs"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

// controllerName names the manager (errors, leader election).
const controllerName = "yonder-net-controller"

// Leader election and the webhook caBundle (the certificate Secret is a namespaced Role, config/rbac).
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;patch

func main() { manager.Main(controllerName, run) }

// flags are the controller's command-line settings.
type flags struct {
	metricsAddr, probeAddr, certDir, leaderNS string
	webhookPort, sliceSize, nodeConcurrency   int
	leaderElect, manageCerts                  bool
	certSecret, webhookService, webhookConf   string
	leaseDuration, renewDeadline, retry       time.Duration
	// logs are the logging flags (--logging-format, -v, --vmodule), pkg/manager's as every manager has them.
	logs *logsv1.LoggingConfiguration
}

// addFlags registers every flag of the controller on fs.
func addFlags(fs *flag.FlagSet) *flags {
	f := &flags{}
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint: HTTPS, callers authenticated and authorized by the API server (0 disables it).")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	fs.StringVar(&f.certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory with the webhook's tls.crt and tls.key.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles.")
	fs.StringVar(&f.leaderNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "Leader election lease duration.")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "Leader election renew deadline.")
	fs.DurationVar(&f.retry, "leader-elect-retry-period", 2*time.Second, "Leader election retry period.")
	fs.BoolVar(&f.manageCerts, "manage-webhook-certs", true, "Provision the webhook's certificate in a Secret and set the caBundle (no cert-manager needed).")
	fs.StringVar(&f.certSecret, "webhook-cert-secret", "yonder-net-webhook-cert", "Secret holding the webhook certificate.")
	fs.StringVar(&f.webhookService, "webhook-service", "yonder-net-webhook-service", "Service in front of the webhook server.")
	fs.StringVar(&f.webhookConf, "webhook-configuration", "yonder-net-validating-webhook-configuration", "ValidatingWebhookConfiguration whose caBundle is set.")
	fs.IntVar(&f.sliceSize, "slice-size", plan.DefaultSliceSize, "Maximum peers per PeerSlice.")
	fs.IntVar(&f.nodeConcurrency, "node-concurrency", 4, "Concurrent Node reconciles (site labels, pod CIDRs).")
	f.logs = manager.AddGoLoggingFlags(fs)
	return f
}

func run() error {
	f := addFlags(flag.CommandLine)
	flag.Parse()
	// Before anything reads a kubeconfig or logs: a bad value stops here, every later line has the format.
	if err := manager.ApplyLogging(f.logs); err != nil {
		return err
	}
	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	// As every manager does: a missing kubeconfig is logged, in the chosen format, before the exit.
	cfg := ctrl.GetConfigOrDie()
	ctx := ctrl.SetupSignalHandler()
	if err := f.ensureCerts(ctx, cfg, scheme); err != nil {
		return err
	}
	mgr, err := f.newManager(cfg, scheme)
	if err != nil {
		return err
	}
	return manager.Run(ctx, mgr, manager.Setup{
		Webhooks: setup.SetupWebhooks,
		Reconcilers: func(ctx context.Context, mgr ctrl.Manager) error {
			_, err := setup.SetupReconcilers(ctx, mgr, setup.Options{SliceSize: f.sliceSize, NodeConcurrency: f.nodeConcurrency})
			return err
		},
	})
}

// ensureCerts provisions the webhook's serving certificate (and the caBundle) unless cert-manager does.
func (f *flags) ensureCerts(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) error {
	if !f.manageCerts {
		return nil
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		return fmt.Errorf("POD_NAMESPACE must be set when --manage-webhook-certs is true")
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("failed to create a client: %w", err)
	}
	return certs.Ensure(ctx, direct, certs.Options{
		Namespace: ns, SecretName: f.certSecret, ServiceName: f.webhookService, WebhookConfigurationName: f.webhookConf, CertDir: f.certDir,
	})
}

// newManager returns the controller's manager: leader election, metrics, probes and webhook server.
func (f *flags) newManager(cfg *rest.Config, scheme *runtime.Scheme) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 manager.SecureMetricsOptions(f.metricsAddr),
		HealthProbeBindAddress:  f.probeAddr,
		WebhookServer:           webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.certDir}),
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "yonder-net-controller.network.yonder.dev",
		LeaderElectionNamespace: f.leaderNS,
		LeaseDuration:           &f.leaseDuration,
		RenewDeadline:           &f.renewDeadline,
		RetryPeriod:             &f.retry,
		// A new leader starts from the published state (slices, Node podCIDRs), so handing over fast is safe.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the manager: %w", err)
	}
	return mgr, nil
}
