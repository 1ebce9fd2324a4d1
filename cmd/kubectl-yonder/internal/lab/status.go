package lab

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func newStatusCommand(o *cli.Options) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the lab runs, its kubeconfigs, hosts, Machines and Nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Status(cmd.Context(), dir, o.Now, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDir(), "directory of the lab's files")
	return cmd
}

// Status prints the lab's state; it fails when no lab runs.
func Status(ctx context.Context, dir string, now func() time.Time, out io.Writer) error {
	st, err := runningState(dir)
	if err != nil {
		return err
	}
	state := "starting"
	if !st.Ready.IsZero() {
		state = fmt.Sprintf("ready (up %s, came up in %s)", now().Sub(st.Ready).Round(time.Second), st.Ready.Sub(st.Started).Round(100*time.Millisecond))
	}
	_, _ = fmt.Fprintf(out, "Lab: %s, supervisor pid %d, log %s/lab.log\n", state, st.PID, dir)
	if st.Bridge != "" {
		_, _ = fmt.Fprintf(out, "Network: bridges %s (management bridge %s, %s)\n", strings.Join(st.Bridges, ","), st.Bridge, st.Prefix)
	}
	if st.ManagementKubeconfig != "" {
		_, _ = fmt.Fprintf(out, "Kubeconfigs: management %s\n             workload   %s\n", st.ManagementKubeconfig, st.WorkloadKubeconfig)
	}
	if st.Prometheus != "" {
		_, _ = fmt.Fprintf(out, "Prometheus: %s (scrapes every manager, yonder-net-controller and every Node's yonder-net-node)\n", st.Prometheus)
	}
	if len(st.Hosts) > 0 {
		_, _ = fmt.Fprintf(out, "\n")
		rows := [][]string{}
		for _, h := range st.Hosts {
			rows = append(rows, []string{h.Name, h.Site, h.Address, h.Namespace})
		}
		_ = (&cli.Options{Out: out}).Table([]string{"HOST", "SITE", "ADDRESS", "NETNS"}, rows)
	}
	if st.ManagementKubeconfig == "" {
		return nil
	}
	mgmt, err := clientFor(st.ManagementKubeconfig)
	if err != nil {
		return err
	}
	ms := &clusterv1.MachineList{}
	if err := mgmt.List(ctx, ms, client.InNamespace(st.Namespace)); err != nil {
		return fmt.Errorf("failed to list Machines: %w", err)
	}
	_, _ = fmt.Fprintf(out, "\nMachines: %d\n", len(ms.Items))
	if len(ms.Items) > 0 {
		rows := [][]string{}
		for _, m := range ms.Items {
			rows = append(rows, []string{m.Name, m.Status.Phase, cli.Dash(m.Status.NodeRef.Name), cli.Dash(m.Spec.ProviderID)})
		}
		_ = (&cli.Options{Out: out}).Table([]string{"MACHINE", "PHASE", "NODE", "PROVIDER ID"}, rows)
	}
	if err := printMetalStatus(ctx, mgmt, st.Namespace, out); err != nil {
		return err
	}
	wl, err := clientFor(st.WorkloadKubeconfig)
	if err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := wl.List(ctx, nodes); err != nil {
		return fmt.Errorf("failed to list Nodes: %w", err)
	}
	_, _ = fmt.Fprintf(out, "\nNodes: %d\n", len(nodes.Items))
	if len(nodes.Items) > 0 {
		rows := [][]string{}
		for _, n := range nodes.Items {
			ready := "Unknown"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					ready = string(c.Status)
				}
			}
			rows = append(rows, []string{n.Name, ready, cli.Dash(n.Spec.ProviderID)})
		}
		_ = (&cli.Options{Out: out}).Table([]string{"NODE", "READY", "PROVIDER ID"}, rows)
	}
	return tunnels(ctx, wl, st, nodes.Items, now, out)
}

// tunnels prints the network add-on's view: the SitePeerings, every link with its kind (Direct,
// NATInitiated with the sites behind NAT, Relayed with its relay), each Node's NodeNetwork (site,
// WireGuard implementation, endpoints, detected reachability, Ready), the check pods as they are now and
// the last recorded pod check.
func tunnels(ctx context.Context, wl client.Client, st *State, nodes []corev1.Node, now func() time.Time, out io.Writer) error {
	sps := &netv1.SitePeeringList{}
	if err := wl.List(ctx, sps); err != nil {
		_, _ = fmt.Fprintf(out, "\nTunnels: the network add-on is not installed (%v)\n", err)
		return nil //nolint:nilerr // a lab without a Cluster has no add-on; status still succeeds
	}
	nns := &netv1.NodeNetworkList{}
	if err := wl.List(ctx, nns); err != nil {
		return fmt.Errorf("failed to list NodeNetworks: %w", err)
	}
	_, _ = fmt.Fprintf(out, "\nTunnels: %d SitePeerings, %d NodeNetworks\n", len(sps.Items), len(nns.Items))
	printLinks(out, sps.Items)
	printNodeNetworks(out, nns.Items, nodes)
	return printPodCheck(ctx, wl, st, nodes, now, out)
}

// printPodCheck prints the check pods as they are now (Node, phase, IP, whether that Node still exists
// and is Ready) and the last recorded pod check with its time, source and age; it says the record is
// stale when a check pod's Node is gone or not Ready, or a pod is missing, not running or has moved.
func printPodCheck(ctx context.Context, wl client.Client, st *State, nodes []corev1.Node, now func() time.Time, out io.Writer) error {
	pc := st.PodCheck
	if pc == nil {
		if st.Cluster != "" && !st.Ready.IsZero() {
			_, _ = fmt.Fprintf(out, "\nPod check: none recorded; `kubectl yonder lab check` runs it\n")
		}
		return nil
	}
	pods := &corev1.PodList{}
	if err := wl.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app.kubernetes.io/name": checkPodApp}); err != nil {
		return fmt.Errorf("failed to list the check pods: %w", err)
	}
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var rows [][]string
	var stale []string
	live := map[string]bool{}
	for _, p := range pods.Items {
		site := p.Labels[SiteLabel]
		live[p.Name] = true
		state := "gone"
		if n, ok := byName[p.Spec.NodeName]; !ok {
			stale = append(stale, fmt.Sprintf("%s's Node %s is gone", p.Name, p.Spec.NodeName))
		} else if state = "Ready"; !nodeReady(n) {
			state = "NotReady"
			stale = append(stale, fmt.Sprintf("%s's Node %s is not Ready", p.Name, p.Spec.NodeName))
		}
		switch {
		case p.DeletionTimestamp != nil:
			stale = append(stale, p.Name+" is being deleted")
		case p.Status.Phase != corev1.PodRunning:
			stale = append(stale, fmt.Sprintf("%s is %s", p.Name, p.Status.Phase))
		case pc.Nodes[site] != "" && pc.Nodes[site] != p.Spec.NodeName:
			stale = append(stale, fmt.Sprintf("%s runs on %s, the check used %s", p.Name, p.Spec.NodeName, pc.Nodes[site]))
		}
		rows = append(rows, []string{p.Name, cli.Dash(site), cli.Dash(p.Spec.NodeName), string(p.Status.Phase), cli.Dash(p.Status.PodIP), state})
	}
	for _, site := range slices.Sorted(maps.Keys(pc.Pods)) {
		if name := pc.Pods[site]; !live[name] {
			stale = append(stale, name+" is missing")
			rows = append(rows, []string{name, site, cli.Dash(pc.Nodes[site]), "missing", "-", "-"})
		}
	}
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	_, _ = fmt.Fprintf(out, "\nCheck pods (namespace default, read now):\n")
	if len(rows) > 0 {
		_ = (&cli.Options{Out: out}).Table([]string{"POD", "SITE", "NODE", "PHASE", "IP", "NODE STATE"}, rows)
	}
	result := "passed"
	if pc.Error != "" {
		result = "failed"
	}
	_, _ = fmt.Fprintf(out, "\nPod check: %s at %s (%s, %s ago)\n", result, pc.At.Local().Format(time.RFC3339), pc.Source, now().Sub(pc.At).Round(time.Second))
	for _, l := range pc.Lines {
		_, _ = fmt.Fprintf(out, "  %s\n", l)
	}
	if pc.Error != "" {
		_, _ = fmt.Fprintf(out, "  failed: %s\n", pc.Error)
	}
	if len(stale) > 0 {
		_, _ = fmt.Fprintf(out, "The stored result is stale (%s): run `kubectl yonder lab check`\n", strings.Join(stale, "; "))
	}
	return nil
}

// printLinks prints one row per SitePeering and one per link: kind, who is behind NAT, the relay.
func printLinks(out io.Writer, sps []netv1.SitePeering) {
	if len(sps) == 0 {
		return
	}
	tbl := &cli.Options{Out: out}
	rows := [][]string{}
	for _, sp := range sps {
		rows = append(rows, []string{sp.Name, string(sp.Spec.Topology), conditionStatus(sp.Status.Conditions), strconv.Itoa(len(sp.Status.Links))})
	}
	_ = tbl.Table([]string{"SITEPEERING", "TOPOLOGY", "READY", "LINKS"}, rows)
	rows = [][]string{}
	for _, sp := range sps {
		for _, l := range sp.Status.Links {
			rows = append(rows, []string{strings.Join(l.Sites, "<->"), cli.Dash(string(l.Kind)), cli.Dash(strings.Join(l.BehindNAT, ",")), cli.Dash(l.Relay),
				string(l.Protocol), strconv.Itoa(int(l.TunnelMTU)), strconv.FormatBool(l.Up)})
		}
	}
	if len(rows) > 0 {
		_, _ = fmt.Fprintln(out)
		_ = tbl.Table([]string{"LINK", "KIND", "BEHIND NAT (dials)", "RELAY", "PROTOCOL", "MTU", "UP"}, rows)
	}
}

// printNodeNetworks prints each Node's NodeNetwork: site, WireGuard implementation, endpoints, the
// reachability its daemon detected (and the address other sites see it from), Ready.
func printNodeNetworks(out io.Writer, nns []netv1.NodeNetwork, nodes []corev1.Node) {
	if len(nns) == 0 {
		return
	}
	site := map[string]string{}
	for _, n := range nodes {
		site[n.Name] = n.Labels[netv1.SiteLabel]
	}
	rows := [][]string{}
	for _, nn := range nns {
		var eps []string
		for _, e := range nn.Spec.Endpoints {
			if !slices.Contains(eps, e.Address) {
				eps = append(eps, e.Address)
			}
		}
		wg := "-"
		if nn.Status.Dataplane != nil {
			wg = string(nn.Status.Dataplane.WireGuard)
		}
		reach := "-"
		if r := nn.Spec.Reachability; r != nil {
			reach = string(r.Inbound)
			if r.ObservedAddress != "" {
				reach += " (seen from " + r.ObservedAddress + ")"
			}
		}
		rows = append(rows, []string{nn.Name, cli.Dash(site[nn.Name]), wg, cli.Dash(strings.Join(eps, ",")), reach, conditionStatus(nn.Status.Conditions)})
	}
	_, _ = fmt.Fprintln(out)
	_ = (&cli.Options{Out: out}).Table([]string{"NODENETWORK", "SITE", "WIREGUARD", "ENDPOINTS", "REACHABILITY", "READY"}, rows)
}

// conditionStatus is the status of the Ready condition, or Unknown.
func conditionStatus(cs []metav1.Condition) string {
	if c := meta.FindStatusCondition(cs, netv1.ReadyCondition); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

func clientFor(kubeconfig string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("failed to load %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 10 * time.Second
	return client.New(cfg, client.Options{Scheme: cli.Scheme})
}
