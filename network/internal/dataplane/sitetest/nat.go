package sitetest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/apisync"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// NATSites is a topology with Sites behind NAT, planned by the real planner (plan.Compute) from what the
// daemons publish — reachability included — as the controller would:
//
//   - Site p: gateways p1, p2 (LAN + a leg on the WAN, relay pool): reachable;
//   - Site q: gateway q1 with one leg on the WAN: reachable (p ↔ q is a Direct link);
//   - Site n: gateways n1, n2 and node n3 on a private network behind NAT router rn;
//   - Site m: gateway m1 on a private network behind NAT router rm.
//
// The NAT routers masquerade onto the WAN with a random source port for every new mapping (like a
// carrier-grade NAT that rebinds) and drop everything unsolicited from the WAN; nothing routes the
// private networks. So p ↔ n and p ↔ m are NAT-initiated (n and m dial), and n ↔ m can only be relayed
// (through p). Nobody tells the daemons which nodes are behind NAT: they detect it.
type NATSites struct {
	*Sites
	// Routers are the NAT routers' namespaces by Site (n, m) and WAN their WAN addresses.
	Routers map[string]string
	WAN     map[string]netip.Addr

	sites    []netv1.Site
	pools    []netv1.GatewayPool
	peerings []netv1.SitePeering

	mu      sync.Mutex
	out     *plan.Output
	written map[string][]byte
}

// natNode describes one node of NATSites.
type natNode struct {
	name, site, podCIDR, lan, net string
	wan                           string // a second leg on the WAN (p's gateways)
	gw                            bool
	via                           string // default route (the NAT router)
}

var natNodes = []natNode{
	{name: "p1", site: "p", podCIDR: "10.30.1.0/24", lan: "192.168.30.11", net: "lanp", wan: "198.51.100.11", gw: true},
	{name: "p2", site: "p", podCIDR: "10.30.2.0/24", lan: "192.168.30.12", net: "lanp", wan: "198.51.100.12", gw: true},
	{name: "q1", site: "q", podCIDR: "10.60.1.0/24", lan: "198.51.100.41", net: "wan", gw: true},
	{name: "n1", site: "n", podCIDR: "10.40.1.0/24", lan: "10.77.1.11", net: "privn", gw: true, via: "10.77.1.1"},
	{name: "n2", site: "n", podCIDR: "10.40.2.0/24", lan: "10.77.1.12", net: "privn", gw: true, via: "10.77.1.1"},
	{name: "n3", site: "n", podCIDR: "10.40.3.0/24", lan: "10.77.1.13", net: "privn", via: "10.77.1.1"},
	{name: "m1", site: "m", podCIDR: "10.50.1.0/24", lan: "10.78.1.11", net: "privm", gw: true, via: "10.78.1.1"},
}

// NewNATSites builds the namespaces, NAT routers, pods and daemons, and follows the daemons' publications
// with the planner until the test ends.
func NewNATSites(t testing.TB) *NATSites {
	t.Helper()
	s := &NATSites{
		Sites:   &Sites{T: t, Lab: topo.New(t), Nodes: map[string]*Node{}, Protocol: netv1.ProtocolWireGuard, Intra: netv1.ProtocolVXLAN, bin: Binary(t)},
		Routers: map[string]string{}, WAN: map[string]netip.Addr{}, written: map[string][]byte{},
	}
	l := s.Lab
	for _, n := range []string{"wan", "lanp", "privn", "privm"} {
		l.Network(n)
	}
	s.router("n", "privn", "10.77.1.1/24", "198.51.100.21")
	s.router("m", "privm", "10.78.1.1/24", "198.51.100.22")
	for _, d := range natNodes {
		s.addNode(d)
	}
	s.configure()
	for _, n := range s.Nodes {
		s.Start(n)
	}
	for _, n := range s.Nodes {
		s.WaitPublished(n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.follow(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// router makes a NAT router for site: masquerading with a random port per mapping, dropping every packet
// from the WAN that no mapping expects.
func (s *NATSites) router(site, private, inside, wan string) {
	l := s.Lab
	ns := l.AddNS("r" + site)
	l.Attach(ns, "eth0", private, inside, 1500)
	l.Attach(ns, "eth1", "wan", wan+"/24", 1500)
	l.Sysctl(ns, "net.ipv4.ip_forward", "1")
	for _, rule := range [][]string{
		{"-t", "nat", "-A", "POSTROUTING", "-o", "eth1", "-j", "MASQUERADE", "--random-fully"},
		{"-A", "FORWARD", "-i", "eth1", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-A", "FORWARD", "-i", "eth1", "-j", "DROP"},
		{"-A", "INPUT", "-i", "eth1", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-A", "INPUT", "-i", "eth1", "-j", "DROP"},
	} {
		if _, err := l.Exec(ns, "iptables", append([]string{"-w"}, rule...)...); err != nil {
			s.T.Fatal(err)
		}
	}
	s.Routers[site], s.WAN[site] = ns, netip.MustParseAddr(wan)
}

func (s *NATSites) addNode(d natNode) {
	l := s.Lab
	n := &Node{Name: d.name, Site: d.site, NS: l.AddNS(d.name), PodCIDR: netip.MustParsePrefix(d.podCIDR), Gateway: d.gw, dir: s.T.TempDir()}
	n.LAN = netip.MustParseAddr(d.lan)
	l.Attach(n.NS, "eth0", d.net, d.lan+"/24", 1500)
	if d.wan != "" {
		n.WAN = netip.MustParseAddr(d.wan)
		l.Attach(n.NS, "eth1", "wan", d.wan+"/24", 1500)
	}
	if d.via != "" {
		l.MustIP(n.NS, "route", "add", "default", "via", d.via)
	}
	n.PodIP = n.PodCIDR.Addr().Next().Next()
	n.Pod = l.Pod(n.NS, "br0", d.name+"p", n.PodCIDR, n.PodIP)
	s.Nodes[d.name] = n
}

// configure writes the API objects the planner reads: a Site per site with its pool, a GatewayPool of its
// gateways (p's may relay), and one Gateway peering of all Sites. Nothing says who is behind NAT.
func (s *NATSites) configure() {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "true"}}
	for _, st := range []struct{ name, pool string }{{"m", "10.50.0.0/16"}, {"n", "10.40.0.0/16"}, {"p", "10.30.0.0/16"}, {"q", "10.60.0.0/16"}} {
		s.sites = append(s.sites, netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: st.name},
			Spec: netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: st.pool}}, HealthProbe: netv1.HealthProbeSpec{Port: 51822}}})
		s.pools = append(s.pools, netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: st.name + "-gw"},
			Spec: netv1.GatewayPoolSpec{Site: st.name, NodeSelector: sel, Relay: st.name == "p"}})
	}
	s.peerings = []netv1.SitePeering{{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: netv1.SitePeeringSpec{Sites: []string{"m", "n", "p", "q"}}}}
}

// follow replans whenever a publication changes, until ctx ends.
func (s *NATSites) follow(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if err := s.Replan(); err != nil {
			s.T.Logf("replanning: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Replan computes the plan from the current publications and writes every node's input that changed.
func (s *NATSites) Replan() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes []plan.Node
	for _, name := range s.names() {
		n := s.Nodes[name]
		pn := plan.Node{Name: n.Name, Site: n.Site, Labels: map[string]string{}, PodCIDRs: []string{n.PodCIDR.String()}, Ready: true, DataplaneReady: true}
		if n.Gateway {
			pn.Labels["gateway"] = "true"
		}
		if spec, err := n.Publication(); err == nil {
			pn.Network = &spec
		}
		nodes = append(nodes, pn)
	}
	in := plan.Input{Sites: s.sites, Pools: s.pools, Peerings: s.peerings, Nodes: nodes}
	if s.out != nil {
		in.Previous = s.out.Slices
	}
	s.out = plan.Compute(in)
	for _, n := range s.Nodes {
		b, err := yaml.Marshal(s.inputOf(n))
		if err != nil {
			return fmt.Errorf("failed to encode the input of %s: %w", n.Name, err)
		}
		if bytes.Equal(b, s.written[n.Name]) {
			continue
		}
		if err := os.WriteFile(filepath.Join(n.dir, "plan.yaml.tmp"), b, 0o600); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(n.dir, "plan.yaml.tmp"), n.InputFile()); err != nil {
			return err
		}
		s.written[n.Name] = b
	}
	return nil
}

// inputOf is what the node's API side (apisync) would read: its Site's plan and slices, and the remote
// slices the plan's links need. s.mu must be held.
func (s *NATSites) inputOf(n *Node) desired.Input {
	in := desired.Input{Node: n.Name, Site: n.Site, PodCIDRs: []string{n.PodCIDR.String()}}
	for _, p := range s.out.Plans {
		if p.Name == n.Site {
			in.Plan = p.Spec
		}
	}
	sels := apisync.RemoteSlices(in.Plan)
	for _, sl := range s.out.Slices {
		match := sl.Spec.Site == n.Site
		for _, sel := range sels {
			match = match || labels.SelectorFromSet(labels.Set(sel)).Matches(labels.Set(sl.Labels))
		}
		if match {
			in.Slices = append(in.Slices, sl.Spec)
		}
	}
	return in
}

func (s *NATSites) names() []string {
	names := make([]string, 0, len(s.Nodes))
	for name := range s.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Link returns the peering's status of the link between two Sites (sorted names) as last planned (zero
// before the first plan).
func (s *NATSites) Link(a, b string) netv1.LinkStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return netv1.LinkStatus{}
	}
	for _, l := range s.out.Peerings["all"].Links {
		if l.Sites[0] == a && l.Sites[1] == b {
			return l
		}
	}
	return netv1.LinkStatus{}
}

// FlushNAT forgets every mapping of a Site's NAT router (conntrack -F): the next packet from inside gets a
// new random source port.
func (s *NATSites) FlushNAT(site string) error {
	_, err := s.Lab.Exec(s.Routers[site], "conntrack", "-F")
	return err
}
