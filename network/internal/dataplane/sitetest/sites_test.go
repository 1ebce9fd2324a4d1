package sitetest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// udpRoundTrip sends one datagram from ns to addr and waits briefly for the echo.
func udpRoundTrip(ns, addr string, size int) error {
	c, err := Dial(ns, "udp4", addr, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	msg := make([]byte, size)
	_, _ = rand.Read(msg)
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("failed to send: %w", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, size+10)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("failed to receive echo: %w", err)
	}
	if !bytes.Equal(buf[:n], msg) {
		return fmt.Errorf("echo differs")
	}
	return nil
}

// diag is every daemon's state and log, for a failure message.
func (s *Sites) diag() string {
	var b strings.Builder
	for _, n := range s.Nodes {
		st, err := s.Debug(n)
		fmt.Fprintf(&b, "--- %s: %+v %v\n%s\n", n.Name, st, err, n.Log())
	}
	return b.String()
}

// tcpTransfer sends size bytes over TCP and reads them back (segments larger than the tunnel MTU exercise MSS
// clamping and path MTU).
func tcpTransfer(ns, addr string, size int) error {
	c, err := Dial(ns, "tcp4", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, size)
	_, _ = rand.Read(msg)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("failed to read echo: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("failed to write: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo differs")
	}
	return nil
}

// dfPing sends three pings of size bytes (IP packet) with DF set from ns to addr; all must be answered.
// Callers that expect success retry it (Eventually): the property is that such a packet fits the path,
// and a ping lost while a loaded machine stalls a gateway's daemon says nothing about that.
func dfPing(s *Sites, ns, addr string, size int) error {
	out, err := s.Lab.Exec(ns, "ping", "-n", "-M", "do", "-c", "3", "-i", "0.2", "-W", "1", "-s", strconv.Itoa(size-28), addr)
	if err != nil {
		return fmt.Errorf("ping -s %d: %w: %s", size-28, err, out)
	}
	if !strings.Contains(out, " 0% packet loss") {
		return fmt.Errorf("ping -s %d lost packets: %s", size-28, out)
	}
	return nil
}

func TestPodToPodAcrossSites(t *testing.T) {
	for _, c := range []struct{ intra, proto netv1.Protocol }{
		{netv1.ProtocolVXLAN, netv1.ProtocolWireGuard}, {netv1.ProtocolVXLAN, netv1.ProtocolVXLAN}, {netv1.ProtocolNone, netv1.ProtocolWireGuard},
	} {
		proto := c.proto
		t.Run(string(c.intra)+"-"+string(proto), func(t *testing.T) {
			g := NewWithT(t)
			s := NewSitesWith(t, c.intra, proto)
			a1, b2, ga1, gb1 := s.Nodes["a1"], s.Nodes["b2"], s.Nodes["ga1"], s.Nodes["gb1"]
			for _, n := range []*Node{a1, b2, ga1} {
				Echo(t, n.Pod, 7000)
			}
			diag := s.diag
			to := func(n *Node) string { return net.JoinHostPort(n.PodIP.String(), "7000") }
			// a1 and b2 reach each other only through the gateways of both sites.
			g.Eventually(func() error { return udpRoundTrip(a1.Pod, to(b2), 100) }, 20*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
			g.Eventually(func() error { return udpRoundTrip(b2.Pod, to(a1), 100) }, 5*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
			// Full-size datagrams (fragmented by the pods' 1500 MTU path) and TCP beyond one segment, both ways.
			g.Eventually(func() error { return udpRoundTrip(a1.Pod, to(b2), 1400) }, 5*time.Second, 100*time.Millisecond).Should(Succeed(), diag)
			g.Expect(tcpTransfer(a1.Pod, to(b2), 1<<20)).To(Succeed(), diag)
			g.Expect(tcpTransfer(b2.Pod, to(a1), 1<<20)).To(Succeed(), diag)
			// The planned path MTU is what crosses: a packet of exactly the link's tunnelMTU with DF set
			// arrives unfragmented; one byte more is refused with "fragmentation needed" (never silently
			// dropped), both by ping's own report.
			linkMTU := int(plan.DefaultMTU - plan.Overhead(proto))
			g.Eventually(func() error { return dfPing(s, a1.Pod, b2.PodIP.String(), linkMTU) }, 5*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
			g.Eventually(func() error { return dfPing(s, b2.Pod, a1.PodIP.String(), linkMTU) }, 5*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
			err := dfPing(s, a1.Pod, b2.PodIP.String(), linkMTU+1)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(MatchRegexp(`(?i)frag needed|message too long|mtu ?= ?%d`, linkMTU))
			// Intra-site (VXLAN) and gateway pod to remote gateway pod.
			g.Expect(tcpTransfer(a1.Pod, to(ga1), 256<<10)).To(Succeed(), diag)
			g.Eventually(func() error { return udpRoundTrip(gb1.Pod, to(ga1), 200) }, 5*time.Second, 100*time.Millisecond).Should(Succeed(), diag)

			st, err := s.Debug(ga1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Attachment).NotTo(BeEmpty())
			g.Expect(st.WireGuard.Kind).NotTo(BeEmpty())
			if proto == netv1.ProtocolWireGuard {
				g.Expect(st.WireGuard.Peers).To(HaveLen(1))
				g.Expect(st.WireGuard.Peers[0].HandshakeAge).To(BeNumerically(">=", 0))
			}
			sa, err := s.Debug(a1)
			g.Expect(err).NotTo(HaveOccurred())
			if c.intra != netv1.ProtocolNone {
				g.Expect(sa.Counters[0]).To(BeNumerically(">", 0), "a1's pod traffic went through the eBPF redirect")
			}
		})
	}
}
