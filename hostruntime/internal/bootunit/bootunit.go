// Package bootunit brings a node back when its host boots. The node's machine runs as a transient systemd
// unit (or, without systemd, as a process the agent launched), and cloud-init runs the bootstrap data only
// on an instance's first boot: nothing would start the node after a reboot (power loss, a kernel update, a
// remediation that reboots the host). On a host whose PID 1 is systemd the agent therefore installs a
// persistent unit, yonder-node-<machine>.service, enabled in multi-user.target, that runs
// `yonder-agent bootstrap` with the node's own flags once the network is online.
//
// The unit re-runs the whole converge rather than starting the machine directly because a reboot loses
// more than the machine: the kubelet's host sysctls (the kernel forgets them; the host phase sets them
// again, or the kubelet refuses to start), the sysctl registry and the bootstrap-success sentinel (both on
// the /run tmpfs), and the machine's cgroup subtrees. Bootstrap is idempotent and its phases find their
// work done (cached and re-verified artifacts, the unpacked tree, unchanged files, files[]/preCommands and
// postCommands already run), so at boot it only sets the sysctls, relaunches the machine, waits for the
// Node to be Ready and writes the sentinel again; and it follows the active blue/green slot recorded in
// the state, so the unit needs no change when an upgrade switches slots.
package bootunit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/yonder-dev/yonder/pkg/atomicfile"
)

// DefaultDir is the local administrator's unit directory: it outlives reboots and package upgrades.
const DefaultDir = "/etc/systemd/system"

// WantedBy is the target that starts the unit at boot.
const WantedBy = "multi-user.target"

// Name is the boot unit's name for a node's machine (the base name, not a blue/green slot).
func Name(machine string) string { return "yonder-node-" + machine + ".service" }

// Unit is one node's boot unit.
type Unit struct {
	// Machine is the node's machine name (its base blue/green slot).
	Machine string
	// Argv is the command run at boot: the agent's absolute path, "bootstrap" and the node's flags.
	Argv []string
}

// Name is the unit's file name.
func (u Unit) Name() string { return Name(u.Machine) }

// Render returns the unit file.
//
// Type=simple: multi-user.target (and what is ordered after it, such as cloud-init's final stage) does not
// wait for the Node to become Ready. Restart=on-failure: a converge that fails at boot (the API server not
// reachable yet) runs again until the node is back; the machine itself runs in its own unit and is not
// stopped when this one exits. Network-online ordering: the agent renders the kubelet's --node-ip from
// the host's route to the API server and copies the host's resolv.conf. Local filesystems, the state
// directory's included, are mounted before any service with default dependencies starts.
func (u Unit) Render() (string, error) {
	if len(u.Argv) == 0 || !filepath.IsAbs(u.Argv[0]) {
		return "", fmt.Errorf("boot unit %s: the command %q does not start with the agent's absolute path", u.Name(), u.Argv)
	}
	words := make([]string, 0, len(u.Argv))
	for _, a := range u.Argv {
		w, err := quote(a)
		if err != nil {
			return "", fmt.Errorf("boot unit %s: %w", u.Name(), err)
		}
		words = append(words, w)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Brings the node of machine %s back when the host boots: converges it again with the node's\n", u.Machine)
	b.WriteString("# AgentConfig and flags. Written by `yonder-agent bootstrap` and `upgrade`, removed by `yonder-agent reset`.\n")
	b.WriteString("[Unit]\n")
	fmt.Fprintf(&b, "Description=Yonder node %s: sysctls, nspawn machine, kubelet Ready (yonder-agent bootstrap)\n", u.Machine)
	b.WriteString("Wants=network-online.target\n")
	b.WriteString("After=network-online.target\n\n")
	b.WriteString("[Service]\n")
	b.WriteString("Type=simple\n")
	fmt.Fprintf(&b, "ExecStart=%s\n", strings.Join(words, " "))
	b.WriteString("Restart=on-failure\n")
	b.WriteString("RestartSec=30s\n\n")
	b.WriteString("[Install]\n")
	fmt.Fprintf(&b, "WantedBy=%s\n", WantedBy)
	return b.String(), nil
}

// quote writes one ExecStart argument (systemd.service(5), "Command lines"): specifiers (%) and variables
// ($) are escaped everywhere, and an argument with anything but plain path characters is double-quoted
// with C escapes, so a path with a space stays one argument.
func quote(arg string) (string, error) {
	plain := arg != ""
	for _, c := range arg {
		switch {
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("argument %q has a control character", arg)
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune("/._-=:,+@%$", c):
		default:
			plain = false
		}
	}
	s := strings.NewReplacer("%", "%%", "$", "$$").Replace(arg)
	if plain {
		return s, nil
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`, nil
}

// Systemctl runs systemctl with args and returns its combined output.
type Systemctl func(ctx context.Context, args ...string) ([]byte, error)

// HostSystemctl runs the host's systemctl.
func HostSystemctl(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
}

// Manager installs and removes boot units on this host.
type Manager struct {
	// Dir holds the unit files (default DefaultDir).
	Dir string
	// Systemctl talks to the host's systemd (default HostSystemctl).
	Systemctl Systemctl
	// Systemd reports whether the host's PID 1 is systemd (sd_booted()'s test; the agent passes
	// nspawn.SystemdIsPID1). Without systemd nothing is installed: nothing would start the unit.
	Systemd func() bool
}

func (m Manager) dir() string {
	if m.Dir == "" {
		return DefaultDir
	}
	return m.Dir
}

func (m Manager) systemctl(ctx context.Context, args ...string) ([]byte, error) {
	run := m.Systemctl
	if run == nil {
		run = HostSystemctl
	}
	out, err := run(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("systemctl %s failed: %s: %w", strings.Join(args, " "), strings.TrimSpace(string(out)), err)
	}
	return out, nil
}

// SystemdIsPID1 reports whether boot units apply here: the host's PID 1 is systemd.
func (m Manager) SystemdIsPID1() bool { return m.Systemd != nil && m.Systemd() }

// Path is where the unit of machine is installed.
func (m Manager) Path(machine string) string { return filepath.Join(m.dir(), Name(machine)) }

// wantsLink is the symlink `systemctl enable` creates.
func (m Manager) wantsLink(machine string) string {
	return filepath.Join(m.dir(), WantedBy+".wants", Name(machine))
}

// Result says what Install did.
type Result struct {
	// Skipped is set when the host's PID 1 is not systemd: nothing was installed.
	Skipped bool
	// Written is set when the unit file was (re)written.
	Written bool
	// Enabled is set when the unit was enabled by this call.
	Enabled bool
	// Masked is set when the operator masked the unit: it stays masked (their choice), and will not start.
	Masked bool
}

// Install writes the unit (atomically, 0644, only when it differs: an equal file is not touched), reloads
// systemd when the file changed, and enables the unit unless it is enabled already. It starts nothing: the
// unit runs at the next boot.
func (m Manager) Install(ctx context.Context, u Unit) (Result, error) {
	if !m.SystemdIsPID1() {
		return Result{Skipped: true}, nil
	}
	content, err := u.Render()
	if err != nil {
		return Result{}, err
	}
	var res Result
	if res.Written, err = writeIfChanged(m.Path(u.Machine), []byte(content), 0o644); err != nil {
		return res, err
	}
	if res.Written {
		if _, err := m.systemctl(ctx, "daemon-reload"); err != nil {
			return res, err
		}
	}
	// is-enabled exits non-zero for every state but enabled; its output names the state.
	out, _ := m.systemctl(ctx, "is-enabled", u.Name())
	switch state := firstLine(out); state {
	case "enabled":
		return res, nil
	case "masked", "masked-runtime":
		res.Masked = true
		return res, nil
	}
	if _, err := m.systemctl(ctx, "enable", u.Name()); err != nil {
		return res, err
	}
	res.Enabled = true
	return res, nil
}

// Remove stops the unit if it runs (a boot-time converge must not relaunch the machine reset is about to
// stop), disables it, removes its file and reloads systemd. It reports the unit file's path when there was
// anything to remove, "" otherwise. Without systemd as PID 1 (the host was booted otherwise since) it
// removes the files alone.
func (m Manager) Remove(ctx context.Context, machine string) (string, error) {
	path, link := m.Path(machine), m.wantsLink(machine)
	_, ferr := os.Lstat(path)
	_, lerr := os.Lstat(link)
	if errors.Is(ferr, os.ErrNotExist) && errors.Is(lerr, os.ErrNotExist) {
		return "", nil
	}
	if m.SystemdIsPID1() && ferr == nil {
		if _, err := m.systemctl(ctx, "disable", "--now", Name(machine)); err != nil {
			return "", err
		}
	}
	// What disable removed is gone; a link left by an interrupted reset (its file already removed) is not.
	for _, p := range []string{link, path} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("failed to remove %s: %w", p, err)
		}
	}
	if m.SystemdIsPID1() {
		if _, err := m.systemctl(ctx, "daemon-reload"); err != nil {
			return "", err
		}
	}
	return path, nil
}

// Status is the boot unit as the host has it.
type Status struct {
	// Name is the unit's name.
	Name string `json:"name"`
	// Installed is true when its file exists.
	Installed bool `json:"installed"`
	// Enabled is systemctl's is-enabled state (enabled, disabled, masked, …); empty without systemd.
	Enabled string `json:"enabled,omitempty"`
}

// Get reports machine's boot unit.
func (m Manager) Get(ctx context.Context, machine string) Status {
	s := Status{Name: Name(machine)}
	_, err := os.Stat(m.Path(machine))
	s.Installed = err == nil
	if m.SystemdIsPID1() {
		out, _ := m.systemctl(ctx, "is-enabled", s.Name)
		s.Enabled = firstLine(out)
	}
	return s
}

func firstLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// writeIfChanged writes content with mode to path (creating its directory) unless it is already there,
// atomically and synced: systemd never reads half a unit, not even after a power cycle.
func writeIfChanged(path string, content []byte, mode os.FileMode) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // the host's unit directory
		return false, fmt.Errorf("failed to create %s: %w", filepath.Dir(path), err)
	}
	return atomicfile.WriteIfChanged(path, content, mode)
}
