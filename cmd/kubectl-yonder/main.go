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
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/describe"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/enrol"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/host"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/machine"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/site"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/version"
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
	root.AddCommand(enrol.AddTo(host.NewCommand(o), o), machine.NewCommand(o), site.NewCommand(o), describe.NewCommand(o), version.NewCommand(o))
	for _, c := range developerCommands {
		root.AddCommand(c(o))
	}
	// cobra's `completion bash|zsh|fish|powershell`, added now (not lazily at Execute) so help and tests see it.
	root.InitDefaultCompletionCmd()
	registerFlagCompletions(root, o)
	return root
}

// completerName is the name kubectl (1.26+) runs to complete `kubectl yonder …`: a link to this binary
// under that name on the PATH makes kubectl's own shell completion reach into the plugin.
const completerName = "kubectl_complete-yonder"

// args are the command line to run: invoked as kubectl_complete-yonder, kubectl asks for completions of
// its arguments, which is cobra's hidden __complete command.
func args(argv []string) []string {
	if filepath.Base(argv[0]) == completerName {
		return append([]string{cobra.ShellCompRequestCmd}, argv[1:]...)
	}
	return argv[1:]
}

// developerCommands are added to the plugin built from a checkout (lab.go); the released plugin, built
// with -tags release, has none: no test harness in it.
var developerCommands []func(*cli.Options) *cobra.Command

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand(cli.NewOptions())
	root.SetArgs(args(os.Args))
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
