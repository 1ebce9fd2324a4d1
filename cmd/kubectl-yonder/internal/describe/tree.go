package describe

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metalv1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1" //nolint:importas // the plugin reads both providers' kinds: infrav1 is the SSH provider's
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// Item is one line of the tree: what it is, its health (True, False, Unknown or "-" where the object has
// none) and what an operator wants to know about it; Children are drawn below it.
type Item struct {
	Name     string
	Ready    string
	Details  string
	Children []*Item
}

func (it *Item) add(c *Item) {
	it.Children = append(it.Children, c)
}

// Rows flattens the tree into table rows, drawing the branches (├─ └─ │) into the first column.
func (it *Item) Rows() [][]string {
	rows := [][]string{{it.Name, cli.Dash(it.Ready), cli.Dash(it.Details)}}
	var walk func(items []*Item, indent string)
	walk = func(items []*Item, indent string) {
		for i, c := range items {
			branch, next := "├─ ", "│  "
			if i == len(items)-1 {
				branch, next = "└─ ", "   "
			}
			rows = append(rows, []string{indent + branch + c.Name, cli.Dash(c.Ready), cli.Dash(c.Details)})
			walk(c.Children, indent+next)
		}
	}
	walk(it.Children, "")
	return rows
}

// index finds the objects around a Machine.
type index struct {
	sshHost   map[string]*infrav1.YonderSSHHost  // by the YonderSSHMachine that claimed it
	metalHost map[string]*metal3v1.BareMetalHost // by the YonderMetalMachine that claimed it
	node      map[string]*corev1.Node
	tunnel    map[string]*netv1.NodeNetwork
	gateway   map[string]*netv1.Peer // gateway candidates by Node
}

func newIndex(v *View) *index {
	ix := &index{sshHost: map[string]*infrav1.YonderSSHHost{}, metalHost: map[string]*metal3v1.BareMetalHost{},
		node: map[string]*corev1.Node{}, tunnel: map[string]*netv1.NodeNetwork{}, gateway: map[string]*netv1.Peer{}}
	for i := range v.Hosts {
		ix.sshHost[v.Hosts[i].Spec.ConsumerRef.Name] = &v.Hosts[i]
	}
	byName := map[string]*metal3v1.BareMetalHost{}
	for i := range v.BareMetalHosts {
		h := &v.BareMetalHosts[i]
		byName[h.Name] = h
		if r := h.Spec.ConsumerRef; r != nil {
			ix.metalHost[r.Name] = h
		}
	}
	// A YonderMetalMachine names its host in status.hostRef before (or without) the host's consumerRef.
	for _, m := range v.MetalMachines {
		if h := byName[m.Status.HostRef]; h != nil && ix.metalHost[m.Name] == nil {
			ix.metalHost[m.Name] = h
		}
	}
	for i := range v.Nodes {
		ix.node[v.Nodes[i].Name] = &v.Nodes[i]
	}
	for i := range v.NodeNetworks {
		ix.tunnel[v.NodeNetworks[i].Name] = &v.NodeNetworks[i]
	}
	for i := range v.PeerSlices {
		for j := range v.PeerSlices[i].Spec.Peers {
			if p := &v.PeerSlices[i].Spec.Peers[j]; p.Gateway != nil {
				ix.gateway[p.Node] = p
			}
		}
	}
	return ix
}

// Tree arranges the view: Cluster → Sites → Machines (host, Node, tunnel) and Nodes no Machine owns, then
// the SitePeerings. A Machine's site is its Node's Site, else the failure domain of its host or itself.
func Tree(o *cli.Options, v *View) *Item {
	cl := v.Cluster
	root := &Item{Name: "Cluster/" + cl.Name, Ready: condStatus(cl.Status.Conditions, clusterv1.AvailableCondition),
		Details: withProblem(fmt.Sprintf("phase %s, control plane %s, age %s", cli.Dash(cl.Status.Phase), endpoint(cl), o.Age(cl.CreationTimestamp.Time)), cl.Status.Conditions, clusterv1.AvailableCondition)}
	for _, c := range cl.Status.Conditions {
		if c.Type != clusterv1.AvailableCondition && !healthy(c) {
			root.add(&Item{Name: "Condition/" + c.Type, Ready: string(c.Status), Details: reasonMessage(c)})
		}
	}
	ix := newIndex(v)
	sites := map[string]*Item{}
	var order []string
	siteItem := func(name string) *Item {
		if it, ok := sites[name]; ok {
			return it
		}
		it := &Item{Name: "Site/" + name, Ready: "-", Details: "no Site object in the workload cluster"}
		if name == "" {
			it.Name, it.Details = "(no site)", "not assigned to a Site yet"
		}
		sites[name] = it
		order = append(order, name)
		return it
	}
	for i := range v.Sites {
		s := &v.Sites[i]
		it := siteItem(s.Name)
		it.Ready, it.Details = condStatus(s.Status.Conditions, "Ready"), siteDetails(s)
	}
	for i := range v.GatewayPools {
		p := &v.GatewayPools[i]
		siteItem(p.Spec.Site).add(&Item{Name: "GatewayPool/" + p.Name, Ready: condStatus(p.Status.Conditions, "Ready"), Details: poolDetails(p)})
	}
	owned := map[string]bool{}
	for i := range v.Machines {
		m := &v.Machines[i]
		it, site := machineItem(ix, m)
		owned[m.Status.NodeRef.Name] = true
		siteItem(site).add(it)
	}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if owned[n.Name] {
			continue
		}
		it := nodeItem(ix, n)
		it.Details = "no Machine (joined by hand); " + it.Details
		siteItem(nodeSite(*n)).add(it)
	}
	sort.Strings(order)
	for _, name := range order {
		root.add(sites[name])
	}
	for i := range v.SitePeerings {
		p := &v.SitePeerings[i]
		root.add(&Item{Name: "SitePeering/" + p.Name, Ready: condStatus(p.Status.Conditions, "Ready"), Details: peeringDetails(p)})
	}
	if v.WorkloadError != "" {
		root.add(&Item{Name: "Workload cluster", Ready: "Unknown", Details: "unavailable: " + v.WorkloadError})
	} else if v.NetworkError != "" {
		root.add(&Item{Name: "Network add-on", Ready: "-", Details: v.NetworkError})
	}
	return root
}

// machineItem is a Machine with its host, Node and tunnel below it, and the site it belongs to.
func machineItem(ix *index, m *clusterv1.Machine) (*Item, string) {
	it := &Item{Name: "Machine/" + m.Name, Ready: condStatus(m.Status.Conditions, clusterv1.ReadyCondition),
		Details: withProblem(strings.Join(nonEmpty(m.Status.Phase, m.Spec.Version, unhealthy(m.Status.Conditions)), ", "), m.Status.Conditions, clusterv1.ReadyCondition)}
	site := m.Spec.FailureDomain
	switch ref := m.Spec.InfrastructureRef; ref.Kind {
	case "YonderSSHMachine":
		if h := ix.sshHost[ref.Name]; h != nil {
			it.add(&Item{Name: "YonderSSHHost/" + h.Name, Ready: sshHostReady(h), Details: strings.Join(nonEmpty(string(h.Status.Phase), h.Spec.Address, fd(h.Spec.FailureDomain)), ", ")})
			if site == "" {
				site = h.Spec.FailureDomain
			}
		} else {
			it.add(&Item{Name: "YonderSSHMachine/" + ref.Name, Ready: "False", Details: "no host claimed yet"})
		}
	case "YonderMetalMachine":
		if h := ix.metalHost[ref.Name]; h != nil {
			it.add(bareMetalHostItem(h))
			if site == "" {
				site = h.Labels[metalv1.FailureDomainLabel]
			}
		} else {
			it.add(&Item{Name: "YonderMetalMachine/" + ref.Name, Ready: "False", Details: "no BareMetalHost claimed yet"})
		}
	}
	if n := ix.node[m.Status.NodeRef.Name]; n != nil {
		it.add(nodeItem(ix, n))
		if s := nodeSite(*n); s != "" {
			site = s
		}
	}
	return it, site
}

func bareMetalHostItem(h *metal3v1.BareMetalHost) *Item {
	ready := "Unknown"
	switch h.Status.OperationalStatus {
	case metal3v1.OperationalStatusOK:
		ready = "True"
	case metal3v1.OperationalStatusError:
		ready = "False"
	}
	power := "powered off"
	if h.Status.PoweredOn {
		power = "powered on"
	}
	details := nonEmpty(string(h.Status.Provisioning.State), power, "BMC "+h.Spec.BMC.Address)
	if h.Status.ErrorMessage != "" {
		details = append(details, string(h.Status.ErrorType)+": "+oneLine(h.Status.ErrorMessage))
	}
	return &Item{Name: "BareMetalHost/" + h.Name, Ready: ready, Details: strings.Join(details, ", ")}
}

func nodeItem(ix *index, n *corev1.Node) *Item {
	it := &Item{Name: "Node/" + n.Name, Ready: ready(*n),
		Details: strings.Join(nonEmpty(internalIP(*n), strings.Join(n.Spec.PodCIDRs, ","), n.Status.NodeInfo.KubeletVersion), ", ")}
	if nn := ix.tunnel[n.Name]; nn != nil {
		it.add(tunnelItem(nn, ix.gateway[n.Name]))
	}
	return it
}

func tunnelItem(nn *netv1.NodeNetwork, gw *netv1.Peer) *Item {
	var eps, protos []string
	for _, e := range nn.Spec.Endpoints {
		eps = append(eps, e.Address+"("+string(e.Type)+")")
	}
	for _, p := range nn.Spec.Protocols {
		protos = append(protos, string(p))
	}
	key := ""
	if len(nn.Spec.PublicKey) > 8 {
		key = "key " + nn.Spec.PublicKey[:8] + "…"
	}
	role := ""
	if gw != nil {
		role = "gateway (standby)"
		if gw.Gateway.Active {
			role = "gateway (active)"
		}
	}
	return &Item{Name: "NodeNetwork/" + nn.Name, Ready: condStatus(nn.Status.Conditions, "Ready"),
		Details: withProblem(strings.Join(nonEmpty(strings.Join(protos, ","), strings.Join(eps, ","), key, role), ", "), nn.Status.Conditions, "Ready")}
}

func siteDetails(s *netv1.Site) string {
	st := s.Status
	return withProblem(fmt.Sprintf("nodes %d/%d ready, gateways %d/%d active, pod CIDRs %d/%d", st.ReadyNodes, st.Nodes, st.ActiveGateways, st.Gateways,
		st.PodCIDRs.Allocated, st.PodCIDRs.Capacity), st.Conditions, "Ready")
}

func poolDetails(p *netv1.GatewayPool) string {
	var gws []string
	for _, g := range p.Status.Gateways {
		state := "active"
		if !g.Active {
			state = cli.Dash(g.Reason)
		}
		gws = append(gws, g.Node+"("+state+")")
	}
	return fmt.Sprintf("%d/%d active%s", p.Status.Active, p.Status.Candidates, strings.Join(append([]string{""}, gws...), " "))
}

func peeringDetails(p *netv1.SitePeering) string {
	return strings.Join(nonEmpty(strings.Join(p.Spec.Sites, " ↔ "), string(p.Spec.Topology), string(p.Spec.Protocol), unhealthy(p.Status.Conditions)), ", ")
}

func sshHostReady(h *infrav1.YonderSSHHost) string {
	if s := condStatus(h.Status.Conditions, "Ready"); s != "-" {
		return s
	}
	return "-"
}

// condStatus is the status of condition t, "-" when the object does not report it.
func condStatus(cs []metav1.Condition, t string) string {
	for _, c := range cs {
		if c.Type == t {
			return string(c.Status)
		}
	}
	return "-"
}

// withProblem appends "<reason>: <message>" of condition t to details when t is not True.
func withProblem(details string, cs []metav1.Condition, t string) string {
	for _, c := range cs {
		if c.Type == t && c.Status != metav1.ConditionTrue {
			return strings.Join(nonEmpty(details, reasonMessage(c)), "; ")
		}
	}
	return details
}

func reasonMessage(c metav1.Condition) string {
	if c.Message == "" {
		return c.Reason
	}
	return c.Reason + ": " + oneLine(c.Message)
}

func fd(s string) string {
	if s == "" {
		return ""
	}
	return "failure domain " + s
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && s != "-" {
			out = append(out, s)
		}
	}
	return out
}
