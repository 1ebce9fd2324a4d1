// Command yonder-controlplane-manager runs the YonderControlPlane reconciler and webhooks: it attaches an
// existing conformant cluster as a CAPI Cluster's control plane.
package main

import (
	"os"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/controlplane/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() { manager.Main(setup.ControllerName, run) }

// flags are the manager's command-line settings.
type flags struct {
	manager            manager.Options
	concurrency        int
	healthCheck, retry time.Duration
}

// addFlags registers every flag of the manager on fs.
func addFlags(fs *pflag.FlagSet) *flags {
	f := &flags{manager: manager.Options{Name: setup.ControllerName}}
	f.manager.AddFlags(fs)
	fs.IntVar(&f.concurrency, "yondercontrolplane-concurrency", 10, "YonderControlPlanes reconciled in parallel")
	fs.DurationVar(&f.healthCheck, "health-check-interval", time.Minute, "How often an attached API server is probed")
	fs.DurationVar(&f.retry, "retry-interval", 20*time.Second, "How soon a failing kubeconfig is checked again")
	return f
}

// options returns the reconcilers' settings.
func (f *flags) options() setup.Options {
	return setup.Options{Controllers: f.manager.Controllers(), HealthCheckInterval: f.healthCheck, RetryInterval: f.retry, Concurrency: f.concurrency}
}

func run() error {
	f := addFlags(pflag.CommandLine)
	if err := f.manager.Parse(pflag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	mgr, err := manager.New(ctrl.GetConfigOrDie(), scheme, f.manager)
	if err != nil {
		return err
	}
	return manager.Run(ctrl.SetupSignalHandler(), mgr, manager.Setup{Webhooks: setup.SetupWebhooks, Reconcilers: setup.Reconcilers(f.options())})
}
