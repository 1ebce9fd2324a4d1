package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/stack"
)

func newCheckCommand() *cobra.Command {
	var dir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Run the cross-site pod check again, on the Nodes the workload cluster has now, and record its result",
		Long: `Runs the pod check of ` + "`lab up`" + ` again from this process: it waits until every Ready Node has its site
label and the network add-on has converged for them (a daemon and a Ready NodeNetwork per Node, every link
up with its kind), places a check pod at every site (replacing one whose Node is gone, not Ready or at
another site), and exchanges TCP and ICMP both ways over a Direct, a NAT-initiated and a relayed link.
It prints every exchange, fails naming the one that did not pass, and records the result with its time in
the lab's state, where ` + "`lab status`" + ` shows it. Run it after scaling a MachineDeployment or a remediation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Check(cmd.Context(), dir, timeout, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDir(), "directory of the lab's files")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long the whole check may take (labels, network, pods, exchanges)")
	return cmd
}

// Check runs the cross-site pod check against the lab's workload cluster as it is now and records the
// result (passed or failed, with its time and "lab check" as its source) in the lab's state.
func Check(ctx context.Context, dir string, timeout time.Duration, out io.Writer) error {
	start := time.Now()
	step := func(format string, args ...any) {
		_, _ = fmt.Fprintf(out, "[check %6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if timeout <= 0 {
		return fmt.Errorf("--timeout %s must be positive", timeout)
	}
	st, err := readyState(dir)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.WorkloadKubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load %s: %w", st.WorkloadKubeconfig, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: cli.Scheme})
	if err != nil {
		return fmt.Errorf("failed to create the workload client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := runCheck(ctx, c, cfg, st, timeout, step)
	res.At, res.Source = time.Now(), SourceCheck
	if err != nil {
		res.Error = err.Error()
	}
	if werr := recordCheck(dir, st.PID, res); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	step("recorded in %s", StatePath(dir))
	return nil
}

// runningState reads the state of a lab whose supervisor runs.
func runningState(dir string) (*State, error) {
	st, err := ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no lab is running (no %s): `kubectl yonder lab up`", StatePath(dir))
	}
	if err != nil {
		return nil, err
	}
	if !st.Alive() {
		return nil, fmt.Errorf("the lab supervisor (pid %d) is not running; `kubectl yonder lab down` removes its state", st.PID)
	}
	return st, nil
}

// readyState reads the state of a lab that is ready and has a Cluster to check.
func readyState(dir string) (*State, error) {
	st, err := runningState(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case st.Ready.IsZero():
		return nil, fmt.Errorf("the lab is still coming up (see %s); run the check once `lab up` has returned", filepath.Join(dir, "lab.log"))
	case st.Cluster == "":
		return nil, errors.New("the lab has no Cluster (`lab up --no-cluster`): there are no Nodes to check")
	}
	return st, nil
}

// runCheck waits for the Nodes' site labels and the network, then runs the pod check. The result is never
// nil: on failure it holds what passed.
func runCheck(ctx context.Context, c client.Client, cfg *rest.Config, st *State, timeout time.Duration, step func(string, ...any)) (*PodCheck, error) {
	nodes, err := waitNodeSites(ctx, c, timeout, step)
	if err != nil {
		return &PodCheck{}, err
	}
	natSites := map[string]bool{}
	for _, s := range st.NATSites {
		natSites[s] = true
	}
	sites := map[string]bool{}
	for _, s := range nodes {
		sites[s] = true
	}
	if err := waitForNetwork(ctx, c, cfg, filepath.Join(st.StackDir, "logs"), nodes, natSites, len(sites) > 1, timeout, step); err != nil {
		return &PodCheck{}, err
	}
	return podCheck(ctx, c, cfg, nodes, natSites, timeout, step)
}

// waitNodeSites waits until every Ready Node carries its site label (the supervisor labels Nodes that
// joined within seconds) and returns the Ready Nodes by their site.
func waitNodeSites(ctx context.Context, c client.Client, timeout time.Duration, step func(string, ...any)) (map[string]string, error) {
	var nodes map[string]string
	var unlabelled []string
	last := ""
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list := &corev1.NodeList{}
		if err := c.List(ctx, list); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		nodes, unlabelled = map[string]string{}, nil
		for i := range list.Items {
			n := &list.Items[i]
			if !nodeReady(n) {
				continue
			}
			if s := n.Labels[SiteLabel]; s != "" {
				nodes[n.Name] = s
			} else {
				unlabelled = append(unlabelled, n.Name)
			}
		}
		if len(unlabelled) > 0 {
			slices.Sort(unlabelled)
			if msg := strings.Join(unlabelled, ","); msg != last {
				step("waiting for the site label %s of the Ready Nodes %s (the lab supervisor sets it every 5 s)", SiteLabel, msg)
				last = msg
			}
		}
		return len(unlabelled) == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the Ready Nodes %v got no site label %s in %s (is the lab supervisor running? see its lab.log): %w", unlabelled, SiteLabel, timeout, err)
	}
	step("%d Ready Nodes: %s", len(nodes), describeNodeSites(nodes))
	return nodes, nil
}

// describeNodeSites lists Nodes by site: "site-a: n1, n2; site-b: n3".
func describeNodeSites(nodes map[string]string) string {
	bySite := map[string][]string{}
	for n, s := range nodes {
		bySite[s] = append(bySite[s], n)
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(bySite)) {
		slices.Sort(bySite[s])
		parts = append(parts, s+": "+strings.Join(bySite[s], ", "))
	}
	return strings.Join(parts, "; ")
}

// recordCheck stores res as the lab's last pod check, unless the lab went away meanwhile (`lab down`
// removes the state; writing it again would leave a stale one behind).
func recordCheck(dir string, pid int, res *PodCheck) error {
	st, err := ReadState(dir)
	if err != nil {
		return fmt.Errorf("failed to record the check's result: %w", err)
	}
	if st.PID != pid || !st.Alive() {
		return fmt.Errorf("failed to record the check's result: the lab (supervisor pid %d) is no longer running", pid)
	}
	st.PodCheck = res
	return st.write()
}
