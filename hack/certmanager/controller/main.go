// Command cert-manager-controller is cert-manager's controller (the reconcilers that issue Certificates)
// built from cert-manager's importable packages, for Yonder's tests and lab: upstream's cmd/controller is a
// module of its own that the Go module proxy does not serve, so hack/test-bins.sh cannot build it.
//
// It runs the same reconcilers upstream enables by default for the Issuer types that need no outside
// service: Issuer and ClusterIssuer readiness, the Certificate lifecycle (trigger, key manager, request
// manager, issuing, readiness, revision manager), the CertificateRequest approver, and the SelfSigned and CA
// signers. ACME, Vault and Venafi are left out: they need servers a test machine cannot reach, and their
// SDKs would triple the binary.
//
// It runs both ways cert-manager's controller runs:
//   - as the Deployment of cert-manager's chart (test/stack's pivot runs the chart's manifest on real
//     kubelets): in-cluster credentials, leader election in --leader-election-namespace (the chart's
//     kube-system) under upstream's Lease name and timings, /livez on --healthz-listen-address (the chart's
//     liveness probe) and the Prometheus registry on --metrics-listen-address, both at upstream's default
//     ports. The chart's ACME flags (--acme-http01-solver-image, --max-concurrent-challenges) are accepted
//     and have nothing to configure here;
//   - as a process of the test harness against any apiserver (--kubeconfig), which passes
//     --leader-elect=false and turns both listeners off (0): it runs exactly one controller per apiserver and
//     owns its lifetime.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
		kubeconfig       = fs.String("kubeconfig", "", "kubeconfig of the apiserver to serve (empty: the Pod's in-cluster credentials)")
		namespace        = fs.String("namespace", "", "watch only this namespace (empty: every namespace)")
		clusterResources = fs.String("cluster-resource-namespace", "cert-manager", "namespace where ClusterIssuers keep their Secrets (the CA issuer's key pair)")
		workers          = fs.Int("workers", 5, "concurrent workers per controller")
		election         = leaderElectionFlags(fs, "cert-manager-controller")
		healthz          = fs.String("healthz-listen-address", "0.0.0.0:9403", "address of /livez and /healthz (0: off)")
		metricsAddr      = fs.String("metrics-listen-address", "0.0.0.0:9402", "address of the Prometheus metrics endpoint (0: off)")
	)
	// The chart's ACME settings: this build has no ACME issuer (see the package doc), so they configure nothing.
	fs.String("acme-http01-solver-image", "", "the ACME HTTP-01 solver's image (no ACME issuer in this build)")
	fs.Int("max-concurrent-challenges", 60, "ACME challenges at once (no ACME issuer in this build)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with the usage
	if *workers < 1 {
		fmt.Fprintln(os.Stderr, "cert-manager-controller: --workers must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	serveErr := make(chan error, 2)
	for _, l := range []struct {
		addr    string
		handler http.Handler
	}{{*healthz, healthHandler()}, {*metricsAddr, promhttp.Handler()}} {
		if l.addr == "0" || l.addr == "" {
			continue
		}
		srv := &http.Server{Addr: l.addr, Handler: l.handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.ListenAndServe() }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	}
	err := election.run(ctx, *kubeconfig, serveErr, func(ctx context.Context) error {
		return run(ctx, controller.ContextOptions{
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
	})
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
