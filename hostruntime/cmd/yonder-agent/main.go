// Command yonder-agent turns a Linux host into a Kubernetes Node: containerd and the kubelet run inside a
// systemd-nspawn machine, so the host stays its owner's and `reset` leaves it as it was.
//
//	yonder-agent bootstrap   run every phase (idempotent; re-run converges)
//	yonder-agent upgrade     switch to a new AgentConfig blue/green, with rollback
//	yonder-agent preflight   check the host, change nothing
//	yonder-agent status      print the node's state as JSON
//	yonder-agent reset       remove the node from this host
//	yonder-agent attest      (bare metal) prove the TPM to the boot server, receive the bootstrap data
//	yonder-agent disk        (bare metal) list disks, write the image to the root disk, clean disk metadata
//	yonder-agent version     print the version
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/agent"
)

// Set with -ldflags "-X main.version=…".
var (
	version = "v0.0.0-dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "yonder-agent:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	o := &agent.Options{}
	root := &cobra.Command{
		Use:           "yonder-agent",
		Short:         "Turn this host into a Kubernetes Node (containerd + kubelet in a systemd-nspawn machine)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := root.PersistentFlags()
	f.StringVar(&o.ConfigPath, "config", agentv1.DefaultPath, "AgentConfig file")
	f.StringVar(&o.StateDir, "state-dir", agent.DefaultStateDir, "state, caches, machine rootfs and logs")
	f.StringVar(&o.MachineName, "machine-name", "", "nspawn machine name (default yonder-<nodeName>)")
	f.StringVar(&o.CgroupName, "cgroup-name", "", "name of the machine's cgroup subtree (default: the machine name)")
	f.StringVar(&o.SentinelPath, "sentinel", agent.DefaultSentinel, "file written once the Node is Ready")
	f.StringVar(&o.ProviderIDFile, "provider-id-file", agent.DefaultProviderIDFile, "read the providerID from this file when the AgentConfig has none (reset removes it)")
	bootstrap, upgrade := newBootstrapCommands(o)
	root.AddCommand(bootstrap, upgrade, newPreflightCommand(o), newStatusCommand(o), newResetCommand(o), newVersionCommand(), newAttestCommand(), newProvisionCommand(), newDiskCommand())
	return root
}

// newBootstrapCommands returns bootstrap and upgrade, which share the node's flags.
func newBootstrapCommands(o *agent.Options) (*cobra.Command, *cobra.Command) {
	bootstrap := &cobra.Command{
		Use:   "bootstrap",
		Short: "Run every phase until the Node is Ready; safe to re-run",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return agent.Bootstrap(cmd.Context(), *o)
		},
	}
	bf := bootstrap.Flags()
	bf.StringVar(&o.NetworkNamespacePath, "network-namespace-path", "", "run the machine in this network namespace (default: the agent's)")
	bf.StringVar(&o.PodCIDR, "pod-cidr", "", "pod CIDR for the CNI config (default: the Node's spec.podCIDR)")
	bf.StringVar(&o.SandboxImage, "sandbox-image", agent.DefaultSandboxImage, "pause image the CRI uses (node images carry it; otherwise import it as an image/ artifact)")
	bf.IntVar(&o.NodeLeaseDurationSeconds, "node-lease-duration-seconds", 0, "kubelet nodeLeaseDurationSeconds (0: kubelet default)")
	bf.DurationVar(&o.ReadyTimeout, "ready-timeout", agent.DefaultReadyTimeout, "how long to wait for the Node to become Ready")
	upgrade := &cobra.Command{
		Use:   "upgrade",
		Short: "Switch the node to a new AgentConfig blue/green: prepare the other machine, switch, verify the kubelet, roll back on failure",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return agent.Upgrade(cmd.Context(), *o)
		},
	}
	upgrade.Flags().AddFlagSet(bf)
	return bootstrap, upgrade
}

func newPreflightCommand(o *agent.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "preflight",
		Short: "Check the host (kernel, cgroups, swap, ports, disk, tools); change nothing",
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := agent.Preflight(*o)
			if err := printJSON(cmd, rep); err != nil {
				return err
			}
			if err := rep.Err(); err != nil {
				return fmt.Errorf("preflight failed: %w", err)
			}
			return nil
		},
	}
}

func newStatusCommand(o *agent.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print the node's phases, machine and Node state as JSON",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			s, err := agent.GetStatus(ctx, *o)
			if err != nil {
				return err
			}
			return printJSON(cmd, s)
		},
	}
}

func newResetCommand(o *agent.Options) *cobra.Command {
	reset := &cobra.Command{
		Use:   "reset",
		Short: "Remove the boot unit, stop the machine, remove its cgroups, mounts, files and the sentinel, restore sysctls",
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := agent.Reset(cmd.Context(), *o)
			if rep != nil {
				if perr := printJSON(cmd, rep); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	reset.Flags().BoolVar(&o.KeepCache, "keep-cache", false, "keep the verified artifact, image and rootfs caches (<state-dir>/cache) for a faster re-bootstrap")
	return reset
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printJSON(cmd, map[string]string{"version": version, "commit": commit, "agentConfig": agentv1.APIVersion})
		},
	}
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
