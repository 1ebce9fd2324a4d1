package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"

	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

const (
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
)

func frame(src, dst netip.Addr, sport, dport uint16, payload int) []byte {
	b := make([]byte, 14+20+8+payload)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	ip[8] = 64
	ip[9] = 17
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+payload))
	return b
}

func mac(i byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0x79, 0, 0, 0, i} }

func run(g *WithT, p *ebpf.Program, pkt []byte) (uint32, []byte) {
	out := make([]byte, len(pkt)+256)
	ret, err := p.Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
	g.Expect(err).NotTo(HaveOccurred())
	return ret, out[:len(pkt)]
}

func TestProgramLogic(t *testing.T) {
	g := NewWithT(t)
	d, err := Load()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = d.Close() }()

	src := netip.MustParseAddr("10.1.1.2")
	members := []Backend{
		{ID: 11, Ifindex: 5, MTU: 1400, DstMAC: mac(1), SrcMAC: mac(9)},
		{ID: 22, Ifindex: 5, MTU: 1400, DstMAC: mac(2), SrcMAC: mac(9)},
		{ID: 33, Ifindex: 6, MTU: 1400, DstMAC: mac(3), SrcMAC: mac(9)},
	}
	want := Desired{
		Prefixes: map[netip.Prefix]uint32{
			netip.MustParsePrefix("10.2.0.0/16"): 1, // remote site via three gateways
			netip.MustParsePrefix("10.2.7.0/24"): 2, // a more specific prefix via one node
			netip.MustParsePrefix("10.3.0.0/16"): 3, // a link that is down: no member
		},
		Groups: map[uint32][]Backend{1: members, 2: {{ID: 44, Ifindex: 7, MTU: 1400, DstMAC: mac(4), SrcMAC: mac(8)}}, 3: nil},
	}
	st, err := d.Sync(want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Updated).To(Equal(6))

	// Unchanged content writes nothing.
	st, err = d.Sync(want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(Stats{}))

	expectVerdicts(g, d, src)
	expectRendezvous(g, d, src, want, members)

	// Removing prefixes and groups deletes them.
	delete(want.Prefixes, netip.MustParsePrefix("10.3.0.0/16"))
	delete(want.Groups, 3)
	st, err = d.Sync(want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(Stats{Deleted: 2}))
	ret, _ := run(g, d.Program(), frame(src, netip.MustParseAddr("10.3.0.9"), 1, 2, 10))
	g.Expect(ret).To(BeEquivalentTo(tcActOK))
	c, err := d.Counters()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c[0]).To(BeNumerically(">", 600))
	g.Expect(c[4]).To(BeEquivalentTo(1))
	g.Expect(c[5]).To(BeEquivalentTo(1), "the ICMP packet")
}

// expectVerdicts checks the program's decisions for single packets of TestProgramLogic's maps: misses and
// non-IPv4 to the kernel, longest prefix, TCP SYNs and ICMP to the kernel, drop on a down link, oversize to the
// kernel.
func expectVerdicts(g *WithT, d *Datapath, src netip.Addr) {
	// Miss → kernel path; not IPv4 → kernel path.
	ret, _ := run(g, d.Program(), frame(src, netip.MustParseAddr("192.168.1.1"), 1, 2, 10))
	g.Expect(ret).To(BeEquivalentTo(tcActOK))
	arp := frame(src, netip.MustParseAddr("10.2.0.1"), 1, 2, 10)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	ret, _ = run(g, d.Program(), arp)
	g.Expect(ret).To(BeEquivalentTo(tcActOK))

	// Longest prefix wins: 10.2.7.x goes to member 44 with its MACs.
	ret, out := run(g, d.Program(), frame(src, netip.MustParseAddr("10.2.7.9"), 1000, 80, 10))
	g.Expect(ret).To(BeEquivalentTo(tcActRedirect))
	g.Expect(net.HardwareAddr(out[0:6])).To(Equal(mac(4)))
	g.Expect(net.HardwareAddr(out[6:12])).To(Equal(mac(8)))

	// TCP SYNs go to the kernel (MSS clamping); other TCP segments are redirected.
	tcp := func(flags byte) []byte {
		f := frame(src, netip.MustParseAddr("10.2.7.9"), 1000, 80, 20)
		f[14+9] = 6
		f[14+20+12] = 5 << 4
		f[14+20+13] = flags
		return f
	}
	ret, _ = run(g, d.Program(), tcp(0x02))
	g.Expect(ret).To(BeEquivalentTo(tcActOK))
	ret, _ = run(g, d.Program(), tcp(0x10))
	g.Expect(ret).To(BeEquivalentTo(tcActRedirect))

	// ICMP goes to the kernel: the sender's conntrack must see the request its reply answers (an unmatched
	// reply is INVALID, which kube-proxy drops).
	icmp := frame(src, netip.MustParseAddr("10.2.7.9"), 0x0800, 0, 20)
	icmp[14+9] = 1
	ret, _ = run(g, d.Program(), icmp)
	g.Expect(ret).To(BeEquivalentTo(tcActOK))

	// A down link drops (never leaks unencrypted onto the underlay).
	ret, _ = run(g, d.Program(), frame(src, netip.MustParseAddr("10.3.0.9"), 1, 2, 10))
	g.Expect(ret).To(BeEquivalentTo(tcActShot))

	// Oversize packets take the kernel path (which answers with ICMP fragmentation needed).
	ret, _ = run(g, d.Program(), frame(src, netip.MustParseAddr("10.2.0.9"), 1, 2, 1400))
	g.Expect(ret).To(BeEquivalentTo(tcActOK))

}

// expectRendezvous checks that flows spread over group 1's three members and stick to one, and that when a
// member fails only its flows move.
func expectRendezvous(g *WithT, d *Datapath, src netip.Addr, want Desired, members []Backend) {
	// Flows spread over all members, and each flow sticks to one member.
	pick := func(sport uint16) byte {
		ret, out := run(g, d.Program(), frame(src, netip.MustParseAddr("10.2.0.9"), sport, 443, 10))
		g.Expect(ret).To(BeEquivalentTo(tcActRedirect))
		return out[5]
	}
	before := map[uint16]byte{}
	spread := map[byte]int{}
	for sp := uint16(1000); sp < 1300; sp++ {
		before[sp] = pick(sp)
		spread[before[sp]]++
		g.Expect(pick(sp)).To(Equal(before[sp]), "a flow must stay on its member")
	}
	g.Expect(spread).To(HaveLen(3))
	for m, n := range spread {
		g.Expect(n).To(BeNumerically(">", 50), "member %d got %d of 300 flows", m, n)
	}

	// Member 22 fails: only its flows move.
	want.Groups[1] = []Backend{members[0], members[2]}
	st, err := d.Sync(want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(Stats{Updated: 1}), "a failure is one group update")
	for sp, m := range before {
		now := pick(sp)
		if m == 2 {
			g.Expect(now).To(BeElementOf(byte(1), byte(3)))
		} else {
			g.Expect(now).To(Equal(m), "flow %d moved although its member is healthy", sp)
		}
	}

}

// TestAttachRedirects attaches the program in namespaces (tcx and clsact) and checks a real packet from a
// "pod" is redirected to the chosen member's device with its MAC, where the node has no route for it.
func TestAttachRedirects(t *testing.T) {
	for _, mode := range []Attachment{AttachTCX, AttachClsact} {
		t.Run(string(mode), func(t *testing.T) { testAttachRedirects(t, mode) })
	}
}

func testAttachRedirects(t *testing.T, mode Attachment) {
	t.Helper()
	g := NewWithT(t)
	lab := topo.New(t)
	node, pod, sink := attachLab(lab)
	var ln *net.UDPConn
	var dm net.HardwareAddr
	g.Expect(topo.RunIn(sink, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		dm = l.Attrs().HardwareAddr
		ln, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 9999})
		return err
	})).To(Succeed())
	defer func() { _ = ln.Close() }()
	d := attachRedirecting(g, node, mode, dm)
	defer func() { _ = d.Close() }()

	var conn *net.UDPConn
	g.Expect(topo.RunIn(pod, func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 9, 0, 5), Port: 9999})
		return err
	})).To(Succeed())
	defer func() { _ = conn.Close() }()
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, 100)
		for {
			n, err := ln.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	g.Eventually(func() bool {
		_, _ = conn.Write([]byte("hello"))
		select {
		case m := <-got:
			return m == "hello"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}, 10*time.Second).Should(BeTrue(), func() string {
		c, _ := d.Counters()
		o1, _ := lab.Exec(node, "ip", "-s", "link")
		o2, _ := lab.Exec(sink, "ip", "-s", "link")
		o3, _ := lab.Exec(pod, "ip", "neigh")
		return fmt.Sprintf("counters %v\n%s\n%s\n%s", c, o1, o2, o3)
	})
	c, err := d.Counters()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c[0]).To(BeNumerically(">=", 1))

	// Detached (the daemon does that for a VXLAN device the plan stopped using), the program sees nothing more
	// and the attachment is released: packets to the sink have no route.
	g.Expect(topo.RunIn(node, func() error {
		p0, err := netlink.LinkByName("p0")
		if err != nil {
			return err
		}
		return d.Detach(p0.Attrs().Index)
	})).To(Succeed())
	g.Expect(d.links).To(BeEmpty())
	g.Expect(d.filters).To(BeEmpty())
	before, err := d.Counters()
	g.Expect(err).NotTo(HaveOccurred())
	for range 5 {
		_, _ = conn.Write([]byte("detached"))
	}
	g.Consistently(func() bool {
		for {
			select {
			case m := <-got:
				if m == "detached" {
					return true
				}
			default:
				return false
			}
		}
	}, time.Second, 100*time.Millisecond).Should(BeFalse(), "nothing is redirected after Detach")
	after, err := d.Counters()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(before), "the program no longer runs on p0")
}

// attachLab is a node namespace with a pod behind veth p0 (10.1.1.2, default route via the node) and a
// sink behind veth out0 (10.9.0.5/16) that the node has no route to: only the program gets packets there.
func attachLab(lab *topo.Lab) (node, pod, sink string) {
	node, pod, sink = lab.AddNS("node"), lab.AddNS("pod"), lab.AddNS("sink")
	lab.MustIP(node, "link", "add", "p0", "type", "veth", "peer", "name", "eth0", "netns", pod)
	lab.MustIP(node, "addr", "add", "10.1.1.1/24", "dev", "p0")
	lab.MustIP(node, "link", "set", "p0", "up")
	lab.MustIP(pod, "addr", "add", "10.1.1.2/24", "dev", "eth0")
	lab.MustIP(pod, "link", "set", "eth0", "up")
	lab.MustIP(pod, "route", "add", "default", "via", "10.1.1.1")
	lab.MustIP(node, "link", "add", "out0", "type", "veth", "peer", "name", "eth0", "netns", sink)
	lab.MustIP(node, "link", "set", "out0", "up")
	lab.MustIP(sink, "addr", "add", "10.9.0.5/16", "dev", "eth0")
	lab.MustIP(sink, "link", "set", "eth0", "up")
	lab.MustIP(sink, "route", "add", "10.1.0.0/16", "dev", "eth0")
	lab.MustIP(sink, "neigh", "add", "10.1.1.2", "lladdr", "02:00:00:00:00:01", "dev", "eth0") // replies are not needed
	return node, pod, sink
}

// attachRedirecting loads the program in node, attaches it to p0 with mode and sends 10.9.0.0/16 to out0
// with the sink's MAC dm.
func attachRedirecting(g *WithT, node string, mode Attachment, dm net.HardwareAddr) *Datapath {
	var d *Datapath
	g.Expect(topo.RunIn(node, func() error {
		var err error
		if d, err = Load(); err != nil {
			return err
		}
		p0, err := netlink.LinkByName("p0")
		if err != nil {
			return err
		}
		out, err := netlink.LinkByName("out0")
		if err != nil {
			return err
		}
		got, err := d.Attach(p0.Attrs().Index, mode)
		if err != nil {
			return err
		}
		if got != mode {
			return fmt.Errorf("attached with %s, want %s", got, mode)
		}
		_, err = d.Sync(Desired{
			Prefixes: map[netip.Prefix]uint32{netip.MustParsePrefix("10.9.0.0/16"): 1},
			Groups:   map[uint32][]Backend{1: {{ID: 1, Ifindex: out.Attrs().Index, MTU: 1500, DstMAC: dm, SrcMAC: out.Attrs().HardwareAddr}}},
		})
		return err
	})).To(Succeed())
	return d
}
