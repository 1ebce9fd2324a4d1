// Command yonder-bootstrap-manager runs the YonderConfig reconciler, the kubelet-serving CSR approver and
// their webhooks: it renders each Machine's bootstrap data and manages its bootstrap token.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	"github.com/yonder-dev/yonder/bootstrap/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
)

const controllerName = "yonder-bootstrap-manager"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	o := manager.Options{Name: controllerName}
	var (
		agentURL, agentSHA, imageRepository string
		concurrency                         int
	)
	fs := pflag.CommandLine
	o.AddFlags(fs)
	fs.IntVar(&concurrency, "yonderconfig-concurrency", 10, "YonderConfigs reconciled in parallel")
	fs.StringVar(&agentURL, "agent-url", "", "Default yonder-agent download URL for YonderConfigs without spec.agent")
	fs.StringVar(&agentSHA, "agent-sha256", "", "sha256 of the default yonder-agent (alone: the agent's blob in the image repository)")
	fs.StringVar(&imageRepository, "image-repository", "", "Default spec.images.repository: where node images (<repository>/yonder-node:<Kubernetes version>) and yonder-agent come from")
	pflag.Parse()
	if agentURL != "" && agentSHA == "" {
		return fmt.Errorf("--agent-url needs --agent-sha256")
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
	if err := setup.Webhooks(mgr); err != nil {
		return err
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:     mgr.GetClient(),
		Cache:            clustercache.CacheOptions{},
		Client:           clustercache.ClientOptions{UserAgent: controllerName, QPS: 20, Burst: 30},
		WatchFilterValue: o.WatchFilter,
	}, controller.Options{MaxConcurrentReconciles: concurrency})
	if err != nil {
		return fmt.Errorf("failed to create the ClusterCache: %w", err)
	}
	if err := setup.Reconcilers(ctx, mgr, cc, setup.Options{
		WatchFilterValue: o.WatchFilter, DefaultAgent: setup.DefaultAgent(agentURL, agentSHA), ImageRepository: imageRepository, Concurrency: concurrency,
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
