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

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	o := manager.Options{Name: "yonder-ssh-manager"}
	var (
		machineConc, hostConc, clusterConc, cleanupRetries int
		probeInterval, pollInterval, retryInterval         time.Duration
	)
	fs := pflag.CommandLine
	o.AddFlags(fs)
	fs.IntVar(&machineConc, "yondersshmachine-concurrency", 10, "Concurrent YonderSSHMachine reconciles")
	fs.IntVar(&hostConc, "yondersshhost-concurrency", 10, "Concurrent YonderSSHHost reconciles")
	fs.IntVar(&clusterConc, "yondersshcluster-concurrency", 2, "Concurrent YonderSSHCluster reconciles")
	fs.IntVar(&cleanupRetries, "cleanup-retries", 5, "Cleanup attempts on delete before an operator must act")
	fs.DurationVar(&probeInterval, "host-probe-interval", 5*time.Minute, "How often hosts are probed over SSH")
	fs.DurationVar(&pollInterval, "bootstrap-poll-interval", 10*time.Second, "How often a running bootstrap is checked")
	fs.DurationVar(&retryInterval, "ssh-retry-interval", 15*time.Second, "First wait after an SSH failure (doubles per attempt, up to 5m)")
	pflag.Parse()
	if cleanupRetries < 1 || cleanupRetries > 1000 {
		return fmt.Errorf("--cleanup-retries must be between 1 and 1000, got %d", cleanupRetries)
	}

	scheme, err := setup.Scheme()
	if err != nil {
		return err
	}
	mgr, err := manager.New(ctrl.GetConfigOrDie(), scheme, o)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setup.SetupWebhooks(mgr); err != nil {
		return err
	}
	if err := setup.SetupReconcilers(ctx, mgr, setup.Options{
		WatchFilterValue: o.WatchFilter, MachineConcurrency: machineConc, HostConcurrency: hostConc, ClusterConcurrency: clusterConc,
		ProbeInterval: probeInterval, PollInterval: pollInterval, RetryInterval: retryInterval,
		CleanupRetries: int32(cleanupRetries),
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
