// Command kubectl-yonder is Yonder's kubectl plugin (`kubectl yonder …` once it is on the PATH): register
// SSH hosts, print a one-line manual bootstrap, install the network add-on into a workload cluster, describe
// a Cluster's hosts, Machines, Nodes and tunnels, and (built from a checkout, not with -tags release) run
// the local lab. See docs/kubectl-yonder.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/describe"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/enrol"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/host"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/machine"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/site"
)

func newRootCommand(o *cli.Options) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-yonder",
		Short:         "Operate Yonder: SSH hosts, manual joins, network sites, cluster views and the local lab",
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs plugins as kubectl-yonder; show the name users type.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl yonder"},
	}
	o.AddFlags(root.PersistentFlags())
	root.AddCommand(enrol.Attach(host.NewCommand(o), o), machine.NewCommand(o), site.NewCommand(o), describe.NewCommand(o))
	for _, c := range developerCommands {
		root.AddCommand(c(o))
	}
	return root
}

// developerCommands are added to the plugin built from a checkout (lab.go); the released plugin, built
// with -tags release, has none: no test harness in it.
var developerCommands []func(*cli.Options) *cobra.Command

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(cli.NewOptions()).ExecuteContext(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
