package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/yonder-dev/yonder/hostruntime/internal/bootunit"
)

// boot makes the node start again when the host boots (package bootunit says how and why). It runs once
// the machine runs: from then on this host is the node, after a reboot too.
func (r *run) boot(ctx context.Context) (string, error) {
	return installBootUnit(ctx, r.o, r.cfg.NodeName, r.log)
}

// installBootUnit installs (or updates) the node's boot unit: the bootstrap of this agent with the
// AgentConfig and flags it runs with now.
func installBootUnit(ctx context.Context, o *Options, nodeName string, log *slog.Logger) (string, error) {
	if !o.BootUnits.SystemdIsPID1() {
		log.Info("Installing no boot unit: the host's PID 1 is not systemd; whatever boots this host must run bootstrap again")
		return "", nil
	}
	argv, err := o.bootArgs(nodeName)
	if err != nil {
		return "", err
	}
	u := bootunit.Unit{Machine: o.baseMachine, Argv: argv}
	res, err := o.BootUnits.Install(ctx, u)
	if err != nil {
		return "", withHint(err, "the node would not start again after a reboot; check systemctl and "+o.BootUnits.Path(u.Machine)+", then run bootstrap again")
	}
	switch {
	case res.Masked:
		log.Warn("Boot unit is masked: the node will not start again after a reboot", "unit", u.Name())
	case res.Written || res.Enabled:
		log.Info("Installed boot unit", "unit", o.BootUnits.Path(u.Machine), "written", res.Written, "enabled", res.Enabled)
	}
	return u.Name(), nil
}

// bootArgs is what the boot unit runs: this agent's bootstrap with the AgentConfig and every host-side
// flag that is not at its default. Paths are absolute (systemd starts the unit in /), the machine and
// cgroup names are the base slot's (bootstrap follows the active blue/green slot recorded in the state).
func (o *Options) bootArgs(nodeName string) ([]string, error) {
	agent := o.AgentPath
	if agent == "" {
		var err error
		if agent, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("failed to find the agent's own path for the boot unit: %w", err)
		}
	}
	var errs []error
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		a, err := filepath.Abs(p)
		if err != nil {
			errs = append(errs, err)
		}
		return a
	}
	argv := []string{abs(agent), "bootstrap", "--config=" + abs(o.ConfigPath)}
	for _, f := range []struct{ name, value, def string }{
		{"state-dir", abs(o.StateDir), DefaultStateDir},
		{"machine-name", o.baseMachine, defaultMachineName(nodeName)},
		{"cgroup-name", o.baseCgroup, o.baseMachine},
		{"sentinel", abs(o.SentinelPath), DefaultSentinel},
		{"provider-id-file", abs(o.ProviderIDFile), DefaultProviderIDFile},
		{"network-namespace-path", abs(o.NetworkNamespacePath), ""},
		{"pod-cidr", o.PodCIDR, ""},
		{"sandbox-image", o.SandboxImage, DefaultSandboxImage},
		{"node-lease-duration-seconds", strconv.Itoa(o.NodeLeaseDurationSeconds), "0"},
		{"ready-timeout", o.ReadyTimeout.String(), DefaultReadyTimeout.String()},
	} {
		if f.value != f.def {
			argv = append(argv, "--"+f.name+"="+f.value)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("failed to make the boot unit's paths absolute: %w", errs[0])
	}
	return argv, nil
}
