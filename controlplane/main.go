// Command yonder-controlplane-manager runs the YonderControlPlane reconciler and webhooks: it attaches an
// existing conformant cluster as a CAPI Cluster's control plane.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/controlplane/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	o := manager.Options{Name: "yonder-controlplane-manager"}
	var (
		concurrency        int
		healthCheck, retry time.Duration
	)
	fs := pflag.CommandLine
	o.AddFlags(fs)
	fs.IntVar(&concurrency, "yondercontrolplane-concurrency", 10, "YonderControlPlanes reconciled in parallel")
	fs.DurationVar(&healthCheck, "health-check-interval", time.Minute, "How often an attached API server is probed")
	fs.DurationVar(&retry, "retry-interval", 20*time.Second, "How soon a failing kubeconfig is checked again")
	pflag.Parse()

	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	mgr, err := manager.New(ctrl.GetConfigOrDie(), scheme, o)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setup.Webhooks(mgr); err != nil {
		return err
	}
	if err := setup.Reconcilers(ctx, mgr, setup.Options{
		WatchFilterValue: o.WatchFilter, HealthCheckInterval: healthCheck, RetryInterval: retry, Concurrency: concurrency,
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
