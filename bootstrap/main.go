// Command yonder-bootstrap-manager runs the YonderConfig reconciler, the kubelet-serving CSR approver and
// their webhooks: it renders each Machine's bootstrap data and manages its bootstrap token.
package main

import (
	"errors"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/yonder-dev/yonder/bootstrap/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

func main() { manager.Main(setup.ControllerName, run) }

// flags are the manager's command-line settings.
type flags struct {
	manager                             manager.Options
	agentURL, agentSHA, imageRepository string
	concurrency                         int
}

// addFlags registers every flag of the manager on fs.
func addFlags(fs *pflag.FlagSet) *flags {
	f := &flags{manager: manager.Options{Name: setup.ControllerName}}
	f.manager.AddFlags(fs)
	fs.IntVar(&f.concurrency, "yonderconfig-concurrency", 10, "YonderConfigs reconciled in parallel")
	fs.StringVar(&f.agentURL, "agent-url", "", "Default yonder-agent download URL for YonderConfigs without spec.agent")
	fs.StringVar(&f.agentSHA, "agent-sha256", "", "sha256 of the default yonder-agent (alone: the agent's blob in the image repository)")
	fs.StringVar(&f.imageRepository, "image-repository", "", "Default spec.images.repository: where node images (<repository>/yonder-node:<Kubernetes version>) and yonder-agent come from")
	return f
}

// options returns the reconcilers' settings, or why the flags are unusable.
func (f *flags) options() (setup.Options, error) {
	if f.agentURL != "" && f.agentSHA == "" {
		return setup.Options{}, errors.New("--agent-url needs --agent-sha256")
	}
	return setup.Options{Controllers: f.manager.Controllers(), DefaultAgent: setup.DefaultAgent(f.agentURL, f.agentSHA),
		ImageRepository: f.imageRepository, Concurrency: f.concurrency}, nil
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
