// Command cert-manager-controller is cert-manager's controller (the reconcilers that issue Certificates)
// built from cert-manager's importable packages, for Yonder's tests and lab: upstream's cmd/controller is a
// module of its own that the Go module proxy does not serve, so hack/test-bins.sh cannot build it.
//
// It runs the same reconcilers upstream enables by default for the Issuer types that need no outside
// service: Issuer and ClusterIssuer readiness, the Certificate lifecycle (trigger, key manager, request
// manager, issuing, readiness, revision manager), the CertificateRequest approver, and the SelfSigned and CA
// signers. ACME, Vault and Venafi are left out: they need servers a test machine cannot reach, and their
// SDKs would triple the binary. There is no leader election: the harness runs exactly one controller per
// apiserver and owns its lifetime.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The Issuer implementations the issuers/clusterissuers controllers look up by type (registered in init).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// enabledControllers are the names (controller.Known()) this binary runs; see the package doc for why.
var enabledControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	// A flag set of our own: controller-runtime registers its own --kubeconfig on the global one.
	fs := flag.NewFlagSet("cert-manager-controller", flag.ExitOnError)
	var (
		kubeconfig       = fs.String("kubeconfig", "", "kubeconfig of the apiserver to serve (required)")
		namespace        = fs.String("namespace", "", "watch only this namespace (empty: every namespace)")
		clusterResources = fs.String("cluster-resource-namespace", "cert-manager", "namespace where ClusterIssuers keep their Secrets (the CA issuer's key pair)")
		workers          = fs.Int("workers", 5, "concurrent workers per controller")
	)
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with the usage
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager-controller: --kubeconfig is required")
		os.Exit(2)
	}
	if *workers < 1 {
		fmt.Fprintln(os.Stderr, "cert-manager-controller: --workers must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	err := run(ctx, controller.ContextOptions{
		Kubeconfig: *kubeconfig,
		Namespace:  *namespace,
		// Upstream's defaults (its config API's defaults.go): the zero values would mean client-side rate
		// limits of 5 QPS and no backoff after a failed issuance.
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: *clusterResources},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	}, *workers)
	logf.FlushLogs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-controller: %v\n", err)
		os.Exit(1)
	}
}

// run builds the enabled controllers on one shared context (one set of informers, as upstream does), starts
// the informers once every controller has registered the ones it needs, and returns when ctx ends or a
// controller fails.
func run(ctx context.Context, opts controller.ContextOptions, workers int) error {
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("failed to connect to the apiserver: %w", err)
	}
	cctx, err := factory.Build()
	if err != nil {
		return fmt.Errorf("failed to build the controller context: %w", err)
	}
	known := controller.Known()
	g, gctx := errgroup.WithContext(ctx)
	names := append([]string(nil), enabledControllers...)
	sort.Strings(names)
	for _, name := range names {
		construct, ok := known[name]
		if !ok {
			// A rename upstream must fail the build's first run, not silently drop a reconciler.
			return fmt.Errorf("controller %q is not registered by this cert-manager version", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("failed to build controller %s: %w", name, err)
		}
		g.Go(func() error {
			if err := c.Run(workers, gctx); err != nil {
				return fmt.Errorf("controller %s: %w", name, err)
			}
			return nil
		})
	}
	logf.FromContext(ctx).Info("starting controllers", "controllers", names)
	// Informers start after the constructors ran: each constructor registers the informers it lists.
	cctx.SharedInformerFactory.Start(gctx.Done())
	cctx.KubeSharedInformerFactory.Start(gctx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	err = g.Wait()
	cctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cctx.KubeSharedInformerFactory.Shutdown()
	cctx.SharedInformerFactory.Shutdown()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
