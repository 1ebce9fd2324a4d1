// Command yonder-metal-manager is the root of Yonder's bare-metal infrastructure provider (clusterctl
// name infrastructure-yonder-metal): YonderMetalMachines claim Metal3 BareMetalHosts CAPM3-style and hand
// them an image and the Machine's bootstrap data; the hosts themselves are reconciled without Ironic
// (Redfish, PXE services, TPM attestation). Layout: STYLE.md.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	o := manager.Options{Name: setup.ControllerName}
	var machineConc, clusterConc int
	fs := pflag.CommandLine
	o.AddFlags(fs)
	fs.IntVar(&machineConc, "yondermetalmachine-concurrency", 10, "Concurrent YonderMetalMachine reconciles")
	fs.IntVar(&clusterConc, "yondermetalcluster-concurrency", 2, "Concurrent YonderMetalCluster reconciles")
	var hostOpts baremetalhost.Options
	hostOpts.AddFlags(fs)
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
	if err := setup.SetupWebhooks(mgr); err != nil {
		return err
	}
	if err := setup.SetupReconcilers(ctx, mgr, setup.Options{
		WatchFilterValue: o.WatchFilter, MachineConcurrency: machineConc, ClusterConcurrency: clusterConc,
	}); err != nil {
		return err
	}
	// BareMetalHosts labelled metal.yonder.dev/managed=true, and the boot services when configured.
	if err := baremetalhost.SetupWithManager(ctx, mgr, hostOpts); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
