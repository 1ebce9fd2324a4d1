// Command yonder-metal-manager is the root of Yonder's bare-metal infrastructure provider (clusterctl
// name infrastructure-yonder-metal): YonderMetalMachines claim Metal3 BareMetalHosts CAPM3-style and hand
// them an image and the Machine's bootstrap data; the hosts themselves are reconciled without Ironic
// (Redfish, PXE services, TPM attestation). Layout: STYLE.md.
package main

import (
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() { manager.Main(setup.ControllerName, run) }

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

// options returns the reconcilers' settings.
func (f *flags) options() setup.Options {
	return setup.Options{Controllers: f.manager.Controllers(), MachineConcurrency: f.machineConc, ClusterConcurrency: f.clusterConc, Hosts: &f.host}
}

func run() error {
	f := addFlags(pflag.CommandLine)
	if err := f.manager.Parse(pflag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	if err := f.host.Validate(); err != nil {
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
