package sitetest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// A node listens on a VXLAN port only while its plan has a next hop over that VXLAN device: the kernel's
// VXLAN socket is bound on every address of the node, so an unused device is only attack surface. Two nodes
// of one Site start natively routed (intra-site protocol None): no VXLAN device, no socket on 4789 or 4790,
// pods reach each other. The plan switches to VXLAN: the underlay device appears (with the eBPF program on
// its ingress for transit traffic), binds 4789, and pod traffic crosses it; the device inside WireGuard
// stays absent (no WireGuard peer). The nodes leave each other's plans: the devices and their sockets go, and
// the daemon releases its attachment.
func TestVXLANDeviceOnlyWhilePlanned(t *testing.T) {
	g := NewWithT(t)
	s := &Sites{T: t, Lab: topo.New(t), Nodes: map[string]*Node{}, bin: Binary(t)}
	s.Lab.Network("lan")
	var peers []netv1.Peer
	for _, d := range []struct{ name, cidr, lan string }{{"d1", "10.96.1.0/24", "192.168.51.11"}, {"d2", "10.96.2.0/24", "192.168.51.12"}} {
		n := &Node{Name: d.name, Site: "a", NS: s.Lab.AddNS(d.name), PodCIDR: netip.MustParsePrefix(d.cidr), LAN: netip.MustParseAddr(d.lan), dir: t.TempDir()}
		s.Lab.Attach(n.NS, "eth0", "lan", d.lan+"/24", 1500)
		n.PodIP = n.PodCIDR.Addr().Next().Next()
		n.Pod = s.Lab.Pod(n.NS, "br0", d.name+"p", n.PodCIDR, n.PodIP)
		Echo(t, n.Pod, 7778)
		s.Nodes[n.Name] = n
		s.Start(n)
		s.WaitPublished(n)
		peers = append(peers, netv1.Peer{Node: d.name, PodCIDRs: []string{d.cidr}, Endpoints: []netv1.Endpoint{{Address: d.lan, Type: netv1.EndpointInternal}}})
	}
	d1, d2 := s.Nodes["d1"], s.Nodes["d2"]
	// plan writes both nodes' views; alone leaves each node only itself in its Site.
	plan := func(intra netv1.Protocol, alone bool) {
		for i, n := range []*Node{d1, d2} {
			ps := peers
			if alone {
				ps = peers[i : i+1]
			}
			in := desired.Input{Node: n.Name, Site: "a", PodCIDRs: []string{n.PodCIDR.String()},
				Plan:   netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: intra, TunnelMTU: 1450}, HealthProbe: netv1.HealthProbeSpec{Port: 51822}},
				Slices: []netv1.PeerSliceSpec{{Site: "a", Role: netv1.SliceRoleNodes, Peers: ps}}}
			b, err := yaml.Marshal(in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(os.WriteFile(n.InputFile(), b, 0o600)).To(Succeed())
		}
	}
	podToPod := func() error {
		return udpRoundTrip(d1.Pod, fmt.Sprintf("%s:7778", d2.PodIP), 200)
	}

	// Natively routed: pods reach each other, and neither node has a VXLAN device or socket.
	plan(netv1.ProtocolNone, false)
	g.Eventually(podToPod, 30*time.Second, 200*time.Millisecond).Should(Succeed(), d1.Log)
	for _, n := range []*Node{d1, d2} {
		st, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Applied).To(BeNumerically(">=", 1), n.Log)
		g.Expect(linkExists(g, n.NS, "yonder-vx")).To(BeFalse(), "%s has no VXLAN link: %s", n.Name, n.Log())
		g.Expect(linkExists(g, n.NS, "yonder-vw")).To(BeFalse(), "%s has no WireGuard link: %s", n.Name, n.Log())
		ports := udpPortsBound(g, s, n)
		g.Expect(ports).NotTo(ContainElement(desired.DefaultVXLANPort), n.Name)
		g.Expect(ports).NotTo(ContainElement(desired.VXLANOverWireGuardPort), n.Name)
	}
	bpfLinks := openBPFLinks(g, d1)

	// VXLAN inside the Site: the underlay device appears on both nodes, listens, carries the pods' traffic and
	// has the eBPF program; the device inside WireGuard is still not needed.
	plan(netv1.ProtocolVXLAN, false)
	for _, n := range []*Node{d1, d2} {
		g.Eventually(func() []int { return udpPortsBound(g, s, n) }, 30*time.Second, 100*time.Millisecond).Should(ContainElement(desired.DefaultVXLANPort), n.Log)
	}
	var mode string
	g.Eventually(func() string { mode = attachedBy(g, s, d1, "yonder-vx"); return mode }, 10*time.Second, 100*time.Millisecond).ShouldNot(BeEmpty(), d1.Log)
	if mode == "tcx" {
		g.Expect(openBPFLinks(g, d1)).To(Equal(bpfLinks+1), "one more attachment: the transit program on yonder-vx")
	}
	tx := txPackets(s, d1, "yonder-vx")
	g.Eventually(podToPod, 30*time.Second, 200*time.Millisecond).Should(Succeed(), d1.Log)
	g.Expect(txPackets(s, d1, "yonder-vx")).To(BeNumerically(">", tx), "the pods' traffic crossed yonder-vx")
	for _, n := range []*Node{d1, d2} {
		g.Expect(linkExists(g, n.NS, "yonder-vw")).To(BeFalse(), n.Name)
		g.Expect(udpPortsBound(g, s, n)).NotTo(ContainElement(desired.VXLANOverWireGuardPort), n.Name)
	}

	// The nodes leave each other's plans: the devices and their sockets go, and the attachment is released.
	plan(netv1.ProtocolVXLAN, true)
	for _, n := range []*Node{d1, d2} {
		g.Eventually(func() bool { return linkExists(g, n.NS, "yonder-vx") }, 30*time.Second, 100*time.Millisecond).Should(BeFalse(), n.Log)
		g.Expect(udpPortsBound(g, s, n)).NotTo(ContainElement(desired.DefaultVXLANPort), n.Name)
	}
	if mode == "tcx" {
		g.Eventually(func() int { return openBPFLinks(g, d1) }, 10*time.Second, 100*time.Millisecond).Should(Equal(bpfLinks), d1.Log)
	}
	g.Expect(podToPod()).NotTo(Succeed(), "no route to the peer's pods any more")
}

// linkExists reports whether ns has a link called name.
func linkExists(g Gomega, ns, name string) bool {
	found := false
	g.Expect(topo.RunIn(ns, func() error {
		_, err := netlink.LinkByName(name)
		found = err == nil
		return nil
	})).To(Succeed())
	return found
}

// udpPortsBound are the local ports of the IPv4 and IPv6 UDP sockets of the node's namespace (the kernel's
// VXLAN sockets are listed there like any other).
func udpPortsBound(g Gomega, s *Sites, n *Node) []int {
	var ports []int
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		out, err := s.Lab.Exec(n.NS, "cat", f)
		g.Expect(err).NotTo(HaveOccurred(), out)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			fields := strings.Fields(l)
			if len(fields) < 2 {
				continue
			}
			_, port, ok := strings.Cut(fields[1], ":")
			g.Expect(ok).To(BeTrue(), l)
			p, err := strconv.ParseUint(port, 16, 16)
			g.Expect(err).NotTo(HaveOccurred(), l)
			ports = append(ports, int(p))
		}
	}
	return ports
}

// attachedBy says how a program is attached to the ingress of dev in the node's namespace: "tcx", "clsact"
// (the daemon's filter) or "" (none).
func attachedBy(g Gomega, s *Sites, n *Node, dev string) string {
	tcx := 0
	g.Expect(topo.RunIn(n.NS, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return nil
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		tcx = len(res.Programs)
		return nil
	})).To(Succeed())
	if tcx > 0 {
		return "tcx"
	}
	if out, _ := s.Lab.Exec(n.NS, "tc", "filter", "show", "dev", dev, "ingress"); strings.Contains(out, "yonder-pod-egress") {
		return "clsact"
	}
	return ""
}

// openBPFLinks counts the daemon's open BPF link descriptors (one per tcx attachment).
func openBPFLinks(g Gomega, n *Node) int {
	dir := fmt.Sprintf("/proc/%d/fd", n.cmd.Process.Pid)
	fds, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	c := 0
	for _, fd := range fds {
		if t, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && t == "anon_inode:bpf_link" {
			c++
		}
	}
	return c
}
