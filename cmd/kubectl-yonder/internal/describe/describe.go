// Package describe implements `kubectl yonder describe cluster NAME`: one view of a Cluster drawn as a
// tree, like `clusterctl describe cluster`: Cluster → Sites (with their gateway pools) → Machines with the
// host each runs on (YonderSSHHost or BareMetalHost through its YonderMetalMachine) → Nodes → tunnels
// (NodeNetwork, gateway role), then the SitePeerings, each line with its health. -o yaml|json prints the
// same objects as a List.
package describe

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metalv1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1" //nolint:importas // the plugin reads both providers' kinds: infrav1 is the SSH provider's
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// NewCommand returns `describe` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{Use: "describe", Short: "Show a Yonder object and everything around it"}
	c := &cobra.Command{
		Use:   "cluster NAME",
		Short: "Draw a Cluster's sites, hosts, Machines, Nodes and tunnels as a tree with their health",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return Cluster(cmd.Context(), o, args[0]) },
	}
	o.AddOutputFlag(c.Flags())
	cmd.AddCommand(c)
	return cmd
}

// View is everything describe cluster gathers. Workload fields are empty when the workload cluster could
// not be reached (WorkloadError says why), network fields when the add-on is missing (NetworkError).
type View struct {
	Cluster        *clusterv1.Cluster
	Hosts          []infrav1.YonderSSHHost
	MetalMachines  []metalv1.YonderMetalMachine
	BareMetalHosts []metal3v1.BareMetalHost
	Machines       []clusterv1.Machine
	Nodes          []corev1.Node
	Sites          []netv1.Site
	GatewayPools   []netv1.GatewayPool
	SitePeerings   []netv1.SitePeering
	NodeNetworks   []netv1.NodeNetwork
	PeerSlices     []netv1.PeerSlice
	WorkloadError  string
	NetworkError   string
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
	if err := gatherManagement(ctx, c, v); err != nil {
		return nil, err
	}
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
	gatherNetwork(ctx, wl.Client, v)
	return v, nil
}

// gatherManagement reads the Machines and the hosts they claimed. A provider whose CRDs are not installed
// (an SSH-only or metal-only management cluster) contributes nothing.
func gatherManagement(ctx context.Context, c client.Client, v *View) error {
	ns, name := v.Cluster.Namespace, v.Cluster.Name
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return fmt.Errorf("failed to list the Machines of Cluster %s/%s: %w", ns, name, err)
	}
	v.Machines = machines.Items
	sort.Slice(v.Machines, func(i, j int) bool { return v.Machines[i].Name < v.Machines[j].Name })

	hosts := &infrav1.YonderSSHHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("failed to list YonderSSHHosts in %s: %w", ns, err)
	}
	for _, h := range hosts.Items {
		if r := h.Spec.ConsumerRef; r != nil && r.ClusterName == name {
			v.Hosts = append(v.Hosts, h)
		}
	}
	// A YonderMetalMachine belongs to the Cluster by CAPI's label, or because one of its Machines points at it.
	infraRefs := map[string]bool{}
	for _, m := range v.Machines {
		if r := m.Spec.InfrastructureRef; r.Kind == "YonderMetalMachine" {
			infraRefs[r.Name] = true
		}
	}
	mms := &metalv1.YonderMetalMachineList{}
	if err := c.List(ctx, mms, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("failed to list YonderMetalMachines in %s: %w", ns, err)
	}
	consumers := map[string]bool{}
	for _, m := range mms.Items {
		if m.Labels[clusterv1.ClusterNameLabel] == name || infraRefs[m.Name] {
			v.MetalMachines = append(v.MetalMachines, m)
			consumers[m.Name] = true
		}
	}
	bmhs := &metal3v1.BareMetalHostList{}
	if err := c.List(ctx, bmhs, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("failed to list BareMetalHosts in %s: %w", ns, err)
	}
	for _, h := range bmhs.Items {
		r := h.Spec.ConsumerRef
		if h.Labels[metalv1.ClusterLabel] == name || (r != nil && r.Kind == "YonderMetalMachine" && consumers[r.Name]) {
			v.BareMetalHosts = append(v.BareMetalHosts, h)
		}
	}
	return nil
}

// gatherNetwork reads the add-on's objects from the workload cluster.
func gatherNetwork(ctx context.Context, wl client.Client, v *View) {
	sites, pools, peerings := &netv1.SiteList{}, &netv1.GatewayPoolList{}, &netv1.SitePeeringList{}
	nns, pss := &netv1.NodeNetworkList{}, &netv1.PeerSliceList{}
	for _, l := range []client.ObjectList{sites, pools, peerings, nns, pss} {
		if err := wl.List(ctx, l); err != nil {
			v.NetworkError = networkErr(err)
			return
		}
	}
	v.Sites, v.GatewayPools, v.SitePeerings = sites.Items, pools.Items, peerings.Items
	v.NodeNetworks, v.PeerSlices = nns.Items, pss.Items
}

func networkErr(err error) string {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return "the network add-on is not installed (kubectl yonder site init)"
	}
	return err.Error()
}

// Objects are the view's objects in tree order (what -o yaml|json prints).
func (v *View) Objects() []client.Object {
	objs := []client.Object{v.Cluster}
	add := func(n int, at func(int) client.Object) {
		for i := range n {
			objs = append(objs, at(i))
		}
	}
	add(len(v.Sites), func(i int) client.Object { return &v.Sites[i] })
	add(len(v.GatewayPools), func(i int) client.Object { return &v.GatewayPools[i] })
	add(len(v.SitePeerings), func(i int) client.Object { return &v.SitePeerings[i] })
	add(len(v.Machines), func(i int) client.Object { return &v.Machines[i] })
	add(len(v.Hosts), func(i int) client.Object { return &v.Hosts[i] })
	add(len(v.MetalMachines), func(i int) client.Object { return &v.MetalMachines[i] })
	add(len(v.BareMetalHosts), func(i int) client.Object { return &v.BareMetalHosts[i] })
	add(len(v.Nodes), func(i int) client.Object { return &v.Nodes[i] })
	add(len(v.NodeNetworks), func(i int) client.Object { return &v.NodeNetworks[i] })
	add(len(v.PeerSlices), func(i int) client.Object { return &v.PeerSlices[i] })
	return objs
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
	if done, err := o.PrintObjects(v.Objects()...); done {
		return err
	}
	return o.Table([]string{"NAME", "READY", "DETAILS"}, Tree(o, v).Rows())
}
