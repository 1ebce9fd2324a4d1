// Package lab implements `kubectl yonder lab up|status|check|down`: Yonder's local lab on one Linux machine,
// built on the end-to-end harness test/stack (management plane installed by the real clusterctl, CAPI
// and Yonder's managers as processes, a workload control plane, network-namespace SSH hosts at several
// sites), plus a Cluster generated from templates/cluster-template-ssh.yaml whose workers join.
//
// `lab up` starts a supervisor process (`lab serve`, in its own session, logging to <dir>/lab.log) that
// owns every process, namespace, link and mount of the lab, follows its log until the lab is ready, and
// returns. `lab down` signals the supervisor, which tears the stack down (hosts reset their nodes first)
// and exits. `lab status` reads the supervisor's state file and asks both clusters. `lab check` runs the
// cross-site pod check again on the Nodes there are now and records its result in the state file.
package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/testbins"
)

// ReadyMarker is the line the supervisor prints once the lab is ready; FailedMarker when it gave up.
const (
	ReadyMarker  = "=== lab ready ==="
	FailedMarker = "=== lab failed ==="
)

// Options are the flags of `lab up` (and of the supervisor).
type Options struct {
	// Dir holds the lab's files: kubeconfigs, SSH keys, state, log, the stack directory.
	Dir string
	// HostsPerSite is N, the number of hosts at each site.
	HostsPerSite int
	// Sites is the number of sites (site-a, site-b, …).
	Sites int
	// Metal adds a QEMU bare-metal host behind the Redfish emulator and a metal MachineDeployment of one.
	Metal bool
	// Workers is the initial MachineDeployment size (default: every host, so both sites have Nodes).
	Workers int
	// NoCluster stops after the hosts: no Cluster is applied (fast checks of the lab's plumbing).
	NoCluster bool
	// Foreground runs the lab in this process and holds it until interrupted.
	Foreground bool
	// Timeout bounds the wait for Ready Nodes.
	Timeout time.Duration
}

// NewCommand returns `lab` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run Yonder's local lab: management plane, workload cluster, SSH hosts at four sites (two behind NAT), joining workers",
		Long: `The lab runs everything on this machine (root needed: network namespaces, bridges, nspawn):
a management cluster with CAPI and Yonder's providers installed by the real clusterctl, a workload control
plane, N SSH hosts per site in network namespaces (site-c and site-d behind NAT), and a Cluster from
templates/cluster-template-ssh.yaml whose workers join at every site. Files go to _lab/ of the checkout (kubeconfigs, SSH key, log).

Building the binaries the first time (Kubernetes, etcd, CAPI, containerd, the node rootfs) takes many
minutes on a small machine; hack/test-bins.sh prints its progress. Later runs reuse the cache.`,
	}
	cmd.AddCommand(newUpCommand(), newServeCommand(), newStatusCommand(o), newCheckCommand(), newDownCommand())
	return cmd
}

func defaultDir() string { return filepath.Join(testbins.RepoRoot(), "_lab") }

func addLabFlags(cmd *cobra.Command, l *Options) {
	fs := cmd.Flags()
	fs.StringVar(&l.Dir, "dir", defaultDir(), "directory of the lab's files")
	fs.IntVar(&l.HostsPerSite, "hosts", 2, "hosts per site")
	fs.IntVar(&l.Sites, "sites", 4, "number of sites (1…4): site-a on the management bridge, site-b behind a routing gateway, site-c and site-d behind NAT")
	fs.BoolVar(&l.Metal, "metal", false, "add a QEMU bare-metal host behind a Redfish emulator and a metal MachineDeployment (lab-metal-0) that provisions it")
	fs.IntVar(&l.Workers, "workers", 0, "initial worker count (default: one per host)")
	fs.BoolVar(&l.NoCluster, "no-cluster", false, "stop after the hosts: apply no Cluster")
	fs.DurationVar(&l.Timeout, "timeout", 20*time.Minute, "how long to wait for Ready worker Nodes")
}

func (l *Options) validate() error {
	var errs []string
	if l.HostsPerSite < 1 || l.HostsPerSite > 20 {
		errs = append(errs, fmt.Sprintf("--hosts %d is outside 1…20", l.HostsPerSite))
	}
	if l.Sites < 1 || l.Sites > 4 {
		errs = append(errs, fmt.Sprintf("--sites %d is outside 1…4", l.Sites))
	}
	if l.Workers < 0 || l.Workers > l.HostsPerSite*l.Sites {
		errs = append(errs, fmt.Sprintf("--workers %d is outside 0…%d (the hosts there are)", l.Workers, l.HostsPerSite*l.Sites))
	}
	if l.Dir == "" {
		errs = append(errs, "--dir is required")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

func (l *Options) args() []string {
	a := []string{"--dir", l.Dir, "--hosts", strconv.Itoa(l.HostsPerSite), "--sites", strconv.Itoa(l.Sites),
		"--workers", strconv.Itoa(l.Workers), "--timeout", l.Timeout.String()}
	if l.NoCluster {
		a = append(a, "--no-cluster")
	}
	if l.Metal {
		a = append(a, "--metal")
	}
	return a
}

func newUpCommand() *cobra.Command {
	l := &Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up (step by step, with elapsed times) and return once workers are Ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := l.validate(); err != nil {
				return err
			}
			if l.Foreground {
				return Serve(cmd.Context(), l, cmd.OutOrStdout(), true)
			}
			return Up(cmd.Context(), l, cmd.OutOrStdout())
		},
	}
	addLabFlags(cmd, l)
	cmd.Flags().BoolVar(&l.Foreground, "foreground", false, "run the lab in this process and hold it until Ctrl-C")
	return cmd
}

func newServeCommand() *cobra.Command {
	l := &Options{}
	cmd := &cobra.Command{
		Use:    "serve",
		Short:  "The lab supervisor that `lab up` starts (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := l.validate(); err != nil {
				return err
			}
			return Serve(cmd.Context(), l, cmd.OutOrStdout(), true)
		},
	}
	addLabFlags(cmd, l)
	return cmd
}

// Up starts the supervisor in its own session and follows its log until the lab is ready or failed.
func Up(ctx context.Context, l *Options, out io.Writer) error {
	if st, err := ReadState(l.Dir); err == nil && st.Alive() {
		return fmt.Errorf("a lab is already running (supervisor pid %d, %s): `kubectl yonder lab status`, or `kubectl yonder lab down` first", st.PID, l.Dir)
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", l.Dir, err)
	}
	logPath := filepath.Join(l.Dir, "lab.log")
	logFile, err := os.Create(logPath) //nolint:gosec // the lab directory is the operator's choice
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", logPath, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("failed to find this program: %w", err)
	}
	cmd := exec.Command(self, append([]string{"lab", "serve"}, l.args()...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = testbins.RepoRoot()
	// Its own session: the lab outlives this command and a Ctrl-C in this terminal after `up` returned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("failed to start the lab supervisor: %w", err)
	}
	_ = logFile.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	_, _ = fmt.Fprintf(out, "Lab supervisor started (pid %d); log %s\n", cmd.Process.Pid, logPath)

	f, err := os.Open(logPath) //nolint:gosec // the log just created above
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(f)
	var partial string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		for {
			line, err := r.ReadString('\n')
			partial += line
			if err != nil {
				break
			}
			_, _ = fmt.Fprint(out, partial)
			switch strings.TrimSpace(partial) {
			case ReadyMarker:
				return nil
			case FailedMarker:
				err := <-exited
				return fmt.Errorf("the lab did not come up (supervisor: %v); see %s", err, logPath)
			}
			partial = ""
		}
		select {
		case err := <-exited:
			// Drain what the supervisor wrote last.
			rest, _ := io.ReadAll(r)
			_, _ = fmt.Fprint(out, partial+string(rest))
			return fmt.Errorf("the lab supervisor exited before the lab was ready (%v); see %s", err, logPath)
		case <-ctx.Done():
			_, _ = fmt.Fprintln(out, "Interrupted: tearing the lab down…")
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := <-exited; err != nil {
				return fmt.Errorf("interrupted; the supervisor's teardown reported %w (see %s)", err, logPath)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// State is what the supervisor records in <dir>/lab.json for status and down.
type State struct {
	PID                  int       `json:"pid"`
	Started              time.Time `json:"started"`
	Ready                time.Time `json:"ready,omitzero"`
	Dir                  string    `json:"dir"`
	ManagementKubeconfig string    `json:"managementKubeconfig"`
	WorkloadKubeconfig   string    `json:"workloadKubeconfig"`
	Namespace            string    `json:"namespace"`
	Cluster              string    `json:"cluster,omitempty"`
	Bridge               string    `json:"bridge"`
	Bridges              []string  `json:"bridges"`
	Prefix               string    `json:"prefix"`
	Hosts                []Host    `json:"hosts"`
	StackDir             string    `json:"stackDir"`
	// Prometheus is the URL of the lab's Prometheus (its state under StackDir/prometheus), which scrapes
	// every manager, yonder-net-controller and every Node's yonder-net-node.
	Prometheus string `json:"prometheus,omitempty"`
	// NATSites are the sites behind NAT (the pod check picks its pairs of sites by them).
	NATSites []string `json:"natSites,omitempty"`
	// PodCheck is the last cross-site pod check: `lab up`'s, or the last `lab check`'s.
	PodCheck *PodCheck `json:"podCheck,omitempty"`
}

// Host is one lab host as status shows it.
type Host struct {
	Name      string `json:"name"`
	Site      string `json:"site"`
	Address   string `json:"address"`
	Namespace string `json:"namespace"`
}

// StatePath is the state file of a lab directory.
func StatePath(dir string) string { return filepath.Join(dir, "lab.json") }

// ReadState reads a lab's state file.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(StatePath(dir))
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", StatePath(dir), err)
	}
	return st, nil
}

func (st *State) write() error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	// A temporary file of its own (0600) renamed over the state: readers see the old or the new state,
	// and the supervisor and `lab check` never write into each other's temporary file.
	f, err := os.CreateTemp(st.Dir, "lab.json.*.tmp")
	if err != nil {
		return fmt.Errorf("failed to write the lab state: %w", err)
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), StatePath(st.Dir))
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("failed to write the lab state: %w", werr)
	}
	return nil
}

// Alive reports whether the supervisor still runs (and is a lab supervisor, not a reused pid).
func (st *State) Alive() bool {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.PID), "cmdline"))
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), "lab\x00serve\x00") || strings.Contains(string(cmdline), "lab\x00up\x00")
}

func newDownCommand() *cobra.Command {
	var dir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Tear the lab down: every process, namespace, link and mount it created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Down(cmd.Context(), dir, timeout, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDir(), "directory of the lab's files")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the teardown")
	return cmd
}

// Down signals the supervisor and waits until it has removed the lab and exited.
func Down(ctx context.Context, dir string, timeout time.Duration, out io.Writer) error {
	start := time.Now()
	st, err := ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		_, _ = fmt.Fprintf(out, "No lab is running (no %s).\n", StatePath(dir))
		return nil
	}
	if err != nil {
		return err
	}
	if !st.Alive() {
		_, _ = fmt.Fprintf(out, "The lab supervisor (pid %d) is gone; removing its state. Leftover namespaces and links of its network are removed by the next lab or test that takes slot %s.\n", st.PID, st.Bridge)
		return os.Remove(StatePath(dir))
	}
	_, _ = fmt.Fprintf(out, "[down %5.1fs] stopping the lab (supervisor pid %d): managers, hosts (agent reset), control planes, network\n", time.Since(start).Seconds(), st.PID)
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("failed to signal the lab supervisor %d: %w", st.PID, err)
	}
	deadline := time.Now().Add(timeout)
	for st.Alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab supervisor %d did not finish its teardown in %s; see %s", st.PID, timeout, filepath.Join(dir, "lab.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := os.Stat(StatePath(dir)); err == nil {
		return fmt.Errorf("the lab supervisor exited without finishing its teardown; see %s", filepath.Join(dir, "lab.log"))
	}
	_, _ = fmt.Fprintf(out, "[down %5.1fs] lab removed\n", time.Since(start).Seconds())
	return nil
}

// notifyContext cancels on SIGINT and SIGTERM (what `lab down` and Ctrl-C send).
func notifyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}
