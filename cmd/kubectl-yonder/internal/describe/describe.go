// Package describe implements `kubectl yonder describe cluster NAME`: one view of a Cluster's conditions,
// the SSH hosts its Machines claimed, the Machines, the workload cluster's Nodes and the network add-on's
// tunnel state (NodeNetwork and PeerSlice objects).
package describe

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// NewCommand returns `describe` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{Use: "describe", Short: "Show a Yonder object and everything around it"}
	c := &cobra.Command{
		Use:   "cluster NAME",
		Short: "Show a Cluster's conditions, claimed hosts, Machines, Nodes and tunnels in one view",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return Cluster(cmd.Context(), o, args[0]) },
	}
	o.AddOutputFlag(c.Flags())
	cmd.AddCommand(c)
	return cmd
}

// View is everything describe cluster gathers. Workload fields are empty when the workload cluster could
// not be reached (WorkloadError says why).
type View struct {
	Cluster       *clusterv1.Cluster
	Hosts         []infrav1.YonderSSHHost
	Machines      []clusterv1.Machine
	Nodes         []corev1.Node
	NodeNetworks  []netv1.NodeNetwork
	PeerSlices    []netv1.PeerSlice
	WorkloadError string
	NetworkError  string
}

// Gather reads the view of Cluster ns/name.
func Gather(ctx context.Context, c client.Client, ns, name string) (*View, error) {
	v := &View{Cluster: &clusterv1.Cluster{}}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, v.Cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cluster %s/%s does not exist (use -n for another namespace)", ns, name)
		}
		return nil, fmt.Errorf("failed to get Cluster %s/%s: %w", ns, name, err)
	}
	hosts := &infrav1.YonderSSHHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("failed to list YonderSSHHosts in %s: %w", ns, err)
	}
	for _, h := range hosts.Items {
		if r := h.Spec.ConsumerRef; r != nil && r.ClusterName == name {
			v.Hosts = append(v.Hosts, h)
		}
	}
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return nil, fmt.Errorf("failed to list the Machines of Cluster %s/%s: %w", ns, name, err)
	}
	v.Machines = machines.Items
	sort.Slice(v.Machines, func(i, j int) bool { return v.Machines[i].Name < v.Machines[j].Name })

	wl, err := cli.WorkloadFor(ctx, c, ns, name)
	if err != nil {
		v.WorkloadError = err.Error()
		return v, nil
	}
	nodes := &corev1.NodeList{}
	if err := wl.Client.List(ctx, nodes); err != nil {
		v.WorkloadError = fmt.Sprintf("failed to list Nodes: %v", err)
		return v, nil
	}
	v.Nodes = nodes.Items
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Name < v.Nodes[j].Name })
	nns := &netv1.NodeNetworkList{}
	pss := &netv1.PeerSliceList{}
	if err := wl.Client.List(ctx, nns); err != nil {
		v.NetworkError = networkErr(err)
		return v, nil
	}
	if err := wl.Client.List(ctx, pss); err != nil {
		v.NetworkError = networkErr(err)
		return v, nil
	}
	v.NodeNetworks, v.PeerSlices = nns.Items, pss.Items
	return v, nil
}

func networkErr(err error) string {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return "the network add-on is not installed (kubectl yonder site init)"
	}
	return err.Error()
}

// Cluster prints the view.
func Cluster(ctx context.Context, o *cli.Options, name string) error {
	if err := o.ValidateOutput(); err != nil {
		return err
	}
	ns, err := o.Ns()
	if err != nil {
		return err
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	v, err := Gather(ctx, c, ns, name)
	if err != nil {
		return err
	}
	objs := []client.Object{v.Cluster}
	for i := range v.Hosts {
		objs = append(objs, &v.Hosts[i])
	}
	for i := range v.Machines {
		objs = append(objs, &v.Machines[i])
	}
	for i := range v.Nodes {
		objs = append(objs, &v.Nodes[i])
	}
	for i := range v.NodeNetworks {
		objs = append(objs, &v.NodeNetworks[i])
	}
	for i := range v.PeerSlices {
		objs = append(objs, &v.PeerSlices[i])
	}
	if done, err := o.PrintObjects(objs...); done {
		return err
	}
	return Print(o, v)
}

// Print writes the human view: the Cluster, its hosts, Machines, Nodes and tunnels.
func Print(o *cli.Options, v *View) error {
	w := o.Out
	cl := v.Cluster
	_, _ = fmt.Fprintf(w, "Cluster %s/%s  phase %s  control plane %s  age %s\n", cl.Namespace, cl.Name, cli.Dash(cl.Status.Phase), endpoint(cl), o.Age(cl.CreationTimestamp.Time))
	conditions(w, "  ", cl.Status.Conditions)
	printHosts(w, v)
	printMachines(w, v)
	_, _ = fmt.Fprintf(w, "\nNodes (workload cluster): ")
	if v.WorkloadError != "" {
		_, _ = fmt.Fprintf(w, "unavailable: %s\n", v.WorkloadError)
		return nil
	}
	printNodes(o, v)
	_, _ = fmt.Fprintf(w, "\nTunnels (network add-on): ")
	if v.NetworkError != "" {
		_, _ = fmt.Fprintf(w, "%s\n", v.NetworkError)
		return nil
	}
	printTunnels(w, v)
	return nil
}

func printHosts(w io.Writer, v *View) {
	_, _ = fmt.Fprintf(w, "\nHosts (YonderSSHHosts claimed by this Cluster): %d\n", len(v.Hosts))
	if len(v.Hosts) == 0 {
		return
	}
	rows := [][]string{}
	for _, h := range v.Hosts {
		rows = append(rows, []string{h.Name, h.Spec.Address, string(h.Status.Phase), h.Spec.ConsumerRef.Name, cli.Dash(h.Spec.FailureDomain)})
	}
	table(w, []string{"HOST", "ADDRESS", "PHASE", "MACHINE", "FAILURE DOMAIN"}, rows)
}

func printMachines(w io.Writer, v *View) {
	_, _ = fmt.Fprintf(w, "\nMachines: %d\n", len(v.Machines))
	if len(v.Machines) == 0 {
		return
	}
	// The host a Machine runs on and its failure domain, from the host's claim: a MachineDeployment's
	// Machines often carry no failure domain of their own, the host they landed on always has one.
	hostOf := map[string]*infrav1.YonderSSHHost{}
	for i := range v.Hosts {
		hostOf[v.Hosts[i].Spec.ConsumerRef.Name] = &v.Hosts[i]
	}
	rows := [][]string{}
	for _, m := range v.Machines {
		host, fd := "", m.Spec.FailureDomain
		if h := hostOf[m.Spec.InfrastructureRef.Name]; h != nil {
			host = h.Name
			if fd == "" {
				fd = h.Spec.FailureDomain
			}
		}
		rows = append(rows, []string{m.Name, cli.Dash(m.Status.Phase), cli.Dash(host), cli.Dash(fd), cli.Dash(m.Status.NodeRef.Name), cli.Dash(m.Spec.Version), notTrue(m.Status.Conditions)})
	}
	table(w, []string{"MACHINE", "PHASE", "HOST", "FAILURE DOMAIN", "NODE", "VERSION", "UNHEALTHY CONDITIONS"}, rows)
}

func printNodes(o *cli.Options, v *View) {
	w := o.Out
	_, _ = fmt.Fprintf(w, "%d\n", len(v.Nodes))
	if len(v.Nodes) == 0 {
		return
	}
	rows := [][]string{}
	for _, n := range v.Nodes {
		rows = append(rows, []string{n.Name, ready(n), cli.Dash(nodeSite(n)), cli.Dash(internalIP(n)), cli.Dash(strings.Join(n.Spec.PodCIDRs, ",")), cli.Dash(n.Status.NodeInfo.KubeletVersion), o.Age(n.CreationTimestamp.Time)})
	}
	table(w, []string{"NODE", "READY", "SITE", "INTERNAL IP", "POD CIDRS", "KUBELET", "AGE"}, rows)
}

func printTunnels(w io.Writer, v *View) {
	_, _ = fmt.Fprintf(w, "%d NodeNetworks, %d PeerSlices\n", len(v.NodeNetworks), len(v.PeerSlices))
	if len(v.NodeNetworks) > 0 {
		rows := [][]string{}
		for _, nn := range v.NodeNetworks {
			var eps []string
			for _, e := range nn.Spec.Endpoints {
				eps = append(eps, e.Address+"("+string(e.Type)+")")
			}
			var protos []string
			for _, p := range nn.Spec.Protocols {
				protos = append(protos, string(p))
			}
			key := "-"
			if len(nn.Spec.PublicKey) > 8 {
				key = nn.Spec.PublicKey[:8] + "…"
			}
			rows = append(rows, []string{nn.Name, cli.Dash(strings.Join(eps, ",")), cli.Dash(strings.Join(protos, ",")), key, notTrue(nn.Status.Conditions)})
		}
		table(w, []string{"NODENETWORK", "ENDPOINTS", "PROTOCOLS", "WG KEY", "UNHEALTHY CONDITIONS"}, rows)
	}
	if len(v.PeerSlices) > 0 {
		rows := [][]string{}
		for _, ps := range v.PeerSlices {
			var gws []string
			for _, p := range ps.Spec.Peers {
				if p.Gateway != nil && p.Gateway.Active {
					gws = append(gws, p.Node)
				}
			}
			rows = append(rows, []string{ps.Name, ps.Spec.Site, string(ps.Spec.Role), strconv.Itoa(len(ps.Spec.Peers)), cli.Dash(strings.Join(gws, ","))})
		}
		table(w, []string{"PEERSLICE", "SITE", "ROLE", "PEERS", "ACTIVE GATEWAYS"}, rows)
	}
}

func endpoint(cl *clusterv1.Cluster) string {
	if ep := cl.Spec.ControlPlaneEndpoint; ep.IsValid() {
		return ep.String()
	}
	return "-"
}

func conditions(w io.Writer, indent string, cs []metav1.Condition) {
	if len(cs) == 0 {
		_, _ = fmt.Fprintf(w, "%sno conditions reported yet\n", indent)
		return
	}
	rows := [][]string{}
	for _, c := range cs {
		rows = append(rows, []string{indent + c.Type, string(c.Status), cli.Dash(c.Reason), oneLine(c.Message)})
	}
	table(w, []string{indent + "CONDITION", "STATUS", "REASON", "MESSAGE"}, rows)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 100 {
		s = s[:99] + "…"
	}
	return cli.Dash(s)
}

// negative are CAPI's conditions whose healthy state is False.
var negative = map[string]bool{"Paused": true, "Deleting": true, "Updating": true, "RollingOut": true, "Remediating": true,
	"ScalingUp": true, "ScalingDown": true, "Provisioning": true}

// notTrue lists the conditions that are not in their healthy state (the ones an operator has to look at).
func notTrue(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		healthy := metav1.ConditionTrue
		if negative[c.Type] {
			healthy = metav1.ConditionFalse
		}
		if c.Status != healthy {
			out = append(out, c.Type+"="+string(c.Status))
		}
	}
	return cli.Dash(strings.Join(out, ","))
}

func ready(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return "Unknown"
}

// nodeSite is the network add-on's assignment, else the topology zone.
func nodeSite(n corev1.Node) string {
	if s := n.Labels[netv1.SiteLabel]; s != "" {
		return s
	}
	return n.Labels[corev1.LabelTopologyZone]
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func table(w io.Writer, header []string, rows [][]string) {
	o := &cli.Options{Out: w}
	_ = o.Table(header, rows)
}
