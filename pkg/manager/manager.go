// Package manager builds the controller-runtime manager of every Yonder provider the same way: the same
// command-line flags with the same names and defaults in each provider (as CAPI's providers share theirs),
// the label-filtered Secret cache of package managercache, leader election, secure metrics, and health
// and readiness checks. Each provider's main.go adds only its own flags, webhooks and reconcilers.
package manager

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/yonder-dev/yonder/pkg/managercache"
)

// Options are the settings every provider manager has.
type Options struct {
	// Name is the manager's name (e.g. yonder-bootstrap-manager): user agent and leader election ID.
	Name string
	// MetricsBindAddr serves metrics over HTTPS ("0" disables them). Every scrape is authenticated (a
	// TokenReview of its bearer token) and authorized (a SubjectAccessReview for GET on the /metrics
	// path): grant a scraper the provider's metrics-reader ClusterRole.
	MetricsBindAddr string
	// HealthAddr serves /healthz and /readyz.
	HealthAddr string
	// LeaderElect lets only one replica reconcile.
	LeaderElect bool
	// WatchNamespace limits the manager to one namespace ("" watches all).
	WatchNamespace string
	// WatchFilter reconciles only objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilter string
	// WebhookPort and WebhookCertDir configure the admission webhook server.
	WebhookPort    int
	WebhookCertDir string
	// SyncPeriod is how often the caches resync.
	SyncPeriod time.Duration
	// Logs are the logging flags (--logging-format, -v, --vmodule), applied by Parse.
	Logs *logsv1.LoggingConfiguration
}

// AddFlags registers the common flags, and the logging flags (logging.go), on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsBindAddr, "metrics-bind-addr", ":8443", `Address of the HTTPS metrics endpoint ("0" disables it)`)
	fs.StringVar(&o.HealthAddr, "health-addr", ":9440", "Address of the health and readiness probes")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles")
	fs.StringVar(&o.WatchNamespace, "namespace", "", "Only watch this namespace (default: all namespaces)")
	fs.StringVar(&o.WatchFilter, "watch-filter", "", "Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Port of the admission webhook server")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook serving certificate (tls.crt, tls.key)")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 10*time.Minute, "How often the caches resync")
	o.addLoggingFlags(fs)
}

// LeaderElectionID is unique per manager and per watch filter, so sharded managers elect separately.
func (o *Options) LeaderElectionID() string {
	id := o.Name + "-leader-election"
	if o.WatchFilter != "" {
		id += "-" + o.WatchFilter
	}
	return id
}

// New sets controller-runtime's logger to klog's (the format Parse applied) and returns a manager with the
// common options.
func New(cfg *rest.Config, scheme *runtime.Scheme, o Options) (ctrl.Manager, error) {
	ctrl.SetLogger(klog.Background())
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = o.Name
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                SecureMetricsOptions(o.MetricsBindAddr),
		HealthProbeBindAddress: o.HealthAddr,
		LeaderElection:         o.LeaderElect,
		LeaderElectionID:       o.LeaderElectionID(),
		// In a Pod controller-runtime reads the namespace from the service account mount; a manager run as
		// a process (the e2e suite, a developer's shell) names it with POD_NAMESPACE, which the Deployment
		// also sets from the downward API.
		LeaderElectionNamespace: os.Getenv("POD_NAMESPACE"),
		// Give up the lease at once on shutdown so a rolling update hands over without waiting it out.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         managercache.CacheOptions(o.WatchNamespace, o.SyncPeriod),
		Client:                        managercache.ClientOptions(),
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: o.WebhookPort, CertDir: o.WebhookCertDir}),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the %s manager: %w", o.Name, err)
	}
	return mgr, nil
}

// SecureMetricsOptions serve metrics on addr over HTTPS, only to authenticated and authorized clients
// (the way CAPI's util/flags does): an anonymous scrape gets 401, one without the right 403. Every Yonder
// component that serves metrics uses them (the managers here, the network add-on's controller and node
// daemon through network/internal/metricsauth).
func SecureMetricsOptions(addr string) metricsserver.Options {
	if addr == "0" {
		return metricsserver.Options{BindAddress: "0"}
	}
	return metricsserver.Options{BindAddress: addr, SecureServing: true, FilterProvider: filters.WithAuthenticationAndAuthorization}
}

// Setup is one manager's own part: its webhooks and its reconcilers (CABPK's setupWebhooks and
// setupReconcilers), each provider's setup package supplying both.
type Setup struct {
	Webhooks    func(mgr ctrl.Manager) error
	Reconcilers func(ctx context.Context, mgr ctrl.Manager) error
}

// Run adds the health and readiness checks (the webhook server must be serving), registers s's webhooks
// and reconcilers with mgr, and runs mgr until ctx ends: the same sequence in every Yonder manager.
func Run(ctx context.Context, mgr ctrl.Manager, s Setup) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("failed to add the readiness check: %w", err)
	}
	if err := s.Webhooks(mgr); err != nil {
		return err
	}
	if err := s.Reconcilers(ctx, mgr); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("failed to run the manager: %w", err)
	}
	return nil
}

// Main runs a manager's run function and exits 1 when it fails. Once run has applied the logging flags
// (ApplyLogging, Options.Parse), the error is one line of the chosen format through klog, as every other
// line: with --logging-format=json a log pipeline sees why the manager stopped. Before that (a logging
// flag component-base refuses) the format is unknown, and the error is printed as plain text; pflag and
// flag report their own parse errors and exit 2 before run returns.
func Main(name string, run func() error) {
	err := run()
	if err == nil {
		return
	}
	if !loggingApplied.Load() {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	klog.Background().WithName(name).Error(err, "Exiting on error")
	// The JSON logger may buffer: flush it before exiting.
	klog.FlushAndExit(klog.ExitFlushTimeout, 1)
}

// Scheme returns a scheme with the kinds of adds registered.
func Scheme(adds ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range adds {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build scheme: %w", err)
		}
	}
	return s, nil
}
