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

// flags are the manager's command-line settings.
type flags struct {
	manager                  manager.Options
	machineConc, clusterConc int
	host                     baremetalhost.Options
}

// addFlags registers every flag of the manager on fs; the manifest test parses the Deployment's args
// with the same set, so config/manager cannot name a flag the binary lacks.
func addFlags(fs *pflag.FlagSet) *flags {
	f := &flags{manager: manager.Options{Name: setup.ControllerName}}
	f.manager.AddFlags(fs)
	fs.IntVar(&f.machineConc, "yondermetalmachine-concurrency", 10, "Concurrent YonderMetalMachine reconciles")
	fs.IntVar(&f.clusterConc, "yondermetalcluster-concurrency", 2, "Concurrent YonderMetalCluster reconciles")
	f.host.AddFlags(fs)
	return f
}

func run() error {
	f := addFlags(pflag.CommandLine)
	pflag.Parse()
	o, machineConc, clusterConc, hostOpts := f.manager, f.machineConc, f.clusterConc, f.host

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
