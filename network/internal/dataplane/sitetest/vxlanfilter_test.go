package sitetest

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// A stranger on a Site's LAN cannot inject frames into a node's pod network through the underlay VXLAN
// port: the kernel would decapsulate any packet with the right VNI, so the daemon admits only the peers
// the plan names. The same forged frame sent from a planned peer's address is delivered to the pod, which
// proves the stranger's would have been too without the filter.
func TestUnderlayVXLANAdmitsOnlyPlannedPeers(t *testing.T) {
	g := NewWithT(t)
	s := &Sites{T: t, Lab: topo.New(t), Nodes: map[string]*Node{}, bin: Binary(t)}
	s.Lab.Network("lan")
	var peers []netv1.Peer
	for _, d := range []struct{ name, cidr, lan string }{{"v1", "10.95.1.0/24", "192.168.50.11"}, {"v2", "10.95.2.0/24", "192.168.50.12"}} {
		n := &Node{Name: d.name, Site: "a", NS: s.Lab.AddNS(d.name), PodCIDR: netip.MustParsePrefix(d.cidr), LAN: netip.MustParseAddr(d.lan), dir: t.TempDir()}
		s.Lab.Attach(n.NS, "eth0", "lan", d.lan+"/24", 1500)
		n.PodIP = n.PodCIDR.Addr().Next().Next()
		n.Pod = s.Lab.Pod(n.NS, "br0", d.name+"p", n.PodCIDR, n.PodIP)
		s.Nodes[n.Name] = n
		s.Start(n)
		s.WaitPublished(n)
		peers = append(peers, netv1.Peer{Node: d.name, PodCIDRs: []string{d.cidr}, Endpoints: []netv1.Endpoint{{Address: d.lan, Type: netv1.EndpointInternal}}})
	}
	stranger := s.Lab.AddNS("vx")
	s.Lab.Attach(stranger, "eth0", "lan", "192.168.50.99/24", 1500)
	v1, v2 := s.Nodes["v1"], s.Nodes["v2"]
	for _, n := range []*Node{v1, v2} {
		in := desired.Input{Node: n.Name, Site: "a", PodCIDRs: []string{n.PodCIDR.String()},
			Plan:   netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1450}, HealthProbe: netv1.HealthProbeSpec{Port: 51822}},
			Slices: []netv1.PeerSliceSpec{{Site: "a", Role: netv1.SliceRoleNodes, Peers: peers}}}
		b, err := yaml.Marshal(in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(n.InputFile(), b, 0o600)).To(Succeed())
	}
	g.Eventually(func() string {
		out, _ := s.Lab.Exec(v1.NS, "iptables", "-w", "-t", "filter", "-S", kernel.VXLANFilterChain)
		return out
	}, 30*time.Second, 100*time.Millisecond).Should(Equal("-N YONDER-VXLAN\n-A YONDER-VXLAN -s 192.168.50.12/32 -j RETURN\n-A YONDER-VXLAN -j DROP\n"), v1.Log)
	// The chain and INPUT's jump to it are written together: a chain that is there is in force (a jump
	// inserted after the chain once let the first forged frames through on a loaded machine).
	out, err := s.Lab.Exec(v1.NS, "iptables", "-w", "-t", "filter", "-S", "INPUT")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("-A INPUT -p udp -m udp --dport 4789 -j YONDER-VXLAN"))

	got := podReceiver(t, v1.Pod, 7777)
	mac := vxlanMAC(g, s, v1)
	forge := func(from, payload string) {
		c, err := Dial(from, "udp4", "192.168.50.11:4789", time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = c.Close() }()
		_, err = c.Write(vxlanFrame(mac, netip.MustParseAddr("10.95.2.2"), v1.PodIP, 7777, payload))
		g.Expect(err).NotTo(HaveOccurred())
	}
	for range 5 {
		forge(stranger, "from-stranger")
	}
	// The planned peer's copy arrives (sent until it does: the first may race the pod's ARP entry)…
	g.Eventually(func() []string {
		forge(v2.NS, "from-peer")
		return got()
	}, 20*time.Second, 200*time.Millisecond).Should(ContainElement("from-peer"))
	// …the stranger's never did, and the chain counted them.
	g.Consistently(got, 2*time.Second, 200*time.Millisecond).ShouldNot(ContainElement("from-stranger"))
	out, err = s.Lab.Exec(v1.NS, "iptables", "-w", "-t", "filter", "-L", kernel.VXLANFilterChain, "-v", "-x", "-n")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(dropCount(out)).To(BeNumerically(">=", 5), out)

	// A node leaving the plan loses its admission.
	in := desired.Input{Node: "v1", Site: "a", PodCIDRs: []string{v1.PodCIDR.String()},
		Plan:   netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1450}, HealthProbe: netv1.HealthProbeSpec{Port: 51822}},
		Slices: []netv1.PeerSliceSpec{{Site: "a", Role: netv1.SliceRoleNodes, Peers: peers[:1]}}}
	b, err := yaml.Marshal(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(v1.InputFile(), b, 0o600)).To(Succeed())
	g.Eventually(func() string {
		out, _ := s.Lab.Exec(v1.NS, "iptables", "-w", "-t", "filter", "-S", kernel.VXLANFilterChain)
		return out
	}, 30*time.Second, 100*time.Millisecond).Should(Equal("-N YONDER-VXLAN\n-A YONDER-VXLAN -j DROP\n"), v1.Log)
}

// podReceiver collects the payloads of UDP datagrams arriving at port in the pod namespace.
func podReceiver(t *testing.T, pod string, port int) func() []string {
	t.Helper()
	l, err := Listen(pod, "udp4", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	pc := l.(net.PacketConn)
	t.Cleanup(func() { _ = pc.Close() })
	var mu sync.Mutex
	var got []string
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, string(buf[:n]))
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// vxlanMAC is the MAC of the node's underlay VXLAN device (the inner frame's destination).
func vxlanMAC(g Gomega, s *Sites, n *Node) net.HardwareAddr {
	out, err := s.Lab.Exec(n.NS, "ip", "-j", "link", "show", "yonder-vx")
	g.Expect(err).NotTo(HaveOccurred(), out)
	var links []struct {
		Address string `json:"address"`
	}
	g.Expect(json.Unmarshal([]byte(out), &links)).To(Succeed())
	g.Expect(links).To(HaveLen(1))
	mac, err := net.ParseMAC(links[0].Address)
	g.Expect(err).NotTo(HaveOccurred())
	return mac
}

// vxlanFrame is a VXLAN payload (VNI 1, the underlay device's) carrying an Ethernet frame with an
// IPv4/UDP datagram from src to dst:port.
func vxlanFrame(dstMAC net.HardwareAddr, src, dst netip.Addr, port int, payload string) []byte {
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], uint16(port))
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload) // checksum 0: none, valid for IPv4
	ip := make([]byte, 20, 20+len(udp))
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	eth := append(append([]byte{}, dstMAC...), 0x02, 0, 0, 0, 0, 0x99, 0x08, 0x00)
	vx := []byte{0x08, 0, 0, 0, 0, 0, 1, 0}
	return append(append(append(vx, eth...), ip...), udp...)
}

// dropCount is the packet counter of the chain's DROP rule in `iptables -L -v -x -n` output.
func dropCount(out string) int {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "DROP" {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
