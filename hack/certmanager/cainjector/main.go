// Command cert-manager-cainjector is cert-manager's CA injector built from cert-manager's importable
// packages, for Yonder's tests and lab: upstream's cmd/cainjector is a module of its own that the Go module
// proxy does not serve, so hack/test-bins.sh cannot build it.
//
// It copies the CA of the Certificate (or Secret) named by a cert-manager.io/inject-ca-from (or
// inject-ca-from-secret, inject-apiserver-ca) annotation into the caBundle of mutating and validating
// webhook configurations, APIServices and CRD conversion webhooks — every kind upstream injects.
//
// As the Deployment of cert-manager's chart it uses the Pod's in-cluster credentials and elects a leader
// under upstream's Lease (see options); as a process of the test harness it gets --kubeconfig and runs
// without leader election.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"

	"github.com/cert-manager/cert-manager/yonder-test-peers/internal/election"
)

func main() {
	// A flag set of our own: controller-runtime registers its own --kubeconfig on the global one.
	fs := flag.NewFlagSet("cert-manager-cainjector", flag.ExitOnError)
	var (
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig of the apiserver to serve (empty: the Pod's in-cluster credentials)")
		namespace  = fs.String("namespace", "", "inject only from and into this namespace (empty: every namespace)")
		o          = options{
			election:       election.Register(fs),
			metricsAddress: fs.String("metrics-listen-address", "0.0.0.0:9402", "address of the Prometheus metrics endpoint (0: off)"),
			healthzAddress: fs.String("healthz-listen-address", "0", "address of /healthz and /readyz (0: off; the chart probes none)"),
		}
	)
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with the usage
	ctrl.SetLogger(klog.Background())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *kubeconfig, *namespace, o)
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-cainjector: %v\n", err)
		os.Exit(1)
	}
}

// options are upstream's flags for the cainjector's leader election and listeners, with its defaults: the
// chart's Deployment passes only --leader-election-namespace; the test harness's processes pass
// --leader-elect=false and --metrics-listen-address=0 (one injector per apiserver, many on one machine).
type options struct {
	election                       election.Flags
	metricsAddress, healthzAddress *string
}

// leaseName is upstream's Lease of the cainjector.
const leaseName = "cert-manager-cainjector-leader-election"

func run(ctx context.Context, kubeconfig, namespace string, o options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load %s: %w", kubeconfig, err)
	}
	cfg = util.RestConfigWithUserAgent(cfg, "cainjector")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, cmscheme.AddToScheme, apiextensionsv1.AddToScheme, apiregistrationv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("failed to build the scheme: %w", err)
		}
	}
	var namespaces map[string]cache.Config
	if namespace != "" {
		namespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The injectors register the informers they need; a read of anything else is a bug, not a new watch.
		Cache: cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		// Secrets are read on demand, as upstream does, so that the injector never caches every Secret of
		// the cluster.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                       metricsserver.Options{BindAddress: *o.metricsAddress},
		HealthProbeBindAddress:        *o.healthzAddress,
		LeaderElection:                *o.election.Enabled,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       *o.election.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 o.election.LeaseDuration,
		RenewDeadline:                 o.election.RenewDeadline,
		RetryPeriod:                   o.election.RetryPeriod,
	})
	if err != nil {
		return fmt.Errorf("failed to create the manager: %w", err)
	}
	// The Certificate data source watches Certificates: without their CRD the manager would fail to start,
	// and the harness may start the injector just before clusterctl installs the CRDs.
	if err := waitForCertificateCRD(ctx, cfg, scheme); err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return fmt.Errorf("failed to register the injectors: %w", err)
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

func waitForCertificateCRD(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("failed to create a client: %w", err)
	}
	key := types.NamespacedName{Name: "certificates.cert-manager.io"}
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		lastErr = c.Get(ctx, key, &apiextensionsv1.CustomResourceDefinition{})
		if apierrors.IsNotFound(lastErr) {
			return false, nil
		}
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the CRD %s did not appear: %w (last error: %v)", key.Name, err, lastErr)
	}
	return nil
}
