// Command yonder-ssh-manager is the root of Yonder's SSH infrastructure provider (clusterctl name
// infrastructure-yonder-ssh): a persistent inventory of existing Linux hosts (YonderSSHHost) that
// YonderSSHMachines claim, bootstrap over SSH with pinned host keys, and release back to the pool when
// their Machine goes away. Layout: STYLE.md.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() { manager.Main(setup.ControllerName, run) }

// flags are the manager's command-line settings.
type flags struct {
	manager                                            manager.Options
	machineConc, hostConc, clusterConc, cleanupRetries int
	probeInterval, pollInterval, retryInterval         time.Duration
}

// addFlags registers every flag of the manager on fs.
func addFlags(fs *pflag.FlagSet) *flags {
	f := &flags{manager: manager.Options{Name: setup.ControllerName}}
	f.manager.AddFlags(fs)
	fs.IntVar(&f.machineConc, "yondersshmachine-concurrency", 10, "Concurrent YonderSSHMachine reconciles")
	fs.IntVar(&f.hostConc, "yondersshhost-concurrency", 10, "Concurrent YonderSSHHost reconciles")
	fs.IntVar(&f.clusterConc, "yondersshcluster-concurrency", 2, "Concurrent YonderSSHCluster reconciles")
	fs.IntVar(&f.cleanupRetries, "cleanup-retries", 5, "Cleanup attempts on delete before an operator must act")
	fs.DurationVar(&f.probeInterval, "host-probe-interval", 5*time.Minute, "How often hosts are probed over SSH")
	fs.DurationVar(&f.pollInterval, "bootstrap-poll-interval", 10*time.Second, "Longest wait between checks of a running bootstrap: the first check comes after a tenth of it, then the wait doubles with the run's age")
	fs.DurationVar(&f.retryInterval, "ssh-retry-interval", 15*time.Second, "First wait after an SSH failure (doubles per attempt, up to 5m)")
	return f
}

// options returns the reconcilers' settings, or why the flags are unusable.
func (f *flags) options() (setup.Options, error) {
	if f.cleanupRetries < 1 || f.cleanupRetries > 1000 {
		return setup.Options{}, fmt.Errorf("--cleanup-retries must be between 1 and 1000, got %d", f.cleanupRetries)
	}
	return setup.Options{
		Controllers:        f.manager.Controllers(),
		MachineConcurrency: f.machineConc, HostConcurrency: f.hostConc, ClusterConcurrency: f.clusterConc,
		ProbeInterval: f.probeInterval, PollInterval: f.pollInterval, RetryInterval: f.retryInterval,
		CleanupRetries: int32(f.cleanupRetries),
	}, nil
}

func run() error {
	f := addFlags(pflag.CommandLine)
	if err := f.manager.Parse(pflag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o, err := f.options()
	if err != nil {
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
	return manager.Run(ctrl.SetupSignalHandler(), mgr, manager.Setup{Webhooks: setup.SetupWebhooks, Reconcilers: setup.Reconcilers(o)})
}
