package wgdev

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

func mustKey(g *WithT) wgtypes.Key {
	k, err := wgtypes.GeneratePrivateKey()
	g.Expect(err).NotTo(HaveOccurred())
	return k
}

func cidr(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

// TestReconcilePeersIsDiffBased checks detection (kernel vs embedded, decided at run time) and that reconciling
// an unchanged peer set writes nothing, and a change writes only the changed peer.
func TestReconcilePeersIsDiffBased(t *testing.T) {
	g := NewWithT(t)
	lab := topo.New(t)
	ns := lab.AddNS("wg")
	name := lab.Prefix + "wg"
	err := topo.RunIn(ns, func() error {
		kernel := KernelAvailable(lab.Prefix + "probe")
		d, err := Open(name, 1420, true, slog.Default())
		if err != nil {
			return err
		}
		defer func() { _ = d.Close(true) }()
		if kernel {
			g.Expect(d.Kind).To(Equal(KindKernel))
		} else {
			g.Expect(d.Kind).To(Equal(KindUserspace))
		}
		changed, err := d.SetIdentity(mustKey(g), 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(changed).To(BeTrue())

		p1, p2, p3 := mustKey(g).PublicKey(), mustKey(g).PublicKey(), mustKey(g).PublicKey()
		desired := []Peer{
			{PublicKey: p1, Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820}, AllowedIPs: []net.IPNet{cidr("10.1.0.0/24")}},
			{PublicKey: p2, Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 51820}, AllowedIPs: []net.IPNet{cidr("10.2.0.0/24"), cidr("10.9.0.0/16")}, Keepalive: 25 * time.Second},
			{PublicKey: p3, AllowedIPs: []net.IPNet{cidr("10.3.0.0/24")}},
		}
		ch, err := d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Added).To(HaveLen(3))

		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Empty()).To(BeTrue(), "unchanged peers must not be rewritten: %+v", ch)

		// Allowed IPs in another order are the same configuration.
		desired[1].AllowedIPs = []net.IPNet{cidr("10.9.0.0/16"), cidr("10.2.0.0/24")}
		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Empty()).To(BeTrue())

		desired[0].AllowedIPs = append(desired[0].AllowedIPs, cidr("10.4.0.0/24"))
		desired = desired[:2]
		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		g.Expect(ch.Removed).To(Equal([]wgtypes.Key{p3}))
		g.Expect(ch.Added).To(BeEmpty())

		st, err := d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Peers).To(HaveLen(2))
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24", "10.4.0.0/24"))

		// A key rotation on an L3 link: the switched key (p1) gains its Site's prefix, which the old key (p2)
		// held. Upsert adds it to p1 without replacing p1's other allowed IPs (no window in which they are
		// gone) and the prefix moves off p2, which stays until ReconcilePeers removes it.
		desired[0].AllowedIPs = append(desired[0].AllowedIPs, cidr("10.9.0.0/16"))
		ch, err = d.UpsertPeers(desired[:1])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		st, err = d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24", "10.4.0.0/24", "10.9.0.0/16"))
		g.Expect(allowed(st, p2)).To(ConsistOf("10.2.0.0/24"))

		// Dropping an allowed IP still replaces the set.
		desired[0].AllowedIPs = []net.IPNet{cidr("10.1.0.0/24")}
		ch, err = d.ReconcilePeers(desired[:1])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		g.Expect(ch.Removed).To(Equal([]wgtypes.Key{p2}))
		st, err = d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Peers).To(HaveLen(1))
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24"))
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
}

// allowed lists the allowed IPs of the peer with key k.
func allowed(st *wgtypes.Device, k wgtypes.Key) []string {
	for _, p := range st.Peers {
		if p.PublicKey == k {
			return ipnetStrings(p.AllowedIPs)
		}
	}
	return nil
}

// TestPeerConfigAddsWithoutReplacing: a peer that only gains allowed IPs is written without
// ReplaceAllowedIPs (which would remove its current ones for a moment); one that loses any is replaced.
func TestPeerConfigAddsWithoutReplacing(t *testing.T) {
	g := NewWithT(t)
	k := mustKey(g).PublicKey()
	have := wgtypes.Peer{PublicKey: k, AllowedIPs: []net.IPNet{cidr("10.99.0.2/32")}}
	gain := Peer{PublicKey: k, AllowedIPs: []net.IPNet{cidr("10.10.0.0/16"), cidr("10.99.0.2/32")}}

	cfg := peerConfig(have, true, gain)
	g.Expect(cfg.ReplaceAllowedIPs).To(BeFalse())
	g.Expect(ipnetStrings(cfg.AllowedIPs)).To(Equal([]string{"10.10.0.0/16"}))

	cfg = peerConfig(wgtypes.Peer{}, false, gain)
	g.Expect(cfg.ReplaceAllowedIPs).To(BeTrue(), "a new peer gets its whole set")
	g.Expect(cfg.AllowedIPs).To(HaveLen(2))

	lose := Peer{PublicKey: k, AllowedIPs: []net.IPNet{cidr("10.10.0.0/16")}}
	cfg = peerConfig(wgtypes.Peer{PublicKey: k, AllowedIPs: gain.AllowedIPs}, true, lose)
	g.Expect(cfg.ReplaceAllowedIPs).To(BeTrue())
	g.Expect(ipnetStrings(cfg.AllowedIPs)).To(Equal([]string{"10.10.0.0/16"}))
}

// TestAddingAllowedIPsDropsNothing: a peer that gains allowed IPs while traffic from it arrives (a rotated
// key gaining its Site's L3 prefixes) keeps accepting that traffic. Two userspace devices in their own
// namespaces (their UDP sockets live on the test process's loopback); b adds prefixes to a's peer 100
// times, listed before a's address — with ReplaceAllowedIPs, a's address was gone while they were inserted
// and a's datagrams were dropped as coming from an unallowed source.
func TestAddingAllowedIPsDropsNothing(t *testing.T) {
	g := NewWithT(t)
	lab := topo.New(t)
	nsA, nsB := lab.AddNS("wga"), lab.AddNS("wgb")
	ka, kb := mustKey(g), mustKey(g)
	addrA, addrB := net.IPv4(10, 99, 0, 1), net.IPv4(10, 99, 0, 2)
	const portA, portB, udpPort = 47101, 47102, 47103
	loop := func(port int) *net.UDPAddr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }
	peerA := Peer{PublicKey: ka.PublicKey(), Endpoint: loop(portA), AllowedIPs: []net.IPNet{{IP: addrA, Mask: net.CIDRMask(32, 32)}}, Keepalive: time.Second}
	peerB := Peer{PublicKey: kb.PublicKey(), Endpoint: loop(portB), AllowedIPs: []net.IPNet{{IP: addrB, Mask: net.CIDRMask(32, 32)}}, Keepalive: time.Second}
	openPeered(t, g, nsA, lab.Prefix+"wa", ka, portA, addrA, peerB)
	b := openPeered(t, g, nsB, lab.Prefix+"wb", kb, portB, addrB, peerA)
	rx, tx := udpThroughTunnel(t, g, nsA, nsB, addrA, addrB, udpPort)

	received, counted := countDatagrams(rx, "seq")
	stop := make(chan struct{})
	sent := sendPaced(tx, "seq", stop)
	var prefixes []net.IPNet
	for i := range 100 {
		for j := range 20 {
			prefixes = append(prefixes, net.IPNet{IP: net.IPv4(10, 50+byte(i/10), byte(i%10*20+j), 0), Mask: net.CIDRMask(24, 32)})
		}
		p := peerA
		p.AllowedIPs = append(slices.Clone(prefixes), peerA.AllowedIPs...)
		_, err := b.UpsertPeers([]Peer{p})
		g.Expect(err).NotTo(HaveOccurred())
	}
	close(stop)
	nSent := <-sent
	// The last datagrams cross: wait until all are counted, at most 200 ms (a dropped one never arrives).
	_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return counted.Load() >= int64(nSent), nil
	})
	_ = rx.SetReadDeadline(time.Now())
	nRecv := <-received
	st, err := b.State()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Peers[0].AllowedIPs).To(HaveLen(len(prefixes) + 1))
	t.Logf("%d datagrams sent while 100 upserts added %d prefixes, %d received", nSent, len(prefixes), nRecv)
	g.Expect(nSent).To(BeNumerically(">", 100))
	g.Expect(nRecv).To(BeNumerically(">=", nSent), "datagrams from the peer were dropped while its allowed IPs grew")
}

// openPeered opens an embedded device in namespace ns with key k on port, its address self, one peer and a
// route to the peer's last allowed IP.
func openPeered(t *testing.T, g Gomega, ns, name string, k wgtypes.Key, port int, self net.IP, peer Peer) *Device {
	t.Helper()
	var d *Device
	g.Expect(topo.RunIn(ns, func() error {
		var err error
		if d, err = Open(name, 1420, false, slog.Default()); err != nil {
			return err
		}
		if _, err := d.SetIdentity(k, port); err != nil {
			return err
		}
		if _, err := d.ReconcilePeers([]Peer{peer}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: self, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		other := peer.AllowedIPs[len(peer.AllowedIPs)-1]
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &other, Scope: netlink.SCOPE_LINK})
	})).To(Succeed())
	t.Cleanup(func() { _ = d.Close(true) })
	return d
}

// udpThroughTunnel opens a receiver at addrB:port in nsB and a sender from addrA in nsA, and waits for the
// handshake (the first datagram that arrives).
func udpThroughTunnel(t *testing.T, g Gomega, nsA, nsB string, addrA, addrB net.IP, port int) (rx, tx *net.UDPConn) {
	t.Helper()
	g.Expect(topo.RunIn(nsB, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: addrB, Port: port})
		return err
	})).To(Succeed())
	t.Cleanup(func() { _ = rx.Close() })
	_ = rx.SetReadBuffer(4 << 20)
	g.Expect(topo.RunIn(nsA, func() (err error) {
		tx, err = net.DialUDP("udp4", &net.UDPAddr{IP: addrA}, &net.UDPAddr{IP: addrB, Port: port})
		return err
	})).To(Succeed())
	t.Cleanup(func() { _ = tx.Close() })
	g.Eventually(func() error {
		_, _ = tx.Write([]byte("hello"))
		_ = rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := rx.Read(make([]byte, 64))
		return err
	}, 5*time.Second).Should(Succeed())
	_ = rx.SetReadDeadline(time.Time{})
	return rx, tx
}

// countDatagrams counts the datagrams reading msg on rx (live in the returned counter); the total is sent on
// the channel when rx fails (its deadline ends the count).
func countDatagrams(rx *net.UDPConn, msg string) (chan int, *atomic.Int64) {
	received := make(chan int, 1)
	counted := &atomic.Int64{}
	go func() {
		n, buf := 0, make([]byte, 64)
		for {
			m, err := rx.Read(buf)
			if err != nil {
				received <- n
				return
			}
			if string(buf[:m]) == msg {
				n++
				counted.Add(1)
			}
		}
	}()
	return received, counted
}

// sendPaced sends msg on tx at most once per 100 µs (a send rate, not a wait) until stop closes, then the
// number sent on the returned channel.
func sendPaced(tx *net.UDPConn, msg string, stop chan struct{}) chan int {
	sent := make(chan int, 1)
	go func() {
		pace := time.NewTicker(100 * time.Microsecond)
		defer pace.Stop()
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			case <-pace.C:
			}
			if _, err := tx.Write([]byte(msg)); err == nil {
				n++
			}
		}
	}()
	return sent
}
