package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/internal/agent"
	"github.com/yonder-dev/yonder/hostruntime/internal/configdrive"
	"github.com/yonder-dev/yonder/hostruntime/internal/disk"
)

// newProvisionCommand is the bare-metal ramdisk's step after `attest`: it carries out the released
// instructions — write the image and its config drive to the root disk, clean every disk, or run the
// Node diskless from the ramdisk's memory (run-node) — and reports the outcome to the boot server, which
// boots the host from its disk, releases it, or counts it provisioned. A live image (action live) needs
// nothing: the command says so and exits 0.
func newProvisionCommand() *cobra.Command {
	var opts disk.ListOptions
	var instructionsPath, cmdlinePath, server, spoolDir string
	var rn runNodeOptions
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "(bare metal) carry out the attested instructions: write the image and config drive, or clean the disks, and report",
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := os.ReadFile(instructionsPath) //nolint:gosec // the operator (the ramdisk's init) names the file
			if err != nil {
				return fmt.Errorf("failed to read the instructions (run `yonder-agent attest` first): %w", err)
			}
			in, err := attest.DecodeInstructions(raw)
			if err != nil {
				return err
			}
			if in.Action == attest.ActionLive {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "action live: nothing to write; the host is booted into its live ISO next")
				return err
			}
			if server == "" {
				cl, err := os.ReadFile(cmdlinePath) //nolint:gosec // the operator names the command line file
				if err != nil {
					return fmt.Errorf("failed to read the kernel command line %s: %w", cmdlinePath, err)
				}
				if server, _ = attest.ParseCmdline(string(cl)); server == "" {
					return fmt.Errorf("no boot server: %s has no yonder.server=; pass --server", cmdlinePath)
				}
			}
			start := time.Now()
			var rep attest.Report
			var workErr error
			if in.Action == attest.ActionRunNode {
				rn.SysRoot = opts.SysRoot
				rep, workErr = runNode(cmd.Context(), in, rn, cmd.ErrOrStderr())
			} else {
				rep, workErr = carryOut(cmd.Context(), in, opts, spoolDir)
			}
			rep.Host, rep.Token, rep.Action, rep.Success = in.Host, in.ReportToken, in.Action, workErr == nil
			rep.Duration = time.Since(start).Round(time.Millisecond).String()
			if workErr != nil {
				rep.Message = workErr.Error()
			}
			client := &attest.Client{Server: server}
			if err := client.Report(cmd.Context(), rep); err != nil {
				return errors.Join(workErr, fmt.Errorf("failed to report to %s: %w", server, err))
			}
			if workErr != nil {
				return fmt.Errorf("%s failed (reported to the boot server): %w", in.Action, workErr)
			}
			rep.Token = "" // a credential: never on the console
			return printJSON(cmd, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&instructionsPath, "instructions", "/run/yonder/instructions.json", "the instructions `yonder-agent attest` wrote")
	f.StringVar(&cmdlinePath, "cmdline", "/proc/cmdline", "kernel command line with yonder.server=")
	f.StringVar(&server, "server", "", "boot server URL to report to (default: yonder.server= from the command line)")
	f.StringVar(&spoolDir, "spool-dir", "", "where a qcow2 image is held while converted (default $TMPDIR or /tmp, the ramdisk's memory)")
	f.StringVar(&rn.ProviderIDFile, "provider-id-file", agent.DefaultProviderIDFile, "(run-node) where the meta data's providerid is written for the agent")
	f.StringVar(&rn.ScriptPath, "bootstrap-script", "/run/yonder/bootstrap.sh", "(run-node) where the user data is written as a shell script and run")
	f.BoolVar(&rn.SetHostname, "set-hostname", true, "(run-node) set the hostname to the meta data's local-hostname")
	f.StringVar(&rn.ResolvConf, "resolv-conf", "/etc/resolv.conf", "(run-node) where the network data's DNS servers are written")
	f.StringVar(&opts.SysRoot, "sys-root", disk.DefaultSysRoot, "where sysfs is mounted")
	f.StringVar(&opts.DevRoot, "dev-root", disk.DefaultDevRoot, "where the device nodes are")
	f.BoolVar(&opts.IncludeLoop, "include-loop", false, "treat attached loop devices as disks (rehearsals and tests; never in the ramdisk)")
	return cmd
}

// carryOut does the work of a write-image or clean instruction and returns what the report says besides
// the outcome.
func carryOut(ctx context.Context, in *attest.Instructions, opts disk.ListOptions, spoolDir string) (attest.Report, error) {
	var rep attest.Report
	inv, err := disk.List(opts)
	if err != nil {
		return rep, err
	}
	switch in.Action {
	case attest.ActionWriteImage:
		root, err := inv.Choose(in.RootDeviceHints)
		if err != nil {
			return rep, err
		}
		rep.Device = root.Path
		res, err := (&disk.Writer{SpoolDir: spoolDir}).Write(ctx, root.Path, *in.Image)
		if err != nil {
			return rep, err
		}
		rep.Bytes = res.ImageBytes
		cd, err := configdrive.Write(root.Path, configdrive.Drive{UserData: in.UserData, MetaData: in.MetaData, NetworkData: in.NetworkData})
		if err != nil {
			return rep, fmt.Errorf("the image is written to %s, but its config drive is not: %w", root.Path, err)
		}
		rep.Message = fmt.Sprintf("%s image (%s %s) written to %s; config drive in partition %d", res.Format, res.ChecksumType, res.Checksum, root.Path, cd.Partition)
		return rep, nil
	case attest.ActionClean:
		if len(inv.Devices) == 0 {
			return rep, fmt.Errorf("no disk to clean (excluded: %s)", describeExcluded(inv.Excluded))
		}
		var errs []error
		var cleaned []string
		// Every disk is attempted: one disk that fails must not leave the others' metadata in place.
		for _, d := range inv.Devices {
			if _, err := disk.Clean(d.Path); err != nil {
				errs = append(errs, err)
				continue
			}
			cleaned = append(cleaned, d.Path)
		}
		rep.Message = fmt.Sprintf("cleaned %v", cleaned)
		return rep, errors.Join(errs...)
	}
	return rep, fmt.Errorf("unknown action %q", in.Action)
}
